"""container.security merged with a template's overrides (pure)."""

from __future__ import annotations

import pytest

from containers.errors import InvalidSpec
from containers.spec.hardening import clean_security, resolve_hardening
from core.config import SECURITY_DEFAULTS


def resolved(template_security=None, resources=None, owner_id=7, **config):
    return resolve_hardening(
        template_security=template_security or {},
        resources=resources or {},
        config={**SECURITY_DEFAULTS, **config},
        owner_id=owner_id,
        installation="inst",
    )


def test_defaults_lock_the_container_down():
    fields = resolved()
    assert fields == {
        "user": "1000007:1000007",
        "group_add": ["1000007"],
        "cap_add": SECURITY_DEFAULTS["capabilities"],
        "no_new_privileges": True,
        "pids_limit": 1024,
        "memory": 1024**3,
        "cpu": 1.0,
        "read_only_rootfs": False,
        "tmpfs_size": None,
        "network": "bridge",
        "network_owned": False,
        "oci_runtime": None,
    }


@pytest.mark.parametrize(
    ("user", "expected"),
    [("owner", "1000007:1000007"), ("image", None), (1234, "1234:1234"), ("5:6", "5:6")],
)
def test_the_container_user_is_configurable(user, expected):
    assert resolved({"user": user})["user"] == expected
    assert resolved(user=user)["user"] == expected
    assert resolved({"user": user})["group_add"] == ["1000007"]  # the workspace's group


def test_template_resources_win_over_the_default_limits():
    fields = resolved(resources={"pids": 64, "memory": 32 << 20, "cpu": 0.5})
    assert (fields["pids_limit"], fields["memory"], fields["cpu"]) == (64, 32 << 20, 0.5)


def test_read_only_root_gets_a_tmpfs_tmp_and_owner_network_is_per_owner():
    fields = resolved({"read_only_rootfs": True, "network": "owner"})
    assert fields["read_only_rootfs"] is True and fields["tmpfs_size"] == 64 << 20
    assert (fields["network"], fields["network_owned"]) == ("gb-net-inst-7", True)
    assert resolved({"network": "owner"}, owner_id=8)["network"] == "gb-net-inst-8"


def test_capabilities_are_added_only_from_the_allow_list():
    assert "NET_RAW" in resolved({"cap_add": ["NET_RAW"]})["cap_add"]
    with pytest.raises(InvalidSpec, match="SETPCAP is not in"):
        resolved({"cap_add": ["SETPCAP"]}, capabilities_allowed=["NET_RAW"])
    for never in ("SYS_ADMIN", "CAP_SYS_MODULE", "NET_ADMIN", "ALL", "SYS_PTRACE"):
        with pytest.raises(InvalidSpec, match="never granted"):
            clean_security({"cap_add": [never]})


def test_a_runtime_must_be_allowed():
    with pytest.raises(InvalidSpec, match="runtimes_allowed"):
        resolved({"runtime": "runsc"})
    assert resolved({"runtime": "runsc"}, runtimes_allowed=["runsc"])["oci_runtime"] == "runsc"


@pytest.mark.parametrize(
    "security",
    [
        {"privileged": True},
        {"network": "host"},
        {"network": "container:abc"},
        {"user": "root"},
        {"user": -1},
        {"read_only_rootfs": "yes"},
        {"cap_add": "NET_RAW"},
        "strict",
    ],
)
def test_what_is_never_allowed_is_refused(security):
    with pytest.raises(InvalidSpec):
        clean_security(security)


def test_an_owner_outside_the_uid_range_is_refused():
    with pytest.raises(InvalidSpec, match="uid_range_size"):
        resolved(owner_id=10, uid_range_size=10)

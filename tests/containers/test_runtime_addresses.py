"""How a ``Runtime`` reaches its engine, checked before it is saved
(``containers.addresses`` through ``Runtime.clean``, so the admin's form and any
``full_clean`` refuse the same): unix, tcp with mutual TLS (file paths), ssh; plain tcp
only to loopback; the key file private to its owner; no message quotes a file."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.exceptions import ValidationError

from containers.models import Runtime
from tests.pki import Pki

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    pki = Pki(tmp_path_factory.mktemp("pki"))
    pki.ca("ca")
    pki.signed("ca", "client", "extendedKeyUsage=clientAuth")
    pki.signed("ca", "other", "extendedKeyUsage=clientAuth")
    return pki


def _tls(pki: Pki, **changes: str) -> dict[str, str]:
    return {
        "tls_ca_cert": pki.cert("ca"),
        "tls_client_cert": pki.cert("client"),
        "tls_client_key": pki.key("client"),
        **changes,
    }


def _problems(**fields) -> dict[str, list[str]]:
    try:
        Runtime(name="r", **fields).full_clean()
    except ValidationError as exc:
        return exc.message_dict
    return {}


ACCEPTED = {
    "the local socket": {"base_url": "unix:///var/run/docker.sock"},
    "ssh with a user": {"base_url": "ssh://gobrave@engine-3.example:2222"},
    "plain tcp to loopback": {"base_url": "tcp://127.0.0.1:2375"},
    "plain tcp to localhost": {"base_url": "tcp://localhost:2375"},
}


@pytest.mark.parametrize("case", ACCEPTED)
def test_an_address_gobrave_can_reach_safely_is_accepted(case):
    assert _problems(**ACCEPTED[case]) == {}


def test_tcp_with_the_three_tls_files_is_accepted(pki):
    assert _problems(base_url="tcp://10.0.0.7:2376", **_tls(pki)) == {}


REFUSED = {
    "plain tcp to another host": (
        {"base_url": "tcp://10.0.0.7:2375"},
        "base_url",
        "Plain tcp:// (no TLS files) is refused to any host but a loopback one",
    ),
    "http": ({"base_url": "http://10.0.0.7:2375"}, "base_url", "Use unix:///"),
    "tcp without a port": ({"base_url": "tcp://127.0.0.1"}, "base_url", "Give the engine's port"),
    "ssh without a user": ({"base_url": "ssh://engine-3"}, "base_url", "Give the ssh user"),
    "ssh with a password": (
        {"base_url": "ssh://u:secret@engine-3"},
        "base_url",
        "Give the ssh user, and no password",
    ),
    "a relative unix path": ({"base_url": "unix://docker.sock"}, "base_url", "unix:///absolute"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_an_address_that_is_unsafe_or_malformed_is_refused_with_its_field_named(case):
    fields, field, message = REFUSED[case]
    problems = _problems(**fields)
    assert message in " ".join(problems.get(field, [])), problems


def test_tls_files_are_refused_for_a_unix_socket(pki):
    problems = _problems(base_url="unix:///var/run/docker.sock", **_tls(pki))
    assert set(problems) == {"tls_ca_cert", "tls_client_cert", "tls_client_key"}, problems


def test_two_tls_files_of_three_name_the_missing_one(pki):
    problems = _problems(base_url="tcp://10.0.0.7:2376", **_tls(pki, tls_client_key=""))
    assert list(problems) == ["tls_client_key"], problems
    assert "needs all three files" in problems["tls_client_key"][0], problems


def test_a_missing_file_is_named(pki):
    missing = str(pki.directory / "nowhere.pem")
    problems = _problems(base_url="tcp://10.0.0.7:2376", **_tls(pki, tls_ca_cert=missing))
    assert problems == {"tls_ca_cert": [f"Cannot read {missing}: No such file or directory."]}


def test_a_key_every_user_may_read_is_refused(pki, tmp_path):
    key = tmp_path / "open.key"
    key.write_bytes(Path(pki.key("client")).read_bytes())
    key.chmod(0o644)
    problems = _problems(base_url="tcp://10.0.0.7:2376", **_tls(pki, tls_client_key=str(key)))
    assert list(problems) == ["tls_client_key"], problems
    assert "readable by every user" in problems["tls_client_key"][0], problems


def test_a_key_that_is_not_the_certificates_is_refused_without_quoting_it(pki):
    other = pki.key("other")
    problems = _problems(base_url="tcp://10.0.0.7:2376", **_tls(pki, tls_client_key=other))
    assert list(problems) == ["tls_client_key"], problems
    key_body = "".join(Path(other).read_text().splitlines()[1:-1])
    assert key_body[:24] not in str(problems), problems

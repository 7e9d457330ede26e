"""The env policy: which keys users may set, and which template values are secret (pure)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from containers.errors import InvalidSpec
from containers.spec import env_policy
from containers.spec.env_policy import (
    DENIED,
    DENIED_PREFIXES,
    MAX_USER_KEYS,
    MAX_USER_VALUE,
    STARTUP_KEYS,
    check_user_env,
    clean_secret_env,
    clean_user_env,
    is_denied,
    redacted,
)
from containers.spec.resolve import clean_template_fields, resolve_spec
from tests.factories import spec_template

TEMPLATE_ENV = {"APP_MODE": "prod", "PORT": "8080", "DB_PASSWORD": "hunter2"}


def allowed(overrides, rules, template_env=TEMPLATE_ENV):
    return check_user_env(overrides, rules=rules, template_env=template_env)


def refused(overrides, rules, template_env=TEMPLATE_ENV) -> InvalidSpec:
    with pytest.raises(InvalidSpec) as caught:
        check_user_env(overrides, rules=rules, template_env=template_env)
    return caught.value


# -- refused whatever the template says ------------------------------------------------------

DENIED_SAMPLES = sorted(DENIED) + [f"{prefix}X" for prefix in DENIED_PREFIXES] + ["LD_PRELOAD"]


@pytest.mark.parametrize("key", DENIED_SAMPLES)
def test_a_key_that_changes_how_programs_load_is_refused_by_name_even_under_star(key):
    error = refused({key: "/tmp/evil"}, ["*"])
    assert error.details == {"field": "env", "key": key}
    assert key in error.message and "load or start" in error.message


@pytest.mark.parametrize("key", ["ld_preload", "Bash_Env", "path", "Path", "https_proxy", "Tmpdir"])
def test_denied_keys_are_refused_in_any_case(key):
    error = refused({key: "x"}, [key])
    assert error.details == {"field": "env", "key": key}, error.message


@pytest.mark.parametrize("rule", ["LD_PRELOAD", "BASH_ENV", "PATH", "LD_*", "DYLD_*", "LD_A*"])
def test_a_template_rule_that_opens_a_denied_key_is_refused_when_saved(rule):
    with pytest.raises(InvalidSpec) as caught:
        clean_template_fields(user_env=[rule])
    assert caught.value.details["field"] == "user_env"
    assert "users may never set" in caught.value.message, caught.value.message


# The keys a user set through a template whose user_env was "*" (issue 26, finding 1), and
# a few more of each runtime the deny-list must know.
FINDING_KEYS = [
    "PYTHONWARNINGS",
    "BROWSER",
    "OPENSSL_CONF",
    "OPENSSL_MODULES",
    "GIT_DIR",
    "GIT_PROXY_COMMAND",
    "GIT_ASKPASS",
    "LESSOPEN",
    "PAGER",
    "EDITOR",
    "DOTNET_STARTUP_HOOKS",
    "CORECLR_PROFILER_PATH",
    "PHPRC",
    "PHP_INI_SCAN_DIR",
    "GEM_PATH",
    "R_PROFILE_USER",
    "MAVEN_OPTS",
    "NODE_REPL_EXTERNAL_MODULE",
    "SSL_CERT_FILE",
    "https_proxy",
    "SSLKEYLOGFILE",
    "TMPDIR",
]
RUNTIME_KEYS = [
    "BASH_XTRACEFD",
    "PS1",
    "MALLOC_TRACE",
    "LANG",
    "LC_ALL",
    "TZ",
    "PYTHON_HISTORY",
    "COVERAGE_PROCESS_START",
    "NODE_EXTRA_CA_CERTS",
    "NPM_CONFIG_PREFIX",
    "JAVA_OPTS",
    "GRADLE_OPTS",
    "COMPlus_ReadyToRun",
    "COR_PROFILER_PATH",
    "RUBY_GC_HEAP_INIT_SLOTS",
    "BUNDLE_GEMFILE",
    "PERL_UNICODE",
    "R_ENVIRON_USER",
    "GOFLAGS",
    "GODEBUG",
    "CGO_CFLAGS",
    "OPENSSL_ENGINES",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "ALL_PROXY",
    "no_proxy",
    "TMP",
    "TEMP",
]


def _covering_prefix(key: str) -> str | None:
    """The ``_*`` prefix an operator might have opened that covers ``key`` (``GIT_*``)."""
    return key[: key.index("_") + 1] + "*" if "_" in key.strip("_") else None


@pytest.mark.parametrize("key", FINDING_KEYS + RUNTIME_KEYS)
def test_a_runtime_start_up_key_is_refused_as_a_user_key_even_when_a_rule_opens_it(key):
    rules = [key] + ([_covering_prefix(key)] if _covering_prefix(key) else []) + ["*"]
    error = refused({key: "x"}, rules, template_env={})
    assert error.details == {"field": "env", "key": key}, error.message
    assert "start-up" in error.message, error.message


@pytest.mark.parametrize("key", FINDING_KEYS + RUNTIME_KEYS)
def test_a_rule_naming_a_runtime_start_up_key_is_refused_when_saved(key):
    with pytest.raises(InvalidSpec, match="users may never set") as caught:
        clean_template_fields(user_env=[key])
    assert caught.value.details["field"] == "user_env"


@pytest.mark.parametrize("key", [k for k in FINDING_KEYS + RUNTIME_KEYS if _covering_prefix(k)])
def test_a_prefix_rule_covering_a_runtime_start_up_key_is_refused_when_saved(key):
    rule = _covering_prefix(key)
    with pytest.raises(InvalidSpec) as caught:
        clean_template_fields(user_env=[rule])
    assert caught.value.details["field"] == "user_env"
    assert "start-up" in caught.value.message, caught.value.message


@pytest.mark.parametrize(
    "rule, says",
    [
        ("*", "would let users set any key"),
        ("PYTHON*", "start-up"),
        ("LD_*", "start-up"),
        ("LD_A*", "start-up"),
        ("BASH_*", "start-up"),
        ("git_*", "start-up"),
        ("_*", "start-up"),
        ("L*", "would let users set"),
        ("MYAPP*", "must end in '_*'"),
        ("APP*", "must end in '_*'"),
    ],
)
def test_a_wildcard_or_a_prefix_reaching_runtime_keys_is_refused_with_the_reason(rule, says):
    with pytest.raises(InvalidSpec) as caught:
        clean_template_fields(user_env=["MODE", rule])
    assert caught.value.message.startswith("user_env[1].name"), caught.value.message
    assert says in caught.value.message, caught.value.message
    assert caught.value.details["field"] == "user_env"


@pytest.mark.parametrize(
    "rule",
    ["APP_*", "MY_APP_*", "MODE", "LDAP_URL", {"name": "MODE", "pattern": "a|b"}],
)
def test_names_and_prefixes_in_the_operators_namespace_are_accepted(rule):
    assert clean_template_fields(user_env=[rule]) == {"user_env": [rule]}


def test_stored_rules_that_are_refused_now_open_nothing():
    """A template saved before the allow-list (or before the deny-list grew): its refused
    rules open no key at all, they do not fail the user's request for another reason."""
    error = refused({"ANYTHING": "x"}, ["*", "L*"])
    assert error.details["key"] == "ANYTHING" and "does not let users set" in error.message
    assert allowed({"APP_LEVEL": "3"}, ["*", "APP_*"]) == {"APP_LEVEL": "3"}


# -- the template's own keys -----------------------------------------------------------------


def test_a_template_key_is_not_replaced_without_a_rule():
    error = refused({"PORT": "1"}, [])
    assert error.details["key"] == "PORT" and "set by the template" in error.message


def test_a_template_key_is_not_replaced_through_a_prefix_pattern():
    error = refused({"APP_MODE": "debug"}, ["APP_*"])
    assert error.details["key"] == "APP_MODE" and "set by the template" in error.message


def test_a_template_key_is_replaced_when_a_rule_names_it_exactly():
    assert allowed({"APP_MODE": "debug"}, ["APP_MODE"]) == {"APP_MODE": "debug"}


def test_resolve_spec_lets_the_allowed_user_value_win_and_keeps_the_rest():
    template = spec_template(
        env=TEMPLATE_ENV, user_env=["APP_MODE", "EXTRA_*"], secret_env=["DB_PASSWORD"]
    )
    spec = resolve_spec(
        template=template,
        variables={"CONTAINER_NAME": "gb-1", "INSTANCE_ID": "1"},
        env_overrides={"APP_MODE": "debug", "EXTRA_LEVEL": 3},
        roots=[],
        installation="i",
    )
    assert spec["env"] == {**TEMPLATE_ENV, "APP_MODE": "debug", "EXTRA_LEVEL": "3"}
    assert spec["secret_env"] == ["DB_PASSWORD"]


# -- keys the template did not declare -------------------------------------------------------


def test_an_undeclared_key_is_refused_with_its_name():
    error = refused({"FOO": "1"}, ["BAR", "APP_*"])
    assert error.details == {"field": "env", "key": "FOO"}
    assert "FOO" in error.message


def test_without_rules_no_user_key_is_accepted_and_none_is_fine():
    assert refused({"FOO": "1"}, []).details["key"] == "FOO"
    assert allowed(None, []) == {} and allowed({}, []) == {}


@pytest.mark.parametrize(
    ("rules", "overrides"),
    [
        (["FOO"], {"FOO": "1"}),
        (["APP_*"], {"APP_LEVEL": "3"}),
        ([{"name": "LEVEL", "pattern": "[0-9]{1,3}"}], {"LEVEL": "42"}),
        ([{"name": "NOTE", "max_length": 5}], {"NOTE": "abcde"}),
        (["N"], {"N": 5}),
        (["EMPTY"], {"EMPTY": ""}),
    ],
)
def test_allowed_paths(rules, overrides):
    assert allowed(overrides, rules) == {k: str(v) for k, v in overrides.items()}


# -- values ------------------------------------------------------------------------------------


def test_a_value_not_matching_the_rule_pattern_is_refused():
    error = refused({"LEVEL": "4; rm -rf /"}, [{"name": "LEVEL", "pattern": "[0-9]+"}])
    assert error.details["key"] == "LEVEL" and "pattern" in error.message


def test_the_pattern_must_match_the_whole_value():
    assert refused({"LEVEL": "12x"}, [{"name": "LEVEL", "pattern": "[0-9]+"}])


def test_a_value_over_the_rule_max_length_is_refused():
    error = refused({"NOTE": "abcdef"}, [{"name": "NOTE", "max_length": 5}])
    assert "at most 5 characters" in error.message


def test_a_value_over_the_global_bound_is_refused_before_any_pattern_runs():
    # (a+)+$ is exponential on a long run of 'a' followed by 'b': it must never run.
    rules = [{"name": "V", "pattern": "(a+)+$"}]
    error = refused({"V": "a" * (MAX_USER_VALUE * 25) + "b"}, rules)
    assert f"at most {MAX_USER_VALUE} characters" in error.message


def test_too_many_keys_are_refused():
    overrides = {f"K{i}": "x" for i in range(MAX_USER_KEYS + 1)}
    assert "at most" in refused(overrides, ["*"]).message


@pytest.mark.parametrize("key", ["1BAD", "A-B", "A B", "X" * 129, ""])
def test_an_invalid_name_is_refused(key):
    assert "not a valid variable name" in refused({key: "1"}, ["*"]).message


@pytest.mark.parametrize("value", [True, None, ["a"], {"a": 1}])
def test_a_value_that_is_not_a_string_or_number_is_refused(value):
    assert refused({"FOO": value}, ["FOO"]).details["key"] == "FOO"


# -- rules themselves ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("user_env", "named"),
    [
        ("FOO", "user_env"),
        ([1], "user_env[0]"),
        (["OK", "1BAD"], "user_env[1].name"),
        (["A*B"], "user_env[0].name"),
        ([{"name": "A", "pattern": "("}], "user_env[0].pattern"),
        ([{"name": "A", "pattern": "x" * 513}], "user_env[0].pattern"),
        ([{"name": "A", "max_length": MAX_USER_VALUE + 1}], "user_env[0].max_length"),
        ([{"name": "A", "max_length": "10"}], "user_env[0].max_length"),
        ([{"name": "A", "other": 1}], "user_env[0]"),
        ([{"pattern": "x"}], "user_env[0]"),
        (["A"] * 65, "user_env"),
    ],
)
def test_bad_rules_are_refused_naming_the_entry(user_env, named):
    with pytest.raises(InvalidSpec) as caught:
        clean_user_env(user_env)
    assert caught.value.message.startswith(named)


# -- secrets ---------------------------------------------------------------------------------


def test_secret_env_must_name_keys_of_the_template_env():
    with pytest.raises(InvalidSpec, match="DB_PASWORD is not a key"):
        clean_template_fields(env=TEMPLATE_ENV, secret_env=["DB_PASWORD"])
    assert clean_template_fields(env=TEMPLATE_ENV, secret_env=["DB_PASSWORD", "DB_PASSWORD"])[
        "secret_env"
    ] == ["DB_PASSWORD"]


@pytest.mark.parametrize("secret_env", ["DB_PASSWORD", [1], ["not valid"]])
def test_secret_env_must_be_a_list_of_keys(secret_env):
    with pytest.raises(InvalidSpec):
        clean_secret_env(secret_env)


def test_redacted_hides_exactly_the_secret_values():
    shown = redacted(TEMPLATE_ENV, ["DB_PASSWORD"])
    assert shown == {**TEMPLATE_ENV, "DB_PASSWORD": env_policy.SECRET_PLACEHOLDER}


def test_the_keys_docs_security_names_as_the_second_wall_are_the_codes():
    text = (Path(__file__).parents[2] / "docs" / "security.md").read_text()
    wall = text[text.index("- The second wall") : text.index("- Rules stored before")]
    named = [t for t in re.findall(r"`([^`]+)`", wall) if re.fullmatch(r"\w+\*?", t)]
    families = {key.upper() for keys in STARTUP_KEYS.values() for key in keys}
    wrong = [
        t for t in named if (t.upper() not in families if t.endswith("*") else not is_denied(t))
    ]
    assert len(named) > 60 and not wrong, (len(named), wrong)

"""Parsing the engine's event stream (pure: the messages are made here, no engine)."""

from __future__ import annotations

from containers.engines.docker import DockerEngine


def message(action: str, exit_code: str | None = None, time_nano: int = 5) -> dict:
    attributes = {"name": "gb-x", "io.gobrave.instance": "i1"}
    if exit_code is not None:
        attributes["exitCode"] = exit_code
    return {
        "Type": "container",
        "Action": action,
        "Actor": {"ID": "c1", "Attributes": attributes},
        "timeNano": time_nano,
    }


def test_events_carry_action_exit_code_labels_and_time():
    [event] = DockerEngine._follow(iter([message("die", "3", 42)]))
    assert (event.action, event.exit_code, event.time_nano) == ("die", 3, 42)
    assert event.labels == {"io.gobrave.instance": "i1"}


def test_a_malformed_message_is_skipped_and_the_stream_goes_on():
    events = list(DockerEngine._follow(iter([message("die", "zz"), message("start")])))
    assert [event.action for event in events] == ["start"]


def test_actions_we_do_not_follow_are_dropped():
    assert list(DockerEngine._follow(iter([message("exec_start"), "not a dict"]))) == []

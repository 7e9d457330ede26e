"""``LogScrubber``: secret values taken out of output that arrives in chunks."""

from __future__ import annotations

import pytest

from containers.spec.redaction import SECRET_PLACEHOLDER, LogScrubber

SECRET = "s3cr3t-value"
TEXT = f"start\nTOKEN={SECRET}\nend {SECRET}"
EXPECTED = TEXT.replace(SECRET, SECRET_PLACEHOLDER)


def _fed(scrubber: LogScrubber, chunks: list[str]) -> list[str]:
    return [scrubber.feed(chunk) for chunk in chunks] + [scrubber.flush()]


@pytest.mark.parametrize("cut", range(1, len(TEXT)))
def test_a_value_split_across_two_chunks_is_caught(cut):
    out = _fed(LogScrubber([SECRET]), [TEXT[:cut], TEXT[cut:]])
    assert "".join(out) == EXPECTED, (cut, out)


def test_a_value_fed_one_character_at_a_time_is_caught():
    out = _fed(LogScrubber([SECRET]), list(TEXT))
    assert "".join(out) == EXPECTED, out
    assert not any(piece and piece in SECRET and len(piece) > 2 for piece in out), out


def test_the_longest_of_overlapping_values_is_hidden_whole():
    out = _fed(LogScrubber(["abc", "abcdefgh"]), ["x abcd", "efgh y abc z"])
    assert "".join(out) == f"x {SECRET_PLACEHOLDER} y {SECRET_PLACEHOLDER} z", out


def test_values_shorter_than_three_characters_are_left_alone():
    scrubber = LogScrubber(["on", "1", ""])
    assert scrubber.feed("debug on 1\n") == "debug on 1\n"
    assert scrubber.flush() == ""


def test_output_without_secrets_is_held_back_by_at_most_the_longest_value_less_one():
    scrubber = LogScrubber(["abcdef"])
    assert scrubber.feed("hello world\n") == "hello w"  # 5 characters held: "orld\n"
    assert scrubber.feed("more") == "orld"
    assert scrubber.flush() == "\nmore"

"""Engine calls that pages and the API make, each bounded in time.

Reads of the database live in ``containers.selectors``; this module is where a request
path talks to an engine, beside the engines themselves. ``bounded_call`` runs a call on
a helper thread so that an engine that hangs never hangs a page; what pages show about
an engine's health is the cached record on its ``Runtime`` row (``containers.execution.health``).
"""

from __future__ import annotations

import codecs
import concurrent.futures
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from containers.engines import engine_for
from containers.engines.base import EngineError
from containers.engines.follows import EngineStream

if TYPE_CHECKING:
    from containers.models import ContainerInstance, Runtime

ENGINE_CALL_SECONDS = 5.0
T = TypeVar("T")
_pool: concurrent.futures.ThreadPoolExecutor | None = None


def bounded_call(call: Callable[[], T], *, seconds: float = ENGINE_CALL_SECONDS):
    """Run ``call()`` on a helper thread; ``(value, "")`` or ``(None, reason)``, never raises.

    After ``seconds`` the caller gets a reason and the call finishes (or times out on the
    engine client's own timeout) on its thread. ``call`` must not touch the database:
    read what it needs first.
    """
    global _pool
    if _pool is None:
        _pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="engine")
    future = _pool.submit(call)
    try:
        return future.result(timeout=seconds), ""
    except concurrent.futures.TimeoutError:
        return None, f"the engine did not answer within {seconds:g} s"
    except Exception as exc:  # noqa: BLE001 - any engine error is reported, not raised
        return None, f"{type(exc).__name__}: {exc}"


LOG_MAX_BYTES = 1024 * 1024
# Bytes of output shown, when an answer was cut at LOG_MAX_BYTES (the API's header).
LOG_CUT_HEADER = "X-Gobrave-Truncated"


@dataclass(frozen=True)
class Logs:
    """A container's output as read for one answer. ``cut_at``: the bytes of output
    shown when there was more (the text then ends with a note saying so); None: all."""

    text: str
    cut_at: int | None


def container_logs(*, instance: ContainerInstance, tail: int = 100) -> Logs:
    """The last ``tail`` lines of the container's output, from its engine, at most
    ``LOG_MAX_BYTES`` of them.

    1. Open the engine's output (``Engine.logs``: chunks as they come).
    2. Read until the output ends or passes ``LOG_MAX_BYTES``; then stop reading and close
       it, so a request holds at most the cap plus one chunk, whatever the container printed.
    3. Cut at the cap (never inside a character) and end the text with a note.

    Raises the engine's errors (``EngineError``, or the engine client's) unchanged, also
    those met while reading; empty when the container does not exist (yet, or any
    more, or never placed on an engine). Bounded in time by the driver.
    """
    if instance.runtime is None:  # not placed yet: no container anywhere
        return Logs(text="", cut_at=None)
    chunks = engine_for(instance.runtime).logs(
        instance.container_id or instance.container_name, tail=tail
    )
    data = bytearray()
    try:
        for chunk in chunks:
            data += chunk
            if len(data) > LOG_MAX_BYTES:
                break
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    if len(data) <= LOG_MAX_BYTES:
        return Logs(text=bytes(data).decode("utf-8", errors="replace"), cut_at=None)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    shown = decoder.decode(bytes(data[:LOG_MAX_BYTES]), final=False)  # holds back a cut char
    note = "\n[gobrave: output cut at 1 MiB; ask with a smaller tail for the newest lines]\n"
    return Logs(text=shown + note, cut_at=LOG_MAX_BYTES)


LOG_FOLLOW_CUT_NOTE = b"\n[gobrave: output cut at 1 MiB; ask again to go on]\n"


async def container_logs_follow(
    *,
    instance: ContainerInstance,
    tail: int = 100,
    seconds: float,
    max_bytes: int | None = LOG_MAX_BYTES,
) -> EngineStream:
    """The container's raw output as it comes, for at most ``seconds`` and ``max_bytes``
    (None: no byte bound, for a reader that keeps only the newest output); then it ends.
    The caller decodes (``containers.live.output_text``) and scrubs.

    1. Open the engine's stream now (``Engine.follow_logs``), raising the engine's errors
       like ``container_logs``; empty when the container does not exist.
    2. Pass chunks on as they come, until ``max_bytes``: the last one is cut there
       (never inside a UTF-8 character) and ``LOG_FOLLOW_CUT_NOTE`` ends the stream.
    3. The end, ``aclose()`` or a cancellation closes the engine stream at once.

    Runs on an event loop and reads no database: ``instance.runtime`` must be loaded
    already (e.g. read once, or ``select_related``).
    """
    if instance.runtime is None:  # not placed yet: no container anywhere
        return EngineStream.empty()
    until = time.time() + float(seconds)
    stream = await engine_for(instance.runtime).follow_logs(
        instance.container_id or instance.container_name, tail=tail, until=until
    )
    if max_bytes is None:
        return stream
    return EngineStream(_capped(stream, max_bytes), stream.aclose)


async def _capped(
    stream: EngineStream, max_bytes: int = LOG_MAX_BYTES
) -> AsyncGenerator[bytes, None]:
    sent = 0
    async for chunk in stream:
        room = max_bytes - sent
        if len(chunk) >= room:
            while 0 < room < len(chunk) and chunk[room] & 0xC0 == 0x80:
                room -= 1  # back to the start of the character the cap falls in
            yield chunk[:room]
            yield LOG_FOLLOW_CUT_NOTE
            return
        sent += len(chunk)
        yield chunk


def container_logs_for_console(*, instance: ContainerInstance, tail: int = 100) -> tuple[str, str]:
    """``(logs, problem)`` for the admin page: ``problem`` says why there are no logs.

    Never raises and never waits on the engine longer than ``ENGINE_CALL_SECONDS``.
    """
    if not instance.container_id and instance.status in ("pending", "creating"):
        return "", "no container yet: the create request has not reached the engine"
    runtime = instance.runtime  # read here: the helper thread must not touch the database
    logs, problem = bounded_call(lambda: container_logs(instance=instance, tail=tail).text)
    if problem:
        return "", f"logs unavailable from runtime {runtime.name}: {problem}"
    if not logs:
        return "", _no_output(instance)
    return logs, ""


def _no_output(instance: ContainerInstance) -> str:
    """What is true when the engine gives no log lines for the instance's container."""
    if instance.runtime_missing:
        return "the engine no longer has this container, nor its output"
    if instance.status in ("running", "paused", "stop_pending", "stopping"):
        return "no output yet: the container has written nothing to stdout or stderr"
    return "the container wrote nothing to stdout or stderr"


def engine_ping(*, runtime: Runtime, seconds: float = ENGINE_CALL_SECONDS) -> tuple[bool, str]:
    """``(answers, problem)`` for the engine behind one ``Runtime`` row, asked now;
    ``problem`` is the engine's reason in an operator's words (``Engine.check``). The
    engine is given ``seconds`` too, so a silent one does not hold the helper thread
    (and the pings queued behind it) for the client's whole call timeout."""

    def check() -> str:
        try:
            engine_for(runtime).check(timeout=seconds)
        except EngineError as exc:
            return str(exc)
        return ""

    reason, problem = bounded_call(check, seconds=seconds)
    problem = problem or reason
    return not problem, problem


OUTPUT_KEPT_BYTES = 64 * 1024
OUTPUT_KEPT_LINES = 10_000


def _last_bytes(chunks, limit: int) -> tuple[bytes, bool]:
    """The last ``limit`` bytes of ``chunks`` (never more held than that plus one chunk),
    and whether anything before them was dropped."""
    data, cut = bytearray(), False
    for chunk in chunks:
        data += chunk
        if len(data) > limit:
            del data[: len(data) - limit]
            cut = True
    return bytes(data), cut


def container_output_tail(*, instance: ContainerInstance, limit: int = OUTPUT_KEPT_BYTES) -> str:
    """The last ``limit`` bytes of the container's output, to keep once it is removed.

    Never raises and never waits on the engine longer than ``ENGINE_CALL_SECONDS``: when
    the engine cannot give the output, the text is a note saying why (``[gobrave: ...]``),
    and so it is when there is none. Must run outside any transaction (an engine call).
    """
    runtime = instance.runtime  # read here: the helper thread must not touch the database
    if runtime is None:
        return "[gobrave: no output: the instance was never placed on an engine]\n"
    ref = instance.container_id or instance.container_name

    def read() -> tuple[bytes, bool]:
        chunks = engine_for(runtime).logs(ref, tail=OUTPUT_KEPT_LINES)
        try:
            return _last_bytes(chunks, limit)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    answer, problem = bounded_call(read)
    if problem:
        return f"[gobrave: output unavailable from runtime {runtime.name}: {problem}]\n"
    data, cut = answer
    if not data:
        return "[gobrave: no output: the container wrote nothing, or the engine no longer has it]\n"
    while cut and data and data[0] & 0xC0 == 0x80:  # begin on a whole character
        data = data[1:]
    text = data.decode("utf-8", errors="replace")
    if cut:
        return f"[gobrave: earlier output cut; the last {limit // 1024} KiB kept]\n" + text
    return text

"""Shared plumbing of the operators' commands (``container_*``).

- Logging stays at WARNING unless ``-v 2`` (INFO) or ``-v 3`` (DEBUG) is given or
  ``GOBRAVE_LOG_LEVEL`` is set: the commands print their own results.
- Instances are named by uuid, a unique prefix (the short id the admin shows) or a name.
- ``--wait`` follows the request until the instance settles, printing each transition
  from its history, and exits non-zero unless it settled where the request leads.
- Who asks is recorded as ``user:<name>`` (``--as``, default: the login name).
- Domain errors become a one-line message and exit status 1.
"""

from __future__ import annotations

import getpass
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from containers.actors import user_actor
from containers.queues import event_kind_display
from containers.selectors import (
    SHORT_ID_LENGTH,
    instance_history_after,
    instance_history_last_id,
    instance_resolve,
    instance_status,
)
from containers.states import RESTING, Status
from core.errors import DomainError

# Where each request leads; ``None``: the instance row is gone (deleted).
SETTLES_AT = {
    "create": Status.RUNNING,
    "start": Status.RUNNING,
    "stop": Status.STOPPED,
    "delete": None,
}
WAIT_POLL_SECONDS = 0.25

S = TypeVar("S")  # what ``follow_history`` follows: a state read, or None when gone


class ConsoleCommand(BaseCommand):
    """A command an operator types: quiet logs, ``--wait``, one-line refusals."""

    def execute(self, *args, **options):
        root = logging.getLogger()
        saved = root.level
        if "GOBRAVE_LOG_LEVEL" not in os.environ:
            verbosity = int(options.get("verbosity", 1))
            root.setLevel(
                {0: logging.WARNING, 1: logging.WARNING, 2: logging.INFO}.get(
                    verbosity, logging.DEBUG
                )
            )
        try:
            return super().execute(*args, **options)
        finally:
            root.setLevel(saved)

    @staticmethod
    def add_request_arguments(parser) -> None:
        """``--as`` (who asks), ``--wait`` and its ``--timeout``."""
        parser.add_argument(
            "--as",
            dest="as_user",
            metavar="USERNAME",
            help="Who asks, recorded as user:<name> (default: your login name).",
        )
        parser.add_argument(
            "--wait",
            action="store_true",
            help="Follow the request until the instance settles, printing each transition.",
        )
        parser.add_argument(
            "--timeout",
            type=float,
            default=300.0,
            metavar="SECONDS",
            help="With --wait: give up (exit 1) after this long (default 300).",
        )

    @staticmethod
    def actor(options) -> str:
        """Who asks, as ``user:<name>``: ``--as``, else the login name."""
        return user_actor(options.get("as_user") or getpass.getuser())

    def wait_if_asked(self, options, *, instance, action: str, after_id: int) -> None:
        """With ``--wait``: ``follow`` the request on ``instance`` until it settles."""
        if options["wait"]:
            self.follow(
                instance_id=instance.id,
                name=instance.name,
                action=action,
                after_id=after_id,
                timeout=options["timeout"],
            )

    def follow(
        self, *, instance_id: uuid.UUID, name: str, action: str, after_id: int, timeout: float
    ) -> None:
        """Print the instance's new history until it rests; ``CommandError`` unless it
        rests where ``action`` leads (``SETTLES_AT``) within ``timeout`` seconds."""
        status = self.follow_history(
            state=lambda: instance_status(instance_id=instance_id),
            history_after=lambda after: instance_history_after(
                instance_id=instance_id, after_id=after
            ),
            line=_history_line,
            rests=lambda status: status is None or status.status in RESTING,
            still=lambda status: f"{action} of {name}: still {status.status} after {timeout:g} s",
            timeout=timeout,
            after_id=after_id,
        )
        wanted = SETTLES_AT[action]
        ended = status.status if status else None
        if ended == wanted:
            return
        if ended is None:
            raise CommandError(f"{action} of {name}: the instance was deleted")
        reason = f": {status.reason}" if status.reason else ""
        code = f" (exit code {status.exit_code})" if status.exit_code is not None else ""
        raise CommandError(f"{action} of {name} ended {ended}{code}{reason}")

    def follow_history(
        self,
        *,
        state: Callable[[], S],
        history_after: Callable[[int], Iterable[Any]],
        line: Callable[[Any], str],
        rests: Callable[[S], bool],
        still: Callable[[S], str],
        timeout: float,
        after_id: int = 0,
    ) -> S:
        """``--wait``'s loop (an instance's request, a DAG run): print each new entry of a
        history (``history_after`` the last id printed, as ``line``) until
        ``rests(state())``, and return that state; ``CommandError(still(state))`` when
        ``timeout`` seconds pass first. The state is read before the history, so the
        history printed holds the move that ended the wait."""
        deadline = time.monotonic() + timeout
        while True:
            now = state()
            for event in history_after(after_id):
                after_id = event.id
                self.stdout.write(line(event))
            if rests(now):
                return now
            if time.monotonic() > deadline:
                raise CommandError(still(now))
            self.pause()

    def pause(self) -> None:
        """Between two looks of ``follow_history`` (a test moves the world here)."""
        time.sleep(WAIT_POLL_SECONDS)


def history_line(event, *, words: Callable[[str], str], subject: str = "", width: int = 28) -> str:
    """One history entry as ``--wait`` prints it: its time, ``subject`` (what moved, when
    a history has more than one thing in it), its move (else its kind, in ``words``),
    who, and the message."""
    when = timezone.localtime(event.created_at).strftime("%H:%M:%S")
    moved = f"{event.from_status or '-'} → {event.to_status}"
    what = moved if event.to_status else words(event.kind)
    message = f"  {event.message}" if event.message else ""
    return f"{when}  {subject}{what:{width}}  {event.actor}{message}"


def _history_line(event) -> str:
    return history_line(event, words=event_kind_display)


def short_id(instance) -> str:
    return str(instance.id)[:SHORT_ID_LENGTH]


class RequestCommand(ConsoleCommand):
    """``container_start|stop|delete INSTANCE [--wait]``."""

    action = ""

    def add_arguments(self, parser):
        parser.add_argument(
            "instance",
            help="The instance's uuid, a unique prefix of it (the admin's short id) or its name.",
        )
        self.add_request_arguments(parser)

    def request(self, **kwargs):  # pragma: no cover - overridden
        raise NotImplementedError

    def handle(self, *args, **options):
        actor = self.actor(options)
        try:
            instance = instance_resolve(ref=options["instance"])
            before = instance_history_last_id(instance_id=instance.id)
            result = self.request(instance_id=instance.id, actor=actor)
        except DomainError as exc:
            raise CommandError(f"refused: {exc.message}") from None
        instance = result.instance
        verb = "accepted" if result.queued else "already under way (nothing queued)"
        self.stdout.write(
            f"{self.action} {short_id(instance)} ({instance.name}): {verb}; "
            f"status {instance.status}"
        )
        self.wait_if_asked(options, instance=instance, action=self.action, after_id=before)

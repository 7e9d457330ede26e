"""The API's answers as engine errors, in an operator's words (never a credential).

| the API answers | error |
|---|---|
| 403 "exceeded quota" (a ``ResourceQuota``) | ``EngineFullError``: waits, no attempt counted |
| 401, 403 otherwise | ``EngineError`` (an operator fixes the credentials or the Role) |
| 408, 409, 429, 5xx, no answer | ``EngineError`` (retried) |
| any other 4xx (422 invalid, 400) | ``PermanentEngineError`` |
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from containers.engines.base import EngineError, EngineFullError, PermanentEngineError

_RETRIABLE = frozenset({0, 408, 409, 429})
QUOTA_RETRY_SECONDS = 10.0


def api_message(exc: ApiException) -> str:
    """The API's own words from an error answer (its Status ``message``)."""
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    return str(body.get("message") or exc.reason or "no message").strip()


def translated_error(what: str, where: str, exc: Exception) -> EngineError:
    if isinstance(exc, ApiException):
        status, message = int(exc.status or 0), api_message(exc)
        text = f"{what}: {message} (HTTP {status})"
        if status == 403 and "exceeded quota" in message:
            error: EngineError = EngineFullError(
                f"{what}: the namespace's ResourceQuota refuses it: {message}"
            )
            error.retry_after = QUOTA_RETRY_SECONDS
            return error
        if status in (401, 403):
            return EngineError(f"{text}: the API refused gobrave's credentials for {where}")
        if status in _RETRIABLE or status >= 500:
            return EngineError(text)
        return PermanentEngineError(text)
    return EngineError(f"{what}: the Kubernetes API of {where} did not answer: {_why(exc)}")


def _why(exc: Exception) -> str:
    """A transport error in an operator's words (refused, TLS, timed out), else as is."""
    reason = getattr(exc, "reason", None) or exc
    text = str(reason)
    if isinstance(reason, urllib3.exceptions.SSLError) or "CERTIFICATE_VERIFY_FAILED" in text:
        return f"its certificate was not accepted (check the kubeconfig's CA): {text}"
    if "Connection refused" in text:
        return "connection refused (nothing listens at the server's address)"
    if isinstance(reason, (urllib3.exceptions.TimeoutError, TimeoutError)):
        return "it timed out"
    return text


TRANSPORT_ERRORS = (urllib3.exceptions.HTTPError, OSError)


@contextlib.contextmanager
def translated(what: str, where: str) -> Iterator[None]:
    """Raise what the client raised inside as an engine error (see the table above)."""
    try:
        yield
    except (ApiException, *TRANSPORT_ERRORS) as exc:
        raise translated_error(what, where, exc) from exc

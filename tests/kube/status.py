"""The API's error answers: ``ApiError`` carries an HTTP code and a Kubernetes ``Status``
body shaped as kube-apiserver writes it (``kind: Status``, ``reason``, ``details``, ``code``),
so the official client's ``ApiException`` reads the same fields it reads from a cluster."""

from __future__ import annotations

from typing import Any

# HTTP code -> the Status ``reason`` the API server gives it.
REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "AlreadyExists",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
}


class ApiError(Exception):
    """An answer other than success; ``body()`` is the ``Status`` object."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "InternalError")
        self.details = details

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def not_found(resource: str, name: str) -> ApiError:
    return ApiError(404, f'{resource} "{name}" not found', details={"name": name, "kind": resource})


def already_exists(resource: str, name: str) -> ApiError:
    return ApiError(
        409, f'{resource} "{name}" already exists', details={"name": name, "kind": resource}
    )


def conflict(resource: str, name: str) -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {resource} "{name}": the object has been modified;'
        " please apply your changes to the latest version and try again",
        reason="Conflict",
        details={"name": name, "kind": resource},
    )


def expired(requested: int, oldest: int) -> ApiError:
    return ApiError(410, f"too old resource version: {requested} ({oldest})")

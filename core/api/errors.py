"""One error shape for the whole API: ``{"error": {"code", "message", "details"}}``.

``exception_handler`` is DRF's ``EXCEPTION_HANDLER``: domain errors keep their own HTTP
status and code (invalid transition 409, queue full 429 with ``Retry-After``, invalid spec
400, not found 404), DRF's validation errors are 400 with the fields in ``details``, every
other DRF error keeps its status, and anything unexpected is logged and answered as a
500 in the same shape. ``page_not_found`` and ``server_error`` do the same for requests
under ``/api/`` that never reach a DRF view. ``error_responses()`` documents the shape in
the OpenAPI schema.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import SuspiciousOperation
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, JsonResponse
from django.utils.module_loading import import_string
from django.views import defaults
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import set_rollback

from core.errors import DomainError

log = logging.getLogger(__name__)


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def _retry_after(seconds: float | None) -> str:
    """Whole seconds, at least 1 (a client that retries at 0 only hammers the queue)."""
    return str(max(1, math.ceil(seconds or 0)))


def _validation_details(detail: Any) -> dict[str, Any]:
    if isinstance(detail, dict):
        return detail
    return {"non_field_errors": detail if isinstance(detail, list) else [detail]}


def _for_caller(context: dict[str, Any], exc) -> tuple[str, dict[str, Any]]:
    """The error's message and details as the caller may see them: users never get host
    paths or engine addresses (``settings.API_ERROR_FOR_CALLER``, which the project points
    at ``containers.spec.redaction.error_for``); the refused field is named."""
    error_for = import_string(settings.API_ERROR_FOR_CALLER)  # cached by Python's imports

    request = context.get("request")
    user = getattr(request, "user", None)
    full = getattr(exc, "operator_message", exc.message)  # a refused mount's whole story
    message, details = error_for(user, full, dict(exc.details))
    if message != full or details != exc.details:
        log.info("error %s shown to %s as %r; in full: %s", exc.code, user, message, full)
    return message, details


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """Map any exception raised by a DRF view to the stable error shape."""
    headers: dict[str, str] = {}
    if isinstance(exc, DomainError):
        set_rollback()
        if getattr(exc, "retry_after", None) is not None:
            headers["Retry-After"] = _retry_after(exc.retry_after)
        message, details = _for_caller(context, exc)
        return Response(
            error_body(exc.code, message, details), status=exc.http_status, headers=headers
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, SuspiciousOperation):  # e.g. a body over DATA_UPLOAD_MAX_MEMORY_SIZE
        exc = exceptions.ParseError(str(exc) or "Malformed request.")
    elif isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(
            exc.message_dict if hasattr(exc, "error_dict") else exc.messages
        )
    if isinstance(exc, exceptions.ValidationError):
        set_rollback()
        return Response(
            error_body("invalid", "Invalid input.", _validation_details(exc.detail)),
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, exceptions.APIException):
        set_rollback()
        if getattr(exc, "auth_header", None):
            headers["WWW-Authenticate"] = exc.auth_header
        if isinstance(exc, exceptions.Throttled):
            headers["Retry-After"] = _retry_after(exc.wait)
        codes = exc.get_codes()
        code = codes if isinstance(codes, str) else exc.default_code
        return Response(error_body(code, str(exc.detail)), status=exc.status_code, headers=headers)
    view = context.get("view")
    log.exception("unexpected error in %s", type(view).__name__ if view else "an API view")
    set_rollback()
    return Response(
        error_body("server_error", "An unexpected error occurred; it has been logged."),
        status=status.HTTP_500_INTERNAL_SERVER_ERROR,
    )


# --- Django's own 404/500 pages, in our shape under /api/ ---------------------------------


def _is_api(request) -> bool:
    return request.path.startswith("/api/")


def page_not_found(request, exception=None):
    if _is_api(request):
        return JsonResponse(error_body("not_found", f"No endpoint at {request.path}."), status=404)
    return defaults.page_not_found(request, exception)


def server_error(request):
    if _is_api(request):
        return JsonResponse(
            error_body("server_error", "An unexpected error occurred; it has been logged."),
            status=500,
        )
    return defaults.server_error(request)


# --- OpenAPI documentation of the shape ---------------------------------------------------


class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="Stable machine-readable code, e.g. queue_full.")
    message = serializers.CharField(help_text="A sentence for humans.")
    details = serializers.DictField(
        child=serializers.JSONField(),
        help_text="Context: the offending fields (validation), status and action (409)...",
    )


class ErrorSerializer(serializers.Serializer):
    error = ErrorDetailSerializer()


_DESCRIPTIONS = {
    400: "Invalid input (`invalid`, `invalid_spec`, `no_matching_runtime`, `parse_error`); "
    "`details` names the fields.",
    401: "Not authenticated (`not_authenticated`, `authentication_failed`).",
    403: "Authenticated but not allowed (`permission_denied`).",
    404: "No such object, or not yours (`not_found`).",
    405: "Method not allowed (`method_not_allowed`).",
    406: "The requested representation is not available (`not_acceptable`).",
    409: "Conflicts with the current state (`invalid_transition`, `template_in_use`, "
    "`not_retriable`; `details` has the current status and the requested action), or the "
    "owner's `max_instances_per_owner` is reached (`quota_exceeded`, `details.quota` names "
    "it; only a delete makes room, so no `Retry-After`).",
    415: "Unsupported media type (`unsupported_media_type`).",
    429: "The create queue is full (`queue_full`), the owner's `max_pending_per_owner` is "
    "reached (`owner_quota`, `details.quota` names it) or too many requests (`throttled`); "
    "retry after `Retry-After` seconds.",
    503: "The container runtime is unreachable (`runtime_unavailable`).",
}

# Every operation can answer these; error_responses() adds them to each one.
COMMON_ERRORS = (401, 403, 405, 406, 415)

RETRY_AFTER = OpenApiParameter(
    "Retry-After",
    OpenApiTypes.INT,
    location=OpenApiParameter.HEADER,
    response=[429],
    description="Whole seconds (at least 1) after which a retry is likely to be admitted.",
)


def error_responses(*codes: int) -> dict[int, OpenApiResponse]:
    """OpenAPI responses in the error shape for ``codes`` plus the common ones."""
    return {
        code: OpenApiResponse(ErrorSerializer, description=_DESCRIPTIONS[code])
        for code in sorted({*codes, *COMMON_ERRORS})
    }

"""``GET /api/``: where everything is, so a newcomer at the API's front door finds the rest."""

from __future__ import annotations

from rest_framework import permissions
from rest_framework.response import Response
from rest_framework.reverse import reverse
from rest_framework.views import APIView

# (name, url name, what it is); every one answers 401 without a token or a session (the
# docs send a browser to the login page) but the metrics (their own token, or loopback).
ENDPOINTS = (
    ("containers", "container-list", "container instances: create, start, stop, delete"),
    ("templates", "template-list", "what an instance runs"),
    ("runtimes", "runtime-list", "the container engines (permission view_runtime)"),
    ("queue", "queue", "the create queue and the relay, now and over the last hour"),
    ("outbox", "outbox-list", "the outbox rows (permission view_outboxevent)"),
    ("dag-templates", "dag-template-list", "DAG templates: graphs of container runs"),
    ("dag-runs", "dag-run-list", "DAG runs: start, watch, cancel, retry failed"),
    ("events", "events", "the audit trail of instances and DAG runs, as one feed"),
    ("tokens", "token-list", "your API tokens: make, list, revoke (also on /account/tokens/)"),
    ("schema", "schema", "the OpenAPI schema"),
    ("docs", "swagger-ui", "the API documentation (Swagger UI)"),
    ("metrics", "metrics", "Prometheus metrics"),
)


class ApiRootView(APIView):
    """The API's index: every endpoint by name, with a line on what it holds. Open to all."""

    permission_classes = [permissions.AllowAny]

    def get(self, request):
        return Response(
            {
                name: {"url": reverse(url_name, request=request), "description": text}
                for name, url_name, text in ENDPOINTS
            }
        )

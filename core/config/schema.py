"""Every section's keys with their validators and defaults (``SCHEMA``), the lifecycle
policies' (``POLICY_SCHEMA``) and the keys that are mappings of their own (``NESTED``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core.config.security import SECURITY_DEFAULTS, SECURITY_SCHEMA, _security
from core.config.values import (
    _absolute_paths,
    _boolean,
    _broker,
    _choice,
    _duration,
    _integer,
    _label,
    _nested,
    _number,
    _optional,
    _rate,
    _text,
    _token,
)

# --- container.policies: lifecycle policies (installation-wide defaults of templates' own) ---
_YEAR = 366 * 86400.0


EXTENDERS = ("nobody", "owner", "staff")


POLICY_SCHEMA: dict[str, tuple[Callable[[Any], Any], Any]] = {
    "interval": (_duration(0.1, 3600), 15.0),
    "max_lifetime": (_optional(_duration(1, _YEAR)), None),
    "idle_timeout": (_optional(_duration(1, _YEAR)), None),
    "idle_cpu_threshold": (_number(0.0001, 1024), 0.02),
    "delete_stopped_after": (_optional(_duration(1, _YEAR)), None),
    "workspace_retention": (_optional(_duration(1, 10 * _YEAR)), None),
    "extendable_by": (_choice(*EXTENDERS), "owner"),
    "extend_max": (_duration(0, _YEAR), 86400.0),
    "batch_size": (_integer(1, 100_000), 200),
}


_policies = _nested(POLICY_SCHEMA, "container.policies")


POLICY_DEFAULTS = _policies({})


# Keys whose value is a mapping of their own: overridden as GOBRAVE_<SECTION>_<KEY>__<SUBKEY>.
NESTED = {("container", "security"): SECURITY_SCHEMA, ("container", "policies"): POLICY_SCHEMA}


SCHEMA: dict[str, dict[str, tuple[Callable[[Any], Any], Any]]] = {
    "container": {
        "refresh_image_status_on_start": (_boolean, True),
        "recover_running_dag_on_start": (_boolean, True),
        "cleanup_dag_node_containers_before_start": (_boolean, True),
        "delete_container_on_node_success": (_boolean, True),
        "dag_node_cleanup_on_failed": (_choice("none", "stop", "delete"), "stop"),
        "dag_node_cleanup_on_dag_finished": (_choice("none", "stop", "delete"), "delete"),
        "create_queue_max_concurrency": (_integer(1, 1000), 3),
        "create_queue_max_pending": (_integer(1, 1_000_000), 50),
        "start_timeout": (_duration(1, 86400), 300.0),
        # A Kubernetes Pod waiting for a node: how long before it fails (None: never).
        "unschedulable_timeout": (_optional(_duration(1, 30 * 86400)), None),
        "stop_timeout": (_duration(0, 3600), 10.0),
        "reconcile_interval": (_duration(1, 86400), 30.0),
        "reconcile_engine_timeout": (_duration(0.1, 3600), 20.0),
        "monitor_appliers": (_integer(1, 64), 4),
        "orphan_policy": (_choice("report", "remove"), "report"),
        # Engine health (contract §9): the monitor pings every engine this often, a ping
        # waits at most engine_ping_timeout (two unanswered in a row: unreachable), and
        # instances on an engine unreachable for
        # longer than engine_lost_after (None, the default: never) end "engine lost".
        "engine_ping_interval": (_duration(0.1, 3600), 5.0),
        "engine_ping_timeout": (_duration(0.1, 60), 5.0),
        "engine_lost_after": (_optional(_duration(1, 365 * 86400)), None),
        # Where a create goes among the engines with room (containers.placement.choice).
        "placement": (_choice("spread", "pack"), "spread"),
        "workspace_root": (_text, "var/workspaces"),
        "allowed_volume_roots": (_absolute_paths, []),
        "installation_id": (_optional(_label), None),
        "security": (_security, SECURITY_DEFAULTS),
        # Lifecycle policies (docs/operations.md, "Policies"): templates override them.
        "policies": (_policies, POLICY_DEFAULTS),
        # Tenants (contract §8): per-owner quotas; None (the key left empty) is no limit.
        # Set by default, as in the shipped config.yml, so that one user cannot fill the
        # queue. Overridable per user and per group in the admin (tenants.models).
        "max_pending_per_owner": (_optional(_integer(1, 1_000_000)), 10),
        "max_instances_per_owner": (_optional(_integer(1, 1_000_000)), 20),
    },
    "outbox": {
        "poll_interval": (_duration(0.01, 60), 1.0),
        "batch_size": (_integer(1, 1000), 16),
        "max_in_flight": (_optional(_integer(1, 10_000)), None),
        "prefetch": (_integer(0, 1000), 0),
        "delivery_timeout": (_duration(1, 3600), 300.0),
        "lease_margin": (_duration(1, 3600), 30.0),
        "liveness_timeout": (_duration(1, 3600), 20.0),
        "handoff_timeout": (_duration(1, 3600), 30.0),
        "write_timeout": (_duration(0.1, 600), 5.0),
        "stop_grace": (_duration(0, 3600), 8.0),
        "max_attempts": (_integer(1, 100), 8),
        "backoff_base": (_duration(0.01, 3600), 1.0),
        "backoff_cap": (_duration(0.01, 86400), 600.0),
        "retention": (_duration(60, 365 * 86400), 7 * 86400.0),
    },
    # What gobrave keeps and for how long (core.retention): each purge deletes in batches
    # of batch_size rows, each its own statement and commit, every interval (run by the
    # dispatcher). Ages: None (the key left empty) keeps forever. Sent outbox rows:
    # outbox.retention.
    "retention": {
        "interval": (_duration(1, 86400), 300.0),
        "batch_size": (_integer(1, 100_000), 1000),
        "dead_letters_resolved": (_optional(_duration(60, 10 * 365 * 86400)), 30 * 86400.0),
        "deleted_instance_history": (_optional(_duration(60, 10 * 365 * 86400)), None),
        "engine_history": (_optional(_duration(60, 10 * 365 * 86400)), None),
        "webhook_deliveries": (_optional(_duration(60, 10 * 365 * 86400)), 30 * 86400.0),
    },
    # Tenants (contract §8): request throttles per user (None: off) and the /metrics token.
    "api": {
        "throttle_create": (_optional(_rate), "1000/minute"),
        "throttle_write": (_optional(_rate), "3000/minute"),
        "metrics_token": (_optional(_token), None),
        "tokens_per_user": (_integer(1, 10_000), 50),
    },
    # Streams (log follow, live pages): open at once per user and in all, counted across
    # every web process and host in lease rows (core.leases), and how long one may last.
    "streams": {
        "per_user": (_integer(1, 10_000), 8),
        "total": (_integer(1, 1_000_000), 1000),
        "idle_seconds": (_duration(0.1, 86400), 300.0),
        "max_seconds": (_duration(1, 7 * 86400), 3600.0),
        "lease_seconds": (_duration(3, 3600), 60.0),
        # Empty: a third of lease_seconds (streams.services.stream_stall_seconds).
        "stall_seconds": (_optional(_duration(0.1, 1800)), None),
    },
    "queue": {
        "broker": (_broker, "orm"),
        "create_workers": (_optional(_integer(1, 100)), None),
        "control_workers": (_integer(1, 100), 2),
        "queue_limit": (_integer(1, 1000), 4),
        "bulk": (_integer(1, 100), 1),
        "poll": (_duration(0.01, 10), 0.1),
        "save_limit": (_integer(-1, 100_000), -1),
    },
    # Signed webhooks (webhooks app): who may subscribe, which addresses an endpoint may
    # have, how a delivery is bounded, when an endpoint is switched off.
    "webhooks": {
        "users_may_subscribe": (_boolean, False),
        "allow_http": (_boolean, False),
        "allow_private": (_boolean, False),
        "workers": (_integer(1, 100), 2),
        "timeout": (_duration(0.1, 60), 5.0),
        "disable_after": (_integer(1, 1000), 3),
        "rotation_overlap": (_duration(0, 30 * 86400), 86400.0),
        "limit_interval": (_duration(60, 86400), 60.0),
    },
}

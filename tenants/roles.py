"""The two ready-made groups, operators and viewers, and the permissions each holds.

``ROLES`` is what the groups hold on a database migrated to the current code. Every
change to it comes with a data migration that calls ``grant`` (an app that adds models
operators should edit, such as DAG templates, adds its own migration), so that existing
installations get the same permissions as new ones; ``tests/tenants/test_roles.py``
checks that the migrated groups hold exactly ``ROLES``.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.apps import apps as django_apps

OPERATORS = "operators"
VIEWERS = "viewers"


def _perms(app: str, actions: Iterable[str], models: Iterable[str]) -> list[str]:
    return [f"{app}.{action}_{model}" for model in models for action in actions]


ROLES: dict[str, frozenset[str]] = {
    OPERATORS: frozenset(
        _perms("containers", ("view", "add", "change", "delete"), ["containertemplate"])
        + _perms("containers", ("view", "change"), ["containerinstance", "runtime"])
        + _perms("containers", ("view",), ["containerevent", "runtimeevent", "orphancontainer"])
        + _perms("containers", ("view", "delete"), ["workspace"])
        + _perms("outbox", ("view", "change"), ["outboxevent"])
        + _perms("tenants", ("view", "add", "change", "delete"), ["userquota", "groupquota"])
        + _perms("dags", ("view", "add", "change", "delete"), ["dagtemplate"])
        + _perms("dags", ("view", "change"), ["dagrun"])
        + _perms("dags", ("view",), ["dagevent"])
        + _perms("webhooks", ("view", "add", "change", "delete"), ["webhookendpoint"])
    ),
    VIEWERS: frozenset(
        _perms("containers", ("view",), ["containertemplate", "containerinstance", "runtime"])
        + _perms("containers", ("view",), ["containerevent", "runtimeevent", "orphancontainer"])
        + _perms("containers", ("view",), ["workspace"])
        + _perms("outbox", ("view",), ["outboxevent"])
        + _perms("tenants", ("view",), ["userquota", "groupquota"])
        + _perms("dags", ("view",), ["dagtemplate", "dagrun", "dagevent"])
        + _perms("webhooks", ("view",), ["webhookendpoint"])
    ),
}


def grant(apps, *, group: str, permissions: Iterable[str]) -> None:
    """Give ``group`` (made if missing) each ``app_label.codename`` permission. Idempotent.

    For data migrations (``apps`` is the migration's app registry) and for tests that
    rebuild the groups after a flush (``apps`` is ``django.apps.apps``). Permissions that
    Django has not created yet (it does so after migrating) are created first; an unknown
    one raises ``LookupError`` naming it.
    """
    from django.contrib.auth.management import create_permissions

    wanted = sorted(set(permissions))
    for label in {name.split(".", 1)[0] for name in wanted}:
        config = apps.get_app_config(label)
        config.models_module = getattr(config, "models_module", None) or True
        create_permissions(config, apps=apps, verbosity=0)
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    target, _ = Group.objects.get_or_create(name=group)
    for name in wanted:
        label, codename = name.split(".", 1)
        permission = Permission.objects.filter(
            content_type__app_label=label, codename=codename
        ).first()
        if permission is None:
            raise LookupError(f"no permission {name}")
        target.permissions.add(permission)


def roles_install() -> None:
    """Make both groups hold at least ``ROLES`` (tests, after a flush emptied them).

    Cheap when they already do (two queries): nothing is written then.
    """
    for group, permissions in ROLES.items():
        if not permissions <= role_permissions(group):
            grant(django_apps, group=group, permissions=permissions)


def role_permissions(group: str) -> set[str]:
    """The ``app_label.codename`` permissions ``group`` holds now (empty if no such group)."""
    from django.contrib.auth.models import Permission

    rows = Permission.objects.filter(group__name=group).values_list(
        "content_type__app_label", "codename"
    )
    return {f"{label}.{codename}" for label, codename in rows}

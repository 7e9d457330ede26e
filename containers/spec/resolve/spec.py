"""The stored spec resolved from a template (``resolve_spec``), a user's env overrides
judged (``user_env_for``), and a template's snapshot (``template_snapshot``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from containers.engines.labels import LABEL_INSTALLATION, LABEL_INSTANCE, LABEL_TEMPLATE
from containers.spec import env_policy
from containers.spec.hardening import resolve_hardening
from containers.spec.image_refs import clean_image
from containers.spec.resolve.constraints import clean_constraints, node_selector
from containers.spec.resolve.expansion import expand
from containers.spec.resolve.fields import clean_command, clean_env, clean_resources
from containers.spec.resolve.volumes import resolve_mounts
from core.config import SECURITY_DEFAULTS

# Template fields that say nothing about what a container is.
_NOT_SNAPSHOT = frozenset(
    {"created_at", "updated_at", "image_status", "image_checked_at", "user_env_removed"}
)


def user_env_for(template: Any, overrides: Mapping[str, Any] | None) -> dict[str, str]:
    """A user's env ``overrides`` of ``template`` checked against its env policy
    (``env_policy.check_user_env``: its ``user_env`` rules, the keys it sets itself), as
    a create applies it; ``InvalidSpec`` naming the first refused key. The API, the admin's
    add form and ``resolve_spec`` all judge overrides here."""
    return env_policy.check_user_env(
        overrides, rules=template.user_env, template_env=clean_env(template.env)
    )


def template_snapshot(template: Any) -> dict[str, Any]:
    """The fields of a template that a spec is resolved from, as plain JSON.

    Stored by callers that must create from a template as it was (a DAG run), however
    the template is edited later; ``container_create_by_template(snapshot=...)`` takes it
    (fields added to templates later take their defaults there).
    """
    return {
        field.attname: getattr(template, field.attname)
        for field in template._meta.concrete_fields
        if field.attname not in _NOT_SNAPSHOT
    }


def resolve_spec(
    *,
    template: Any,
    variables: Mapping[str, str],
    env_overrides: Mapping[str, Any] | None,
    roots: list[str],
    installation: str,
    owner_id: int = 0,
    security: Mapping[str, Any] | None = None,
    workspace: Mapping[str, Any] | None = None,
    local: bool = True,
    workspace_root: str = "",
) -> dict[str, Any]:
    """The stored spec: what the worker hands the engine, fully resolved.

    The user's ``env_overrides`` pass the template's env policy (``containers.spec.env_policy``)
    and are kept literally: variables expand only in the template's own values.
    ``secret_env`` names the env keys whose values users must not see. ``workspace``
    (``kind``, ``source``, ``uid``, ``gid``) is the owner's workspace on the chosen
    engine, kept in the spec when a volume mounts it so the worker provisions it;
    ``security`` is ``container.security`` (its defaults when None).
    """
    operator_env = clean_env(template.env)
    user_env = user_env_for(template, env_overrides)
    # gobrave's variables expand in the operator's values only: a user's value is literal
    # (their "$WORKSPACE_ROOT" must not become the host path the API hides).
    env = {
        **{
            k: expand(v, variables, strict=False, where=f"env.{k}") for k, v in operator_env.items()
        },
        **user_env,
    }
    secret = [k for k in env_policy.clean_secret_env(template.secret_env) if k in env]
    command = clean_command(template.command)
    resources = clean_resources(template.resources)
    if workspace is None:
        workspace = {"kind": "directory", "source": variables.get("WORKSPACE_PATH", "")}
    resolved_mounts = resolve_mounts(
        template.volumes,
        variables,
        roots=roots,
        workspace=workspace,
        local=local,
        workspace_root=workspace_root,
        template_name=template.name,
    )
    hardening = resolve_hardening(
        template_security=getattr(template, "security", {}),
        resources=resources,
        config=SECURITY_DEFAULTS if security is None else security,
        owner_id=owner_id,
        installation=installation,
    )
    return {
        "name": variables["CONTAINER_NAME"],
        "image": clean_image(template.image),
        "pull_policy": template.pull_policy,
        "command": (
            [expand(p, variables, strict=False, where="command") for p in command]
            if command
            else None
        ),
        "env": env,
        "mounts": resolved_mounts,
        **hardening,
        "secret_env": secret,
        "node_selector": node_selector(clean_constraints(getattr(template, "constraints", {}))),
        "workspace": (
            dict(workspace) if any(m.get("workspace") for m in resolved_mounts) else None
        ),
        "labels": {
            LABEL_INSTALLATION: installation,
            LABEL_INSTANCE: variables["INSTANCE_ID"],
            LABEL_TEMPLATE: template.name,
        },
    }

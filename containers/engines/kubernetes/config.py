"""How a Kubernetes runtime reaches its API: a kubeconfig file and context, or the
service account of the Pod gobrave runs in. Certificate verification is always on: a
kubeconfig that turns it off is refused, not obeyed.

Calls go through the official ``kubernetes`` client (its ``ApiClient``, one per engine
object and process); nothing here is hand-rolled HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import (
    SERVICE_CERT_FILENAME,
    SERVICE_TOKEN_FILENAME,
    InClusterConfigLoader,
)

from containers.engines.base import EngineError

# Where the in-cluster service account's token and CA are mounted in gobrave's Pod (the
# client's fixed paths): module attributes so that a test points them at its own files.
SERVICE_ACCOUNT_TOKEN = SERVICE_TOKEN_FILENAME
SERVICE_ACCOUNT_CA = SERVICE_CERT_FILENAME


@dataclass(frozen=True)
class KubeTarget:
    """One namespace of one cluster, and how owners' workspaces are claimed there.

    Checked on the ``Runtime`` row (``containers.addresses.kube_target_problems``).
    ``kubeconfig`` empty: the in-cluster service account (token and CA mounted in the
    Pod). ``storage_class`` empty: the cluster's default class.
    """

    namespace: str
    kubeconfig: str = ""
    context: str = ""
    storage_class: str = ""
    volume_size: str = "1Gi"
    access_mode: str = "ReadWriteOnce"

    @property
    def where(self) -> str:
        """The target in an operator's words (never a credential)."""
        source = (
            f"kubeconfig {self.kubeconfig}" + (f" context {self.context}" if self.context else "")
            if self.kubeconfig
            else "in-cluster service account"
        )
        return f"namespace {self.namespace} ({source})"


# A kubeconfig user whose credentials expire and are renewed by the client before a call
# (``Configuration.refresh_api_key_hook``): an exec plugin's, an auth provider's. Any
# other (a token, a token file read at load, a client certificate) never changes.
RENEWED_BY = ("exec", "auth-provider")


def _renewed(target: KubeTarget) -> bool:
    """Whether the kubeconfig's user (of ``target.context``, or the current context) has
    credentials the client renews (``RENEWED_BY``); True when that cannot be told, so
    the client's hook stays."""
    try:
        kubeconfig = yaml.safe_load(Path(target.kubeconfig).read_text(encoding="utf-8")) or {}
        name = target.context or kubeconfig["current-context"]
        context = next(c for c in kubeconfig["contexts"] if c["name"] == name)["context"]
        user = next(u for u in kubeconfig["users"] if u["name"] == context["user"])["user"]
    except (OSError, KeyError, TypeError, StopIteration, yaml.YAMLError):
        return True
    return not isinstance(user, dict) or any(key in user for key in RENEWED_BY)


def api_client(target: KubeTarget, *, timeout: float) -> client.ApiClient:
    """A client for ``target``, verification on. ``EngineError`` (with the reason an
    operator reads on the runtime's health) when the configuration cannot be loaded or
    turns verification off."""
    configuration = client.Configuration()
    try:
        if target.kubeconfig:
            config.load_kube_config(
                config_file=target.kubeconfig,
                context=target.context or None,
                client_configuration=configuration,
                persist_config=False,
            )
        else:
            # ``config.load_incluster_config``, from ``SERVICE_ACCOUNT_*``: the API's
            # address from KUBERNETES_SERVICE_HOST/PORT, the token re-read as it rotates.
            InClusterConfigLoader(
                token_filename=SERVICE_ACCOUNT_TOKEN, cert_filename=SERVICE_ACCOUNT_CA
            ).load_and_set(configuration)
    except (ConfigException, OSError, TypeError, ValueError, yaml.YAMLError) as exc:
        raise EngineError(
            f"cannot load the Kubernetes configuration of {target.where}: {exc}"
        ) from exc
    if not configuration.verify_ssl:
        raise EngineError(
            f"the Kubernetes configuration of {target.where} turns certificate verification"
            " off (insecure-skip-tls-verify); gobrave always verifies: give the cluster's CA"
        )
    configuration.retries = 0  # gobrave's relay retries, with its backoff
    if target.kubeconfig and not _renewed(target):
        # The client calls this hook before every request to renew credentials that
        # expire; for any others it only sets the same values again (about 0.06 ms a
        # call on the project's machine, on each of a create's requests).
        configuration.refresh_api_key_hook = None
    api = client.ApiClient(configuration)
    api.user_agent = "gobrave"
    return api

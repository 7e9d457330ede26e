"""The Kubernetes driver: each instance is one Pod in one namespace (docs/kubernetes.md).

Small modules, each named for what it holds: ``config`` (how the API is reached, checked),
``names`` (Pod, Secret and claim names; labels cleaned to Kubernetes' alphabet, full
values in annotations), ``pods`` (a ``ContainerSpec`` as a Pod manifest, and what this
driver refuses), ``states`` (a Pod as a ``ContainerState``: the state table),
``watch`` (Pod changes as engine events, resumed by ``resourceVersion``), ``logs``
(tail and follow) and ``engine`` (the ``Engine`` itself).
"""

from __future__ import annotations

from containers.engines.kubernetes.config import KubeTarget
from containers.engines.kubernetes.engine import KubernetesEngine

__all__ = ["KubeTarget", "KubernetesEngine"]

"""Containers: engines, templates, instances and their history.

Where what lives:
- ``runtime``: ``Runtime``, an engine gobrave schedules onto (how it is reached, its
  health, cordon, decommission and capacity).
- ``template``: ``ContainerTemplate``, what to run, and ``PullPolicy``.
- ``instance``: ``ContainerInstance``, one managed container, and its transitions.
- ``history``: ``ContainerEvent`` (an instance's history) and ``RuntimeEvent`` (an
  engine's).
- ``bookkeeping``: ``Gate``, ``OrphanContainer``, ``MonitorCursor`` and
  ``Installation``, the rows gobrave keeps for its own running.
- ``workspace``: ``Workspace``, an owner's workspace on one engine.
Every model is imported here, in the order the single module defined them, so Django's
registry (``containers.models``) holds the same models in the same order; callers import
them from this package.
"""

# Unsorted on purpose: Django registers the models in the order the single module had.
# isort: off
from containers.models.runtime import Runtime
from containers.models.template import ContainerTemplate, PullPolicy
from containers.models.instance import ContainerInstance
from containers.models.history import ContainerEvent, RuntimeEvent
from containers.models.bookkeeping import Gate, Installation, MonitorCursor, OrphanContainer
from containers.models.workspace import Workspace

# isort: on

__all__ = [
    "ContainerEvent",
    "ContainerInstance",
    "ContainerTemplate",
    "Gate",
    "Installation",
    "MonitorCursor",
    "OrphanContainer",
    "PullPolicy",
    "Runtime",
    "RuntimeEvent",
    "Workspace",
]

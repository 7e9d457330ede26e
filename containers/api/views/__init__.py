"""The containers REST API. Views are thin: validate input, call a selector or a service,
render. Errors are raised (``DomainError`` or DRF's) and shaped by ``core.api.errors``.

Who may do what is ``containers.access`` (and ``core.api.permissions`` for the
permission each action needs): a user sees and acts on their own instances; another
user's instance answers 404 exactly as a missing one does, unless the caller holds
``view_containerinstance`` (then acting on it needs ``change_containerinstance``, else
403). The staff flag grants nothing here.

Where what lives:
- ``common``: who acts (``_actor``) and for whom serializers render (``_viewer``).
- ``instances``: ``ContainerViewSet`` (``/api/containers/``), with its logs.
- ``templates``: ``TemplateViewSet`` (``/api/templates/``).
- ``runtimes``: ``RuntimeViewSet`` (``/api/runtimes/``), cordon and decommission too.
- ``queue``: ``QueueView`` (``/api/queue/``).
The views are re-exported so ``containers.api.urls`` imports them from this package; a
test that replaces a name a view looks up must patch the module that holds the view.
"""

from containers.api.views.instances import ContainerViewSet
from containers.api.views.queue import QueueView
from containers.api.views.runtimes import RuntimeViewSet
from containers.api.views.templates import TemplateViewSet

__all__ = ["ContainerViewSet", "QueueView", "RuntimeViewSet", "TemplateViewSet"]

"""Input and output serializers for the containers API. Serializers validate and render;
the services in ``containers.requests.services`` and ``containers.spec.template_services``
do the writes.

Where what lives:
- ``common``: what several serializers (and ``dags.api``) share: ``StoredJSONField``,
  ``StrictCharField``, ``TemplateRefField``, ``ForViewer``.
- ``instances``: instances, their logs, extensions, accepted requests and history.
- ``templates``: templates in and out.
- ``runtimes``: runtimes in and out, the reason of an action, a decommission.
- ``queue``: the queue's statistics.
The names below are re-exported so callers import them from this package (the views as
``serializers as s``).
"""

from containers.api.serializers.common import (
    ForViewer,
    StoredJSONField,
    StrictCharField,
    TemplateRefField,
)
from containers.api.serializers.instances import (
    EventOutputSerializer,
    ExtendInputSerializer,
    InstanceAcceptedSerializer,
    InstanceCreateInputSerializer,
    InstanceOutputSerializer,
    LogsOutputSerializer,
    LogsQuerySerializer,
    NamedRefSerializer,
    PolicyStatusSerializer,
    RuntimeRefSerializer,
)
from containers.api.serializers.queue import (
    OwnerQueueOutputSerializer,
    QueueOutputSerializer,
    RelayStatsSerializer,
)
from containers.api.serializers.runtimes import (
    DecommissionInputSerializer,
    DecommissionPreviewSerializer,
    DecommissionResultSerializer,
    ForgottenSerializer,
    RuntimeActionInputSerializer,
    RuntimeChangeInputSerializer,
    RuntimeInputSerializer,
    RuntimeOutputSerializer,
)
from containers.api.serializers.templates import (
    GroupNamesField,
    TemplateInputSerializer,
    TemplateOutputSerializer,
)

__all__ = [
    "DecommissionInputSerializer",
    "DecommissionPreviewSerializer",
    "DecommissionResultSerializer",
    "EventOutputSerializer",
    "ExtendInputSerializer",
    "ForViewer",
    "ForgottenSerializer",
    "GroupNamesField",
    "InstanceAcceptedSerializer",
    "InstanceCreateInputSerializer",
    "InstanceOutputSerializer",
    "LogsOutputSerializer",
    "LogsQuerySerializer",
    "NamedRefSerializer",
    "OwnerQueueOutputSerializer",
    "PolicyStatusSerializer",
    "QueueOutputSerializer",
    "RelayStatsSerializer",
    "RuntimeActionInputSerializer",
    "RuntimeChangeInputSerializer",
    "RuntimeInputSerializer",
    "RuntimeOutputSerializer",
    "RuntimeRefSerializer",
    "StoredJSONField",
    "StrictCharField",
    "TemplateInputSerializer",
    "TemplateOutputSerializer",
    "TemplateRefField",
]

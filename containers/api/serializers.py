"""Input and output serializers for the containers API. Serializers validate and render;
the services in ``containers.requests.services`` and ``containers.spec.template_services``
do the writes.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from containers.fleet import runtimes
from containers.fleet.services import REASON_MAX
from containers.models import (
    ContainerEvent,
    ContainerInstance,
    ContainerTemplate,
    PullPolicy,
    Runtime,
)
from containers.queues import event_kind_display
from containers.spec import redaction
from containers.spec.env_policy import MAX_USER_KEYS, MAX_USER_VALUE
from containers.spec.policies import POLICY_FIELDS, policy_status
from containers.spec.resolve import MAX_COMMAND_PART, MAX_COMMAND_PARTS
from core.api.input import InputSerializer

# --- shared -----------------------------------------------------------------------------


def _policy_seconds(help_text: str) -> serializers.IntegerField:
    """A template's policy duration in seconds: up to ten years and a bit, null for the
    installation's default (``containers.spec.policies``)."""
    return serializers.IntegerField(
        min_value=0, max_value=3660 * 86400, allow_null=True, default=None, help_text=help_text
    )


def _no_nul(value: Any, where: str = "") -> None:
    """PostgreSQL cannot store U+0000 in text or jsonb: refuse it here, as a 400."""
    if isinstance(value, str):
        if "\x00" in value:
            raise serializers.ValidationError(
                f"{where or 'value'}: NUL characters are not allowed."
            )
    elif isinstance(value, dict):
        for key, item in value.items():
            _no_nul(key, where)
            _no_nul(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _no_nul(item, f"{where}[{index}]")


class StoredJSONField(serializers.JSONField):
    """Any JSON value that PostgreSQL's jsonb can store (the spec cleaners judge the rest)."""

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        _no_nul(value)
        return value


class StrictCharField(serializers.CharField):
    """Text that must be given as a JSON string (DRF's ``CharField`` turns 600 into "600")."""

    default_error_messages = {"not_a_string": "Must be a string."}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("not_a_string")
        return super().to_internal_value(data)


@extend_schema_field(
    {"oneOf": [{"type": "integer"}, {"type": "string"}], "description": "Template id or name."}
)
class TemplateRefField(serializers.Field):
    """A template id or name (the value is passed on as text; the view resolves it)."""

    default_error_messages = {"invalid": "Give a template id or name."}

    def to_internal_value(self, data: Any) -> str:
        if isinstance(data, bool) or not isinstance(data, int | str):
            self.fail("invalid")
        text = str(data).strip()
        if not text or len(text) > 128 or "\x00" in text:
            self.fail("invalid")
        return text

    def to_representation(self, value: Any) -> Any:
        return value


# --- instances --------------------------------------------------------------------------


class InstanceCreateInputSerializer(InputSerializer):
    template = TemplateRefField()
    name = serializers.CharField(required=False, max_length=128)
    env = serializers.DictField(
        child=serializers.CharField(
            allow_blank=True, trim_whitespace=False, max_length=MAX_USER_VALUE
        ),
        required=False,
        help_text="Env for this instance (NAME: value): only the keys the template's "
        "user_env allows. Values are literal: $VARIABLES are not expanded.",
    )

    def validate_env(self, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_USER_KEYS:
            raise serializers.ValidationError(f"At most {MAX_USER_KEYS} keys.")
        return value


class LogsQuerySerializer(serializers.Serializer):
    tail = serializers.IntegerField(
        min_value=1,
        max_value=10_000,
        default=100,
        help_text="Lines from the end. An answer holds at most 1 MiB of them: past it, it is "
        "cut, ends with a note saying so and carries `X-Gobrave-Truncated: <bytes shown>`.",
    )
    follow = serializers.BooleanField(
        default=False,
        help_text="Stream the output as it comes (text/plain) instead of one JSON answer. "
        "The stream ends when the container stops or is deleted, when you may no longer see "
        "it (checked every `streams.lease_seconds`/3), after `streams.idle_seconds` without "
        "output, after `seconds`, or after 1 MiB (a client that reads nothing for "
        "`streams.stall_seconds` has its connection reset); a last line `[gobrave: stream ended: "
        "<why>]` says which when it is not the container's end. A user holds at most "
        "`streams.per_user` streams at once (429 `too_many_streams` beyond).",
    )
    seconds = serializers.IntegerField(
        min_value=1,
        max_value=86_400,
        required=False,
        help_text="With follow: how long to follow at most (capped at `streams.max_seconds`, "
        "3600 as shipped; that cap when left out).",
    )


class NamedRefSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()


class RuntimeRefSerializer(NamedRefSerializer):
    """The instance's runtime and its engine's health as last recorded (since when)."""

    health = serializers.CharField()
    health_since = serializers.DateTimeField(allow_null=True)


class ForViewer:
    """Renders for ``context["viewer"]`` (the caller): what users never see is taken out
    (``containers.spec.redaction``). Without a viewer, as for the least privileged."""

    def viewer(self):
        return self.context.get("viewer")


class PolicyStatusSerializer(serializers.Serializer):
    """When the instance will be stopped (and why) or deleted by a lifecycle policy, and
    whether the caller may extend its time limit (``POST .../extend/``)."""

    stop_at = serializers.DateTimeField(allow_null=True)
    stop_reason = serializers.CharField(allow_blank=True)
    idle_since = serializers.DateTimeField(allow_null=True)
    idle_stop_at = serializers.DateTimeField(allow_null=True)
    delete_at = serializers.DateTimeField(allow_null=True)
    extendable = serializers.BooleanField()
    extend_left = serializers.IntegerField(help_text="Seconds of extension left for this run.")


class ExtendInputSerializer(InputSerializer):
    seconds = serializers.IntegerField(
        min_value=1, max_value=366 * 86400, help_text="How much later to stop it, in seconds."
    )


class InstanceOutputSerializer(ForViewer, serializers.ModelSerializer):
    template = NamedRefSerializer()
    runtime = RuntimeRefSerializer(allow_null=True)  # null while pending: not placed yet
    owner = serializers.CharField(source="owner.get_username")
    policy = serializers.SerializerMethodField()

    class Meta:
        model = ContainerInstance
        fields = [
            "id",
            "name",
            "status",
            "status_reason",
            "owner",
            "template",
            "runtime",
            "placement_reason",
            "container_id",
            "runtime_node_name",
            "runtime_missing",
            "exit_code",
            "spec",
            "created_at",
            "status_changed_at",
            "started_at",
            "finished_at",
            "policy",
        ]
        read_only_fields = fields

    @extend_schema_field(PolicyStatusSerializer)
    def get_policy(self, instance: ContainerInstance) -> dict[str, Any]:
        return PolicyStatusSerializer(policy_status(instance, self.viewer())).data

    def to_representation(self, instance):
        data = super().to_representation(instance)
        viewer = self.viewer()
        data["spec"] = redaction.spec_for(viewer, data.get("spec") or {})
        if not redaction.sees_hosts(viewer):
            data["status_reason"] = redaction.scrub(data.get("status_reason") or "")
        return data


class InstanceAcceptedSerializer(InstanceOutputSerializer):
    """An accepted request: the instance, and whether a new request was queued.

    ``queued`` is false for a repeat of a request already under way (a no-op).
    """

    queued = serializers.BooleanField(read_only=True)

    class Meta(InstanceOutputSerializer.Meta):
        fields = [*InstanceOutputSerializer.Meta.fields, "queued"]
        read_only_fields = fields

    def to_representation(self, result):
        """``result`` is the service's ``RequestResult``: the instance, plus ``queued``."""
        instance = InstanceOutputSerializer(result.instance, context=self.context).data
        return {**instance, "queued": result.queued}


class EventOutputSerializer(ForViewer, serializers.ModelSerializer):
    # ``kind`` is for programs; ``kind_display`` says it in words (queues.EVENT_KIND_WORDS).
    kind_display = serializers.SerializerMethodField()

    class Meta:
        model = ContainerEvent
        fields = [
            "id",
            "kind",
            "kind_display",
            "from_status",
            "to_status",
            "message",
            "actor",
            "data",
            "created_at",
        ]
        read_only_fields = fields

    def get_kind_display(self, event: ContainerEvent) -> str:
        return event_kind_display(event.kind)

    def to_representation(self, instance):
        data = super().to_representation(instance)
        if not redaction.sees_hosts(self.viewer()):
            data["message"] = redaction.scrub(data["message"])
            data["data"] = redaction.scrub_data(data["data"])
        return data


class LogsOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    tail = serializers.IntegerField()
    logs = serializers.CharField(allow_blank=True)


# --- templates --------------------------------------------------------------------------


class GroupNamesField(serializers.ListField):
    """Group names; drawn from a template's groups too (the browsable API's edit form)."""

    def to_representation(self, data):
        if hasattr(data, "all"):
            data = [group.name for group in data.all()]
        return super().to_representation(data)


class TemplateInputSerializer(InputSerializer):
    """A template to create or replace (PUT: omitted fields take their defaults) or to
    change (PATCH: only the fields given)."""

    name = serializers.CharField(max_length=128)
    image = serializers.CharField(max_length=255)
    command = serializers.ListField(
        child=StrictCharField(allow_blank=True, trim_whitespace=False, max_length=MAX_COMMAND_PART),
        max_length=MAX_COMMAND_PARTS,
        default=list,
        help_text='The words the container runs, e.g. ["sleep", "600"]; no shell runs them '
        '(for one give ["sh", "-c", "..."]). Empty: the image\'s own command.',
    )
    env = StoredJSONField(default=dict, help_text="NAME: value; values may use $VARIABLES.")
    user_env = StoredJSONField(
        default=list,
        help_text='Env keys users may set: "KEY", "APP_*" (a prefix ending in _*) or '
        '{"name", "pattern", "max_length"}; never "*" nor a key runtimes read at start-up.',
    )
    secret_env = StoredJSONField(default=list, help_text="Keys of env users never see.")
    volumes = StoredJSONField(
        default=list, help_text='[{"source", "target", "read_only"}] or "src:dst[:ro]".'
    )
    resources = StoredJSONField(
        default=dict, help_text='{"cpu": cores, "memory": bytes or "256m", "pids": processes}'
    )
    security = StoredJSONField(
        default=dict,
        help_text="Overrides of container.security: user, cap_add, read_only_rootfs, "
        "network, runtime.",
    )
    constraints = StoredJSONField(default=dict, help_text="Runtime label name: required value.")
    pull_policy = serializers.ChoiceField(
        choices=PullPolicy.choices, default=PullPolicy.IF_NOT_PRESENT
    )
    max_lifetime = _policy_seconds(
        "Seconds a run may last before the policy stops it; null: the "
        "installation's default; 0: never.",
    )
    idle_timeout = _policy_seconds(
        "Seconds under idle_cpu_threshold before the policy stops it; null: the "
        "installation's default; 0: never.",
    )
    idle_cpu_threshold = serializers.FloatField(
        min_value=0.0001,
        max_value=1024,
        allow_null=True,
        default=None,
        help_text="Cores below which the container counts as idle; null: the default.",
    )
    delete_stopped_after = _policy_seconds(
        "Seconds after it stopped that the policy deletes it; null: the "
        "installation's default; 0: never.",
    )
    extendable_by = serializers.ChoiceField(
        choices=["nobody", "owner", "staff"],
        allow_blank=True,
        default="",
        help_text="Who may push back its time limit; empty: the installation's default.",
    )
    extend_max = _policy_seconds(
        "Seconds a run's stop may be pushed back in all; null: the default.",
    )
    workspace_retention = _policy_seconds(
        "Seconds the owner's volume workspace is kept once their last instance "
        "is gone (the longest among the templates of the instances that used it); null: "
        "the installation's default; 0: kept.",
    )
    enabled = serializers.BooleanField(default=True, help_text="Off: no user sees or uses it.")
    allowed_groups = GroupNamesField(
        child=serializers.CharField(max_length=150),
        default=list,
        max_length=1000,
        help_text="Group names whose members may use it; empty: every user.",
    )


class TemplateOutputSerializer(ForViewer, serializers.ModelSerializer):
    allowed_groups = serializers.SlugRelatedField(slug_field="name", many=True, read_only=True)
    extendable_by = serializers.CharField(
        read_only=True,
        help_text="Who may push back its time limit: nobody, owner or staff; empty: the "
        "installation's default.",
    )
    command = serializers.ListField(
        child=serializers.CharField(), read_only=True, help_text="The words the container runs."
    )

    class Meta:
        model = ContainerTemplate
        fields = [
            "id",
            "name",
            "image",
            "command",
            "env",
            "user_env",
            "secret_env",
            "volumes",
            "resources",
            "constraints",
            "pull_policy",
            *POLICY_FIELDS,
            "enabled",
            "allowed_groups",
            "image_status",
            "image_checked_at",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def to_representation(self, instance):
        return redaction.template_for(self.viewer(), super().to_representation(instance))


# --- runtimes and the queue -------------------------------------------------------------


def _runtime_limit(help_text: str) -> serializers.IntegerField:
    """One of a runtime's own capacity limits: from 1 to a million, null for none."""
    return serializers.IntegerField(
        min_value=1, max_value=1_000_000, default=None, allow_null=True, help_text=help_text
    )


class RuntimeInputSerializer(InputSerializer):
    """A runtime to create, or (PATCH) the fields to change. How to reach the engine is
    checked by the service (``containers.fleet.runtimes``); the TLS fields are paths."""

    name = serializers.SlugField(max_length=64)
    driver = serializers.ChoiceField(choices=Runtime.Driver.choices, default="docker")
    base_url = serializers.CharField(
        max_length=255,
        required=False,
        help_text="docker: unix:///path, tcp://host:port (with the three TLS files), or "
        "ssh://user@host[:port]. kubernetes: set by gobrave from the context and namespace.",
    )
    tls_ca_cert = serializers.CharField(max_length=1024, default="", allow_blank=True)
    tls_client_cert = serializers.CharField(max_length=1024, default="", allow_blank=True)
    tls_client_key = serializers.CharField(
        max_length=1024,
        default="",
        allow_blank=True,
        help_text="The key file's path on gobrave's hosts; its content is never read back.",
    )
    kube_namespace = serializers.CharField(
        max_length=63, default="", allow_blank=True, help_text="kubernetes: the namespace."
    )
    kube_config = serializers.CharField(
        max_length=1024,
        default="",
        allow_blank=True,
        help_text="kubernetes: the kubeconfig file's path on gobrave's hosts (empty: the "
        "in-cluster service account); its content is never read back.",
    )
    kube_context = serializers.CharField(max_length=253, default="", allow_blank=True)
    kube_storage_class = serializers.CharField(max_length=253, default="", allow_blank=True)
    kube_volume_size = serializers.CharField(max_length=32, default="1Gi")
    kube_access_mode = serializers.ChoiceField(
        choices=Runtime.AccessMode.choices, default=Runtime.AccessMode.RWO
    )
    labels = StoredJSONField(default=dict, help_text="Label name: value (templates match them).")
    enabled = serializers.BooleanField(default=True)
    max_containers = _runtime_limit(
        "At most this many instances placed here (every state but pending, "
        "delete_pending and deleting); null: no limit of its own."
    )
    max_concurrency = _runtime_limit(
        "At most this many create/start slots here at once; null: no limit of its own."
    )

    def validate_labels(self, value):
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise serializers.ValidationError("An object of label names to string values.")
        return value


def _reason_field(what: str) -> serializers.CharField:
    return serializers.CharField(
        max_length=REASON_MAX,
        required=False,
        default="",
        allow_blank=True,
        help_text=f"Why: recorded with {what} in the runtime's history (the events feed).",
    )


class RuntimeChangeInputSerializer(RuntimeInputSerializer):
    """PATCH: the fields to change, and why (switching it on or off and a capacity change
    are entries in the runtime's history, with the caller and this reason)."""

    reason = _reason_field("a change of enabled or of the capacity")


class RuntimeActionInputSerializer(InputSerializer):
    """Cordon, uncordon: an optional reason (the body may be empty)."""

    reason = _reason_field("the action")


class RuntimeOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = Runtime
        # What a caller may set (the TLS and kubeconfig fields are paths), then gobrave's own.
        fields = [
            "id",
            *runtimes.WRITABLE,
            "workspace_driver",
            "node_name",
            "health",
            "health_checked_at",
            "health_since",
            "last_seen_at",
            "last_error",
            "serves_stats",
            "cordoned",
            "cordoned_at",
            "cordoned_by",
            "decommissioned_at",
            "created_at",
        ]
        read_only_fields = fields


class DecommissionInputSerializer(InputSerializer):
    confirm = serializers.CharField(
        help_text="The runtime's name, typed again: the decommission forgets every instance "
        "on it and cannot be undone."
    )
    reason = _reason_field("the decommission")


class ForgottenSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    status = serializers.CharField()
    owner = serializers.CharField()
    container_name = serializers.CharField()
    container_id = serializers.CharField()


class DecommissionPreviewSerializer(serializers.Serializer):
    """What a decommission would forget (``GET``)."""

    runtime = RuntimeOutputSerializer()
    instances = ForgottenSerializer(many=True)
    others = serializers.ListField(
        child=serializers.CharField(), help_text="DAG runs placed there, one line each."
    )


class DecommissionResultSerializer(serializers.Serializer):
    """What a decommission forgot (``POST``)."""

    runtime = RuntimeOutputSerializer()
    instances = serializers.SerializerMethodField()
    superseded = serializers.IntegerField(help_text="Waiting requests finished as superseded.")
    others = serializers.ListField(child=serializers.CharField())

    def get_instances(self, result) -> list[dict[str, str]]:
        return [{"id": str(pk), "name": name} for pk, name in result.instances]


class RelayStatsSerializer(serializers.Serializer):
    window_seconds = serializers.IntegerField(help_text="The counters cover this many seconds.")
    claimed = serializers.IntegerField()
    sent = serializers.IntegerField()
    superseded = serializers.IntegerField()
    deferred = serializers.IntegerField()
    retried = serializers.IntegerField()
    dead = serializers.IntegerField()
    reclaimed_unstarted = serializers.IntegerField(
        help_text="Claims that ran out before any worker began them (a wedged or gone cluster)."
    )
    cluster_restarted = serializers.IntegerField(
        help_text="Worker clusters the supervisor restarted (dead or wedged)."
    )
    in_flight = serializers.IntegerField(help_text="Outbox rows in processing right now.")


class QueueOutputSerializer(serializers.Serializer):
    """The installation's queue (callers with ``view_containerinstance``)."""

    scope = serializers.ChoiceField(choices=["installation"])
    pending_count = serializers.IntegerField()
    active_count = serializers.IntegerField(
        help_text="Create/start slots held (creating or starting, not waiting for a retry)."
    )
    max_pending = serializers.IntegerField()
    max_concurrency = serializers.IntegerField()
    dead_count = serializers.IntegerField(help_text="Outbox rows that went dead.")
    oldest_pending_age_seconds = serializers.FloatField(allow_null=True)
    relay = RelayStatsSerializer()


class OwnerQueueOutputSerializer(serializers.Serializer):
    """The caller's own side of the queue (callers without ``view_containerinstance``)."""

    scope = serializers.ChoiceField(choices=["owner"])
    pending_count = serializers.IntegerField(help_text="Your create requests waiting.")
    active_count = serializers.IntegerField(help_text="Your instances creating or starting.")
    instance_count = serializers.IntegerField(
        help_text="Your instances not deleted and not being deleted."
    )
    max_pending_per_owner = serializers.IntegerField(allow_null=True, help_text="null: no limit")
    max_instances_per_owner = serializers.IntegerField(allow_null=True, help_text="null: no limit")
    oldest_pending_age_seconds = serializers.FloatField(allow_null=True)

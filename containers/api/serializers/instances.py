"""Instances: a create's input, a logs query and its answer, an extension, an
instance as shown (with its lifecycle policy's status), an accepted request, and an
instance's history."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from containers.api.serializers.common import ForViewer, TemplateRefField
from containers.models import ContainerEvent, ContainerInstance
from containers.queues import event_kind_display
from containers.spec import redaction
from containers.spec.env_policy import MAX_USER_KEYS, MAX_USER_VALUE
from containers.spec.policies import policy_status
from core.api.input import InputSerializer


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

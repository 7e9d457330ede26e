"""Runtimes: one to add or change, the reason of an action, one as shown, and a
decommission's confirmation, preview and result."""

from __future__ import annotations

from rest_framework import serializers

from containers.api.serializers.common import StoredJSONField
from containers.fleet import runtimes
from containers.fleet.services import REASON_MAX
from containers.models import Runtime
from core.api.input import InputSerializer


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

"""Templates: one to create, replace or change, and one as shown."""

from __future__ import annotations

from rest_framework import serializers

from containers.api.serializers.common import ForViewer, StoredJSONField, StrictCharField
from containers.models import ContainerTemplate, PullPolicy
from containers.spec import redaction
from containers.spec.policies import POLICY_FIELDS
from containers.spec.resolve import MAX_COMMAND_PART, MAX_COMMAND_PARTS
from core.api.input import InputSerializer


def _policy_seconds(help_text: str) -> serializers.IntegerField:
    """A template's policy duration in seconds: up to ten years and a bit, null for the
    installation's default (``containers.spec.policies``)."""
    return serializers.IntegerField(
        min_value=0, max_value=3660 * 86400, allow_null=True, default=None, help_text=help_text
    )


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

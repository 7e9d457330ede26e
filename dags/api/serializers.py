"""Input and output serializers of the DAG API; the services in ``dags.services`` write."""

from __future__ import annotations

from rest_framework import serializers

from containers.api.serializers import ForViewer, StoredJSONField, TemplateRefField
from containers.spec import redaction
from core.api.input import InputSerializer
from dags.history import dag_event_kind_display
from dags.models import DagEvent, DagNodeRun, DagRun, DagTemplate
from dags.selectors import node_output_spec


class ScrubbedForViewer(ForViewer):
    """Free-text fields (``scrubbed``) lose host paths and engine addresses unless the
    viewer may see them (contract §8): a refused create's reason can name a host path."""

    scrubbed: tuple[str, ...] = ()

    def to_representation(self, instance):
        data = super().to_representation(instance)
        if not redaction.sees_hosts(self.viewer()):
            for name in self.scrubbed:
                data[name] = redaction.scrub(data[name])
        return data


class DagTemplateInputSerializer(InputSerializer):
    name = serializers.CharField(max_length=128)
    description = serializers.CharField(required=False, allow_blank=True, default="")
    nodes = StoredJSONField(
        help_text="A list of nodes: key, template (name or id), command (a list of words, "
        'e.g. ["sh", "-c", "make test"]), env, depends_on, retries.'
    )


class DagTemplateOutputSerializer(ForViewer, serializers.ModelSerializer):
    """Each node's env as the viewer may see it: ``context["secret_env"]`` maps container
    template ids to their ``secret_env`` (``dags.selectors.dag_secret_env``)."""

    class Meta:
        model = DagTemplate
        fields = ["id", "name", "description", "nodes", "created_at", "updated_at"]
        read_only_fields = fields

    def to_representation(self, instance):
        data = super().to_representation(instance)
        secret_env = self.context.get("secret_env") or {}
        data["nodes"] = redaction.dag_nodes_for(self.viewer(), data["nodes"], secret_env)
        return data


class DagRunCreateInputSerializer(InputSerializer):
    template = TemplateRefField(help_text="The DAG template's id or name.")


class DagNodeOutputSerializer(ScrubbedForViewer, serializers.ModelSerializer):
    scrubbed = ("reason",)

    class Meta:
        model = DagNodeRun
        fields = [
            "key",
            "status",
            "depends_on",
            "retries",
            "attempt",
            "instance_id",
            "instance_name",
            "exit_code",
            "reason",
            "started_at",
            "finished_at",
            "output",
            "output_attempt",
        ]
        read_only_fields = fields

    def to_representation(self, instance):
        """``output``: a failed attempt's kept output, its secret values hidden from a
        viewer who may not see them (``node.run`` comes with the prefetched nodes)."""
        data = super().to_representation(instance)
        if data["output"]:
            spec = node_output_spec(instance.run, instance.key)
            data["output"] = redaction.logs_for(self.viewer(), spec, data["output"])
        return data


class DagRunOutputSerializer(ScrubbedForViewer, serializers.ModelSerializer):
    scrubbed = ("reason",)
    template = serializers.CharField(source="template_name", read_only=True)
    owner = serializers.CharField(source="owner.username", read_only=True)
    runtime = serializers.CharField(source="runtime.name", read_only=True, default=None)
    node_counts = serializers.SerializerMethodField()

    class Meta:
        model = DagRun
        fields = [
            "id",
            "template",
            "owner",
            "status",
            "reason",
            "runtime",
            "node_counts",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields

    def get_node_counts(self, run: DagRun) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node in run.nodes.all():  # prefetched by the view
            counts[node.status] = counts.get(node.status, 0) + 1
        return counts


class DagRunDetailSerializer(DagRunOutputSerializer):
    nodes = DagNodeOutputSerializer(many=True, read_only=True)

    class Meta(DagRunOutputSerializer.Meta):
        fields = [*DagRunOutputSerializer.Meta.fields, "nodes"]
        read_only_fields = fields


class DagEventOutputSerializer(ScrubbedForViewer, serializers.ModelSerializer):
    scrubbed = ("message",)
    # ``kind`` is for programs; ``kind_display`` says it in words (DAG_EVENT_KIND_WORDS).
    kind_display = serializers.SerializerMethodField()

    class Meta:
        model = DagEvent
        fields = [
            "id",
            "node",
            "kind",
            "kind_display",
            "from_status",
            "to_status",
            "message",
            "actor",
            "created_at",
        ]
        read_only_fields = fields

    def get_kind_display(self, event: DagEvent) -> str:
        return dag_event_kind_display(event.kind)

"""The queue's statistics: the installation's (with the relay's counters) or the
caller's own."""

from __future__ import annotations

from rest_framework import serializers


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

"""Placement: which runtime (engine) a create goes to.

``choice.placement_choose`` decides (constraints, room, the policy);
``containers.requests.placing`` runs it under the capacity gate when a create leaves
``pending``; a DAG run's engine is ``choice.runtime_select``.
"""

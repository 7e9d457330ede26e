"""Placement: which runtime (engine) a new instance goes to.

The request side asks ``choice.runtime_select`` while it accepts a create (and a DAG run
for its nodes); per-engine capacity and health-driven placement belong here too.
"""

"""Signals other apps subscribe to, so that containers never imports them.

Both are sent inside the transaction that holds the instance's row lock, after the
change is saved and recorded. Receivers run in that transaction: they must be quick, may
write rows of their own (an outbox row, say) and must never lock rows of another app
that could be waiting on this instance (a DAG run's row, for one), nor call an engine.

- ``instance_moved(instance, source, target, actor)``: every state change (``move()``).
- ``instance_removed(instance, actor)``: the instance's row is about to be deleted after
  its container was removed (the delete request finished).

Two more concern a whole engine (``containers.fleet``), sent with no instance row locked:

- ``runtime_placements(runtime)``: each receiver returns a list of one-line descriptions
  of what of its own is placed on ``runtime`` (a DAG run), for the decommission's
  confirmation. Reads only.
- ``runtime_decommissioned(runtime, reason, actor)``: ``runtime`` is gone for good and its
  instances were forgotten; each receiver ends what of its own is placed there, with
  ``reason``, and lets go of the runtime row (sent in the transaction that switches the
  runtime off, under its row lock, before its instances are forgotten).
"""

from __future__ import annotations

from django.dispatch import Signal

instance_moved = Signal()
instance_removed = Signal()
runtime_placements = Signal()
runtime_decommissioned = Signal()

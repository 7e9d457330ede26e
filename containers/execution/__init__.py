"""The engine side: the outbox handlers that carry requests out on engines, the monitor
that follows engines' events, sync and the reconciler that keep rows true to the
engines, engine health, workspaces, images and housekeeping.
"""

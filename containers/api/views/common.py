"""What the views of the containers API share: who acts (``_actor``) and for whom
a serializer renders (``_viewer``)."""

from __future__ import annotations

from containers.actors import user_actor


def _actor(request) -> str:
    return user_actor(request.user)


def _viewer(request) -> dict:
    """Serializer context: render for this caller (``containers.spec.redaction``)."""
    return {"viewer": request.user}

"""The Docker engine's images: present or not, the pull policy applied, a pull's errors."""

from __future__ import annotations

import re

import docker
import docker.errors

from containers.engines.base import EngineError, PermanentEngineError
from containers.engines.docker.errors import _translated

PULL_POLICIES = frozenset({"never", "if_not_present", "always"})
# What a registry answers, through the engine, for an image that is not there or a
# reference that is not one: no retry can fix it, whatever the HTTP status (Docker 20.10
# answers 404 or 400 before a pull's stream starts; an error inside the stream has none).
# A registry that cannot be reached ("connection refused", "no such host", a timeout)
# matches none of these: retried.
_IMAGE_ABSENT = re.compile(
    r"manifest unknown|name unknown|repository does not exist|not found"
    r"|invalid reference format",
    re.IGNORECASE,
)


def pull_error(exc: EngineError) -> EngineError:
    """A pull's error, permanent when it says the image is absent (``_IMAGE_ABSENT``)."""
    if isinstance(exc, PermanentEngineError) or not _IMAGE_ABSENT.search(str(exc)):
        return exc
    return PermanentEngineError(str(exc))


class _Images:
    """``DockerEngine``'s image calls (a part of it: uses its ``_api``)."""

    def image_present(self, image: str) -> bool:
        """True when ``image`` is in the engine's local store."""
        with _translated(f"inspect image {image}"):
            try:
                self._api().inspect_image(image)
            except docker.errors.NotFound:
                return False
            return True

    def ensure_image(self, image: str, pull_policy: str) -> None:
        """Make ``image`` available per policy.

        ``never``: missing is a PermanentEngineError. ``if_not_present``: pull only when
        missing. ``always``: pull; when the pull fails but a local copy exists, use it.
        Pull errors are classified like other engine errors (registry unreachable →
        EngineError; e.g. repository not found → PermanentEngineError).
        """
        if pull_policy not in PULL_POLICIES:
            raise PermanentEngineError(
                f"unknown pull_policy {pull_policy!r} for image {image!r} "
                f"(expected one of {', '.join(sorted(PULL_POLICIES))})"
            )
        if pull_policy == "never":
            if not self.image_present(image):
                raise PermanentEngineError(
                    f"image {image!r} is not present on the engine and pull_policy is 'never'"
                )
            return
        if pull_policy == "if_not_present" and self.image_present(image):
            return
        try:
            self._pull(image)
        except EngineError:
            if pull_policy == "always" and self.image_present(image):
                return
            raise

    def _pull(self, image: str) -> None:
        """Pull ``image`` (tag defaults to latest), surfacing errors reported mid-stream.

        The error says "cannot pull image <image>: <the engine's message>"; one that says
        the image is absent (``_IMAGE_ABSENT``) is a PermanentEngineError, whatever the
        status the engine sent it with.
        """
        what = f"cannot pull image {image}"
        repository, tag = docker.utils.parse_repository_tag(image)
        try:
            with _translated(what):
                for chunk in self._api().pull(
                    repository, tag=tag or "latest", stream=True, decode=True
                ):
                    if isinstance(chunk, dict) and chunk.get("error"):
                        raise EngineError(f"{what}: {chunk['error']}")
        except EngineError as exc:
            error = pull_error(exc)
            if error is exc:
                raise
            raise error from exc
        if not self.image_present(image):
            raise EngineError(f"{what}: the pull finished but the image is not present")

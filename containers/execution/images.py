"""Template image status: is each template's image in the store of the engines it may use?

``run_monitor`` refreshes it at start when ``refresh_image_status_on_start`` is set, and
``manage.py refresh_images`` on demand. The admin and the API show the stored result.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.utils import timezone

from containers.engines import engine_for
from containers.engines.base import EngineError
from containers.errors import InvalidSpec
from containers.models import ContainerTemplate, Runtime
from containers.spec.resolve import clean_constraints

log = logging.getLogger(__name__)

Status = ContainerTemplate.ImageStatus


def runtimes_matching(*, template: ContainerTemplate, runtimes: Iterable[Runtime]) -> list[Runtime]:
    """The runtimes among ``runtimes`` whose labels satisfy the template's constraints."""
    try:
        constraints = clean_constraints(template.constraints)
    except InvalidSpec:
        return []
    return [
        runtime
        for runtime in runtimes
        if all(str(runtime.labels.get(k)) == v for k, v in constraints.items())
    ]


def template_image_status(*, template: ContainerTemplate, runtimes: Iterable[Runtime]) -> str:
    """``present`` when every reachable matching runtime has the image, ``missing`` when one
    lacks it, ``unknown`` when no matching runtime answered (or none can tell: a cluster).
    Makes engine calls; no DB writes.
    """
    answers = []
    for runtime in runtimes_matching(template=template, runtimes=runtimes):
        try:
            answer = engine_for(runtime).image_present(template.image)
            if answer is not None:
                answers.append(answer)
        except EngineError as exc:
            log.warning(
                "image check of %s on runtime %s failed: %s", template.image, runtime.name, exc
            )
    if not answers:
        return Status.UNKNOWN
    return Status.PRESENT if all(answers) else Status.MISSING


def template_images_refresh(
    *, templates: Iterable[ContainerTemplate] | None = None
) -> list[ContainerTemplate]:
    """Check and store ``image_status`` and ``image_checked_at`` of each template.

    1. Read the enabled runtimes once.
    2. For each template (all by default), ask each matching runtime whether the image
       is present (engine calls, no transaction open).
    3. Store the answer with an ``update()`` of those two fields only, so a concurrent
       template edit is never overwritten.
    Idempotent; an unreachable engine leaves ``unknown`` rather than failing the run.
    Returns the templates with their new status.
    """
    runtimes = list(Runtime.objects.filter(enabled=True).order_by("name"))
    templates = list(ContainerTemplate.objects.all() if templates is None else templates)
    for template in templates:
        status = template_image_status(template=template, runtimes=runtimes)
        now = timezone.now()
        ContainerTemplate.objects.filter(pk=template.pk).update(
            image_status=status, image_checked_at=now
        )
        template.image_status, template.image_checked_at = status, now
        log.info("template %s image %s: %s", template.name, template.image, status)
    return templates

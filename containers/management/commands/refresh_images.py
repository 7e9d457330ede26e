"""``manage.py refresh_images``: store each template's image status (present/missing)."""

from __future__ import annotations

from containers.execution.images import template_images_refresh
from containers.management.commands._request import ConsoleCommand


class Command(ConsoleCommand):
    help = "Check each template's image on the enabled runtimes its constraints match."

    def handle(self, *args, **options):
        for template in template_images_refresh():
            self.stdout.write(f"{template.name:32}  {template.image:40}  {template.image_status}")

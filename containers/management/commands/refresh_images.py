"""``manage.py refresh_images``: store each template's image status (present/missing)."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from containers.images import template_images_refresh


class Command(BaseCommand):
    help = "Check each template's image on the enabled runtimes its constraints match."

    def handle(self, *args, **options):
        for template in template_images_refresh():
            self.stdout.write(f"{template.name:32}  {template.image:40}  {template.image_status}")

"""``manage.py container_stop <uuid>``: request a stop through the service layer."""

from containers.management.commands._request import RequestCommand
from containers.requests.services import container_stop


class Command(RequestCommand):
    help = "Request a stop of a container instance."
    action = "stop"

    def request(self, **kwargs):
        return container_stop(**kwargs)

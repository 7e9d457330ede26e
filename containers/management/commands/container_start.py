"""``manage.py container_start <uuid>``: request a start through the service layer."""

from containers.management.commands._request import RequestCommand
from containers.requests.services import container_start


class Command(RequestCommand):
    help = "Request a start of a container instance."
    action = "start"

    def request(self, **kwargs):
        return container_start(**kwargs)

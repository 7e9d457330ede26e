"""``manage.py container_delete <uuid>``: request a delete through the service layer."""

from containers.management.commands._request import RequestCommand
from containers.requests.services import container_delete


class Command(RequestCommand):
    help = "Request a delete of a container instance."
    action = "delete"

    def request(self, **kwargs):
        return container_delete(**kwargs)

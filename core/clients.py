"""Who is calling: the client's address, as every per-address count sees it (the login
lockout, the API's throttles of anonymous requests).

Behind a reverse proxy every client has the proxy's address; the proxy then passes the
client's address in a header of its own (``GOBRAVE_CLIENT_IP_HEADER``), which it must
overwrite on every request so that clients cannot choose it. Nothing else a client sends
(``X-Forwarded-For`` included) is believed.
"""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def client_address(request: HttpRequest) -> str:
    """The client's address: the proxy's header when one is configured and holds an
    address, else the peer's."""
    header = settings.GOBRAVE_CLIENT_IP_HEADER
    if header and (forwarded := request.META.get(header, "").strip()):
        try:
            return str(ipaddress.ip_address(forwarded[:64]))
        except ValueError:
            pass  # not an address (the proxy did not set it): count the peer
    return request.META.get("REMOTE_ADDR", "")

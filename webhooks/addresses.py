"""Where a delivery may go: the URL check, and the one place a webhook socket is opened.

A webhook URL must not turn gobrave into a probe of its own network. So:

1. ``url_check`` parses the URL: ``https`` only (``http`` when ``webhooks.allow_http``),
   a host, no user name or password in it, a port in range.
2. ``resolve`` looks the host up and refuses it unless *every* address it resolves to is
   public (``is_public``): loopback, link-local, private, shared, multicast, reserved and
   unspecified addresses are refused, unless ``webhooks.allow_private``. The lookup runs
   in a thread of its own and is waited for only until the delivery's deadline (or
   ``webhooks.timeout`` at creation): ``getaddrinfo`` itself cannot be bounded, and a
   resolver that does not answer must not hold a worker past its deadline.
3. ``open_socket`` connects only to an address ``resolve`` returned *at that moment*
   (the delivery resolves again before each attempt, and connects to the address it
   checked: never a second lookup that DNS rebinding could answer differently), then checks
   the peer the socket really reached once more before a byte is sent.

The API and the admin check at creation (steps 1-2); every delivery checks again (1-3).
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

from webhooks.errors import WebhookUrlRefused

MAX_URL = 2000


@dataclass(frozen=True)
class Target:
    """A checked URL: its scheme, host (as written), port and path with query."""

    scheme: str
    host: str
    port: int
    path: str


def _config() -> dict:
    return settings.GOBRAVE["webhooks"]


# IPv6 prefixes that carry an IPv4 address a gateway may deliver to: NAT64 (RFC 6052's
# well-known prefix and RFC 8215's local-use one) and IPv4-compatible (deprecated, ::/96).
_CARRIERS = tuple(
    ipaddress.ip_network(prefix) for prefix in ("64:ff9b::/96", "64:ff9b:1::/48", "::/96")
)


def _carried(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, 6to4, NAT64, compatible)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if any(ip in network for network in _CARRIERS):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def is_public(address: str) -> bool:
    """True for an address on the public internet. An IPv6 address that carries an IPv4
    one (IPv4-mapped, 6to4, NAT64, IPv4-compatible) must be public as that IPv4 address
    too: ``64:ff9b::a9fe:a9fe`` is 169.254.169.254 through a NAT64 gateway."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        carried = _carried(ip)
        if carried is not None and not (carried.is_global and not carried.is_multicast):
            return False
    return ip.is_global and not ip.is_multicast


def url_check(url: str) -> Target:
    """Step 1: the URL's form. Raises ``WebhookUrlRefused`` naming what is wrong."""
    if not isinstance(url, str) or not url or len(url) > MAX_URL:
        raise WebhookUrlRefused(f"the URL must be 1-{MAX_URL} characters", field="url")
    if any(ch.isspace() or not ch.isprintable() for ch in url):
        raise WebhookUrlRefused("the URL must not contain spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise WebhookUrlRefused(f"not a valid URL: {exc}", field="url") from None
    allowed = ("https", "http") if _config()["allow_http"] else ("https",)
    if parts.scheme not in allowed:
        raise WebhookUrlRefused(
            f"the URL's scheme must be {' or '.join(allowed)}, not {parts.scheme or 'none'!r}"
            + ("" if _config()["allow_http"] else " (webhooks.allow_http is off)"),
            field="url",
        )
    if not parts.hostname:
        raise WebhookUrlRefused("the URL has no host", field="url")
    if parts.username is not None or parts.password is not None:
        raise WebhookUrlRefused("the URL must not hold a user name or password", field="url")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(
        scheme=parts.scheme,
        host=parts.hostname,
        port=port or (443 if parts.scheme == "https" else 80),
        path=path,
    )


def lookup(host: str, port: int) -> list[tuple]:
    """The system's resolver (``getaddrinfo``), for TCP: the one lookup of this module."""
    return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)


def _bounded_lookup(host: str, port: int, *, deadline: float | None) -> list[tuple]:
    """``lookup`` in a daemon thread, waited for until ``deadline`` (a
    ``time.monotonic()`` instant; None: ``webhooks.timeout`` from now). Past it,
    ``WebhookUrlRefused`` marked ``unresolved`` (a delivery is retried, as for a name that
    does not resolve) and the thread is left to end with the resolver's own timeout.

    A thread per lookup, not a pool: nothing to rebuild in a forked worker, and a
    daemon never holds up a worker's exit. Stuck threads stay few: a worker makes its
    attempts one after another, so it has at most the resolver's timeout over the
    deadline of them at once."""
    wait = max(float(_config()["timeout"]) if deadline is None else deadline - time.monotonic(), 0)
    done = threading.Event()
    outcome: list = []

    def run() -> None:
        try:
            outcome.append(lookup(host, port))
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
            outcome.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name="webhook-dns", daemon=True).start()
    if not done.wait(wait):
        raise WebhookUrlRefused(
            f"{host} did not resolve within the deadline ({wait:.1f} s): "
            "name resolution took too long",
            field="url",
            unresolved=True,
        )
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


def _refused(address: str) -> bool:
    return not _config()["allow_private"] and not is_public(address)


def resolve(target: Target, *, deadline: float | None = None) -> list[tuple]:
    """Step 2: the addresses ``target``'s host resolves to (``getaddrinfo`` entries),
    all of them allowed, or ``WebhookUrlRefused`` (marked ``unresolved`` for a name that
    does not resolve, or not before ``deadline``: ``_bounded_lookup``)."""
    try:
        infos = _bounded_lookup(target.host, target.port, deadline=deadline)
    except (socket.gaierror, UnicodeError) as exc:
        raise WebhookUrlRefused(
            f"{target.host} does not resolve: {exc}", field="url", unresolved=True
        ) from None
    if not infos:
        raise WebhookUrlRefused(f"{target.host} does not resolve", field="url", unresolved=True)
    for *_, sockaddr in infos:
        if _refused(sockaddr[0]):
            raise WebhookUrlRefused(
                f"{target.host} resolves to {sockaddr[0]}, which is not a public address "
                "(loopback, link-local and private addresses are refused unless "
                "webhooks.allow_private is on)",
                field="url",
                address=sockaddr[0],
            )
    return infos


def endpoint_url_check(url: str) -> Target:
    """Steps 1 and 2, for the API and the admin: the URL is well formed and its host
    resolves only to allowed addresses now."""
    target = url_check(url)
    resolve(target)
    return target


def open_socket(target: Target, *, timeout: float, deadline: float | None = None) -> socket.socket:
    """Step 3: resolve, check, connect to a checked address, check the peer reached.

    The lookup and the connects all end by ``deadline`` (a ``time.monotonic()``
    instant, when given; the lookup's own bound otherwise: ``resolve``), each address
    tried in turn within ``timeout``; raises ``WebhookUrlRefused`` for a refused address
    (before any connection is made) or a name not resolved in time, and ``OSError``
    (``TimeoutError`` past the deadline) when none answers.
    """
    last: OSError | None = None
    for family, kind, proto, _, sockaddr in resolve(target, deadline=deadline):
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{target.host}: no connection within the deadline")
            timeout = min(timeout, left)
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(sockaddr)
            peer = sock.getpeername()[0]
            if _refused(peer):
                raise WebhookUrlRefused(f"connected to {peer}, which is not a public address")
            return sock
        except OSError as exc:
            sock.close()
            last = exc
        except BaseException:
            sock.close()
            raise
    raise last or OSError(f"{target.host}: no address to connect to")

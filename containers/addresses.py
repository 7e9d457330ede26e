"""How a ``Runtime`` row reaches its engine: the addresses gobrave accepts, checked.

Three ways, each safe on an untrusted network or confined to one host:

- ``unix:///path/docker.sock``: an engine on this host;
- ``tcp://host:port`` with mutual TLS: the CA that signed the engine's certificate, and
  gobrave's client certificate and key, given as **file paths** (the files are secrets,
  the paths are not: the database never holds a key). Plain ``tcp://`` (no TLS files) is
  refused unless the host is a loopback address: anyone on the path could otherwise run
  containers as root on the engine's host;
- ``ssh://user@host[:port]``: the docker CLI's ``docker system dial-stdio`` on the far
  side, as the user gobrave runs as (its ``~/.ssh/config``, key and ``known_hosts``: an
  unknown host key is refused).

Verification is always on: there is no "insecure" switch, and the environment
(``REQUESTS_CA_BUNDLE``, ``CURL_CA_BUNDLE``, proxies) is not read for a TLS engine.
"""

from __future__ import annotations

import ipaddress
import os
import re
import ssl
import stat
from urllib.parse import urlsplit

SCHEMES = ("unix", "tcp", "ssh")
LOOPBACK_NAMES = frozenset({"localhost"})


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and the loopback addresses (127.0.0.0/8, ::1)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _tls_file_problem(path: str, *, key: bool) -> str:
    """Why the PEM file at ``path`` cannot serve ("" when it can). Never quotes the file."""
    if not os.path.isabs(path):
        return "Give an absolute path."
    try:
        info = os.stat(path)
    except OSError as exc:
        return f"Cannot read {path}: {exc.strerror}."
    if not stat.S_ISREG(info.st_mode):
        return f"{path} is not a file."
    if not os.access(path, os.R_OK):
        return f"{path} is not readable by gobrave."
    if key and info.st_mode & (stat.S_IROTH | stat.S_IWOTH):
        return f"{path} is readable by every user of this host: chmod 600 (or 640) it."
    return ""


def _tls_problems(ca_cert: str, client_cert: str, client_key: str) -> dict[str, str]:
    """The TLS files' problems, by field: each present and readable, the key private to
    its owner, the CA a certificate, the client's certificate and key a pair."""
    given = {"tls_ca_cert": ca_cert, "tls_client_cert": client_cert, "tls_client_key": client_key}
    problems = {
        field: "Mutual TLS needs all three files: the CA, the client certificate and its key."
        for field, path in given.items()
        if not path
    }
    for field, path in given.items():
        if path and (problem := _tls_file_problem(path, key=field == "tls_client_key")):
            problems[field] = problem
    if problems:
        return problems
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_verify_locations(cafile=ca_cert)
    except (ssl.SSLError, ValueError):
        problems["tls_ca_cert"] = f"{ca_cert} holds no PEM certificate."
    try:
        context.load_cert_chain(client_cert, client_key)
    except (ssl.SSLError, ValueError):  # the message never quotes the files
        problems["tls_client_key"] = (
            f"{client_cert} and {client_key} are not a PEM certificate and its unencrypted key."
        )
    return problems


def engine_address_problems(
    *,
    driver: str,
    base_url: str,
    tls_ca_cert: str = "",
    tls_client_cert: str = "",
    tls_client_key: str = "",
) -> dict[str, str]:
    """Why a runtime's address cannot be used, by field (empty: it can).

    Checks the form of ``base_url`` for the driver (``fake://`` for the fake driver;
    ``unix://``, ``tcp://`` or ``ssh://`` for Docker) and the TLS files (read on this host,
    never quoted): only a ``tcp://`` address takes them, and a ``tcp://`` address needs
    them unless its host is a loopback one. Reads files, never asks an engine.
    """
    tls = (tls_ca_cert, tls_client_cert, tls_client_key)
    if driver == "fake":
        return {} if base_url.startswith("fake://") else {"base_url": "Use fake:///directory."}
    parts = urlsplit(base_url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        return {
            "base_url": "Use unix:///path/to/docker.sock, tcp://host:port (with TLS files) "
            "or ssh://user@host."
        }
    problems: dict[str, str] = {}
    if scheme != "tcp" and any(tls):
        for field, path in zip(
            ("tls_ca_cert", "tls_client_cert", "tls_client_key"), tls, strict=True
        ):
            if path:
                problems[field] = "Only a tcp:// engine takes TLS files."
    if scheme == "unix":
        if not parts.path.startswith("/") or parts.netloc:
            problems["base_url"] = "A unix socket's address is unix:///absolute/path."
        return problems
    try:
        port = parts.port
    except ValueError:
        return {"base_url": "The port is not a number from 1 to 65535."}
    host = parts.hostname or ""
    if not host:
        return {"base_url": "Give the engine's host."}
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return {"base_url": "Give only the scheme, the host and the port."}
    if scheme == "ssh":
        if not parts.username or parts.password is not None:
            problems["base_url"] = "Give the ssh user, and no password: ssh://user@host[:port]."
        return problems
    if parts.username is not None:
        return {"base_url": "A tcp:// address has no user."}
    if port is None:
        return {"base_url": "Give the engine's port: tcp://host:2376."}
    if any(tls):
        return _tls_problems(*tls)
    if not is_loopback(host):
        problems["base_url"] = (
            "Plain tcp:// (no TLS files) is refused to any host but a loopback one: "
            "give the CA, the client certificate and its key (docs/operations.md)."
        )
    return problems


KUBE_ACCESS_MODES = ("ReadWriteOnce", "ReadWriteMany")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")


def kube_target_problems(
    *,
    namespace: str,
    kubeconfig: str = "",
    context: str = "",
    storage_class: str = "",
    volume_size: str = "1Gi",
    access_mode: str = "ReadWriteOnce",
) -> dict[str, str]:
    """Why a ``kubernetes`` runtime's target cannot be used, by field (empty: it can).

    The kubeconfig, when given, must be an absolute path to a file gobrave can read (it
    is never quoted; its certificate verification is checked when the engine connects);
    none means the in-cluster service account.
    """
    problems: dict[str, str] = {}
    if not _DNS_LABEL.match(namespace or ""):
        problems["kube_namespace"] = (
            "Give the namespace: lower-case letters, digits and '-', at most 63 characters."
        )
    if kubeconfig:
        if not os.path.isabs(kubeconfig):
            problems["kube_config"] = "Give an absolute path (empty: the in-cluster account)."
        elif not os.path.isfile(kubeconfig) or not os.access(kubeconfig, os.R_OK):
            problems["kube_config"] = f"{kubeconfig} is not a file gobrave can read."
    if context and not kubeconfig:
        problems["kube_context"] = "A context needs a kubeconfig file."
    if storage_class and not _DNS_SUBDOMAIN.match(storage_class):
        problems["kube_storage_class"] = "Not a storage class name (empty: the default)."
    if not _QUANTITY.match(volume_size or ""):
        problems["kube_volume_size"] = "A size such as 1Gi or 500Mi."
    if access_mode not in KUBE_ACCESS_MODES:
        problems["kube_access_mode"] = f"One of {', '.join(KUBE_ACCESS_MODES)}."
    return problems

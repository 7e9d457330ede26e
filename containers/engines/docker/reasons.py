"""Why a Docker engine does not answer, in an operator's words (``DockerEngine.check``).

The SDK's errors (``requests``, ``ssl``, ``paramiko``) say what failed in the transport's
terms ("CERTIFICATE_VERIFY_FAILED", "Max retries exceeded"); an operator needs to know
which file or which side to fix. ``unreachable_reason`` maps the failures met in practice
(each one tested against a real engine, tests/containers/test_remote_engines.py) to a
sentence naming that; anything else keeps the error's own words. Never quotes a file's
content (TLS file paths are not secrets; their content is).
"""

from __future__ import annotations

import datetime as dt
from urllib.parse import urlsplit

from cryptography import x509

_LIMIT = 500
# What a TLS client sees when the engine refuses its certificate: an alert, or (Go's
# server, dockerd's, under TLS 1.2) the connection closed in the handshake.
_REFUSALS = ("certificate_required", "bad_certificate", "unknown_ca", "handshake_failure")


def _chain(exc: BaseException) -> str:
    """The text of ``exc`` and of every exception it was raised from (the SSL error sits
    a few levels under requests' and urllib3's)."""
    texts, seen = [], set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        texts.append(f"{type(current).__name__}: {current}")
        current = current.__cause__ or current.__context__
    return " | ".join(texts)


def _expired_on(cert: str) -> str:
    """The end of validity of the certificate at ``cert`` when it is past ("" otherwise,
    or when it cannot be read)."""
    if not cert:
        return ""
    try:
        with open(cert, "rb") as handle:
            ends = x509.load_pem_x509_certificate(handle.read()).not_valid_after_utc
    except (OSError, ValueError):
        return ""
    return f"{ends:%Y-%m-%d %H:%M} UTC" if ends < dt.datetime.now(dt.UTC) else ""


def _where(base_url: str) -> str:
    parts = urlsplit(base_url)
    return parts.netloc or base_url


def unreachable_reason(
    exc: BaseException, *, base_url: str, tls_files: tuple[str, str, str] | None
) -> str:
    """One sentence: why the engine at ``base_url`` did not answer ``exc`` (its
    ``tls_files``: the CA, client certificate and key it was reached with, if any)."""
    where = _where(base_url)
    text = _chain(exc)
    lower = text.lower()
    ca, cert, _ = tls_files or ("", "", "")
    if base_url.startswith("unix://"):
        path = base_url.removeprefix("unix://")
        if "no such file" in lower or "filenotfounderror" in lower:
            return f"no engine socket at {path} (the engine is not running, or a wrong path)"
        if "connection refused" in lower:
            return f"nothing listens on {path} (the engine stopped)"
        if "permission denied" in lower:
            return f"gobrave's user may not open {path} (it must be in the engine's group)"
    if "http request to an https server" in lower:
        return (
            f"plain HTTP to a TLS port: the engine at {where} speaks TLS only; give the "
            "runtime the CA, the client certificate and its key"
        )
    if "certificate_verify_failed" in lower or "certificate verify failed" in lower:
        if "expired" in lower:
            return f"the engine's certificate at {where} has expired: renew it"
        if "mismatch" in lower:
            return (
                f"the engine's certificate is not for {where}: its subjectAltName must name "
                "the host or address in the runtime's URL"
            )
        return (
            f"wrong CA: the engine's certificate at {where} is not signed by the CA in {ca} "
            "(the runtime's CA file)"
        )
    if any(alert in lower for alert in _REFUSALS) or (
        "ssl" in lower and "eof occurred in violation of protocol" in lower
    ):
        if expired := _expired_on(cert):
            return (
                f"the engine refused the TLS handshake: our client certificate {cert} "
                f"expired on {expired}: renew it"
            )
        return (
            f"the engine refused the TLS handshake: it does not accept our client certificate "
            f"{cert} (it must be signed by the CA the engine trusts, dockerd --tlscacert)"
        )
    if "wrong_version_number" in lower or "wrong version number" in lower:
        return f"TLS to a port that does not speak TLS: {where} answers in plain text"
    if "not found in known_hosts" in lower:
        return (
            f"ssh: the host key of {where} is not in known_hosts of the user gobrave runs as: "
            "check it, then add it (ssh-keyscan)"
        )
    if "badhostkeyexception" in lower:
        return f"ssh: the host key of {where} is not the one in known_hosts: refusing to connect"
    if "authenticationexception" in lower or "authentication failed" in lower:
        return f"ssh: {where} refused our key (its authorized_keys lacks gobrave's public key)"
    if "connection refused" in lower:
        return (
            f"connection refused at {where}: nothing listens there (engine stopped, or wrong port)"
        )
    if "timed out" in lower or "timeout" in lower:
        return f"no answer from {where} in time (host down, or the packets are dropped)"
    if "name or service not known" in lower or "name resolution" in lower:
        return f"the host name of {where} is not known (DNS)"
    if "no route to host" in lower or "network is unreachable" in lower:
        return f"no route to {where}"
    if tls_files and ("tlsparametererror" in lower or "filenotfounderror" in lower):
        return f"the runtime's TLS files cannot be read: {exc}"[:_LIMIT]
    return f"{type(exc).__name__}: {exc}"[:_LIMIT]

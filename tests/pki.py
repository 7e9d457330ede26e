"""Certificates for a test's engines, made with the ``openssl`` command (as
docs/operations.md tells an operator to): CAs, an engine's certificate for its address,
clients' certificates, an expired one. EC P-256 keys: fast to make.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


class Pki:
    """PEM files in ``directory``: ``<name>.pem`` (certificate) and ``<name>.key``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _openssl(self, *args: str) -> None:
        subprocess.run(["openssl", *args], cwd=self.directory, check=True, capture_output=True)

    def ca(self, name: str) -> str:
        """A self-signed CA; returns its certificate's path."""
        self._openssl(
            "req", "-x509", *KEY, "-days", "2", "-subj", f"/CN={name}",
            "-keyout", f"{name}.key", "-out", f"{name}.pem",
        )  # fmt: skip
        (self.directory / f"{name}.key").chmod(0o600)
        return self.cert(name)

    def signed(self, ca: str, name: str, extension: str, *, days: int = 1) -> str:
        """A certificate signed by CA ``ca`` with one extension line (``subjectAltName=...``
        for an engine, ``extendedKeyUsage=clientAuth`` for a client); ``days=-1`` makes one
        that expired a day before it began (OpenSSL 3.0 accepts it)."""
        (self.directory / f"{name}.ext").write_text(extension + "\n")
        self._openssl(
            "req", *KEY, "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.csr",
        )  # fmt: skip
        self._openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-days", str(days), "-extfile", f"{name}.ext",
            "-out", f"{name}.pem",
        )  # fmt: skip
        (self.directory / f"{name}.key").chmod(0o600)
        return self.cert(name)

    def cert(self, name: str) -> str:
        return str(self.directory / f"{name}.pem")

    def key(self, name: str) -> str:
        return str(self.directory / f"{name}.key")

    def not_after(self, name: str) -> str:
        """The certificate's end of validity, as openssl prints it."""
        out = subprocess.run(
            ["openssl", "x509", "-in", self.cert(name), "-noout", "-enddate"],
            check=True,
            capture_output=True,
            text=True,
        )
        return out.stdout.strip()

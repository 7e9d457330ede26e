"""An ``sshd`` of a test's own, so that ``ssh://`` reaches a private engine.

Debian's ``openssh-server`` (``scripts/test-services.sh`` installs it; its system service
is never enabled): ``sshd -D -f CONFIG`` on a free loopback port, with a host key and one
authorized key generated here, and ``SetEnv DOCKER_HOST=<the private engine's socket>``,
so the ``docker system dial-stdio`` the docker SDK runs on the far side reaches that
engine, never the machine's. ``home`` is the client's home directory: ``.ssh/config``
names the key, ``.ssh/known_hosts`` the server's host key (the SDK refuses unknown
hosts); point ``HOME`` at it while a client is made. ``stop()`` ends the daemon.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

from tests.processes import free_port, wait_for

SSHD = "/usr/sbin/sshd"


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as connection:
            return connection.recv(4).startswith(b"SSH-")
    except OSError:
        return False


def missing_sshd() -> str:
    """Why no private sshd can run here ("" when it can)."""
    if not os.path.exists(SSHD) or not shutil.which("ssh-keygen"):
        return "no sshd: install openssh-server (scripts/test-services.sh does)"
    return ""


class PrivateSshd:
    def __init__(self, directory: Path, *, docker_host: str) -> None:
        self.directory, self.docker_host = directory, docker_host
        self.home = directory / "home"
        self.port = 0
        self.process: subprocess.Popen | None = None

    def _keygen(self, path: Path) -> str:
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
            check=True,
            capture_output=True,
        )
        return path.with_suffix(".pub").read_text().strip()

    def start(self) -> PrivateSshd:
        ssh = self.home / ".ssh"
        ssh.mkdir(parents=True, mode=0o700)
        host_key = self._keygen(self.directory / "host_key")
        (self.directory / "authorized_keys").write_text(self._keygen(ssh / "id_ed25519") + "\n")
        self.port = free_port()
        (ssh / "config").write_text(f"Host 127.0.0.1\n  IdentityFile {ssh / 'id_ed25519'}\n")
        (ssh / "known_hosts").write_text(f"[127.0.0.1]:{self.port} {host_key}\n")
        config = self.directory / "sshd_config"
        config.write_text(
            f"Port {self.port}\n"
            "ListenAddress 127.0.0.1\n"
            f"HostKey {self.directory / 'host_key'}\n"
            f"PidFile {self.directory / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {self.directory / 'authorized_keys'}\n"
            "PermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "UsePAM no\n"
            "StrictModes no\n"
            f"SetEnv DOCKER_HOST={self.docker_host}\n"
        )
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
        log = open(self.directory / "sshd.log", "ab")  # noqa: SIM115 - the daemon holds it
        self.process = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        wait_for(
            lambda: _answers(self.port) or self.process.poll() is not None,
            timeout=30,
            message="the private sshd to listen",
        )
        if self.process.poll() is not None:
            raise RuntimeError(f"sshd exited: {(self.directory / 'sshd.log').read_text()}")
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)

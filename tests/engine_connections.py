"""How many connections a process holds open to the Docker engine's socket.

``ss -x`` lists each unix stream socket with its inode and its peer's inode; the
engine's side of a connection is the one bound to the socket's path, and its peer is
the client's socket. A process holds that connection when the peer's inode is among the
sockets in ``/proc/PID/fd``. Counts only what is connected now (a socket closed on
either side is not listed as established).
"""

from __future__ import annotations

import os
import re
import subprocess

_SOCKET_FD = re.compile(r"^socket:\[(\d+)\]$")


def _socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets among process ``pid``'s open files."""
    inodes = set()
    fds = f"/proc/{pid}/fd"
    for fd in os.listdir(fds):
        try:
            target = os.readlink(f"{fds}/{fd}")
        except OSError:  # closed meanwhile
            continue
        match = _SOCKET_FD.match(target)
        if match:
            inodes.add(match.group(1))
    return inodes


def _engine_peers(socket_path: str) -> list[str]:
    """The client-side inodes of every established connection to ``socket_path``.

    A line of ``ss -xH``: netid, state, recv-q, send-q, local path, local inode, peer
    path (``*``), peer inode. The engine's side is the line whose local path is the socket.
    """
    paths = {socket_path, os.path.realpath(socket_path)}
    listed = subprocess.run(
        ["ss", "-xH", "state", "established"], capture_output=True, text=True, check=True
    ).stdout
    peers = []
    for line in listed.splitlines():
        fields = line.split()
        for at, field in enumerate(fields[:-3]):
            if field in paths:
                peers.append(fields[at + 3])
                break
    return peers


def engine_connections(pid: int, socket_path: str = "/var/run/docker.sock") -> int:
    """How many connections process ``pid`` holds open to the engine at ``socket_path``."""
    mine = _socket_inodes(pid)
    return sum(1 for peer in _engine_peers(socket_path) if peer in mine)

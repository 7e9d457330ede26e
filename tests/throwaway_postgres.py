"""A PostgreSQL server of the test's own, to restart under running processes.

Never the shared server: ``initdb`` into a temporary directory owned by ``postgres``,
started on a free port with its socket in the same directory, removed afterwards.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from tests.processes import free_port


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise RuntimeError(f"no {name}: install Debian's postgresql")
    return found[-1]


class ThrowawayPostgres:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="gobrave-pg-", dir="/tmp"))
        self.data = self.root / "data"
        self.port = free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/gobrave"

    def _as_postgres(self, *args: str) -> None:
        command = ["runuser", "-u", "postgres", "--", *args] if os.getuid() == 0 else list(args)
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def init(self) -> ThrowawayPostgres:
        if os.getuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self._as_postgres(_bin("initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres")
        self.start()
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE gobrave")
        return self

    def dsn(self, db: str = "gobrave") -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={db}"

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1"
        self._as_postgres(
            _bin("pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.root / "log"),
            "-w", "start",
        )  # fmt: skip

    def stop(self) -> None:
        self._as_postgres(_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def crash(self) -> None:
        """Stop as a crash would: no checkpoint, commits not yet flushed are lost (the
        next ``start`` recovers from the WAL)."""
        self._as_postgres(_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def query(self, sql: str, *params):
        for _ in range(50):
            try:
                with psycopg.connect(self.dsn(), autocommit=True) as conn:
                    return conn.execute(sql, params).fetchall()
            except psycopg.OperationalError:
                time.sleep(0.2)
        raise RuntimeError("throwaway PostgreSQL does not answer")

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

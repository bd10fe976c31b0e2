"""A PostgreSQL cluster of one test's own, to stop and start at will.

`PgCluster` runs `initdb` into a fresh directory and serves it on a Unix socket
in that directory only (no TCP), as the `postgres` user (PostgreSQL refuses to
run as root). Stopping it disturbs no other test: the shared server of
`SPACE_TEST_PG_URL` is never touched.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.e2e.server import free_port

PG_USER = "postgres"


def pg_bin(name: str) -> str:
    """`name` from the newest PostgreSQL installed under /usr/lib/postgresql."""
    found = sorted(
        Path("/usr/lib/postgresql").glob(f"*/bin/{name}"),
        key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0,
    )
    if not found:
        raise RuntimeError(f"no PostgreSQL {name} under /usr/lib/postgresql (run scripts/postgres)")
    return str(found[-1])


class PgCluster:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="space-pg-"))
        shutil.chown(self.root, PG_USER, PG_USER)
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.port = free_port()  # names the socket file; nothing listens on TCP
        self.url = f"postgresql+psycopg://{PG_USER}@/postgres?host={self.root}&port={self.port}"
        self._as_postgres(pg_bin("initdb"), "-D", str(self.data), "-A", "trust", "-U", PG_USER)
        conf = self.data / "postgresql.conf"
        with conf.open("a") as file:
            file.write(
                f"listen_addresses = ''\nunix_socket_directories = '{self.root}'\n"
                f"port = {self.port}\nmax_connections = 100\nfsync = off\n"
            )

    def start(self) -> None:
        self._as_postgres(
            pg_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start"
        )

    def stop(self) -> None:
        """A fast shutdown: open connections are cut, as in a database restart."""
        self._as_postgres(pg_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def running(self) -> bool:
        status = [pg_bin("pg_ctl"), "-D", str(self.data), "status"]
        return (
            subprocess.run(
                ["runuser", "-u", PG_USER, "--", *status], capture_output=True
            ).returncode
            == 0
        )

    def close(self) -> None:
        if self.data.exists() and self.running():
            self._as_postgres(pg_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    def _as_postgres(self, *argv: str) -> None:
        done = subprocess.run(
            ["runuser", "-u", PG_USER, "--", *argv], capture_output=True, text=True
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}")

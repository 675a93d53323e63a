"""Job-store fixtures: every store behaviour test runs on SQLite and on a real PostgreSQL server
that the suite starts itself (initdb + pg_ctl in a temporary folder, as the unprivileged user
``nobody`` when run as root, since initdb refuses root; skipped, with the reason, only where
PostgreSQL is not installed or cannot start)."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from neuralbake.service.store import Store

BACKENDS = ["sqlite", "postgresql"]


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class PostgresServer:
    """A running throwaway server: TCP on loopback and a unix socket in ``socket_dir``."""

    port: int
    socket_dir: Path

    def url(self, database: str = "postgres") -> str:
        """The TCP URL of one database (the form users give ``--db``)."""
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{database}"

    def socket_url(self, database: str = "postgres") -> str:
        """The unix-socket URL of one database."""
        return f"postgresql+psycopg2://postgres@/{database}?host={self.socket_dir}&port={self.port}"

    def create_database(self) -> str:
        """A new empty database; its TCP URL."""
        import sqlalchemy as sa

        name = f"t{time.monotonic_ns()}"
        admin = sa.create_engine(self.url(), isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
        admin.dispose()
        return self.url(name)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL server for the test session, stopped and deleted at its end."""
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not initdb or not pg_ctl:
        pytest.skip("PostgreSQL is not installed (initdb/pg_ctl not found; Debian: apt-get install postgresql); the store tests ran on SQLite only")
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        pytest.skip("psycopg2 is not installed (pip install psycopg2-binary); the store tests ran on SQLite only")
    root = Path(tempfile.mkdtemp(prefix="nb-pg-"))
    data, port = root / "data", _free_port()
    prefix: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root
        runuser = shutil.which("runuser")
        if runuser is None:
            shutil.rmtree(root, ignore_errors=True)
            pytest.skip("running as root without runuser: PostgreSQL cannot be started as an unprivileged user")
        shutil.chown(root, "nobody")
        os.chmod(root, 0o700)
        prefix = [runuser, "-u", "nobody", "--"]

    def run(*args: str) -> None:
        subprocess.run([*prefix, *args], check=True, capture_output=True, text=True, timeout=120)

    try:
        run(initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
        run(pg_ctl, "-D", str(data), "-w", "-t", "60", "-l", str(root / "log"), "-o", options, "start")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"PostgreSQL could not be started: {getattr(exc, 'stderr', None) or exc}")
    try:
        yield PostgresServer(port=port, socket_dir=root)
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"], check=False, capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_url(postgres_server: PostgresServer) -> str:
    """The URL of the throwaway server's ``postgres`` database."""
    return postgres_server.url()


@pytest.fixture(params=BACKENDS)
def empty_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database with no schema yet, on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'service.db'}"
    return request.getfixturevalue("postgres_server").create_database()


@pytest.fixture
def store_url(empty_store_url: str) -> str:
    """A fresh, migrated database URL on each backend."""
    store = Store(empty_store_url)
    store.migrate()
    store.close()
    return empty_store_url


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """A migrated Store on each backend."""
    s = Store(store_url)
    yield s
    s.close()

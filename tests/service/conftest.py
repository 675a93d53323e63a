"""Job-store fixtures: every store test runs on SQLite and on a real PostgreSQL server that the
suite starts itself (initdb + pg_ctl in a temporary folder, as an unprivileged user when run as
root; skipped, with the reason, where PostgreSQL is not installed)."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from neuralbake.service.store import Store


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


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL server for the session; its URL (database ``postgres``)."""
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not initdb or not pg_ctl:
        pytest.skip("PostgreSQL is not installed (Debian: apt-get install postgresql); the store tests ran on SQLite only")
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        pytest.skip("psycopg2 is not installed (pip install psycopg2-binary)")
    root = Path(tempfile.mkdtemp(prefix="nb-pg-"))
    data, port = root / "data", _free_port()
    prefix: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root
        runuser = shutil.which("runuser")
        if runuser is None:
            pytest.skip("running as root without runuser: cannot start PostgreSQL as an unprivileged user")
        shutil.chown(root, "nobody")
        os.chmod(root, 0o700)
        prefix = [runuser, "-u", "nobody", "--"]
    run = lambda *args: subprocess.run([*prefix, *args], check=True, capture_output=True, text=True, timeout=120)  # noqa: E731
    try:
        run(initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        run(pg_ctl, "-D", str(data), "-w", "-l", str(root / "log"), "-o", f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off", "start")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"PostgreSQL could not be started: {getattr(exc, 'stderr', exc)}")
    try:
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "immediate", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, migrated database URL on each backend."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'service.db'}"
    else:
        base = request.getfixturevalue("postgres_url")
        import sqlalchemy as sa

        name = f"t{time.monotonic_ns()}"
        admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
        admin.dispose()
        url = base.rsplit("/", 1)[0] + f"/{name}"
    Store(url).migrate()
    yield url


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """A migrated Store on each backend."""
    s = Store(store_url)
    yield s
    s.close()

"""What only PostgreSQL exercises in the job store: the server the suite starts is really
PostgreSQL (so the ``[postgresql]`` cases of test_store.py are not SQLite in disguise), it is
reachable by TCP and by unix socket, claimers and reapers skip rows that another transaction
holds (``FOR UPDATE SKIP LOCKED``) instead of waiting for it, and migrations on one database are
serialised by an advisory lock. The behaviour tests shared with SQLite live in test_store.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from neuralbake.service.store import _MIGRATION_LOCK, Store, jobs

from .conftest import PostgresServer


def _impatient(url: str) -> Store:
    """A Store whose statements give up on a held lock after 2 s (a regression fails, not hangs)."""
    return Store(sa.make_url(url).update_query_dict({"options": "-c lock_timeout=2000"}).render_as_string(hide_password=False))


@pytest.fixture
def pg_store(postgres_server: PostgresServer) -> Iterator[Store]:
    """A migrated Store on a fresh PostgreSQL database."""
    store = Store(postgres_server.create_database())
    store.migrate()
    yield store
    store.close()


def test_the_suite_s_server_is_postgresql_by_tcp_and_by_socket(postgres_server: PostgresServer, pg_store: Store) -> None:
    assert pg_store.engine.dialect.name == "postgresql" and not pg_store.sqlite
    with pg_store.engine.connect() as conn:
        assert "PostgreSQL" in conn.execute(sa.text("SELECT version()")).scalar_one()
    database = pg_store.engine.url.database
    by_socket = Store(postgres_server.socket_url(database))
    with by_socket.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT inet_server_addr()")).scalar_one() is None  # a unix socket has no address
    job = pg_store.create_job("texture", {"x": 1})
    assert by_socket.get_job(job.id) == job
    by_socket.close()


def test_a_claimer_skips_a_job_another_transaction_holds(pg_store: Store) -> None:
    first = pg_store.create_job("texture", {"n": 1})
    second = pg_store.create_job("texture", {"n": 2})
    other = _impatient(pg_store.url)
    with pg_store.engine.begin() as tx:  # e.g. a cancel request in progress on the oldest job
        tx.execute(sa.select(jobs).where(jobs.c.id == first.id).with_for_update())
        started = time.monotonic()
        claimed = other.claim_next("w", lease_seconds=30)
        assert time.monotonic() - started < 2.0  # did not wait for the lock
        assert claimed is not None and claimed.id == second.id
    again = other.claim_next("w", lease_seconds=30)
    assert again is not None and again.id == first.id  # once released, the oldest is handed out
    other.close()


def test_a_reaper_leaves_a_row_another_transaction_holds(pg_store: Store) -> None:
    job = pg_store.create_job("texture", {})
    pg_store.claim_next("lost", lease_seconds=0.01)
    time.sleep(0.05)
    other = _impatient(pg_store.url)
    with pg_store.engine.begin() as tx:
        tx.execute(sa.select(jobs).where(jobs.c.id == job.id).with_for_update())
        assert other.requeue_expired() == []  # another transaction is acting on it: not waited for
    assert other.requeue_expired() == [job.id]
    other.close()


def test_migrations_wait_for_each_other(postgres_server: PostgresServer) -> None:
    url = postgres_server.create_database()
    holder, waiter = Store(url), Store(url)
    done = threading.Event()
    with holder.engine.begin() as tx:  # what a migrating server holds
        tx.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})
        thread = threading.Thread(target=lambda: (waiter.migrate(), done.set()), daemon=True)
        thread.start()
        assert not done.wait(0.5)  # the second server waits its turn
    assert done.wait(30) and "jobs" in sa.inspect(waiter.engine).get_table_names()
    holder.close()
    waiter.close()

"""The service's durable job store: jobs with attempts and leases, their events, API tokens.

One :class:`Store` over SQLAlchemy 2.0 serves SQLite (the default: one file, WAL journal) and
PostgreSQL (a URL), with the schema kept by alembic migrations (:meth:`Store.migrate`).
SQLAlchemy and alembic are the field's standard tools for this (one code path for both
databases, versioned schema changes); what differs between the databases is how writers are
kept apart:

- on SQLite every writing transaction starts with ``BEGIN IMMEDIATE`` (it takes the database's
  one write lock up front, so two writers never read the same state and then both write it),
  while reads run in plain deferred transactions, which in WAL mode never wait for a writer (the
  SSE streams poll the events while workers write them);
- on PostgreSQL the rows a transaction is about to change are locked first (``SELECT ... FOR
  UPDATE``; claimers and the lease reaper add ``SKIP LOCKED`` so they pass each other's rows);
- a worker claims the oldest queued job in one transaction, so no job is handed to two workers;
- a claimed job carries a lease that the worker's heartbeat extends; a job whose lease ran out
  (its worker was killed) is requeued by :meth:`Store.requeue_expired`, and fails for good once
  ``max_attempts`` attempts are spent, with the reason;
- every event of a job gets the next number of a gap-free per-job sequence (the job row's counter
  is incremented in the same transaction that inserts the event), so a client that reconnects
  with the last number it saw receives every later event exactly once.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event as sa_event
from sqlalchemy.engine import Connection, Engine

from neuralbake.errors import ConfigError, NeuralbakeError
from neuralbake.io.files import json_safe

__all__ = ["TERMINAL_STATES", "EventRecord", "JobRecord", "JobStateError", "QuotaError", "Store", "TokenRecord"]

JOB_STATES = ("queued", "running", "succeeded", "failed", "cancelled")
TERMINAL_STATES = ("succeeded", "failed", "cancelled")

# How long a SQLite writer waits for another's write lock before giving up ("database is locked").
_SQLITE_BUSY_SECONDS = 30.0
# Marks the engine whose transactions only read (deferred BEGIN on SQLite).
_READ_ONLY = "neuralbake_read_only"
# pg_advisory_xact_lock key held while migrating (any fixed 64-bit number: "nbstore").
_MIGRATION_LOCK = 0x6E6273746F7265

_meta = sa.MetaData()
tokens = sa.Table(
    "tokens", _meta,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("quota_jobs", sa.Integer),
    sa.Column("created", sa.Float, nullable=False),
    sa.Column("revoked", sa.Boolean, nullable=False),
    sa.Column("admin", sa.Boolean, nullable=False),
)
upload_owners = sa.Table(
    "upload_owners", _meta,
    sa.Column("upload_id", sa.String(64), primary_key=True),
    sa.Column("token_id", sa.String(32), sa.ForeignKey("tokens.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("created", sa.Float, nullable=False),
)
jobs = sa.Table(
    "jobs", _meta,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("kind", sa.String(40), nullable=False),
    sa.Column("config", sa.Text, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("max_attempts", sa.Integer, nullable=False),
    sa.Column("error", sa.Text),
    sa.Column("created", sa.Float, nullable=False),
    sa.Column("updated", sa.Float, nullable=False),
    sa.Column("worker", sa.String(200)),
    sa.Column("lease_until", sa.Float),
    sa.Column("token_id", sa.String(32), sa.ForeignKey("tokens.id")),
    sa.Column("cancel_requested", sa.Boolean, nullable=False),
    sa.Column("event_seq", sa.Integer, nullable=False),
)
events = sa.Table(
    "events", _meta,
    sa.Column("job_id", sa.String(32), sa.ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("type", sa.String(40), nullable=False),
    sa.Column("data", sa.Text, nullable=False),
    sa.Column("created", sa.Float, nullable=False),
)


class QuotaError(NeuralbakeError):
    """The token has submitted as many jobs as its quota allows."""

    status = 429


class JobStateError(NeuralbakeError):
    """The job is not in a state that allows the request (e.g. retrying a running job)."""


@dataclass(frozen=True)
class JobRecord:
    """One job as stored."""

    id: str
    kind: str
    config: dict[str, Any]
    status: str
    attempts: int
    max_attempts: int
    error: str | None
    created: float
    updated: float
    worker: str | None
    token_id: str | None
    cancel_requested: bool

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (what the HTTP API returns)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True)
class EventRecord:
    """One event of a job; ``seq`` counts 1, 2, 3... per job without gaps."""

    job_id: str
    seq: int
    type: str
    data: dict[str, Any]
    created: float


@dataclass(frozen=True)
class TokenRecord:
    """An API token (only its sha256 is stored)."""

    id: str
    name: str
    quota_jobs: int | None
    created: float
    revoked: bool
    admin: bool = False
    """Sees and acts on every job and upload (``token create --admin``)."""


def _job(row: Any) -> JobRecord:
    return JobRecord(
        id=row.id, kind=row.kind, config=json.loads(row.config), status=row.status, attempts=row.attempts,
        max_attempts=row.max_attempts, error=row.error, created=row.created, updated=row.updated, worker=row.worker,
        token_id=row.token_id, cancel_requested=bool(row.cancel_requested),
    )


def _token(row: Any) -> TokenRecord:
    return TokenRecord(id=row.id, name=row.name, quota_jobs=row.quota_jobs, created=row.created, revoked=bool(row.revoked), admin=bool(row.admin))


def _enable_wal(cursor: sqlite3.Cursor) -> None:
    """Put the database file in WAL mode (it stays so). Switching needs the file to itself and
    SQLite answers "locked" at once rather than waiting, which processes opening a new database
    together (a server and its workers) do meet: so the mode is read first and the switch retried."""
    deadline = time.monotonic() + _SQLITE_BUSY_SECONDS
    while True:
        try:
            if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _sqlite_url(url: str) -> bool:
    return url.startswith("sqlite")


class Store:
    """Jobs, events and tokens in one database (see the module docstring).

    Parameters
    ----------
    url:
        A SQLAlchemy URL: ``sqlite:///PATH`` (the folder must exist) or
        ``postgresql://user@host/db`` (``postgresql+psycopg2://...``).
    """

    def __init__(self, url: str) -> None:
        if not url or "://" not in url:
            raise ConfigError(f"{url!r} is not a database URL.", field="db", fix="use sqlite:///path/to/service.db or postgresql://user@host/db.")
        self.url = url
        self.sqlite = _sqlite_url(url)
        try:
            if self.sqlite:
                self.engine: Engine = sa.create_engine(url, connect_args={"timeout": _SQLITE_BUSY_SECONDS, "check_same_thread": False})
                self._configure_sqlite(self.engine)
            else:
                self.engine = sa.create_engine(url, pool_pre_ping=True)
        except (sa.exc.ArgumentError, ImportError) as exc:
            raise ConfigError(f"the database URL cannot be used ({exc}).", field="db", fix="use sqlite:///PATH or postgresql://user@host/db.") from exc
        # The same pool, marked so that its transactions begin as plain (deferred) reads on SQLite.
        self._reader: Engine = self.engine.execution_options(**{_READ_ONLY: True})

    @staticmethod
    def _configure_sqlite(engine: Engine) -> None:
        # pysqlite's own transaction handling defers BEGIN and cannot take the write lock up front;
        # switch it off and begin writing transactions IMMEDIATE (SQLAlchemy's documented recipe).
        # Reads (self._reader) begin deferred: in WAL mode they see a snapshot and never wait.
        @sa_event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, record: Any) -> None:
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute(f"PRAGMA busy_timeout={int(_SQLITE_BUSY_SECONDS * 1000)}")
            _enable_wal(cursor)
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        @sa_event.listens_for(engine, "begin")
        def _on_begin(connection: Connection) -> None:
            connection.exec_driver_sql("BEGIN" if connection.get_execution_options().get(_READ_ONLY) else "BEGIN IMMEDIATE")

    def migrate(self, revision: str = "head") -> None:
        """Bring the schema to the newest revision (alembic ``upgrade head``; or to ``revision``); safe to repeat."""
        from alembic import command
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", str(Path(__file__).with_name("migrations")))
        with self.engine.begin() as connection:
            if not self.sqlite:
                # Servers starting together on one database migrate one after the other (on
                # SQLite, BEGIN IMMEDIATE already serialises them).
                connection.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})
            config.attributes["connection"] = connection
            command.upgrade(config, revision)

    def close(self) -> None:
        """Release the connection pool."""
        self.engine.dispose()

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        """A writing transaction (BEGIN IMMEDIATE on SQLite)."""
        with self.engine.begin() as connection:
            yield connection

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        """A reading transaction (deferred on SQLite: it never waits for a writer)."""
        with self._reader.connect() as connection:
            yield connection

    # -- jobs -----------------------------------------------------------------------------------

    def create_job(self, kind: str, config: dict[str, Any], *, token_id: str | None = None, max_attempts: int = 3, quota: int | None = None) -> JobRecord:
        """Queue a job; its first event is ``queued``. With ``quota``, refuse it (:class:`QuotaError`) if
        the token has that many jobs already: counted and inserted in one transaction, so requests
        that race each other cannot pass the quota together (the token's row is locked on PostgreSQL;
        SQLite's writers are one at a time)."""
        if max_attempts < 1:
            raise ConfigError(f"max_attempts must be >= 1, got {max_attempts}.", field="max_attempts", fix="use 1 or more.")
        job_id, now = uuid.uuid4().hex, time.time()
        with self._tx() as tx:
            if quota is not None and token_id is not None:
                tx.execute(sa.select(tokens.c.id).where(tokens.c.id == token_id).with_for_update())
                used = tx.execute(sa.select(sa.func.count()).select_from(jobs).where(jobs.c.token_id == token_id)).scalar_one()
                if used >= quota:
                    raise QuotaError(f"this token's quota of {quota} jobs is used up.", field="token", fix="ask for a token with a larger quota.")
            tx.execute(jobs.insert().values(
                id=job_id, kind=kind, config=json.dumps(config), status="queued", attempts=0, max_attempts=max_attempts, error=None,
                created=now, updated=now, worker=None, lease_until=None, token_id=token_id, cancel_requested=False, event_seq=0,
            ))
            self._add_event(tx, job_id, "queued", {"kind": kind})
            return self._get(tx, job_id)

    @staticmethod
    def _get(tx: Connection, job_id: str, *, lock: bool = False) -> JobRecord:
        """The job inside a transaction (``lock``: its row locked until the end, on PostgreSQL)."""
        query = sa.select(jobs).where(jobs.c.id == job_id)
        row = tx.execute(query.with_for_update() if lock else query).first()
        if row is None:
            raise JobStateError(f"there is no job {job_id!r}.", field="job", fix="list the jobs to find its id.")
        return _job(row)

    def get_job(self, job_id: str) -> JobRecord | None:
        """The job, or None."""
        with self._read() as conn:
            row = conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).first()
        return None if row is None else _job(row)

    def list_jobs(self, *, status: str | None = None, limit: int = 100, token_id: str | None = None) -> list[JobRecord]:
        """Newest first, optionally of one status and/or one token."""
        query = sa.select(jobs).order_by(jobs.c.created.desc(), jobs.c.id).limit(max(1, min(limit, 10_000)))
        if status is not None:
            if status not in JOB_STATES:
                raise ConfigError(f"unknown job status {status!r}.", field="status", fix=f"use one of {', '.join(JOB_STATES)}.")
            query = query.where(jobs.c.status == status)
        if token_id is not None:
            query = query.where(jobs.c.token_id == token_id)
        with self._read() as conn:
            return [_job(row) for row in conn.execute(query)]

    def count_jobs(self, token_id: str) -> int:
        """How many jobs a token has submitted (for its quota)."""
        with self._read() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(jobs).where(jobs.c.token_id == token_id)).scalar_one())

    def claim_next(self, worker: str, *, lease_seconds: float) -> JobRecord | None:
        """Hand the oldest queued job to ``worker`` (running, one more attempt, a lease); None if none is queued."""
        now = time.time()
        with self._tx() as tx:
            # SQLite renders no FOR UPDATE: there BEGIN IMMEDIATE already keeps claimers apart.
            query = (sa.select(jobs.c.id).where(jobs.c.status == "queued").order_by(jobs.c.created, jobs.c.id).limit(1)
                     .with_for_update(skip_locked=True))
            job_id = tx.execute(query).scalar_one_or_none()
            if job_id is None:
                return None
            tx.execute(jobs.update().where(jobs.c.id == job_id, jobs.c.status == "queued").values(
                status="running", attempts=jobs.c.attempts + 1, worker=worker, lease_until=now + lease_seconds, updated=now,
            ))
            job = self._get(tx, job_id)
            self._add_event(tx, job_id, "started", {"worker": worker, "attempt": job.attempts})
        return job

    def heartbeat(self, job_id: str, worker: str, *, lease_seconds: float) -> bool:
        """Extend ``worker``'s lease on the job; False if the job is no longer running for it."""
        now = time.time()
        with self._tx() as tx:
            result = tx.execute(jobs.update().where(jobs.c.id == job_id, jobs.c.worker == worker, jobs.c.status == "running")
                                .values(lease_until=now + lease_seconds, updated=now))
            return result.rowcount == 1

    def finish(self, job_id: str, worker: str, status: str, *, error: str | None = None, data: dict[str, Any] | None = None) -> bool:
        """End ``worker``'s attempt: succeeded, failed or cancelled (with its final event). False if
        the job was no longer this worker's (its lease ran out and it was requeued)."""
        if status not in TERMINAL_STATES:
            raise ConfigError(f"a job ends as one of {', '.join(TERMINAL_STATES)}, not {status!r}.", field="status", fix="pass a final state.")
        now = time.time()
        with self._tx() as tx:
            result = tx.execute(jobs.update().where(jobs.c.id == job_id, jobs.c.worker == worker, jobs.c.status == "running")
                                .values(status=status, error=error, lease_until=None, updated=now))
            if result.rowcount != 1:
                return False
            self._add_event(tx, job_id, status, {**(data or {}), **({"error": error} if error else {})})
        return True

    def release(self, job_id: str, worker: str) -> bool:
        """Hand a running job back to the queue (its worker is shutting down); the attempt it
        used is given back too. False if the job was no longer this worker's."""
        now = time.time()
        with self._tx() as tx:
            result = tx.execute(jobs.update().where(jobs.c.id == job_id, jobs.c.worker == worker, jobs.c.status == "running").values(
                status="queued", worker=None, lease_until=None, attempts=jobs.c.attempts - 1, updated=now))
            if result.rowcount != 1:
                return False
            self._add_event(tx, job_id, "requeued", {"worker": worker, "reason": "worker shut down"})
        return True

    def requeue_expired(self, now: float | None = None) -> list[str]:
        """Running jobs whose lease ran out (their worker died): back to the queue, or failed once
        their attempts are spent. ``now=math.inf`` treats every lease as run out (only safe when no
        worker of any server is alive, e.g. in tests)."""
        now = time.time() if now is None else now
        moved = []
        with self._tx() as tx:
            # Locked (PostgreSQL) so that two reapers, or a reaper and a late heartbeat, never act
            # on the same lease: a row another transaction holds is left to it.
            expired = sa.select(jobs).where(jobs.c.status == "running", jobs.c.lease_until < now).order_by(jobs.c.created)
            rows = tx.execute(expired.with_for_update(skip_locked=True)).all()
            for row in rows:
                stamp = time.time()
                if row.cancel_requested:
                    values = {"status": "cancelled", "error": "cancelled; its worker stopped before it could finish"}
                elif row.attempts < row.max_attempts:
                    values = {"status": "queued", "error": None}
                else:
                    values = {"status": "failed", "error": f"its worker was lost {row.attempts} times (last: {row.worker}); attempts are spent."}
                tx.execute(jobs.update().where(jobs.c.id == row.id).values(worker=None, lease_until=None, updated=stamp, **values))
                kind = "requeued" if values["status"] == "queued" else values["status"]
                self._add_event(tx, row.id, kind, {"worker": row.worker, "attempt": row.attempts, **({"error": values["error"]} if values["error"] else {})})
                moved.append(row.id)
        return moved

    def request_cancel(self, job_id: str) -> JobRecord:
        """Cancel a queued job at once; ask the worker of a running one to stop it."""
        now = time.time()
        with self._tx() as tx:
            job = self._get(tx, job_id, lock=True)
            if job.status == "queued":
                tx.execute(jobs.update().where(jobs.c.id == job_id).values(status="cancelled", updated=now))
                self._add_event(tx, job_id, "cancelled", {})
            elif job.status == "running" and not job.cancel_requested:
                tx.execute(jobs.update().where(jobs.c.id == job_id).values(cancel_requested=True, updated=now))
                self._add_event(tx, job_id, "cancel_requested", {})
            return self._get(tx, job_id)

    def retry(self, job_id: str) -> JobRecord:
        """Queue a failed or cancelled job again with fresh attempts."""
        now = time.time()
        with self._tx() as tx:
            job = self._get(tx, job_id, lock=True)
            if job.status not in ("failed", "cancelled"):
                raise JobStateError(f"the job is {job.status}; only failed or cancelled jobs can be retried.", field="status", fix="wait for it to end, or cancel it first.")
            tx.execute(jobs.update().where(jobs.c.id == job_id).values(
                status="queued", attempts=0, error=None, cancel_requested=False, worker=None, lease_until=None, updated=now))
            self._add_event(tx, job_id, "queued", {"retry": True})
            return self._get(tx, job_id)

    # -- events ---------------------------------------------------------------------------------

    def _add_event(self, tx: Connection, job_id: str, kind: str, data: dict[str, Any]) -> int:
        seq = tx.execute(jobs.update().where(jobs.c.id == job_id).values(event_seq=jobs.c.event_seq + 1).returning(jobs.c.event_seq)).scalar_one_or_none()
        if seq is None:
            raise JobStateError(f"there is no job {job_id!r}.", field="job", fix="list the jobs to find its id.")
        # Standard JSON (a non-finite metric as null) that every client's parser reads.
        tx.execute(events.insert().values(job_id=job_id, seq=seq, type=kind, data=json.dumps(json_safe(data), default=str, allow_nan=False), created=time.time()))
        return int(seq)

    def add_event(self, job_id: str, kind: str, data: dict[str, Any]) -> int:
        """Store one event of a job; return its number in the job's sequence."""
        with self._tx() as tx:
            return self._add_event(tx, job_id, kind, data)

    def events_after(self, job_id: str, after_seq: int = 0, limit: int = 1000) -> list[EventRecord]:
        """The job's events numbered after ``after_seq``, in order."""
        query = (sa.select(events).where(events.c.job_id == job_id, events.c.seq > after_seq)
                 .order_by(events.c.seq).limit(max(1, min(limit, 100_000))))
        with self._read() as conn:
            return [EventRecord(row.job_id, row.seq, row.type, json.loads(row.data), row.created) for row in conn.execute(query)]

    # -- tokens ---------------------------------------------------------------------------------

    def add_token(self, name: str, token_hash: str, *, quota_jobs: int | None = None, admin: bool = False) -> TokenRecord:
        """Store a token's hash (never the token); an ``admin`` token sees every job and upload."""
        if len(token_hash) != 64:
            raise ConfigError("a token is stored as its hex sha256 (64 characters).", field="token_hash", fix="hash the token first.")
        token_id = uuid.uuid4().hex
        with self._tx() as tx:
            tx.execute(tokens.insert().values(id=token_id, name=name, token_hash=token_hash, quota_jobs=quota_jobs, created=time.time(), revoked=False, admin=admin))
            return _token(tx.execute(sa.select(tokens).where(tokens.c.id == token_id)).one())

    def token_by_hash(self, token_hash: str) -> TokenRecord | None:
        """The live (not revoked) token with this hash, or None."""
        with self._read() as conn:
            row = conn.execute(sa.select(tokens).where(tokens.c.token_hash == token_hash, tokens.c.revoked.is_(False))).first()
        return None if row is None else _token(row)

    def list_tokens(self) -> list[TokenRecord]:
        """Every token (revoked ones too), oldest first."""
        with self._read() as conn:
            return [_token(row) for row in conn.execute(sa.select(tokens).order_by(tokens.c.created, tokens.c.id))]

    def revoke_token(self, token_id: str) -> None:
        """Refuse this token from now on."""
        with self._tx() as tx:
            tx.execute(tokens.update().where(tokens.c.id == token_id).values(revoked=True))

    # -- uploads ----------------------------------------------------------------------------------

    def add_upload_owner(self, upload_id: str, token_id: str) -> None:
        """Record that ``token_id`` made (or sent the same bytes as) an upload; repeating it is harmless."""
        with self._tx() as tx:
            known = tx.execute(sa.select(upload_owners.c.token_id).where(upload_owners.c.upload_id == upload_id, upload_owners.c.token_id == token_id)).first()
            if known is None:
                tx.execute(upload_owners.insert().values(upload_id=upload_id, token_id=token_id, created=time.time()))

    def owns_upload(self, upload_id: str, token_id: str) -> bool:
        """Whether ``token_id`` made this upload."""
        with self._read() as conn:
            query = sa.select(upload_owners.c.token_id).where(upload_owners.c.upload_id == upload_id, upload_owners.c.token_id == token_id)
            return conn.execute(query).first() is not None

"""The job store, on SQLite and PostgreSQL: jobs and their life, exactly-once claims under
concurrency, gap-free event numbers, leases and requeues, tokens, restarts and migrations."""

from __future__ import annotations

import math
import threading
import time

import pytest
import sqlalchemy as sa

from neuralbake.errors import ConfigError
from neuralbake.service.store import JobStateError, Store


def test_a_job_goes_from_queued_to_succeeded_with_its_events(store: Store) -> None:
    job = store.create_job("texture", {"image": "a.png"})
    assert job.status == "queued" and job.attempts == 0 and job.config == {"image": "a.png"}
    claimed = store.claim_next("w1", lease_seconds=30)
    assert claimed is not None and claimed.id == job.id and claimed.status == "running" and claimed.attempts == 1
    assert store.claim_next("w2", lease_seconds=30) is None
    assert store.heartbeat(job.id, "w1", lease_seconds=30)
    assert not store.heartbeat(job.id, "w2", lease_seconds=30)  # not its job
    store.add_event(job.id, "train", {"step": 5, "loss": 0.25})
    assert store.finish(job.id, "w1", "succeeded", data={"psnr_db": 30.0})
    assert not store.finish(job.id, "w1", "failed")  # already over
    final = store.get_job(job.id)
    assert final is not None and final.status == "succeeded" and final.worker == "w1"
    kinds = [(e.seq, e.type) for e in store.events_after(job.id)]
    assert kinds == [(1, "queued"), (2, "started"), (3, "train"), (4, "succeeded")]
    assert store.events_after(job.id, 2)[0].data == {"step": 5, "loss": 0.25}
    assert store.events_after(job.id, 3)[0].data == {"psnr_db": 30.0}


def test_jobs_are_claimed_oldest_first_and_listed_newest_first(store: Store) -> None:
    ids = [store.create_job("texture", {"n": i}).id for i in range(3)]
    assert [j.id for j in store.list_jobs()] == ids[::-1]
    assert [store.claim_next("w", lease_seconds=30).id for _ in ids] == ids  # type: ignore[union-attr]
    assert [j.id for j in store.list_jobs(status="running")] == ids[::-1]
    with pytest.raises(ConfigError, match="unknown job status"):
        store.list_jobs(status="done")


def test_concurrent_workers_claim_every_job_exactly_once(store_url: str) -> None:
    setup = Store(store_url)
    expected = {setup.create_job("texture", {"n": i}).id for i in range(40)}
    claims: list[tuple[str, str]] = []
    lock = threading.Lock()

    def worker(name: str) -> None:
        own = Store(store_url)
        while (job := own.claim_next(name, lease_seconds=60)) is not None:
            with lock:
                claims.append((job.id, name))
            own.finish(job.id, name, "succeeded")
        own.close()

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    claimed = [job_id for job_id, _ in claims]
    assert sorted(claimed) == sorted(expected)  # every job once: none lost, none twice
    assert all(job.status == "succeeded" and job.attempts == 1 for job in setup.list_jobs(limit=100))
    setup.close()


def test_concurrent_event_writers_get_gap_free_numbers(store_url: str) -> None:
    setup = Store(store_url)
    job = setup.create_job("texture", {})

    def writer(name: str) -> None:
        own = Store(store_url)
        for i in range(15):
            own.add_event(job.id, "train", {"writer": name, "i": i})
        own.close()

    threads = [threading.Thread(target=writer, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    seqs = [event.seq for event in setup.events_after(job.id)]
    assert seqs == list(range(1, 62))  # "queued" + 4 x 15
    setup.close()


def test_a_lost_worker_s_job_is_requeued_then_failed_when_attempts_are_spent(store: Store) -> None:
    job = store.create_job("fit", {}, max_attempts=2)
    store.claim_next("w1", lease_seconds=0.01)
    time.sleep(0.05)
    assert store.requeue_expired() == [job.id]
    again = store.claim_next("w2", lease_seconds=0.01)
    assert again is not None and again.attempts == 2
    assert not store.finish(job.id, "w1", "succeeded")  # the lost worker's late answer is ignored
    time.sleep(0.05)
    assert store.requeue_expired() == [job.id]
    failed = store.get_job(job.id)
    assert failed is not None and failed.status == "failed" and "lost 2 times" in (failed.error or "")
    assert [e.type for e in store.events_after(job.id)][-1] == "failed"


def test_cancel_and_retry(store: Store) -> None:
    queued = store.create_job("texture", {})
    assert store.request_cancel(queued.id).status == "cancelled"
    running = store.create_job("texture", {})
    store.claim_next("w", lease_seconds=30)
    flagged = store.request_cancel(running.id)
    assert flagged.status == "running" and flagged.cancel_requested
    assert store.finish(running.id, "w", "cancelled")
    with pytest.raises(JobStateError, match="only failed or cancelled"):
        store.retry(store.create_job("texture", {}).id)
    again = store.retry(running.id)
    assert again.status == "queued" and again.attempts == 0 and not again.cancel_requested
    with pytest.raises(JobStateError, match="no job"):
        store.request_cancel("nope")


def test_a_restart_loses_nothing_and_recovers_running_jobs(store_url: str) -> None:
    first = Store(store_url)
    done = first.create_job("texture", {"a": 1})
    first.claim_next("w", lease_seconds=3600)
    first.finish(done.id, "w", "succeeded")
    running = first.create_job("texture", {"b": 2})
    first.claim_next("w", lease_seconds=3600)
    waiting = first.create_job("texture", {"c": 3})
    first.close()
    second = Store(store_url)  # a new server process on the same database
    second.migrate()
    assert second.requeue_expired(now=math.inf) == [running.id]
    assert {j.id: j.status for j in second.list_jobs()} == {done.id: "succeeded", running.id: "queued", waiting.id: "queued"}
    assert [e.type for e in second.events_after(running.id)] == ["queued", "started", "requeued"]
    second.close()


def test_tokens_store_only_hashes_and_can_be_revoked(store: Store) -> None:
    token = store.add_token("studio", "a" * 64, quota_jobs=2)
    assert store.token_by_hash("a" * 64) == token
    store.create_job("texture", {}, token_id=token.id)
    assert store.count_jobs(token.id) == 1
    store.revoke_token(token.id)
    assert store.token_by_hash("a" * 64) is None
    with pytest.raises(ConfigError, match="sha256"):
        store.add_token("bad", "plain-token")


def test_migrations_build_the_schema_from_empty_and_are_idempotent(store_url: str) -> None:
    store = Store(store_url)
    store.migrate()  # a second time: nothing to do
    names = set(sa.inspect(store.engine).get_table_names())
    assert {"jobs", "events", "tokens", "alembic_version"} <= names
    with store.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one() == "0001"
    store.close()


def test_a_bad_url_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="not a database URL"):
        Store("service.db")

"""The job store's behaviour, each test on SQLite and on PostgreSQL (the ``store``/``store_url``
fixtures of conftest.py are parametrised over both): jobs and their life, exactly-once claims by
concurrent threads and processes, gap-free event numbers under concurrent writers, leases and
requeues, cancel and retry, tokens, reads that never wait for a writer, restarts and migrations."""

from __future__ import annotations

import json
import math
import multiprocessing
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from neuralbake.errors import ConfigError
from neuralbake.service.store import JobStateError, QuotaError, Store, jobs


def _in_threads(target: Callable[[int], None], count: int, timeout: float = 60.0) -> None:
    """Run ``target(i)`` for i < count in threads started together; re-raise the first error.

    The threads are daemons and share one deadline, so a store that blocks fails the test
    instead of hanging the test run."""
    errors: list[BaseException] = []
    start = threading.Barrier(count)

    def body(i: int) -> None:
        try:
            start.wait()
            target(i)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    if errors:
        raise errors[0]


def _claim_until_empty(url: str, worker: str) -> list[str]:
    """A worker process: claim and finish jobs until none is queued; the ids it claimed."""
    store, claimed = Store(url), []
    while (job := store.claim_next(worker, lease_seconds=60)) is not None:
        claimed.append(job.id)
        assert store.finish(job.id, worker, "succeeded")
    store.close()
    return claimed


def test_a_job_goes_from_queued_to_succeeded_with_its_events(store: Store) -> None:
    job = store.create_job("texture", {"image": "a.png"})
    assert job.status == "queued" and job.attempts == 0 and job.config == {"image": "a.png"} and job.max_attempts == 3
    assert store.get_job(job.id) == job and store.get_job("nope") is None
    claimed = store.claim_next("w1", lease_seconds=30)
    assert claimed is not None and claimed.id == job.id and claimed.status == "running" and claimed.attempts == 1
    assert claimed.worker == "w1"
    assert store.claim_next("w2", lease_seconds=30) is None
    assert store.heartbeat(job.id, "w1", lease_seconds=30)
    assert not store.heartbeat(job.id, "w2", lease_seconds=30)  # not its job
    assert store.add_event(job.id, "train", {"step": 5, "loss": 0.25}) == 3
    assert store.finish(job.id, "w1", "succeeded", data={"psnr_db": 30.0})
    assert not store.finish(job.id, "w1", "failed")  # already over
    assert not store.heartbeat(job.id, "w1", lease_seconds=30)
    final = store.get_job(job.id)
    assert final is not None and final.status == "succeeded" and final.worker == "w1" and final.error is None
    kinds = [(e.seq, e.type) for e in store.events_after(job.id)]
    assert kinds == [(1, "queued"), (2, "started"), (3, "train"), (4, "succeeded")]
    assert store.events_after(job.id, 2)[0].data == {"step": 5, "loss": 0.25}
    assert store.events_after(job.id, 3)[0].data == {"psnr_db": 30.0}
    assert [e.seq for e in store.events_after(job.id, 1, limit=2)] == [2, 3]
    assert store.events_after(job.id, 4) == [] and store.events_after("nope") == []
    assert final.to_json()["status"] == "succeeded"


def test_a_failed_attempt_keeps_its_error(store: Store) -> None:
    job = store.create_job("texture", {})
    store.claim_next("w", lease_seconds=30)
    assert store.finish(job.id, "w", "failed", error="texture.png: image: not found. Fix: upload it.")
    failed = store.get_job(job.id)
    assert failed is not None and failed.status == "failed" and "not found" in (failed.error or "")
    assert store.events_after(job.id)[-1].data == {"error": "texture.png: image: not found. Fix: upload it."}


def test_bad_arguments_are_clear_errors(store: Store) -> None:
    with pytest.raises(ConfigError, match="max_attempts must be >= 1"):
        store.create_job("texture", {}, max_attempts=0)
    job = store.create_job("texture", {})
    store.claim_next("w", lease_seconds=30)
    with pytest.raises(ConfigError, match="ends as one of"):
        store.finish(job.id, "w", "running")
    with pytest.raises(JobStateError, match="no job"):
        store.add_event("nope", "train", {})
    with pytest.raises(ConfigError, match="unknown job status"):
        store.list_jobs(status="done")


def test_jobs_are_claimed_oldest_first_and_listed_newest_first(store: Store) -> None:
    token = store.add_token("studio", "b" * 64)
    ids = [store.create_job("texture", {"n": i}, token_id=token.id if i == 1 else None).id for i in range(3)]
    assert [j.id for j in store.list_jobs()] == ids[::-1]
    assert [j.id for j in store.list_jobs(limit=2)] == ids[:0:-1]
    assert [j.id for j in store.list_jobs(token_id=token.id)] == [ids[1]]
    assert [store.claim_next("w", lease_seconds=30).id for _ in ids] == ids  # type: ignore[union-attr]
    assert [j.id for j in store.list_jobs(status="running")] == ids[::-1]
    assert store.list_jobs(status="queued") == []


def test_concurrent_threads_claim_every_job_exactly_once(store_url: str) -> None:
    setup = Store(store_url)
    expected = {setup.create_job("texture", {"n": i}).id for i in range(50)}
    claims: list[list[str]] = [[] for _ in range(4)]

    def worker(i: int) -> None:
        claims[i] = _claim_until_empty(store_url, f"w{i}")

    _in_threads(worker, 4)
    claimed = [job_id for own in claims for job_id in own]
    assert sorted(claimed) == sorted(expected)  # every job once: none lost, none twice
    assert all(job.status == "succeeded" and job.attempts == 1 for job in setup.list_jobs(limit=100))
    setup.close()


def test_concurrent_processes_claim_every_job_exactly_once(store_url: str) -> None:
    setup = Store(store_url)
    expected = {setup.create_job("texture", {"n": i}).id for i in range(50)}
    setup.close()
    with multiprocessing.get_context("spawn").Pool(4) as pool:  # leaving the block terminates the workers
        results = pool.starmap_async(_claim_until_empty, [(store_url, f"p{i}") for i in range(4)], chunksize=1).get(timeout=120)
    claimed = [job_id for own in results for job_id in own]
    assert sorted(claimed) == sorted(expected)


def test_concurrent_event_writers_get_gap_free_numbers(store_url: str) -> None:
    setup = Store(store_url)
    job = setup.create_job("texture", {})
    returned: list[int] = []

    def writer(i: int) -> None:
        own = Store(store_url)
        for n in range(15):
            returned.append(own.add_event(job.id, "train", {"writer": i, "n": n}))
        own.close()

    _in_threads(writer, 4)
    events = setup.events_after(job.id)
    assert [event.seq for event in events] == list(range(1, 62))  # "queued" + 4 x 15
    assert sorted(returned) == list(range(2, 62))
    for i in range(4):  # each writer's events keep their order
        assert [e.data["n"] for e in events if e.data.get("writer") == i] == list(range(15))
    setup.close()


def test_reads_never_wait_for_a_writer(store_url: str) -> None:
    reader, writer = Store(store_url), Store(store_url)
    job = reader.create_job("texture", {})
    with writer.engine.begin() as tx:  # an open writing transaction holding the job's row
        tx.execute(jobs.update().where(jobs.c.id == job.id).values(updated=time.time()))
        seen: list[object] = []
        thread = threading.Thread(target=lambda: seen.extend([reader.get_job(job.id), reader.events_after(job.id), reader.list_jobs()]), daemon=True)
        thread.start()
        thread.join(timeout=5)
        assert not thread.is_alive(), "a read waited for the writer's transaction"
        assert seen[0] == job and len(seen[1]) == 1  # type: ignore[arg-type]
    reader.close()
    writer.close()


def test_a_lost_worker_s_job_is_requeued_then_failed_when_attempts_are_spent(store: Store) -> None:
    job = store.create_job("fit", {}, max_attempts=2)
    store.claim_next("w1", lease_seconds=0.01)
    time.sleep(0.05)
    assert store.requeue_expired() == [job.id]
    requeued = store.get_job(job.id)
    assert requeued is not None and requeued.status == "queued" and requeued.worker is None and requeued.attempts == 1
    assert not store.heartbeat(job.id, "w1", lease_seconds=30)  # the lost worker learns it is no longer its job
    again = store.claim_next("w2", lease_seconds=0.01)
    assert again is not None and again.attempts == 2
    assert not store.finish(job.id, "w1", "succeeded")  # the lost worker's late answer is ignored
    time.sleep(0.05)
    assert store.requeue_expired() == [job.id]
    failed = store.get_job(job.id)
    assert failed is not None and failed.status == "failed" and "lost 2 times" in (failed.error or "")
    assert [e.type for e in store.events_after(job.id)] == ["queued", "started", "requeued", "started", "failed"]
    assert store.requeue_expired() == []


def test_a_live_lease_is_not_requeued(store: Store) -> None:
    job = store.create_job("texture", {})
    store.claim_next("w", lease_seconds=0.2)
    assert store.requeue_expired() == []
    time.sleep(0.1)
    assert store.heartbeat(job.id, "w", lease_seconds=30)  # the heartbeat pushes the lease on
    time.sleep(0.2)
    assert store.requeue_expired() == []
    assert store.requeue_expired(now=math.inf) == [job.id]  # a server restart takes every running job back


def test_concurrent_reapers_requeue_each_job_once(store_url: str) -> None:
    setup = Store(store_url)
    ids = [setup.create_job("texture", {"n": i}).id for i in range(10)]
    for _ in ids:
        setup.claim_next("lost", lease_seconds=0.01)
    time.sleep(0.05)
    moved: list[str] = []

    def reaper(i: int) -> None:
        own = Store(store_url)
        moved.extend(own.requeue_expired())
        own.close()

    _in_threads(reaper, 4)
    assert sorted(moved) == sorted(ids)
    for job_id in ids:
        assert [e.type for e in setup.events_after(job_id)] == ["queued", "started", "requeued"]
    setup.close()


def test_a_worker_shutting_down_hands_its_job_back(store: Store) -> None:
    job = store.create_job("texture", {})
    store.claim_next("w", lease_seconds=30)
    assert not store.release(job.id, "other")
    assert store.release(job.id, "w")
    back = store.get_job(job.id)
    assert back is not None and back.status == "queued" and back.attempts == 0 and back.worker is None
    assert store.events_after(job.id)[-1].type == "requeued"


def test_cancel_and_retry(store: Store) -> None:
    queued = store.create_job("texture", {})
    assert store.request_cancel(queued.id).status == "cancelled"
    assert store.claim_next("w", lease_seconds=30) is None  # a cancelled job is never claimed
    running = store.create_job("texture", {})
    store.claim_next("w", lease_seconds=30)
    flagged = store.request_cancel(running.id)
    assert flagged.status == "running" and flagged.cancel_requested
    assert store.request_cancel(running.id) == flagged  # asking twice changes nothing
    assert store.finish(running.id, "w", "cancelled")
    assert store.request_cancel(running.id).status == "cancelled"  # an ended job stays as it ended
    with pytest.raises(JobStateError, match="only failed or cancelled"):
        store.retry(store.create_job("texture", {}).id)
    again = store.retry(running.id)
    assert again.status == "queued" and again.attempts == 0 and not again.cancel_requested and again.error is None
    assert [e.type for e in store.events_after(running.id)][-2:] == ["cancelled", "queued"]
    with pytest.raises(JobStateError, match="no job"):
        store.request_cancel("nope")
    with pytest.raises(JobStateError, match="no job"):
        store.retry("nope")


def test_a_cancelled_job_whose_worker_died_ends_cancelled(store: Store) -> None:
    job = store.create_job("texture", {})
    store.claim_next("w", lease_seconds=0.01)
    store.request_cancel(job.id)
    time.sleep(0.05)
    assert store.requeue_expired() == [job.id]
    ended = store.get_job(job.id)
    assert ended is not None and ended.status == "cancelled"


def test_a_restart_loses_nothing_and_recovers_running_jobs(store_url: str) -> None:
    first = Store(store_url)
    token = first.add_token("studio", "c" * 64, quota_jobs=5)
    done = first.create_job("texture", {"a": 1}, token_id=token.id)
    first.claim_next("w", lease_seconds=3600)
    first.add_event(done.id, "train", {"step": 1})
    first.finish(done.id, "w", "succeeded")
    running = first.create_job("texture", {"b": 2})
    first.claim_next("w", lease_seconds=3600)
    waiting = first.create_job("texture", {"c": 3})
    before = {job.id: job for job in first.list_jobs()}
    done_events = first.events_after(done.id)
    first.close()
    second = Store(store_url)  # a new server process on the same database
    second.migrate()
    assert {job.id: job for job in second.list_jobs()} == before
    assert second.events_after(done.id) == done_events
    assert second.token_by_hash("c" * 64) == token and second.count_jobs(token.id) == 1
    assert second.requeue_expired(now=math.inf) == [running.id]
    assert {j.id: j.status for j in second.list_jobs()} == {done.id: "succeeded", running.id: "queued", waiting.id: "queued"}
    assert [e.type for e in second.events_after(running.id)] == ["queued", "started", "requeued"]
    assert second.add_event(done.id, "note", {}) == len(done_events) + 1  # numbering carries on
    second.close()


def test_tokens_store_only_hashes_and_can_be_revoked(store: Store) -> None:
    token = store.add_token("studio", "a" * 64, quota_jobs=2)
    assert token.name == "studio" and token.quota_jobs == 2 and not token.revoked
    assert store.token_by_hash("a" * 64) == token and store.token_by_hash("d" * 64) is None
    assert store.count_jobs(token.id) == 0
    store.create_job("texture", {}, token_id=token.id)
    store.create_job("texture", {})
    assert store.count_jobs(token.id) == 1
    store.revoke_token(token.id)
    assert store.token_by_hash("a" * 64) is None
    with pytest.raises(ConfigError, match="sha256"):
        store.add_token("bad", "plain-token")
    with pytest.raises(sa.exc.IntegrityError):  # one hash, one token
        store.add_token("again", "a" * 64)


def test_migrations_build_the_schema_from_empty_and_are_idempotent(empty_store_url: str) -> None:
    store = Store(empty_store_url)
    assert sa.inspect(store.engine).get_table_names() == []
    store.migrate()
    store.migrate()  # a second time: nothing to do
    names = set(sa.inspect(store.engine).get_table_names())
    assert names == {"jobs", "events", "tokens", "upload_owners", "alembic_version"}
    with store.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one() == "0002"
    assert store.create_job("texture", {}).status == "queued"
    store.close()


def test_servers_starting_together_migrate_once(empty_store_url: str) -> None:
    def start(i: int) -> None:
        own = Store(empty_store_url)
        own.migrate()
        own.close()

    _in_threads(start, 4)
    store = Store(empty_store_url)
    with store.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars().all() == ["0002"]
    store.close()


def test_a_bad_url_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="not a database URL"):
        Store("service.db")
    with pytest.raises(ConfigError, match="cannot be used"):
        Store("nosuchdialect://x/y")


def test_the_alembic_command_runs_the_same_migrations(empty_store_url: str) -> None:
    from alembic import command
    from alembic.config import Config

    from neuralbake.service import store as store_module

    config = Config()  # what an alembic.ini pointing at the migrations folder gives the command
    config.set_main_option("script_location", str(Path(store_module.__file__).with_name("migrations")))
    config.set_main_option("sqlalchemy.url", empty_store_url)
    command.upgrade(config, "head")
    store = Store(empty_store_url)
    store.migrate()  # already at head: nothing to do
    assert store.create_job("texture", {}).status == "queued"
    store.close()


def test_the_ownership_migration_turns_stored_paths_into_references(empty_store_url: str) -> None:
    """Jobs queued before revision 0002 held absolute upload paths; after it, the references a worker resolves."""
    store = Store(empty_store_url)
    store.migrate("0001")
    upload = "ab" * 32
    old = {"image": f"/srv/nb/uploads/{upload}/photo.png", "sources": [f"normal=/srv/nb/uploads/{upload}/n.png"], "device": "cpu",
           "stage_options": {"fit": {"warm_start": f"/srv/nb/uploads/{upload}/fit.pt", "epochs": 3}}}
    with store.engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO tokens (id, name, token_hash, created, revoked) VALUES ('t', 'old', :h, 0, false)"), {"h": "0" * 64})
        conn.execute(sa.text("INSERT INTO jobs (id, kind, config, status, attempts, max_attempts, created, updated, cancel_requested, event_seq) "
                             "VALUES ('j', 'texture', :c, 'queued', 0, 3, 0, 0, false, 0)"), {"c": json.dumps(old)})
    store.migrate()
    job = store.get_job("j")
    assert job is not None and job.config == {"image": f"{upload}/photo.png", "sources": [f"normal={upload}/n.png"], "device": "cpu",
                                              "stage_options": {"fit": {"warm_start": f"{upload}/fit.pt", "epochs": 3}}}
    token = store.token_by_hash("0" * 64)
    assert token is not None and token.admin is False
    store.close()


def test_a_quota_holds_against_requests_that_race(store: Store) -> None:
    """Counted and inserted in one transaction: six submissions at once with a quota of one store one job."""
    token = store.add_token("racer", "9" * 64, quota_jobs=1)
    outcomes: list[str] = []

    def submit(i: int) -> None:
        try:
            store.create_job("texture", {"n": i}, token_id=token.id, quota=1)
            outcomes.append("stored")
        except QuotaError:
            outcomes.append("refused")

    _in_threads(submit, 6)
    assert sorted(outcomes) == ["refused"] * 5 + ["stored"]
    assert store.count_jobs(token.id) == 1

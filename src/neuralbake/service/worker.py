"""Workers: processes that take jobs from the store and run them on the one bake run path.

A worker claims the oldest queued job (:meth:`~neuralbake.service.store.Store.claim_next`), turns
its stored config back into the bake's config dataclass (the same typed checks as a config file),
and runs :meth:`neuralbake.bakes.run.Bake.run` into ``DATA/jobs/<id>/out`` with a
:class:`StoreSink`, so the runner's events (phase, train, eval, checkpoint...) land in the store for
every subscriber. A job's config holds references to uploads, which the worker turns into paths when it runs the
job (:func:`neuralbake.service.paths.resolve_paths`), and what it stores for clients (events,
errors) shows references again, never the server's paths. A heartbeat thread extends the job's
lease while it runs and notices a cancellation, which stops the bake at the next training step (the
trainer saves a checkpoint first); work that reaches no step soon (loading, rendering references,
decimating, writing outputs, a stage of a chain between its trainings) is interrupted where it
stands by a signal to the worker's main thread, so a cancel ends every job as ``cancelled``. A
worker that dies (``kill -9``, a lost machine) stops heartbeating; its job is requeued when the
lease runs out and the next attempt resumes from the checkpoint in the job's folder.

:func:`serve_workers` runs N such processes (``multiprocessing`` with ``spawn``: each worker
owns its interpreter, its torch threads and its database connections) and restarts any that die.
:func:`serve_workers_ray` runs the same worker loop as N long-lived Ray tasks, each asking the
cluster for the GPUs a bake needs, so a studio grows from one box to many with the same code; the
Ray workers must see the service's data folder (one machine, or a shared file system) and its
database (PostgreSQL for several machines).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuralbake.bakes.folder import OutputLockedError
from neuralbake.bakes.registry import registered
from neuralbake.core.config import config_from_dict
from neuralbake.errors import ConfigError, NeuralbakeError
from neuralbake.io.files import json_safe
from neuralbake.nn.trainer import TrainingInterrupted
from neuralbake.service.paths import Redactor, resolve_paths
from neuralbake.service.store import JobRecord, Store
from neuralbake.service.uploads import UploadStore

__all__ = ["JobCancelled", "StoreSink", "WorkerSettings", "bake_of", "job_folder", "run_job", "run_worker", "serve_workers", "serve_workers_ray"]

log = logging.getLogger("neuralbake.service.worker")


def bake_of(kind: str) -> Any:
    """The :class:`~neuralbake.bakes.run.Bake` of a job kind (the registry's; unknown kinds are a ConfigError)."""
    return registered(kind).bake


def job_folder(data: Path, job_id: str) -> Path:
    """Where a job's bake writes: ``DATA/jobs/<id>/out``."""
    return Path(data) / "jobs" / job_id / "out"


@dataclass
class WorkerSettings:
    """How a worker runs."""
    db: str
    """The store's SQLAlchemy URL."""
    data: Path
    """The service's data folder (job outputs under ``jobs/``)."""
    lease_seconds: float = 30.0
    """A job whose worker has not heartbeated this long is requeued."""
    poll_seconds: float = 0.5
    """How often an idle worker looks for a queued job."""
    device: str = "auto"
    """Device for jobs that leave theirs at ``auto``."""
    threads: int | None = None
    """CPU threads each worker's torch uses (None: the machine's cores shared among the workers)."""
    models: Path | None = None
    """The service's model library (postfx jobs name their models in it)."""


class StoreSink:
    """An event sink that stores a job's events; ``train`` events at most every ``interval`` s.

    The newest held-back train event is stored before any other event and at the end, so the
    stored history always ends with the real last loss.
    """

    def __init__(self, store: Store, job_id: str, *, interval: float = 0.25, redact: Callable[[Any], Any] | None = None) -> None:
        self.store = store
        self.job_id = job_id
        self.redact = redact or (lambda value: value)
        self.interval = interval
        self._last = -math.inf
        self._pending: dict[str, Any] | None = None

    def write(self, event: dict[str, Any]) -> None:
        kind = str(event.get("event", "event"))
        data = self.redact({key: value for key, value in event.items() if key != "event"})
        now = time.monotonic()
        if kind == "train":
            if now - self._last < self.interval:
                self._pending = data
                return
            self._last = now
            self._pending = None
        else:
            self._flush()
        self.store.add_event(self.job_id, kind, data)

    def _flush(self) -> None:
        if self._pending is not None:
            self.store.add_event(self.job_id, "train", self._pending)
            self._pending = None

    def close(self) -> None:
        self._flush()


CANCEL_POLL_SECONDS = 1.0
"""How often a running job's worker looks for a cancellation request."""
CANCEL_GRACE_SECONDS = 5.0
"""How long a cancelled job may go without a training step (which stops it cleanly, with a
checkpoint) before the work it is in is interrupted where it stands."""
_CANCEL_SIGNAL = signal.SIGUSR1


class JobCancelled(BaseException):  # noqa: N818 - like KeyboardInterrupt: no `except Exception` in a bake may swallow it
    """Raised in the worker's main thread when a cancelled job is in work that reaches no training step."""


class _Heartbeat(threading.Thread):
    """Extends the job's lease; notes a cancellation request or a lost lease."""
    def __init__(self, store: Store, job: JobRecord, worker: str, lease_seconds: float) -> None:
        super().__init__(daemon=True, name=f"heartbeat-{job.id[:8]}")
        self.store, self.job, self.worker, self.lease = store, job, worker, lease_seconds
        self.cancelled = threading.Event()
        self.lost = threading.Event()
        self.done = threading.Event()
        self.last_step = time.monotonic()
        """When the job last finished a training step (set by the worker's step hook)."""
        self.interrupt: Callable[[], None] | None = None
        """Interrupts the job's work where it stands (set while the job runs in the main thread)."""
        self._interrupted = False

    def run(self) -> None:
        # A cancellation is looked for every second (an artist's refit waits on it); the lease is
        # extended every third of its length.
        last_beat = time.monotonic()
        while not self.done.wait(min(CANCEL_POLL_SECONDS, self.lease / 3)):
            if time.monotonic() - last_beat >= self.lease / 3:
                if not self.store.heartbeat(self.job.id, self.worker, lease_seconds=self.lease):
                    self.lost.set()
                    return
                last_beat = time.monotonic()
            current = self.store.get_job(self.job.id)
            if current is not None and current.cancel_requested:
                if not self.cancelled.is_set():
                    self.cancelled.set()
                    self.last_step = max(self.last_step, time.monotonic() - CANCEL_GRACE_SECONDS / 2)
                stalled = time.monotonic() - self.last_step > CANCEL_GRACE_SECONDS
                interrupt = self.interrupt  # read once: the job may end between a check and a call
                if stalled and interrupt is not None and not self._interrupted:
                    self._interrupted = True
                    interrupt()


class _Interruptible:
    """While a job runs in the main thread, a signal from its heartbeat raises :class:`JobCancelled`
    there; before and after, the same signal does nothing. The handler is installed once in the
    process and stays (a signal that arrives late must find it, not the default action, which
    would end the worker); it checks, in the main thread, whether a job is running, so a late
    signal cannot hit the worker's own bookkeeping."""

    active = False
    installed = False

    def __init__(self, heartbeat: _Heartbeat) -> None:
        self.heartbeat = heartbeat

    @staticmethod
    def _handle(signum: int, frame: Any) -> None:
        if _Interruptible.active:
            _Interruptible.active = False
            raise JobCancelled()

    def __enter__(self) -> _Interruptible:
        if threading.current_thread() is threading.main_thread():
            if not _Interruptible.installed:
                signal.signal(_CANCEL_SIGNAL, _Interruptible._handle)
                _Interruptible.installed = True
            main = threading.main_thread().ident
            self.heartbeat.interrupt = lambda: signal.pthread_kill(main, _CANCEL_SIGNAL)  # type: ignore[arg-type]
        _Interruptible.active = True
        return self

    def __exit__(self, *exc: object) -> None:
        _Interruptible.active = False
        self.heartbeat.interrupt = None


def run_job(store: Store, job: JobRecord, worker: str, settings: WorkerSettings) -> str:
    """Run one claimed job to its end; return the state it ended in ("" if its lease was lost)."""
    out = job_folder(settings.data, job.id)
    redact = Redactor(settings.data, settings.models)
    heartbeat = _Heartbeat(store, job, worker, settings.lease_seconds)
    heartbeat.start()
    sink = StoreSink(store, job.id, redact=redact)

    def on_step(trainer: Any, step: int) -> None:
        heartbeat.last_step = time.monotonic()
        if heartbeat.cancelled.is_set() or heartbeat.lost.is_set():
            trainer.request_stop()

    try:
        with _Interruptible(heartbeat):
            bake = bake_of(job.kind)
            uploads = UploadStore(Path(settings.data) / "uploads", max_bytes=0)
            paths = resolve_paths(bake.config_type, job.config, uploads=uploads, models=settings.models)
            config = config_from_dict(bake.config_type, paths, source=f"job {job.id}")
            if getattr(config, "device", None) == "auto":
                config.device = settings.device
            checkpoints = out / ".neuralbake" / "checkpoints"
            resume = checkpoints.is_dir() and any(checkpoints.glob("*.pt"))
            out.parent.mkdir(parents=True, exist_ok=True)
            report = bake.run(config, out, resume=resume, progress=False, sinks=[sink], on_step=on_step, previews=True, shown=redact)
        summary = {key: value for key, value in report.items() if isinstance(value, int | float | str) and not isinstance(value, bool)}
        status, error, data = "succeeded", None, {"report": json_safe(redact(summary))}
    except OutputLockedError:
        # The job's folder is still held by a worker that is finishing it (e.g. one of a server
        # that is shutting down): hand the job back without spending an attempt.
        return BUSY
    except TrainingInterrupted as exc:
        if not heartbeat.cancelled.is_set():
            # The lease was lost (another worker has the job now) or this worker is shutting down
            # (SIGTERM): either way the job resumes elsewhere from the checkpoint just saved.
            return "" if heartbeat.lost.is_set() else SHUTDOWN
        status, error, data = "cancelled", redact.text(str(exc)), {}
    except JobCancelled:
        status, error, data = "cancelled", "cancelled before its work reached a training step", {}
    except NeuralbakeError as exc:
        status, error, data = "failed", redact.text(str(exc)), {}
    except Exception as exc:  # a bug: its traceback goes to the worker's log, not to the client
        log.exception("job %s (%s) failed with an internal error", job.id, job.kind)
        # Only the error's type reaches the client: its text may name the server's files or modules.
        status, error, data = "failed", f"internal error: {type(exc).__name__} (the worker's log has the details).", {}
    finally:
        sink.close()
        heartbeat.done.set()
        heartbeat.join(timeout=5)
    return status if store.finish(job.id, worker, status, error=error, data=data) else ""


BUSY = "busy"
"""What :func:`run_job` returns when another process still holds the job's folder."""

SHUTDOWN = "shutdown"
"""What :func:`run_job` returns when the worker was asked to stop mid-job (SIGTERM)."""


def run_worker(settings: WorkerSettings, worker: str, stop: threading.Event | None = None, *, max_jobs: int | None = None) -> int:
    """Take and run jobs until ``stop`` is set (or ``max_jobs`` ran); return how many ran."""
    stop = stop or threading.Event()
    store = Store(settings.db)
    ran = 0
    try:
        while not stop.is_set() and (max_jobs is None or ran < max_jobs):
            job = store.claim_next(worker, lease_seconds=settings.lease_seconds)
            if job is None:
                stop.wait(settings.poll_seconds)
                continue
            outcome = run_job(store, job, worker, settings)
            if outcome in (SHUTDOWN, BUSY):
                # Hand the job back at once rather than waiting for its lease to run out.
                store.release(job.id, worker)
                if outcome == SHUTDOWN:
                    break
                stop.wait(1.0)
                continue
            ran += 1
    finally:
        store.close()
    return ran


def _follow_parent() -> None:
    """SIGTERM this worker when the server that started it dies (even by kill -9), so no worker
    outlives its server: the signal stops a running bake at the next step and hands its job back."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True, name="follow-parent").start()


def _worker_process(settings: WorkerSettings, worker: str) -> None:
    _follow_parent()
    stop = threading.Event()
    # Between jobs SIGTERM ends the loop; during a bake the trainer takes the signal over, saves a
    # checkpoint and stops, and the job is handed back (run_worker).
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    if settings.threads:
        import torch

        torch.set_num_threads(settings.threads)  # N workers x all cores each would oversubscribe the CPU
    run_worker(settings, worker, stop)


def serve_workers(settings: WorkerSettings, count: int, stop: threading.Event, *, on_start: Callable[[str], None] | None = None) -> None:
    """Run ``count`` worker processes until ``stop``; restart any that die; requeue lost jobs.

    Jobs left running by a previous server are requeued once their leases run out.
    """
    if count < 1:
        raise ConfigError(f"need at least one worker, got {count}.", field="workers", fix="pass --workers 1 or more.")
    if settings.threads is None:
        settings = dataclasses.replace(settings, threads=max(1, (os.cpu_count() or 1) // count))
    store = Store(settings.db)
    # Jobs a previous server left running come back when their leases run out (requeue_expired
    # below), never sooner: with a shared database, another server's workers may still hold them.
    context = multiprocessing.get_context("spawn")
    processes: dict[str, Any] = {}
    serial = 0
    try:
        while not stop.is_set():
            for name, process in list(processes.items()):
                if not process.is_alive():
                    del processes[name]
            while len(processes) < count:
                serial += 1
                name = f"{os.uname().nodename}:{os.getpid()}:w{serial}"
                process = context.Process(target=_worker_process, args=(settings, name), daemon=True, name=name)
                process.start()
                processes[name] = process
                if on_start is not None:
                    on_start(name)
            store.requeue_expired()
            stop.wait(1.0)
    finally:
        for process in processes.values():
            process.terminate()
        for process in processes.values():
            process.join(timeout=10)
        store.close()


def _ray_worker(settings: WorkerSettings, worker: str) -> int:
    return run_worker(settings, worker)


def serve_workers_ray(settings: WorkerSettings, count: int, stop: threading.Event, *, address: str = "auto", gpus_per_worker: float = 0.0) -> None:
    """Run ``count`` workers as Ray tasks until ``stop``; restart any that end; requeue lost jobs.

    ``address``: a Ray cluster's address, or ``auto`` (the cluster this machine belongs to, else a
    local one started here). ``gpus_per_worker``: GPUs each worker asks Ray for.
    """
    try:
        import ray
    except ImportError as exc:
        raise ConfigError("Ray is not installed.", field="--ray", fix="pip install 'ray[default]' (or run local workers with --workers).") from exc
    if count < 1:
        raise ConfigError(f"need at least one worker, got {count}.", field="workers", fix="pass --workers 1 or more.")
    if not ray.is_initialized():
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        except ConnectionError:
            if address != "auto":
                raise ConfigError(f"no Ray cluster answers at {address}.", field="--ray", fix="check the address (ray status), or use --ray auto.") from None
            ray.init(include_dashboard=False, log_to_driver=False)
    remote = ray.remote(num_cpus=1, num_gpus=gpus_per_worker, max_retries=0)(_ray_worker)
    store = Store(settings.db)
    running: dict[Any, str] = {}
    serial = 0
    try:
        while not stop.is_set():
            if running:
                finished, _ = ray.wait(list(running), num_returns=len(running), timeout=0)
                for ref in finished:
                    running.pop(ref)
            while len(running) < count:
                serial += 1
                name = f"ray:{os.uname().nodename}:{os.getpid()}:w{serial}"
                running[remote.remote(settings, name)] = name
            store.requeue_expired()
            stop.wait(1.0)
    finally:
        for ref in running:
            ray.cancel(ref, force=True)  # their jobs are requeued when the leases run out
        store.close()

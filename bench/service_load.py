"""Load-and-fault benchmark of the asset service: jobs/minute, recovery times, and 0 lost / 0 duplicated jobs.

What it does: starts a real ``neuralbake serve`` (a subprocess on loopback, a free port, a temporary
data folder, ``--workers W``), makes a token with ``neuralbake token create``, uploads one small
picture and submits ``--jobs N`` small texture bakes (``--steps S`` fp32 steps of a 2 x 16 MLP on
the CPU, a few seconds each, checkpointing every 500 steps). ``--followers M`` threads follow the
jobs' server-sent event streams (every follower follows every job, in submission order rotated by
its index) and drop their connection at random moments (connection lives drawn from an exponential
distribution, mean ``--drop-mean`` seconds; a quiet stream is dropped by a read timeout), then
reconnect with ``Last-Event-ID``; every ``(job, seq, type)`` they receive is recorded.

Faults (left out with ``--no-faults``):

1. once ``N/4`` jobs have succeeded (``--kill-worker-after``), ``kill -9`` of one worker process
   (a ``multiprocessing`` spawn child of the server, found under ``/proc``; the job it runs is the
   one whose output folder lock it holds), chosen while its job is mid-training with a checkpoint.
   The server starts a replacement worker; the job comes back when its lease runs out (``serve``'s default ``--lease``, 30 s) and resumes from its checkpoint;
2. once that job runs again, ``kill -9`` of the server itself while jobs are mid-training, and a
   restart on the same data folder, database and port at once. The old workers notice their parent
   is gone, stop their bakes with a checkpoint and hand their jobs back; the new server's workers
   resume them.

Checks at the end (exit status 1 if any fails):

- lost: jobs that did not end ``succeeded``;
- duplicated: from the API, each job's events numbered exactly 1..n, exactly one terminal event
  and it is the last (a stream resumed after it delivers nothing), one ``succeeded``; attempts that
  never overlap (every ``started`` follows a ``queued``/``requeued``; nothing of a lost attempt is
  written after it was requeued; training steps rise within an attempt); the number of ``started``
  events matches the job's attempts; after the server is stopped, the same from the store itself;
- outputs: every job's files downloaded with ``ServiceClient.fetch`` (each checked against its
  ``bake.json``), ``report.json`` with S steps;
- followers: every follower received every event of every job exactly once, in order, across all
  its reconnects (and the server's restart);
- no process of the run (server, workers, resource trackers) is left once the server stopped.

Figures: jobs/minute over the whole run (first submission -> last job finished) and before the
first fault; worker kill -> replacement worker up / job requeued (lease ran out) / job running
again / job finished; server kill -> old workers exited / jobs handed back / API answers again /
first job running again / all jobs finished; jobs resumed from a checkpoint; events stored and
received, connections, random drops, streams cut by the server, refused connects.

Run (from the repository root, in the project's venv)::

    python bench/service_load.py                    # 30 jobs, 2 workers, 4 followers, faults
    python bench/service_load.py --no-faults        # the baseline jobs/minute
    python bench/service_load.py --postgres         # a throwaway PostgreSQL (initdb/pg_ctl, as nobody when root)
    python bench/service_load.py --db postgresql+psycopg2://user@host/db --json out/load.json

Options: ``--jobs --workers --followers --steps --drop-mean --db URL --postgres --no-faults
--kill-worker-after K --timeout --seed --keep --json PATH``. Everything it starts (server, workers,
PostgreSQL) is stopped and the temporary folder removed at the end, on failure and on Ctrl-C too
(the server is also tied to this process with PR_SET_PDEATHSIG, and its workers follow it).

Figures measured with it, and what they show: ``docs/benchmarks.md``, "Asset service".
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from timing import Stopwatch

ROOT = Path(__file__).resolve().parents[1]
IMAGE = ROOT / "examples" / "neural_texture" / "grace_hopper_256.png"
TERMINAL = ("succeeded", "failed", "cancelled")
LIFECYCLE = ("queued", "started", "requeued", *TERMINAL)
LOCK_PATH = re.compile(r"/jobs/([0-9a-f]{32})/out/\.neuralbake/lock$")
CHECKPOINT_EVERY = 500


def job_config(steps: int) -> dict[str, Any]:
    """A tiny texture bake: a few seconds on one CPU core for a few thousand steps."""
    return {"batch_size": 64, "device": "cpu", "network": {"hidden": 16, "layers": 2},
            "train": {"steps": steps, "precision": "fp32", "eval_every": 0, "checkpoint_every": CHECKPOINT_EVERY}}


class Interrupted(Exception):
    """SIGTERM (or SIGINT) reached the bench: clean up and stop."""


# -- processes under /proc (no psutil) ------------------------------------------------------------

def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name: [state, ppid, pgrp, ...]."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2:].split()


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def worker_pids(server_pid: int) -> list[int]:
    """The server's live worker processes (its spawn children, not its resource tracker)."""
    found = []
    for pid in _pids():
        stat = _stat(pid)
        if stat is not None and int(stat[1]) == server_pid and stat[0] not in ("Z", "X"):
            line = _cmdline(pid)
            if "spawn_main" in line and "resource_tracker" not in line:
                found.append(pid)
    return sorted(found)


def job_of(pid: int) -> str | None:
    """The job whose output folder lock the process holds (the job it is baking), if any."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    for fd in fds:
        try:
            match = LOCK_PATH.search(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
        if match:
            return match.group(1)
    return None


def processes_in_groups(groups: set[int]) -> list[tuple[int, str]]:
    """Live processes whose process group is one of ``groups`` (those of the servers we started)."""
    left = []
    for pid in _pids():
        stat = _stat(pid)
        if stat is not None and int(stat[2]) in groups and stat[0] not in ("Z", "X"):
            left.append((pid, _cmdline(pid)[:120]))
    return left


class OtherLoad(threading.Thread):
    """CPU time used by processes that are not part of the run (other users of the machine skew the
    figures on a 2-core box): sampled every second from /proc/*/stat, in cores on average."""

    def __init__(self, ours: Any) -> None:
        super().__init__(daemon=True, name="other-load")
        self.ours = ours  # () -> process groups of the run (a process whose parent leads one is the run's too)
        self.stop = threading.Event()
        self.ticks = 0
        self.started = time.monotonic()
        self.hz = os.sysconf("SC_CLK_TCK")
        self.busiest: dict[str, int] = {}

    def sample(self) -> dict[int, tuple[int, str]]:
        groups, seen = self.ours(), {}
        for pid in _pids():
            stat = _stat(pid)
            if stat is None or pid == os.getpid() or int(stat[2]) in groups or int(stat[1]) in groups or int(stat[2]) == os.getpgrp():
                continue
            seen[pid] = (int(stat[11]) + int(stat[12]), _cmdline(pid)[:60])
        return seen

    def run(self) -> None:
        last = self.sample()
        while not self.stop.wait(1.0):
            now = self.sample()
            for pid, (cpu, name) in now.items():
                delta = cpu - last[pid][0] if pid in last else 0
                if delta > 0:
                    self.ticks += delta
                    self.busiest[name] = self.busiest.get(name, 0) + delta
            last = now

    def cores(self) -> float:
        return self.ticks / self.hz / max(1e-9, time.monotonic() - self.started)

    def top(self) -> list[str]:
        return [name for name, ticks in sorted(self.busiest.items(), key=lambda item: -item[1])[:3] if ticks / self.hz > 1.0]


_LIBC = ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    _LIBC.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: the server dies if the bench is killed


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- a throwaway PostgreSQL (as tests/service/conftest.py starts one) ------------------------------

class Postgres:
    """initdb + pg_ctl in a temporary folder, as ``nobody`` when run as root; stopped by :meth:`stop`."""

    def __init__(self) -> None:
        def find(name: str) -> str:
            path = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
            if path is None:
                raise SystemExit(f"--postgres: {name} not found (install PostgreSQL, or pass --db URL)")
            return path

        self.initdb, self.pg_ctl = find("initdb"), find("pg_ctl")
        self.root = Path(tempfile.mkdtemp(prefix="nb-load-pg-"))
        self.port = _free_port()
        self.prefix: list[str] = []
        if os.geteuid() == 0:  # initdb refuses root
            shutil.chown(self.root, "nobody")
            os.chmod(self.root, 0o700)
            self.prefix = ["runuser", "-u", "nobody", "--"]
        self.started = False

    def start(self) -> str:
        data = self.root / "data"
        run = lambda *args: subprocess.run([*self.prefix, *args], check=True, capture_output=True, text=True, timeout=120)  # noqa: E731
        try:
            run(self.initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
            options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
            self.started = True  # from here on, stop() runs pg_ctl stop
            run(self.pg_ctl, "-D", str(data), "-w", "-t", "60", "-l", str(self.root / "log"), "-o", options, "start")
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            raise RuntimeError(f"PostgreSQL could not be started: {getattr(exc, 'stderr', None) or exc}") from exc
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/postgres"

    def group(self) -> int | None:
        """The postmaster's pid, which leads its process group (its backends each lead their own, as its children)."""
        try:
            return int((self.root / "data" / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def version(self) -> str:
        out = subprocess.run([self.pg_ctl, "--version"], capture_output=True, text=True).stdout  # "pg_ctl (PostgreSQL) 15.18 (Debian ...)"
        found = re.search(r"\(PostgreSQL\) ([0-9.]+)", out)
        return found.group(1) if found else "?"

    def stop(self) -> None:
        if self.started:
            subprocess.run([*self.prefix, self.pg_ctl, "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop"], capture_output=True, timeout=60)
            self.started = False
        shutil.rmtree(self.root, ignore_errors=True)


# -- the service under test ------------------------------------------------------------------------

class Service:
    """``neuralbake serve`` in its own session (its process group holds its workers too)."""

    def __init__(self, data: Path, db: str, workers: int, log: Path) -> None:
        self.data, self.db, self.workers, self.log_path = data, db, workers, log
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self.groups: set[int] = set()
        self.starts = 0
        self.token = ""

    def _db_args(self) -> list[str]:
        return ["--db", self.db] if self.db else []

    def create_token(self) -> str:
        made = subprocess.run([sys.executable, "-m", "neuralbake", "token", "create", "service-load", "--data", str(self.data), *self._db_args()],
                              capture_output=True, text=True, timeout=120)
        if made.returncode != 0:
            raise RuntimeError(f"token create failed: {made.stdout}{made.stderr}")
        self.token = made.stdout.strip().splitlines()[-1].strip()
        return self.token

    def start(self) -> None:
        """Start the server (from the main thread: PR_SET_PDEATHSIG follows the thread that forks)."""
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"\n==== start {self.starts} at {time.strftime('%H:%M:%S')} ====\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                [sys.executable, "-m", "neuralbake", "serve", "--data", str(self.data), "--port", str(self.port), "--workers", str(self.workers), *self._db_args()],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent,
            )
        self.groups.add(self.process.pid)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def answers(self) -> bool:
        """Whether an authenticated request gets its 200 now."""
        try:
            response = httpx.get(f"{self.url}/api/jobs", params={"limit": 1}, headers={"Authorization": f"Bearer {self.token}"}, timeout=5.0)
        except httpx.TransportError:
            return False
        return response.status_code == 200

    def wait_ready(self, timeout: float = 120.0) -> float:
        """Poll an authenticated request until it answers 200; return time.time() of that answer."""
        deadline = time.monotonic() + timeout
        while True:
            if self.answers():
                return time.time()
            if not self.running():
                raise RuntimeError(f"the server exited with {self.process.returncode if self.process else '?'}; see {self.log_path}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server did not answer within {timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.05)

    def kill9(self) -> float:
        """kill -9 the server process (not its workers); return time.time() of the kill."""
        stamp = time.time()
        os.kill(self.pid, signal.SIGKILL)
        assert self.process is not None
        self.process.wait()
        return stamp

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM, as an operator would; SIGKILL after ``timeout``."""
        if self.running():
            assert self.process is not None
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def leftovers(self, grace: float = 15.0) -> list[tuple[int, str]]:
        """Processes of our servers' groups still alive after ``grace`` seconds."""
        deadline = time.monotonic() + grace
        while True:
            left = processes_in_groups(self.groups)
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.2)

    def kill_groups(self) -> None:
        for group in self.groups:
            try:
                os.killpg(group, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


# -- followers ------------------------------------------------------------------------------------

@dataclass
class FollowerStats:
    connects: int = 0
    drops: int = 0
    """Connections the follower dropped itself, at a random moment."""
    cuts: int = 0
    """Streams that broke or ended without their job's terminal event (the server was killed)."""
    refused: int = 0
    """Connection attempts that failed (the server was down)."""
    events: int = 0
    problems: list[str] = field(default_factory=list)


class Follower(threading.Thread):
    """Follows every job's event stream in turn; drops and reconnects at random moments."""

    def __init__(self, index: int, url: str, token: str, jobs: list[str], drop_mean: float, seed: int, stop: threading.Event) -> None:
        super().__init__(daemon=True, name=f"follower-{index}")
        self.index, self.jobs, self.drop_mean, self.stop = index, jobs, drop_mean, stop
        self.rng = random.Random(seed)
        self.http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"})
        self.received: dict[str, list[tuple[int, str]]] = {}
        self.stats = FollowerStats()
        self.finished = False

    def run(self) -> None:
        try:
            for job in self.jobs:
                if self.stop.is_set():
                    return
                self.follow(job)
            self.finished = True
        except Exception as exc:  # noqa: BLE001 - reported as a problem of this follower
            self.stats.problems.append(f"follower crashed: {type(exc).__name__}: {exc}")
        finally:
            self.http.close()

    def follow(self, job: str) -> None:
        got = self.received.setdefault(job, [])
        last = 0
        while not self.stop.is_set():
            life = self.rng.expovariate(1.0 / self.drop_mean)
            deadline = time.monotonic() + life
            timeout = httpx.Timeout(5.0, read=max(0.05, life))
            try:
                with self.http.stream("GET", f"/api/jobs/{job}/events", headers={"Last-Event-ID": str(last)}, timeout=timeout) as response:
                    self.stats.connects += 1
                    if response.status_code != 200:
                        self.stats.problems.append(f"job {job[:8]}: HTTP {response.status_code} on a connection resuming after {last}")
                        if len(self.stats.problems) > 50:
                            return
                        time.sleep(0.2)
                        continue
                    current: dict[str, Any] = {}
                    for line in response.iter_lines():
                        if line.startswith(":"):
                            pass  # a comment (keep-alive ping)
                        elif line.startswith("id:"):
                            current["seq"] = int(line[3:].strip())
                        elif line.startswith("event:"):
                            current["type"] = line[6:].strip()
                        elif line.startswith("data:"):
                            current["data"] = True
                        elif not line and "seq" in current:
                            got.append((current["seq"], current.get("type", "message")))
                            self.stats.events += 1
                            last = current["seq"]
                            if current.get("type") in TERMINAL:
                                return
                            current = {}
                        if time.monotonic() >= deadline:
                            self.stats.drops += 1  # mid-stream, maybe mid-event: the partial one is discarded
                            break
                    else:
                        self.stats.cuts += 1  # the server ended the stream before the job ended
            except httpx.ReadTimeout:
                self.stats.drops += 1  # a quiet stream reached its random life
            except (httpx.ConnectError, httpx.ConnectTimeout):
                self.stats.refused += 1
                time.sleep(0.1)
            except httpx.TransportError:
                self.stats.cuts += 1
                time.sleep(0.05)


# -- watching the store (read-only) to time the faults ----------------------------------------------

class Watch:
    """Read-only views of the job store, to pick the moments of the faults and time the recoveries
    (the store's event timestamps are the writers' time.time(), on this machine's clock)."""

    def __init__(self, url: str) -> None:
        from neuralbake.service.store import Store

        self.store = Store(url)

    def statuses(self, ids: list[str]) -> dict[str, str]:
        out = {}
        for job_id in ids:
            job = self.store.get_job(job_id)
            out[job_id] = job.status if job is not None else "missing"
        return out

    def events(self, job_id: str) -> list[Any]:
        return self.store.events_after(job_id, 0, limit=100_000)

    def current_attempt(self, job_id: str) -> tuple[int, int | None, bool]:
        """(attempt, newest training step, has a checkpoint) of the job's current attempt."""
        attempt, step, checkpoint = 0, None, False
        for event in self.events(job_id):
            if event.type == "started":
                attempt, step, checkpoint = int(event.data.get("attempt", attempt + 1)), None, False
            elif event.type == "train":
                step = event.data.get("step", step)
            elif event.type == "checkpoint":
                checkpoint = True
        return attempt, step, checkpoint

    def first_event(self, job_id: str, kind: str, after: float, test: Any = None) -> Any:
        for event in self.events(job_id):
            if event.type == kind and event.created >= after and (test is None or test(event)):
                return event
        return None

    def close(self) -> None:
        self.store.close()


# -- the run ---------------------------------------------------------------------------------------

def _wait(what: str, condition: Any, deadline: float, service: Service, *, expect_server: bool = True, every: float = 0.1) -> Any:
    while True:
        value = condition()
        if value:
            return value
        if expect_server and not service.running():
            raise RuntimeError(f"the server died while waiting for {what}:\n{service.log_tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(every)


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def run(args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    """Run the benchmark; return its figures and the list of failed checks."""
    root = Path(tempfile.mkdtemp(prefix="nb-service-load-"))
    data = root / "data"
    figures: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "cpu_count": os.cpu_count(), "jobs": args.jobs, "workers": args.workers,
                               "followers": args.followers, "steps": args.steps, "faults": not args.no_faults}
    failures: list[str] = []
    postgres = Postgres() if args.postgres else None
    service: Service | None = None
    watch: Watch | None = None
    stop = threading.Event()
    followers: list[Follower] = []
    load: OtherLoad | None = None
    try:
        db = args.db or (postgres.start() if postgres else "")
        figures["loadavg_before"] = round(os.getloadavg()[0], 2)
        pg_group = postgres.group() if postgres else None
        load = OtherLoad(lambda: (service.groups if service else set()) | ({pg_group} if pg_group else set()))
        load.start()
        figures["database"] = ("PostgreSQL " + postgres.version()) if postgres else ("PostgreSQL" if db.startswith("postgres") else "SQLite" if not db else db.split(":")[0])
        service = Service(data, db, args.workers, root / "server.log")
        data.mkdir(parents=True)
        token = service.create_token()
        service.start()
        service.wait_ready()
        from neuralbake.client import ServiceClient

        client = ServiceClient(service.url, token)
        image = client.upload([IMAGE])
        ref = f"{image['id']}/{IMAGE.name}"
        watch = Watch(db or f"sqlite:///{(data / 'service.db').resolve()}")
        deadline = time.monotonic() + args.timeout

        t_submit = time.time()  # a wall-clock stamp: later phases are measured from it, as the store's event times are
        with Stopwatch() as submitting:
            ids = [client.submit("texture", job_config(args.steps), {"image": ref})["id"] for _ in range(args.jobs)]
        figures["submit_seconds"] = _seconds(submitting.seconds)
        for index in range(args.followers):
            shift = index * len(ids) // max(1, args.followers)
            followers.append(Follower(index, service.url, token, ids[shift:] + ids[:shift], args.drop_mean, args.seed * 1000 + index, stop))
        for follower in followers:
            follower.start()

        def done_count() -> int:
            return sum(status in TERMINAL for status in watch.statuses(ids).values())

        if not args.no_faults:
            # -- fault 1: kill -9 one worker mid-training (after its job's first checkpoint) ----------
            _wait(f"{args.kill_worker_after} jobs to finish", lambda: done_count() >= args.kill_worker_after, deadline, service)

            def victim() -> tuple[int, str, int, int | None] | None:
                for pid in worker_pids(service.pid):
                    job = job_of(pid)
                    if job is None:
                        continue
                    attempt, step, checkpoint = watch.current_attempt(job)
                    if checkpoint and step is not None and step < 0.8 * args.steps:
                        return pid, job, attempt, step
                if done_count() == len(ids):
                    raise RuntimeError("every job ended before a worker could be killed mid-training: use more --jobs or --steps")
                return None

            pid, job_w, attempt_w, step_w = _wait("a worker mid-training", victim, deadline, service, every=0.05)
            done_before = done_count()
            before = set(worker_pids(service.pid))
            t_wkill = time.time()
            os.kill(pid, signal.SIGKILL)
            figures["phase1_jobs_per_minute"] = round(done_before / (t_wkill - t_submit) * 60, 1)
            figures["phase1_jobs_done"] = done_before
            figures["worker_kill"] = {"job": job_w, "attempt": attempt_w, "step_at_kill": step_w}
            t_replaced = _wait("a replacement worker", lambda: time.time() if set(worker_pids(service.pid)) - before else None, deadline, service, every=0.05)
            requeued = _wait("the killed worker's job to be requeued", lambda: watch.first_event(job_w, "requeued", t_wkill), deadline, service, every=0.2)
            restarted = _wait("the killed worker's job to run again",
                              lambda: watch.first_event(job_w, "started", t_wkill, lambda e: int(e.data.get("attempt", 0)) > attempt_w), deadline, service, every=0.2)
            figures["worker_kill"].update({
                "replacement_worker_up_s": _seconds(t_replaced - t_wkill),
                "job_requeued_s": _seconds(requeued.created - t_wkill),
                "requeue_reason": requeued.data.get("reason", "lease ran out"),
                "job_running_again_s": _seconds(restarted.created - t_wkill),
            })

            # -- fault 2: kill -9 the server mid-training, restart it at once on the same folder/port --
            # Wait (15 s at most) for every worker to be mid-training, then settle for one (15 s more).
            soft = time.monotonic() + 15

            def busy() -> dict[str, tuple[int, int | None]] | None:
                running = {}
                for worker in worker_pids(service.pid):
                    job = job_of(worker)
                    if job is not None:
                        attempt, step, checkpoint = watch.current_attempt(job)
                        if checkpoint and step is not None and step < 0.8 * args.steps:
                            running[job] = (attempt, step)
                left = len(ids) - done_count()
                enough = min(args.workers, left) if time.monotonic() < soft else 1
                return running if len(running) >= max(1, enough) else None

            try:
                running = _wait("a job mid-training", busy, time.monotonic() + 30, service, every=0.05)
            except RuntimeError:
                running = {}  # nothing mid-training within 30 s: kill anyway (the restart is still measured)
            old_workers = worker_pids(service.pid)
            t_skill = service.kill9()
            figures["server_kill"] = {"jobs_mid_training": {job: {"attempt": a, "step": s} for job, (a, s) in running.items()},
                                      "jobs_done_before": done_count()}
            service.start()  # at once, as a supervisor would
            t_answer = t_old_gone = None
            while t_answer is None or t_old_gone is None:
                if t_old_gone is None and not any(alive(p) for p in old_workers):
                    t_old_gone = time.time()
                if t_answer is None and service.answers():
                    t_answer = time.time()
                if not service.running():
                    raise RuntimeError(f"the restarted server exited:\n{service.log_tail()}")
                if time.monotonic() > deadline:
                    raise RuntimeError("timed out waiting for the restarted server and the old workers' exit")
                time.sleep(0.05)
            handed = {}
            for job in running:
                def back(job: str = job) -> Any:
                    return next((e for e in watch.events(job) if e.created >= t_skill and e.type in ("requeued", *TERMINAL)), None)

                event = _wait(f"job {job[:8]} to be handed back", back, deadline, service, every=0.2)
                reason = event.data.get("reason", "lease ran out") if event.type == "requeued" else f"{event.type} before handing back"
                handed[job] = (event.created - t_skill, reason)
            first_start = _wait("a job to start on the new server",
                                lambda: min((e.created for j in ids for e in watch.events(j) if e.type == "started" and e.created >= t_skill), default=None),
                                deadline, service, every=0.2)
            figures["server_kill"].update({
                "old_workers_exited_s": _seconds(t_old_gone - t_skill),
                "jobs_handed_back_s": {job: _seconds(s) for job, (s, _) in handed.items()},
                "hand_back_reasons": sorted({reason for _, reason in handed.values()}),
                "api_answers_again_s": _seconds(t_answer - t_skill),
                "first_job_running_again_s": _seconds(first_start - t_skill),
            })

        _wait("every job to end", lambda: done_count() == len(ids), deadline, service, every=0.2)
        ends = [max(e.created for e in watch.events(j) if e.type in TERMINAL) for j in ids]
        t_end = max(ends)
        wall = t_end - t_submit
        figures["wall_seconds"] = _seconds(wall)
        figures["jobs_per_minute"] = round(len(ids) / wall * 60, 1)
        if args.no_faults:
            figures["phase1_jobs_per_minute"] = figures["jobs_per_minute"]
        else:
            end_w = max(e.created for e in watch.events(figures["worker_kill"]["job"]) if e.type in TERMINAL)
            figures["worker_kill"]["job_finished_s"] = _seconds(end_w - t_wkill)
            figures["server_kill"]["all_jobs_finished_s"] = _seconds(t_end - t_skill)

        for follower in followers:
            follower.join(timeout=max(5.0, deadline - time.monotonic()))
        stop.set()
        load.stop.set()
        figures["other_processes_cpu_cores"] = round(load.cores(), 2)
        figures["other_processes_busiest"] = load.top()

        # -- verification through the API ---------------------------------------------------------
        api_events, jobs = verify_jobs(client, service, ids, args.steps, root / "fetched", figures, failures)
        verify_followers(followers, api_events, figures, failures)
        client.close()

        # -- a graceful stop: every process of the run must be gone ---------------------------------
        service.stop()
        left = service.leftovers()
        figures["processes_left_after_stop"] = len(left)
        if left:
            failures.append(f"{len(left)} process(es) of the run still alive after the server stopped: {left}")
        verify_store(watch, ids, api_events, figures, failures)
        return figures, failures
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stop.set()
        if load is not None:
            load.stop.set()
        if watch is not None:
            watch.close()
        if service is not None:
            service.stop(timeout=30)
            service.kill_groups()
        for follower in followers:
            follower.join(timeout=10)
        if postgres is not None:
            postgres.stop()
        if args.keep:
            print(f"kept {root} (server log: {root / 'server.log'})", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


def _segments(events: list[dict[str, Any]]) -> tuple[list[str], int]:
    """Check that attempts never overlap; return (problems, attempts started)."""
    problems, state, started, last_step = [], "none", 0, None
    for event in events:
        kind = event["type"]
        if kind in ("queued", "requeued"):
            if kind == "requeued" and state != "running":
                problems.append(f"seq {event['seq']}: requeued while {state}")
            state, last_step = "waiting", None
        elif kind == "started":
            started += 1
            if state != "waiting":
                problems.append(f"seq {event['seq']}: started while {state} (two attempts at once)")
            state, last_step = "running", None
        elif kind in TERMINAL:
            if state not in ("running", "waiting"):
                problems.append(f"seq {event['seq']}: {kind} while {state}")
            state = "ended"
        else:
            if state != "running":
                problems.append(f"seq {event['seq']}: {kind} written while the job was {state} (a lost attempt still writing)")
            if kind == "train":
                step = event["data"].get("step")
                if last_step is not None and step is not None and step <= last_step:
                    problems.append(f"seq {event['seq']}: train step {step} after {last_step} in one attempt (two writers)")
                last_step = step if step is not None else last_step
    return problems, started


def _tail_is_empty(service: Service, job_id: str, after: int) -> bool:
    """A stream resumed after the terminal event delivers nothing (no second terminal event)."""
    headers = {"Authorization": f"Bearer {service.token}", "Last-Event-ID": str(after)}
    try:
        with httpx.stream("GET", f"{service.url}/api/jobs/{job_id}/events", headers=headers, timeout=httpx.Timeout(5.0, read=0.8)) as response:
            for line in response.iter_lines():
                if line.startswith("id:"):
                    return False
    except httpx.ReadTimeout:
        return True
    return True


def verify_jobs(client: Any, service: Service, ids: list[str], steps: int, fetched: Path, figures: dict[str, Any], failures: list[str]) -> tuple[dict[str, list[dict]], dict[str, dict]]:
    lost, duplicated, bad_outputs, resumed, attempts_total, stored = [], [], [], 0, 0, 0
    api_events: dict[str, list[dict]] = {}
    jobs: dict[str, dict] = {}
    for job_id in ids:
        job = client.job(job_id)
        jobs[job_id] = job
        events = list(client.events(job_id))
        api_events[job_id] = events
        stored += len(events)
        seqs = [event["seq"] for event in events]
        kinds = [event["type"] for event in events]
        problems = []
        if job["status"] != "succeeded":
            lost.append(f"{job_id}: {job['status']} ({job.get('error')})")
        if seqs != list(range(1, len(seqs) + 1)):
            problems.append(f"event numbers are not 1..{len(seqs)}: {seqs[:50]}")
        terminal = [kind for kind in kinds if kind in TERMINAL]
        if len(terminal) != 1 or kinds[-1] not in TERMINAL or kinds.count("succeeded") > 1:
            problems.append(f"terminal events {terminal}")
        if seqs and not _tail_is_empty(service, job_id, seqs[-1]):
            problems.append("events after the terminal one")
        overlap, started = _segments(events)
        problems += overlap
        handed_back = sum(1 for e in events if e["type"] == "requeued" and e["data"].get("reason") == "worker shut down")
        if started - handed_back != job["attempts"]:
            problems.append(f"{started} started events, {handed_back} hand-backs, but attempts = {job['attempts']}")
        attempts_total += started
        if problems:
            duplicated.append(f"{job_id}: " + "; ".join(problems))
        if job["status"] == "succeeded":
            try:
                client.fetch(job_id, fetched / job_id)
                report = json.loads((fetched / job_id / "report.json").read_text())
                if report.get("steps") != steps:
                    bad_outputs.append(f"{job_id}: report.json says {report.get('steps')} steps")
                resumed += bool(report.get("resumed"))
            except Exception as exc:  # noqa: BLE001 - a failed download or check is a finding
                bad_outputs.append(f"{job_id}: {type(exc).__name__}: {exc}")
    figures["succeeded"] = len(ids) - len(lost)
    figures["lost"] = len(lost)
    figures["duplicated"] = len(duplicated)
    figures["outputs_verified"] = len(ids) - len(lost) - len(bad_outputs)
    figures["jobs_resumed_from_checkpoint"] = resumed
    figures["attempts_started"] = attempts_total
    figures["events_stored"] = stored
    for label, items in (("lost", lost), ("duplicated", duplicated), ("bad outputs", bad_outputs)):
        failures += [f"{label}: {item}" for item in items]
    return api_events, jobs


def verify_followers(followers: list[Follower], api_events: dict[str, list[dict]], figures: dict[str, Any], failures: list[str]) -> None:
    missed = repeated = disordered = unfinished = 0
    for follower in followers:
        if not follower.finished:
            unfinished += 1
            failures.append(f"follower {follower.index} did not finish its jobs")
        failures += [f"follower {follower.index}: {problem}" for problem in follower.stats.problems]
        for job_id, expected in api_events.items():
            want = [(event["seq"], event["type"]) for event in expected]
            got = follower.received.get(job_id, [])
            if got == want:
                continue
            got_seqs = [seq for seq, _ in got]
            miss = len(set(range(1, len(want) + 1)) - set(got_seqs))
            rep = len(got_seqs) - len(set(got_seqs))
            missed, repeated = missed + miss, repeated + rep
            disordered += int(got_seqs != sorted(got_seqs) or (not miss and not rep))
            failures.append(f"follower {follower.index}, job {job_id[:8]}: {miss} missed, {rep} repeated, got {got_seqs[:40]} (want 1..{len(want)})")
    stats = [follower.stats for follower in followers]
    figures["followers_report"] = {
        "events_received": sum(s.events for s in stats),
        "connections": sum(s.connects for s in stats),
        "random_drops": sum(s.drops for s in stats),
        "streams_cut_by_server": sum(s.cuts for s in stats),
        "refused_connects": sum(s.refused for s in stats),
        "reconnects": sum(s.connects for s in stats) - sum(len(f.received) for f in followers),
        "events_missed": missed,
        "events_repeated": repeated,
        "streams_out_of_order": disordered,
        "unfinished_followers": unfinished,
    }


def verify_store(watch: Watch, ids: list[str], api_events: dict[str, list[dict]], figures: dict[str, Any], failures: list[str]) -> None:
    """After the server stopped: the store itself agrees with the API, with one terminal event a job."""
    mismatched = 0
    for job_id in ids:
        stored = watch.events(job_id)
        terminal = [event.type for event in stored if event.type in TERMINAL]
        job = watch.store.get_job(job_id)
        if len(terminal) != 1 or job is None or job.status != "succeeded":
            failures.append(f"store: job {job_id} ended {job.status if job else 'missing'} with terminal events {terminal}")
        if [(e.seq, e.type) for e in stored] != [(e["seq"], e["type"]) for e in api_events[job_id]]:
            mismatched += 1
            failures.append(f"store: job {job_id}'s events differ from what the API streamed")
    figures["store_matches_api"] = mismatched == 0


# -- output -----------------------------------------------------------------------------------------

def table(figures: dict[str, Any]) -> str:
    f = figures
    rows: list[tuple[str, Any]] = [
        ("database", f.get("database")),
        ("jobs N / workers W / followers M / steps S", f"{f['jobs']} / {f['workers']} / {f['followers']} / {f['steps']}"),
        ("faults", "worker kill -9 + server kill -9" if f["faults"] else "none"),
        ("CPU used by other processes meanwhile (cores)", f"{f.get('other_processes_cpu_cores')}" + (
            f"  <- the machine was shared: {'; '.join(f.get('other_processes_busiest') or [])}" if (f.get("other_processes_cpu_cores") or 0) > 0.2 else "")),
        ("wall time, first submit -> last job end (s)", f.get("wall_seconds")),
        ("jobs/minute, whole run", f.get("jobs_per_minute")),
        ("jobs/minute before the first fault", f.get("phase1_jobs_per_minute") if f["faults"] else "(no faults: as above)"),
    ]
    if f["faults"] and "worker_kill" in f:
        w = f["worker_kill"]
        rows += [
            ("worker kill: job's step at kill", w.get("step_at_kill")),
            ("  -> replacement worker up (s)", w.get("replacement_worker_up_s")),
            ("  -> job requeued (s)", f"{w.get('job_requeued_s')} ({w.get('requeue_reason')})"),
            ("  -> job running again (s)", w.get("job_running_again_s")),
            ("  -> job finished (s)", w.get("job_finished_s")),
        ]
    if f["faults"] and "server_kill" in f:
        s = f["server_kill"]
        handed = s.get("jobs_handed_back_s") or {}
        rows += [
            ("server kill: jobs mid-training", ", ".join(f"{j[:8]}@{v['step']}" for j, v in s.get("jobs_mid_training", {}).items()) or "none"),
            ("  -> old workers exited (s)", s.get("old_workers_exited_s")),
            ("  -> jobs handed back (s)", (", ".join(f"{v}" for v in handed.values()) + f" ({', '.join(s.get('hand_back_reasons', []))})") if handed else "-"),
            ("  -> API answers again (s)", s.get("api_answers_again_s")),
            ("  -> first job running again (s)", s.get("first_job_running_again_s")),
            ("  -> all jobs finished (s)", s.get("all_jobs_finished_s")),
        ]
    r = f.get("followers_report", {})
    rows += [
        ("succeeded / lost / duplicated", f"{f.get('succeeded')} / {f.get('lost')} / {f.get('duplicated')}"),
        ("outputs downloaded and verified", f.get("outputs_verified")),
        ("attempts started / resumed from checkpoint", f"{f.get('attempts_started')} / {f.get('jobs_resumed_from_checkpoint')}"),
        ("events stored (all jobs)", f.get("events_stored")),
        ("followers: events received", r.get("events_received")),
        ("followers: reconnects (random drops / cut / refused)", f"{r.get('reconnects')} ({r.get('random_drops')} / {r.get('streams_cut_by_server')} / {r.get('refused_connects')})"),
        ("followers: events missed / repeated / out of order", f"{r.get('events_missed')} / {r.get('events_repeated')} / {r.get('streams_out_of_order')}"),
        ("store agrees with the API", f.get("store_matches_api")),
        ("processes left after stop", f.get("processes_left_after_stop")),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=30, help="jobs N (default 30)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes W (default 2)")
    parser.add_argument("--followers", type=int, default=4, help="event-stream followers M (default 4)")
    parser.add_argument("--steps", type=int, default=3000, help="training steps per job (default 3000: ~4 s on a 2-core CPU)")
    parser.add_argument("--drop-mean", type=float, default=1.5, help="mean life of a follower's connection before it drops it, s (default 1.5)")
    parser.add_argument("--db", default="", help="job store URL (default: SQLite in the data folder)")
    parser.add_argument("--postgres", action="store_true", help="start a throwaway PostgreSQL for the run (initdb/pg_ctl)")
    parser.add_argument("--no-faults", action="store_true", help="no worker or server kill: the baseline jobs/minute")
    parser.add_argument("--kill-worker-after", type=int, default=None, help="jobs finished before the worker kill (default N/4)")
    parser.add_argument("--timeout", type=float, default=900.0, help="give up after this many seconds (default 900)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the followers' random drops")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (data, server log)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures as JSON here")
    args = parser.parse_args()
    if args.db and args.postgres:
        parser.error("--db and --postgres exclude each other")
    if min(args.jobs, args.workers, args.followers, args.steps) < 1 or args.drop_mean <= 0:
        parser.error("--jobs, --workers, --followers, --steps and --drop-mean must be positive")
    if args.steps <= CHECKPOINT_EVERY and not args.no_faults:
        parser.error(f"with faults, --steps must exceed {CHECKPOINT_EVERY} (the kills wait for a job's first checkpoint)")
    if args.kill_worker_after is None:
        args.kill_worker_after = max(1, args.jobs // 4)
    if not args.no_faults and args.kill_worker_after >= args.jobs - args.workers:
        parser.error("with faults, --kill-worker-after must leave jobs to run (or use more --jobs)")

    def on_signal(signum: int, frame: Any) -> None:
        raise Interrupted(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        figures, failures = run(args)
    except Interrupted as exc:
        print(f"interrupted ({exc}); everything the run started was stopped", file=sys.stderr)
        return 130
    except RuntimeError as exc:
        print(f"the run failed: {exc}", file=sys.stderr)
        return 2
    figures["failures"] = failures
    print(table(figures))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    if failures:
        print(f"\nFAILED: {len(failures)} check(s)", file=sys.stderr)
        for failure in failures[:40]:
            print(f"  {failure}", file=sys.stderr)
        return 1
    print("\nOK: 0 lost, 0 duplicated; every follower got every event exactly once, in order")
    return 0


if __name__ == "__main__":
    sys.exit(main())

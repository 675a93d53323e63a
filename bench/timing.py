"""The one way the benchmarks time things, so that every figure they report is measured alike.

- :func:`measure` runs a callable a few times after warm-up runs and returns a :class:`Timing` (every run's seconds,
  best, median, and what the last run returned). Work on a CUDA device is synchronised before and after each run, so
  a run's time is the GPU's, not the launch's; other devices (a Slang/Vulkan one) pass their own ``sync``.
- :class:`Stopwatch` times one span (a whole bake, a server's round of jobs), synchronised the same way.

Scripts import it as ``from timing import measure, Stopwatch`` (``python bench/X.py`` puts bench/ on the path). It
needs only the standard library (PyTorch when there is CUDA work to wait for), so scripts that run where only slangpy
and numpy are installed use it too.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["Stopwatch", "Timing", "measure", "synchronizer"]


def synchronizer(device: torch.device | str | None = None) -> Callable[[], None]:
    """What waits for ``device``'s queued work: ``torch.cuda.synchronize`` for a CUDA device, nothing for the CPU.

    ``None``: every CUDA device this process has started (nothing if it has started none)."""
    if device is None:
        return _started_cuda
    import torch  # a device was named, so PyTorch is here

    device = torch.device(device)
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return _nothing


def _nothing() -> None:
    return None


def _started_cuda() -> None:
    torch = sys.modules.get("torch")  # not imported: no CUDA work to wait for
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():  # asked at each call: CUDA may start later
        torch.cuda.synchronize()


@dataclass(frozen=True)
class Timing:
    """The seconds of each timed run of :func:`measure`, and what the last one returned."""

    times: tuple[float, ...]
    value: Any = None

    @property
    def best(self) -> float:
        """The fastest run: the figure least disturbed by the rest of the machine."""
        return min(self.times)

    @property
    def median(self) -> float:
        """The middle run: the figure a caller can expect."""
        return statistics.median(self.times)

    @property
    def repeats(self) -> int:
        return len(self.times)

    def rate(self, items: float, *, best: bool = True) -> float:
        """``items`` per second at the best (or, ``best=False``, the median) run."""
        return items / (self.best if best else self.median)


def measure(
    fn: Callable[[], Any],
    *,
    repeats: int = 5,
    warmup: int = 1,
    device: torch.device | str | None = None,
    sync: Callable[[], None] | None = None,
) -> Timing:
    """Run ``fn`` ``warmup`` times untimed (compilation, caches, allocator), then ``repeats`` times timed.

    Each timed run is bracketed by ``sync`` (default :func:`synchronizer` of ``device``), so queued GPU work is
    counted in the run that queued it.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    wait = sync or synchronizer(device)
    for _ in range(warmup):
        fn()
    times = []
    value = None
    for _ in range(repeats):
        wait()
        start = time.perf_counter()
        value = fn()
        wait()
        times.append(time.perf_counter() - start)
    return Timing(tuple(times), value)


class Stopwatch:
    """Seconds of one span: ``with Stopwatch() as watch: ...`` then ``watch.seconds``, or ``watch = Stopwatch().start()``
    ... ``watch.stop()`` where the span does not fit a block.

    Synchronised with ``device`` (or ``sync``) at both ends, as :func:`measure` is; ``seconds`` read while it runs is
    the time so far (unsynchronised).
    """

    def __init__(self, device: torch.device | str | None = None, *, sync: Callable[[], None] | None = None) -> None:
        self._sync = sync or synchronizer(device)
        self._start: float | None = None
        self._stop: float | None = None

    def start(self) -> Stopwatch:
        self._sync()
        self._start, self._stop = time.perf_counter(), None
        return self

    def stop(self) -> float:
        """End the span; returns its seconds."""
        self._sync()
        self._stop = time.perf_counter()
        return self.seconds

    def __enter__(self) -> Stopwatch:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def seconds(self) -> float:
        if self._start is None:
            raise RuntimeError("the stopwatch has not started")
        return (self._stop if self._stop is not None else time.perf_counter()) - self._start

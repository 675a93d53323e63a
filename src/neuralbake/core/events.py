"""Metric events with swappable sinks: a terminal progress bar, a JSON-lines log, or both.

A bake emits plain dicts (``{"event": "train", "step": 100, "loss": ...}``); sinks decide what to
do with them. The trainer never talks to the terminal directly, so tests run silently and the
asset service can forward the same events over HTTP.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from neuralbake.io.files import json_safe

__all__ = ["EventSink", "EventWriter", "JsonlSink", "ListSink", "ProgressSink", "progress_task"]


class EventSink(Protocol):
    """Receives every event; closed once at the end."""

    def write(self, event: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class EventWriter:
    """Fans events out to sinks."""

    def __init__(self, sinks: list[EventSink] | None = None) -> None:
        self.sinks = list(sinks or [])

    def emit(self, event: str, **fields: Any) -> None:
        record = {"event": event, **fields}
        for sink in self.sinks:
            sink.write(record)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class JsonlSink:
    """Appends each event as one JSON line (appending keeps the log whole across ``--resume``).

    Every line is plain JSON: a non-finite number is written as ``null`` and the line's
    ``non_finite`` entry says what it was (``{"psnr_db": "inf"}``; see :func:`neuralbake.io.files.json_safe`).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._handle = open(self.path, "a", encoding="utf-8")

    def write(self, event: dict[str, Any]) -> None:
        found: dict[str, str] = {}
        record = json_safe(event, non_finite=found)
        if found:
            record["non_finite"] = found
        self._handle.write(json.dumps(record, allow_nan=False) + "\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


class ListSink:
    """Keeps events in memory (tests, notebooks)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def write(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def close(self) -> None:
        pass


def _decibels(event: dict[str, Any]) -> dict[str, str]:
    """An evaluation's figures in dB (``*_db``), as a progress bar shows them."""
    return {key: f"{key} {value:.2f}" for key, value in event.items() if key.endswith("_db") and isinstance(value, (int, float))}


class ProgressSink:
    """A rich progress bar driven by ``start``/``train``/``eval``/``end`` events (and a second one for a run's
    half-length twin: ``half_run_start``/``half_run_train``/``half_run``)."""

    def __init__(self, description: str = "training", console: Console | None = None) -> None:
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[metrics]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self._description = description
        self._task: Any = None
        self._main_task: Any = None
        self._metrics: dict[str, str] = {}

    def write(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "start":
            self._progress.start()
            self._task = self._progress.add_task(
                self._description, total=event["total_steps"], completed=event.get("step", 0), metrics=""
            )
            return
        if self._task is None:
            return
        if kind == "half_run_start":  # a wsd run's half-length twin (neuralbake.nn.half_run): a bar of its own
            self._main_task = self._task
            self._task = self._progress.add_task(f"{self._description} at half the steps", total=event["total_steps"], completed=0, metrics="")
            return
        if kind == "half_run":
            self._progress.update(self._task, completed=event.get("taken_steps", 0), metrics="  ".join(_decibels(event).values()))
            self._task = self._main_task if self._main_task is not None else self._task
            return
        if kind == "train":
            self._metrics["loss"] = f"loss {event['loss']:.2e}"
            if event.get("loss_scale") is not None:
                self._metrics["scale"] = f"scale {event['loss_scale']:g}"
        elif kind == "eval":
            self._metrics.update(_decibels(event))
        self._progress.update(self._task, completed=event.get("step", 0), metrics="  ".join(self._metrics.values()))
        if kind == "end":
            self._progress.stop()

    def close(self) -> None:
        self._progress.stop()


@contextlib.contextmanager
def progress_task(description: str, total: int, *, enabled: bool = True, unit: str = "") -> Iterator[Callable[[int], None]]:
    """A progress bar with elapsed and remaining time on stderr for work that is not training.

    Yields ``advance(n)``; call it as units of work finish (pixels, samples, images). With
    ``enabled=False`` (``--quiet``) nothing is shown and ``advance`` does nothing.
    """
    if not enabled or total <= 0:
        yield lambda n: None
        return
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn()]
    if unit:
        columns.append(TextColumn(unit))
    progress = Progress(*columns, TimeElapsedColumn(), TimeRemainingColumn(), console=Console(stderr=True), transient=False)
    with progress:
        task = progress.add_task(description, total=total)
        yield lambda n: progress.advance(task, n)

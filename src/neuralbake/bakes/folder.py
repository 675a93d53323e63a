"""A bake's output folder: its lock, the journalled swap of finished outputs, and what a new bake sets aside.

The run path (:mod:`neuralbake.bakes.run`) claims a folder with :func:`folder_lock`, finishes a swap a
crash cut short (:func:`finish_swap`), moves the previous bake's state aside (:func:`prepare_state`)
and puts it back or drops it (:func:`settle_aside`, :func:`drop_aside`) as the module docstring of
:mod:`neuralbake.bakes.run` describes; a finished bake's staged files go in with :func:`swap_in`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from neuralbake.errors import InputError, NeuralbakeError, TrainingError
from neuralbake.io.files import atomic_write_json
from neuralbake.io.limits import load_json_file
from neuralbake.io.manifest import BAKE_MANIFEST, read_bake_manifest

__all__ = [
    "ASIDE_DIR",
    "PREVIEW_DIR",
    "STATE_DIR",
    "DropAsideOnCheckpoint",
    "OutputLockedError",
    "drop_aside",
    "finish_swap",
    "folder_lock",
    "prepare_state",
    "settle_aside",
    "swap_in",
]

STATE_DIR = ".neuralbake"
"""The runner's own folder inside a bake's output folder (lock, staging, checkpoints, journal)."""
PREVIEW_DIR = "previews"
"""Live previews, under the runner's folder (``.neuralbake/previews``); kept after the bake."""
ASIDE_DIR = "set_aside"
"""What a new bake replaces (the previous bake's staging, checkpoints and previews), kept under the runner's
folder until the new bake has a checkpoint of its own or has finished (``.neuralbake/set_aside``)."""
_ASIDE_RECORD = "set_aside.json"
_ASIDE_NAMES = ("staging", "checkpoints", PREVIEW_DIR)
_DROPPED = "set_aside.dropped"


class OutputLockedError(InputError):
    """Another bake holds the output folder's lock (nothing of this bake was started)."""


@contextlib.contextmanager
def folder_lock(path: Path, out: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (released by the OS if the process dies)."""
    handle = open(path, "a+b")
    try:
        try:
            if sys.platform == "win32":
                import msvcrt

                msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
            else:
                import fcntl

                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            raise OutputLockedError(
                "another bake is writing to this output folder right now.",
                path=out,
                field="--out",
                fix="wait for it to finish (or stop it), or choose another --out.",
            ) from exc
        yield
    finally:
        handle.close()


def _old_names(out: Path) -> set[str]:
    """Top-level names of the files the previous bake in ``out`` wrote (from its bake.json)."""
    try:
        manifest = read_bake_manifest(out)
    except NeuralbakeError:
        manifest = None
    if manifest is None:
        return set()
    listed = set(manifest["files"])
    return {name for name in {Path(item).parts[0] for item in listed} if _owned(out / name, name, listed)} | {BAKE_MANIFEST}


def _owned(path: Path, name: str, listed: set[str]) -> bool:
    """Whether ``path`` holds only what the previous bake wrote: a listed file, or a folder whose
    every file is listed (so a folder of the user's that a forged or stale bake.json names is
    never removed)."""
    if path.is_symlink() or not path.exists():
        return False
    if path.is_file():
        return name in listed
    return all(f"{name}/{inner.relative_to(path).as_posix()}" in listed for inner in path.rglob("*") if not inner.is_dir() or inner.is_symlink())


def finish_swap(out: Path, state: Path) -> None:
    """Move the staged files into ``out`` as the journal says; safe to repeat after a crash."""
    journal = state / "swap.json"
    if not journal.exists():
        return
    plan = load_json_file(journal, what="swap journal")
    stage, trash = state / "staging", state / "trash"
    trash.mkdir(exist_ok=True)
    new = [name for name in plan["new"] if name != BAKE_MANIFEST] + [BAKE_MANIFEST]  # the manifest goes in last

    def discard(name: str) -> None:
        target = out / name
        if target.is_symlink() or target.exists():
            os.replace(target, trash / f"{name}.{time.monotonic_ns()}")

    for name in sorted(set(plan["old"]) - set(new)):
        discard(name)
    for name in new:
        if (stage / name).exists():
            discard(name)
            os.replace(stage / name, out / name)
    shutil.rmtree(trash, ignore_errors=True)
    shutil.rmtree(stage, ignore_errors=True)
    journal.unlink()


def swap_in(out: Path, state: Path, listed: list[str]) -> None:
    """Swap the staged outputs (the top-level names of ``listed``, bake.json's files) into ``out``.

    A name already in ``out`` that the previous bake did not write (a user's file or folder) is
    never replaced: the bake stops with an error naming it, its checkpoints kept for --resume.
    """
    new = sorted({Path(name).parts[0] for name in listed} | {BAKE_MANIFEST})
    old = _old_names(out)
    for name in new:
        target = out / name
        if (target.exists() or target.is_symlink()) and name not in old:
            raise InputError(
                f"the output folder already holds {name!r}, which this bake would replace, and no earlier bake recorded writing it.",
                path=target,
                field="--out",
                fix=f"move or delete {name!r} (then --resume to finish without training again), or choose another --out.",
            )
    atomic_write_json(state / "swap.json", {"new": new, "old": sorted(old)})
    finish_swap(out, state)


def prepare_state(out: Path, state: Path, resume: bool) -> None:
    """Fresh staging for the bake, and for a new one fresh checkpoints, with what they replace set aside
    (:func:`_set_aside`); a resumed bake keeps its checkpoints and carries its event log over."""
    stage, checkpoints = state / "staging", state / "checkpoints"
    if resume and (not checkpoints.is_dir() or not any(checkpoints.glob("*.pt"))):
        raise TrainingError(
            "there is no checkpoint to resume from in this output folder.",
            path=out,
            field="--resume",
            fix="run without --resume to start a new bake.",
        )
    _set_aside(state, resume)
    for folder in (stage, checkpoints):
        folder.mkdir(parents=True, exist_ok=True)
    for partial in checkpoints.glob(".*.partial"):  # a kill in the middle of a checkpoint save leaves its temp file
        partial.unlink(missing_ok=True)
    log, earlier = stage / "events.jsonl", state / ASIDE_DIR / "staging" / "events.jsonl"
    if resume and earlier.is_file():
        shutil.copyfile(earlier, log)  # outputs are written again at the end; only the event log carries over (one history)
    elif resume and (out / "events.jsonl").is_file():
        shutil.copyfile(out / "events.jsonl", log)  # resuming a finished bake (more steps): one log


def _set_aside(state: Path, resume: bool) -> None:
    """Move what this bake replaces into ``.neuralbake/set_aside``: the staging folder, and for a new bake the
    checkpoints and previews. The record, written last, lists them and the checkpoints left in place (their
    inode, mtime and size), by which :func:`settle_aside` tells whether this bake wrote one of its own."""
    aside = state / ASIDE_DIR
    aside.mkdir()
    names = ["staging"] if resume else list(_ASIDE_NAMES)
    moved = []
    for name in names:
        if (state / name).exists() or (state / name).is_symlink():
            os.replace(state / name, aside / name)
            moved.append(name)
    atomic_write_json(aside / _ASIDE_RECORD, {"names": names, "moved": moved, "checkpoints": _checkpoint_stamps(state / "checkpoints")})


def _checkpoint_stamps(checkpoints: Path) -> dict[str, list[int]]:
    """Every checkpoint under ``checkpoints`` (a chain's stages' too) with what a save changes: inode, mtime, size
    (a save replaces the file, so its inode changes)."""
    stamps: dict[str, list[int]] = {}
    if checkpoints.is_dir() and not checkpoints.is_symlink():
        for path in checkpoints.rglob("*.pt"):
            if path.is_file() and not path.is_symlink():
                info = path.stat()
                stamps[path.relative_to(checkpoints).as_posix()] = [info.st_ino, info.st_mtime_ns, info.st_size]
    return stamps


def settle_aside(state: Path, *, finished: bool = False) -> str:
    """Put back or drop what a bake set aside (:func:`_set_aside`), by one rule: it goes once the bake has written
    a checkpoint of its own or has ``finished``; otherwise the folder gets back what it held before the bake, and
    what the bake made in its place goes. Safe to repeat after a crash inside it. Returns ``"restored"``,
    ``"dropped"`` or ``"none"`` (nothing was set aside)."""
    shutil.rmtree(state / _DROPPED, ignore_errors=True)
    aside = state / ASIDE_DIR
    if not aside.is_dir():
        return "none"
    try:
        record = load_json_file(aside / _ASIDE_RECORD, what="set-aside record")
    except (OSError, NeuralbakeError):
        record = None
    if not isinstance(record, dict):  # killed while setting aside: nothing of the bake exists yet, so all of it goes back
        for name in _ASIDE_NAMES:
            if (aside / name).exists() or (aside / name).is_symlink():
                _remove(state / name)
                os.replace(aside / name, state / name)
        shutil.rmtree(aside)
        return "restored"
    kept = record.get("checkpoints") or {}
    wrote = any(kept.get(name) != stamp for name, stamp in _checkpoint_stamps(state / "checkpoints").items())
    if not record.get("restore") and (finished or wrote):
        drop_aside(state)
        return "dropped"
    if not record.get("restore"):  # decided once: a restore cut short goes on as a restore
        atomic_write_json(aside / _ASIDE_RECORD, {**record, "restore": True})
    for name in record.get("names") or _ASIDE_NAMES:
        if (aside / name).exists() or (aside / name).is_symlink():
            _remove(state / name)
            os.replace(aside / name, state / name)
        elif name not in (record.get("moved") or []):
            _remove(state / name)  # made by the bake where there was none
    shutil.rmtree(aside)
    return "restored"


def drop_aside(state: Path) -> None:
    """Remove what was set aside (renamed first, so a crash during the removal cannot look like a set-aside to restore)."""
    aside = state / ASIDE_DIR
    if aside.is_dir():
        shutil.rmtree(state / _DROPPED, ignore_errors=True)
        os.replace(aside, state / _DROPPED)
        shutil.rmtree(state / _DROPPED, ignore_errors=True)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


class DropAsideOnCheckpoint:
    """An event sink that drops what the bake set aside at its first checkpoint (the bake has its own from then on)."""

    def __init__(self, state: Path) -> None:
        self.state, self.checkpoints = state, (state / "checkpoints").resolve()

    def write(self, event: dict[str, Any]) -> None:
        if event.get("event") == "checkpoint" and (self.state / ASIDE_DIR).is_dir():
            if Path(str(event.get("path", ""))).resolve().is_relative_to(self.checkpoints):
                drop_aside(self.state)

    def close(self) -> None:
        pass

"""Crash-safe file output.

Every result neuralbake writes goes through these helpers: the bytes land in a temporary file in
the target folder and are moved over the final name with ``os.replace``, which is atomic on POSIX
and Windows. A crash or Ctrl-C therefore leaves either the old file or the new one, never half of
one. :func:`json_safe` turns data into what JSON can hold (non-finite floats become ``null``), for
every JSON a bake writes that carries numbers (reports, event logs).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from neuralbake.errors import InputError

__all__ = [
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "json_path",
    "json_safe",
    "prepare_output_dir",
    "sha256_file",
]


def _umask() -> int:
    # os.umask can only be read by setting it; put the old value straight back.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it over ``path`` if the block succeeds.

    For writers that insist on a file name (Pillow, matplotlib, ``torch.save``). On any exception
    the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def _atomic_open(path: str | Path, mode: str) -> Iterator[IO[Any]]:
    with atomic_path(path) as tmp, open(tmp, mode) as handle:
        yield handle
        handle.flush()
        os.fsync(handle.fileno())


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with _atomic_open(path, "wb") as handle:
        handle.write(data)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as indented, standard JSON to ``path`` atomically (a non-finite number as ``null``,
    :func:`json_safe`; a writer that must say what it was uses ``json_safe(obj, non_finite=...)`` first)."""
    atomic_write_text(path, json.dumps(json_safe(obj), indent=2, sort_keys=False, allow_nan=False) + "\n")


def json_path(parts: Sequence[str | int]) -> str:
    """A place inside JSON data as text: keys joined by dots, list indices in brackets (``per_level[0].box.psnr_db``)."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text


def json_safe(value: Any, *, non_finite: dict[str, str] | None = None) -> Any:
    """``value`` as data that JSON can hold: every non-finite float (inf, -inf, NaN) becomes ``None``.

    Dicts, lists and tuples are copied at any depth (walked with a stack, not recursion, so depth is
    no limit; tuples become lists, as ``json.dumps`` writes them); other values are kept as they are.
    Python's ``json`` would write non-finite floats as ``Infinity`` / ``NaN``, which no other JSON
    parser reads. ``non_finite``, when given, receives where each one was and what it was:
    ``{json_path(...): "inf" | "-inf" | "nan"}`` (``""`` for ``value`` itself). A container that
    holds itself raises ``ValueError``, as ``json.dumps`` does.
    """

    def empty(item: Any) -> dict[Any, Any] | list[Any] | None:
        return {} if isinstance(item, dict) else [] if isinstance(item, list | tuple) else None

    def where(key: Any) -> str:
        return json_path([frame[2] for frame in stack[1:]] + [key])

    def scalar(item: Any, key: Any) -> Any:
        if isinstance(item, float) and not math.isfinite(item):
            if non_finite is not None:
                non_finite[where(key) if stack else ""] = "nan" if math.isnan(item) else "inf" if item > 0 else "-inf"
            return None
        return item

    stack: list[tuple[Iterator[tuple[Any, Any]], Any, Any, int]] = []
    root = empty(value)
    if root is None:
        return scalar(value, None)
    # Depth first with an explicit stack: one frame (items left, the copy, its key, its id) per container on the
    # current path, so the path is the frames' keys and a cycle is an id already on it; no recursion limit.
    stack.append((_items(value), root, None, id(value)))
    on_path = {id(value)}
    while stack:
        items, copy, _, ident = stack[-1]
        entry = next(items, None)
        if entry is None:
            stack.pop()
            on_path.discard(ident)
            continue
        key, item = entry
        inner = empty(item)
        if inner is None:
            item = scalar(item, key)
        elif id(item) in on_path:
            raise ValueError(f"circular reference at {where(key)}")
        else:
            stack.append((_items(item), inner, key, id(item)))
            on_path.add(id(item))
            item = inner
        if isinstance(copy, dict):
            copy[key] = item
        else:
            copy.append(item)
    return root


def _items(container: Any) -> Iterator[tuple[Any, Any]]:
    return iter(container.items()) if isinstance(container, dict) else enumerate(container)


def prepare_output_dir(path: str | Path) -> Path:
    """Create the output folder if needed and prove it is writable, before any work starts.

    Raises
    ------
    InputError
        If the folder cannot be created or written (names the folder and the fix).
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError(
            "the output path exists and is a file, not a folder.",
            path=path,
            fix="pass a folder path with --out, or remove the file.",
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-probe.", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise InputError(
            f"the output folder cannot be written ({exc.strerror or exc}).",
            path=path,
            fix="choose a folder you can write to with --out, or fix its permissions.",
        ) from exc
    return path


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()

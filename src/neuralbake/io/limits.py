"""Input limits that every loader shares: JSON nesting, decoded pixels, and memory before work.

A hostile or broken input must fail fast with a clear message, not exhaust the interpreter's
stack, the machine's memory or the user's patience. The limits here are generous for real
assets and checked *before* the expensive step: JSON nesting is measured by a linear scan before
the parser recurses, an image's pixel count is read from its header before it is decoded, and an
output's size is compared with the memory the machine has before it is allocated.

Python's ``json`` module has no depth limit of its own (it raises ``RecursionError`` somewhere
near the interpreter's recursion limit, after doing the work), hence the scanner.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import numpy as np

from neuralbake.errors import InputError

__all__ = [
    "MAX_IMAGE_PIXELS",
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "TooManyPixelsError",
    "available_memory_bytes",
    "check_image_pixels",
    "check_memory",
    "data_depth",
    "bracket_depth",
    "json_depth",
    "load_json_file",
    "parse_json_text",
]

MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects accepted in any JSON input (configs, materials, manifests)."""

MAX_JSON_BYTES = 64 * 1024 * 1024
"""Largest JSON document read (a glTF's JSON chunk is checked by the glTF reader with its own budget)."""

MAX_IMAGE_PIXELS = 16384 * 16384
"""Most pixels decoded from one image (a 16K texture); checked from the header before decoding."""


_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


def bracket_depth(text: str) -> int:
    """Deepest nesting of ``[``/``{`` against ``]``/``}`` in ``text`` (vectorised: a 60 MB glTF full
    of data URIs takes well under a second). Brackets inside strings must be removed first."""
    codes = np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    step = np.isin(codes, (0x5B, 0x7B)).astype(np.int64) - np.isin(codes, (0x5D, 0x7D)).astype(np.int64)
    return int(np.cumsum(step).max(initial=0))


def json_depth(text: str) -> int:
    """Deepest nesting of ``[`` / ``{`` in ``text``, outside strings (no recursion)."""
    return bracket_depth(_JSON_STRING.sub('""', text))


def data_depth(value: Any) -> int:
    """Deepest nesting of lists/tuples/dicts in an already parsed value (iterative, no recursion).

    For parsers without a depth scan of their own (TOML's dotted keys nest tables without
    brackets), so that later code (``repr`` in an error message, a recursive check) cannot hit
    the recursion limit.
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        deepest = max(deepest, depth + 1)
        if deepest > MAX_JSON_DEPTH:  # far enough: the caller refuses anything past the limit
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def parse_json_text(text: str, *, source: str | Path, what: str = "JSON file", fix: str = "correct the syntax.") -> Any:
    """Parse JSON ``text`` after checking its nesting; errors name ``source``.

    Raises
    ------
    InputError
        Nesting deeper than :data:`MAX_JSON_DEPTH`, or a syntax error.
    """
    depth = json_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise InputError(
            f"the {what} nests arrays/objects {depth} deep; at most {MAX_JSON_DEPTH} is accepted.",
            path=source,
            fix="flatten the document; no neuralbake format needs more than a few levels.",
        )
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"the {what} is not valid JSON ({exc}).", path=source, fix=fix) from exc
    except ValueError as exc:  # e.g. an integer of more than 4300 digits (int's conversion limit)
        raise InputError(f"the {what} holds a value Python cannot read ({exc}).", path=source, fix=fix) from exc
    except RecursionError as exc:  # pragma: no cover - the depth scan should have caught it
        raise InputError(f"the {what} nests too deeply.", path=source, fix="flatten the document.") from exc


def load_json_file(path: str | Path, *, what: str = "JSON file", fix: str = "correct the syntax.") -> Any:
    """Read and parse a JSON file with the size and nesting limits; errors name the file."""
    path = Path(path)
    try:
        status = path.stat()
    except OSError as exc:
        raise InputError(f"the {what} cannot be read ({exc.strerror or exc}).", path=path, fix="check the path.") from exc
    if not stat.S_ISREG(status.st_mode):
        # A folder fails, but a FIFO or a device would block or never end: refuse all three up front.
        kind = "a folder" if stat.S_ISDIR(status.st_mode) else "not a regular file"
        raise InputError(f"the {what} is {kind}.", path=path, fix="pass the path of a file.")
    size = status.st_size
    if size > MAX_JSON_BYTES:
        raise InputError(
            f"the {what} is {size:,} bytes; at most {MAX_JSON_BYTES:,} is read.", path=path, fix="pass the right file."
        )
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"the {what} is not UTF-8 text ({exc.reason}).", path=path, fix="save it as UTF-8 JSON.") from exc
    except OSError as exc:
        raise InputError(f"the {what} cannot be read ({exc.strerror or exc}).", path=path, fix="check the path.") from exc
    return parse_json_text(text, source=path, what=what, fix=fix)


class TooManyPixelsError(InputError):
    """An image's header announces more pixels than the reader was allowed to decode."""

    def __init__(self, problem: str, *, width: int, height: int, limit: int, **kwargs: Any) -> None:
        self.width, self.height, self.limit = width, height, limit
        super().__init__(problem, **kwargs)


def check_image_pixels(path: str | Path, width: int, height: int, *, limit: int = MAX_IMAGE_PIXELS) -> None:
    """Refuse an image whose header announces more than ``limit`` pixels, before decoding it.

    Raises :class:`TooManyPixelsError` (an InputError), so a caller with its own, smaller budget
    can say what to do about it.
    """
    if width * height > limit:
        raise TooManyPixelsError(
            f"the image is {width}x{height} = {width * height:,} pixels; at most {limit:,} are decoded.",
            width=width,
            height=height,
            limit=limit,
            path=path,
            fix="downscale it first (a 16384x16384 texture is the largest accepted).",
        )


def available_memory_bytes() -> int | None:
    """Memory the machine can still give this process (``MemAvailable``), or ``None`` if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return None


def check_memory(
    needed_bytes: int, *, what: str, field: str | None = None, fix: str, fraction: float = 0.8, path: str | Path | None = None
) -> None:
    """Refuse work whose estimated peak ``needed_bytes`` exceeds ``fraction`` of available memory.

    Called before the allocation, so that a size inside the documented limits but beyond this
    machine fails in a second with a message instead of swapping for minutes. ``path``, when
    given, is the input the work is for (the message names it).
    """
    available = available_memory_bytes()
    if available is None or needed_bytes <= fraction * available:
        return
    raise InputError(
        f"{what} needs about {needed_bytes / 2**30:.1f} GiB of memory; this machine has {available / 2**30:.1f} GiB available.",
        path=path,
        field=field,
        fix=fix,
    )

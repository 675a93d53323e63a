"""Crash-safe writes: the old file or the new one, never half of one, and no stray temporaries."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from neuralbake.errors import InputError
from neuralbake.io.files import atomic_path, atomic_write_bytes, atomic_write_json, json_safe, prepare_output_dir, sha256_file


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    atomic_write_json(target, {"version": 1})
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text('{"version": 2, "half')
        raise RuntimeError("the writer died half-way")
    assert json.loads(target.read_text()) == {"version": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_a_successful_write_replaces_the_file_whole(tmp_path: Path) -> None:
    target = tmp_path / "data.bin"
    atomic_write_bytes(target, b"old")
    atomic_write_bytes(target, b"new bytes")
    assert target.read_bytes() == b"new bytes"
    assert not list(tmp_path.glob("*.partial"))


def test_an_interrupt_during_a_write_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "weights.bin"
    atomic_write_bytes(target, b"old")
    with pytest.raises(KeyboardInterrupt), atomic_path(target) as tmp:
        tmp.write_bytes(b"new")
        raise KeyboardInterrupt
    assert target.read_bytes() == b"old"
    assert not list(tmp_path.glob("*.partial"))


def test_sha256_file_matches_hashlib(tmp_path: Path) -> None:
    import hashlib

    data = bytes(range(256)) * 5000  # more than one read block
    (tmp_path / "f").write_bytes(data)
    assert sha256_file(tmp_path / "f") == hashlib.sha256(data).hexdigest()


def test_an_output_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("x")
    with pytest.raises(InputError, match="is a file, not a folder"):
        prepare_output_dir(tmp_path / "taken")


def test_json_safe_turns_non_finite_floats_into_null_at_any_depth() -> None:
    value = {"a": math.inf, "b": [1.0, math.nan, {"c": -math.inf, "d": (1, 2.5)}], "e": "inf", "f": None, 3: True}
    found: dict[str, str] = {}
    safe = json_safe(value, non_finite=found)
    assert safe == {"a": None, "b": [1.0, None, {"c": None, "d": [1, 2.5]}], "e": "inf", "f": None, 3: True}
    assert found == {"a": "inf", "b[1]": "nan", "b[2].c": "-inf"}
    assert value["a"] == math.inf and isinstance(value["b"][2]["d"], tuple)  # the input is not changed
    assert json_safe(math.nan) is None and json_safe(2.5) == 2.5 and json_safe("x") == "x"
    json.dumps(safe, allow_nan=False)


def test_json_safe_has_no_depth_limit_and_refuses_a_cycle() -> None:
    deep: list = []
    inner = deep
    for _ in range(50_000):  # far past Python's recursion limit
        inner.append([])
        inner = inner[0]
    inner.append(math.inf)
    found: dict[str, str] = {}
    safe = json_safe(deep, non_finite=found)
    assert list(found.values()) == ["inf"] and list(found)[0] == "[0]" * 50_000 + "[0]"
    while safe:
        safe = safe[0]
    assert safe is None
    shared = [1.0]
    assert json_safe({"x": shared, "y": shared}) == {"x": [1.0], "y": [1.0]}  # the same list twice is no cycle
    loop: dict = {"a": []}
    loop["a"].append(loop)
    with pytest.raises(ValueError, match="circular"):
        json_safe(loop)


def test_every_json_written_atomically_is_standard_json(tmp_path) -> None:
    """rd.json, pack.json and every other record go through atomic_write_json: no Infinity or NaN in them."""
    import json
    import math

    from neuralbake.io.files import atomic_write_json

    atomic_write_json(tmp_path / "rd.json", {"rates": [{"bpp": 4.0, "psnr_db": math.inf}], "loss": float("nan")})
    text = (tmp_path / "rd.json").read_text()
    assert "Infinity" not in text and "NaN" not in text
    assert json.loads(text) == {"rates": [{"bpp": 4.0, "psnr_db": None}], "loss": None}

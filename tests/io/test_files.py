"""Crash-safe writes: the old file or the new one, never half of one, and no stray temporaries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuralbake.errors import InputError
from neuralbake.io.files import atomic_path, atomic_write_bytes, atomic_write_json, prepare_output_dir, sha256_file


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

"""`neuralbake submit` uploads what a bake reads: a file, a glTF with its folder, or a folder whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from neuralbake.cli.service import _upload_input


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[list[Path], Path | None]] = []

    def upload(self, paths: list[Path], *, base: Path | None = None) -> dict[str, Any]:
        self.calls.append((sorted(Path(p) for p in paths), base))
        return {"id": "u1", "files": []}


def test_a_folder_goes_whole_and_is_named_by_its_own_name(tmp_path: Path) -> None:
    style = tmp_path / "style"
    (style / "sub").mkdir(parents=True)
    for name in ("a.png", "a.txt", "sub/b.png", ".hidden"):
        (style / name).write_bytes(b"x")
    client = _Recorder()
    assert _upload_input(client, style) == "u1/style"  # type: ignore[arg-type]
    (files, base), = client.calls
    assert files == [style / "a.png", style / "a.txt", style / "sub" / "b.png"] and base == tmp_path


def test_a_gltf_brings_its_folder_and_a_file_goes_alone(tmp_path: Path) -> None:
    (tmp_path / "scene").mkdir()
    for name in ("scene/s.gltf", "scene/s.bin", "scene/tex.png", "photo.png"):
        (tmp_path / name).write_bytes(b"x")
    client = _Recorder()
    assert _upload_input(client, tmp_path / "scene" / "s.gltf") == "u1/s.gltf"  # type: ignore[arg-type]
    assert _upload_input(client, tmp_path / "photo.png") == "u1/photo.png"  # type: ignore[arg-type]
    assert client.calls[0][0] == sorted((tmp_path / "scene").iterdir()) and client.calls[1] == ([tmp_path / "photo.png"], None)

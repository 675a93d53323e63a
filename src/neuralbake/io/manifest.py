"""The bake manifest: ``bake.json``, a sha256 and a size for every file a bake wrote.

Every bake folder ends with this file (the runner in :mod:`neuralbake.bakes.run` writes it last,
after the report). Readers of a bake's outputs call :func:`verify_bake_folder` before they trust
any byte: a file that changed, shrank or vanished since the bake is an error naming it, so a
flipped byte in a latent texture or a decoder is refused instead of rendering silently wrong. A
folder without ``bake.json`` (written before manifests existed) is read as before, relying on the
per-format checks of its own manifest.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

from neuralbake.errors import BundleError
from neuralbake.io.files import atomic_write_json, sha256_file
from neuralbake.io.limits import load_json_file

__all__ = ["BAKE_MANIFEST", "verify_bake_folder", "write_bake_manifest"]

BAKE_MANIFEST = "bake.json"
FORMAT = "neuralbake.bake"
VERSION = 1
_MAX_FILES = 10_000


def _listing(folder: Path) -> list[Path]:
    """Every regular file below ``folder`` (hidden runner state and the manifest itself excluded)."""
    files = []
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if relative.parts[0].startswith(".") or relative.as_posix() == BAKE_MANIFEST or not path.is_file() or path.is_symlink():
            continue
        files.append(path)
    return files


def write_bake_manifest(folder: str | Path, *, bake: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write ``folder/bake.json`` listing every file in ``folder`` with its size and sha256."""
    folder = Path(folder)
    files = {
        path.relative_to(folder).as_posix(): {"bytes": path.stat().st_size, "sha256": sha256_file(path)} for path in _listing(folder)
    }
    manifest = {"format": FORMAT, "version": VERSION, "bake": bake, "files": files, **(extra or {})}
    atomic_write_json(folder / BAKE_MANIFEST, manifest)
    return manifest


def _fail(path: Path, problem: str, fix: str, field: str | None = None) -> BundleError:
    return BundleError(problem, path=path, field=field, fix=fix)


def read_bake_manifest(folder: str | Path) -> dict[str, Any] | None:
    """The parsed, structure-checked ``bake.json`` of ``folder``; ``None`` if the folder has none."""
    path = Path(folder) / BAKE_MANIFEST
    if not path.exists():
        return None
    data = load_json_file(path, what="bake manifest")
    fix = "re-run the bake that wrote this folder."
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise _fail(path, "this is not a neuralbake bake manifest.", fix, "format")
    if data.get("version") != VERSION:
        raise _fail(path, f"bake manifest version {data.get('version')!r} is not supported (this neuralbake reads {VERSION}).", "use a matching neuralbake version, or re-run the bake.", "version")
    files = data.get("files")
    if not isinstance(files, dict) or len(files) > _MAX_FILES:
        raise _fail(path, "the manifest's file list is missing or malformed.", fix, "files")
    for name, entry in files.items():
        parts = PurePosixPath(name).parts if isinstance(name, str) else ()
        if (
            not parts or PurePosixPath(name).is_absolute() or ".." in parts or "\\" in name or ":" in name
            or parts[0].startswith(".") or name != PurePosixPath(name).as_posix()
        ):
            raise _fail(path, f"the manifest lists {name!r}, which is not a path inside the folder.", fix, "files")
        if not isinstance(entry, dict) or not isinstance(entry.get("bytes"), int) or not isinstance(entry.get("sha256"), str):
            raise _fail(path, f"the entry for {name!r} has no size or sha256.", fix, f"files.{name}")
    return data


_verified: dict[tuple[str, int, int], dict[str, Any]] = {}


def verify_bake_folder(folder: str | Path) -> dict[str, Any] | None:
    """Check every file ``bake.json`` lists against its size and sha256; return the manifest.

    Raises
    ------
    BundleError
        A listed file is missing, a symlink, of another size or another sha256 (names the file).
    """
    folder = Path(folder)
    manifest = read_bake_manifest(folder)
    if manifest is None:
        if (folder / ".neuralbake").is_dir():
            raise BundleError(
                "this folder holds a bake that never finished (it has the runner's .neuralbake/ but no bake.json).",
                path=folder,
                fix="finish it with the same command and --resume, or bake again.",
            )
        return None
    root = folder.resolve()
    stats = [(folder / name).stat() for name in [BAKE_MANIFEST, *manifest["files"]] if (folder / name).is_file()]
    key = (str(root), tuple(manifest["files"]), hash(tuple((s.st_size, s.st_mtime_ns, s.st_ino) for s in stats)))
    if key in _verified and len(stats) == len(manifest["files"]) + 1:
        return _verified[key]  # unchanged since this process checked it (one command reads a bundle several times)
    for name, entry in manifest["files"].items():
        path = folder / name
        fix = "the bake's outputs were changed after it finished; restore the file or re-run the bake."
        if path.is_symlink() or not path.is_file() or not path.resolve().is_relative_to(root):
            raise _fail(path, "a file the bake wrote is missing (or was replaced by a link).", fix, f"{BAKE_MANIFEST}: files.{name}")
        size = path.stat().st_size
        if size != entry["bytes"]:
            raise _fail(path, f"the file is {size:,} bytes but the bake wrote {entry['bytes']:,}.", fix, f"{BAKE_MANIFEST}: files.{name}")
        if sha256_file(path) != entry["sha256"]:
            raise _fail(path, "the file's sha256 does not match the bake manifest: its bytes changed after the bake.", fix, f"{BAKE_MANIFEST}: files.{name}")
    if len(_verified) >= 256:  # a long-running service reads many folders: keep the cache small
        _verified.clear()
    _verified[key] = manifest
    return manifest

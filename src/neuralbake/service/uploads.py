"""Content-addressed uploads: the files a job reads, stored once, never changed, never escaped.

An upload is a set of files sent together (a glTF with its ``.bin`` and textures, a texture set, a
material with its images), or one ``.zip`` that is unpacked here. Its id is the sha256 of its
sorted ``(name, sha256 of the file)`` list, so the same files give the same id and are stored
once, under ``DATA/uploads/<id>/``. Every name must be a plain relative path (no ``..``, no
absolute path, no backslash, no NUL, no symlink, at most 255 characters a component); sizes and
file counts are capped while the bytes stream in (a zip is checked by its members' declared and
actual sizes, so a zip bomb stops at the cap); an upload is assembled in a temporary folder and
moved into place whole. Jobs name their inputs as ``<id>/<name>``; :meth:`UploadStore.resolve`
turns that into a path inside the upload or refuses it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import uuid
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from neuralbake.errors import InputError

__all__ = ["UploadError", "UploadRecord", "UploadStore", "check_name"]

MAX_FILES = 512
INDEX = ".files.json"
"""The file beside an upload's files that lists them (names, sizes, sha256)."""
_BLOCK = 1 << 20


class UploadError(InputError):
    """An upload was refused; ``status`` is the HTTP status that says why."""

    def __init__(self, problem: str, *, status: int = 422, field: str | None = "files", fix: str | None = None) -> None:
        super().__init__(problem, field=field, fix=fix)
        self.status = status


@dataclass(frozen=True)
class UploadRecord:
    """A stored upload: its id and its files (name -> bytes, sha256)."""

    id: str
    files: dict[str, dict[str, int | str]]


def check_name(name: str) -> str:
    """Return ``name`` as a clean relative POSIX path, or raise UploadError naming the problem."""
    fix = "send plain relative file names such as textures/albedo.png."
    if not name or len(name) > 1024 or "\x00" in name or "\\" in name:
        raise UploadError(f"{name[:80]!r} is not a usable file name.", fix=fix)
    path = PurePosixPath(name)
    if path.is_absolute() or any(part in ("", ".", "..") for part in name.split("/")) or any(len(part) > 255 for part in path.parts):
        raise UploadError(f"{name[:80]!r} is not a plain relative file name (no absolute paths, no . or ..).", fix=fix)
    return path.as_posix()


class _Names:
    """The names of one upload so far: each once, and no name both a file and a folder (``a`` and ``a/b.png``)."""

    def __init__(self) -> None:
        self.files: set[str] = set()
        self.folders: set[str] = set()
        self.last = ""

    def __len__(self) -> int:
        return len(self.files)

    def add(self, name: str) -> None:
        parents = {"/".join(name.split("/")[:i]) for i in range(1, name.count("/") + 1)}
        if name == INDEX:
            raise UploadError(f"{INDEX!r} is the name the service keeps an upload's index under.", fix="rename that file.")
        if name in self.files:
            raise UploadError(f"{name[:80]!r} is sent twice.", fix="send each file once.")
        clash = name if name in self.folders else next((p for p in sorted(parents) if p in self.files), None)
        if clash is not None:
            raise UploadError(f"{clash[:80]!r} is both a file and a folder in this upload.", fix="rename one of them.")
        self.files.add(name)
        self.folders |= parents
        self.last = name


class UploadStore:
    """Uploads under ``root`` (see the module docstring)."""

    def __init__(self, root: str | Path, *, max_bytes: int) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.root.mkdir(parents=True, exist_ok=True)

    def add(self, files: Iterable[tuple[str, BinaryIO]]) -> UploadRecord:
        """Store the files (or unpack a single ``.zip``); return the upload (deduplicated). A refused
        upload leaves nothing behind."""
        incoming = self.root / ".incoming" / uuid.uuid4().hex
        unpacked = incoming.with_name(incoming.name + ".unzipped")
        incoming.mkdir(parents=True)
        try:
            budget = [self.max_bytes]
            names = _Names()
            for name, stream in files:
                names.add(check_name(name))
                if len(names) > MAX_FILES:
                    raise UploadError(f"more than {MAX_FILES} files in one upload.", status=413, fix="send fewer files, or a zip.")
                self._write(incoming / names.last, stream, budget)
            if not len(names):
                raise UploadError("the upload holds no files.", fix="send one or more files as multipart form field 'files'.")
            if len(names) == 1 and names.last.lower().endswith(".zip"):
                unpacked.mkdir()
                self._unzip(incoming / names.last, unpacked)
                return self._commit(unpacked)
            return self._commit(incoming)
        finally:
            shutil.rmtree(incoming, ignore_errors=True)
            shutil.rmtree(unpacked, ignore_errors=True)

    def _write(self, target: Path, stream: BinaryIO, budget: list[int]) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "xb") as handle:
            while block := stream.read(_BLOCK):
                budget[0] -= len(block)
                if budget[0] < 0:
                    raise UploadError(f"the upload is larger than {self.max_bytes:,} bytes.", status=413, fix="send smaller files, or raise the server's --max-upload.")
                handle.write(block)

    def _unzip(self, archive: Path, target: Path) -> None:
        try:
            with zipfile.ZipFile(archive) as zipped:
                members = [m for m in zipped.infolist() if not m.is_dir()]
                if len(members) > MAX_FILES:
                    raise UploadError(f"the zip holds more than {MAX_FILES} files.", status=413, fix="send fewer files.")
                budget = [self.max_bytes]
                names = _Names()
                for member in members:
                    if stat.S_ISLNK(member.external_attr >> 16):
                        raise UploadError(f"the zip holds a symlink ({member.filename[:80]!r}).", fix="zip the files themselves, not links.")
                    name = check_name(member.filename)
                    names.add(name)
                    if member.file_size > budget[0]:
                        raise UploadError(f"the zip unpacks to more than {self.max_bytes:,} bytes.", status=413, fix="send a smaller set.")
                    with zipped.open(member) as stream:
                        self._write(target / name, stream, budget)  # counts real bytes, not the declared size
        except zipfile.BadZipFile as exc:
            raise UploadError(f"the .zip cannot be read ({exc}).", fix="send a valid zip file.") from exc

    def _commit(self, folder: Path) -> UploadRecord:
        files = {}
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            digest = hashlib.sha256()
            with open(path, "rb") as handle:
                for block in iter(lambda h=handle: h.read(_BLOCK), b""):
                    digest.update(block)
            files[path.relative_to(folder).as_posix()] = {"bytes": path.stat().st_size, "sha256": digest.hexdigest()}
        upload_id = hashlib.sha256(json.dumps(sorted((n, f["sha256"]) for n, f in files.items())).encode()).hexdigest()
        final = self.root / upload_id
        if not final.exists():
            (folder / INDEX).write_text(json.dumps(files))
            try:
                os.replace(folder, final)
            except OSError:
                if not final.exists():  # a concurrent identical upload won the race: same bytes, keep theirs
                    raise
        return UploadRecord(upload_id, files)

    def get(self, upload_id: str) -> UploadRecord | None:
        """A stored upload, or None."""
        if len(upload_id) != 64 or not all(c in "0123456789abcdef" for c in upload_id):
            return None
        index = self.root / upload_id / INDEX
        return UploadRecord(upload_id, json.loads(index.read_text())) if index.is_file() else None

    def resolve(self, ref: str, *, field: str, folders: bool = False) -> Path:
        """``<upload id>/<name>`` -> the file's path inside that upload, or an error naming ``field``.
        With ``folders``, ``name`` may also be a folder of the upload (a job that reads a frame sequence)."""
        upload_id, _, name = ref.partition("/")
        upload = self.get(upload_id)
        if upload is None:
            raise UploadError(f"there is no upload {upload_id[:80]!r}.", field=f"config.{field}", fix="upload the files first; refer to them as <upload id>/<file name>.")
        try:
            name = check_name(name.rstrip("/")) if name.rstrip("/") else ""
        except UploadError as exc:
            raise UploadError(exc.problem, field=f"config.{field}", fix=exc.fix) from exc
        if folders and name and name not in upload.files and any(f.startswith(name + "/") for f in upload.files):
            folder = (self.root / upload_id / name).resolve()
            if not folder.is_relative_to((self.root / upload_id).resolve()) or not folder.is_dir():
                raise UploadError(f"{ref[:80]!r} does not resolve inside its upload.", field=f"config.{field}")
            return folder
        if name not in upload.files:
            raise UploadError(f"upload {upload_id[:12]}... has no file {name!r}.", field=f"config.{field}", fix=f"use one of: {', '.join(list(upload.files)[:10])}.")
        path = (self.root / upload_id / name).resolve()
        if not path.is_relative_to((self.root / upload_id).resolve()) or not path.is_file():
            raise UploadError(f"{ref[:80]!r} does not resolve inside its upload.", field=f"config.{field}")
        return path

"""A job's files: every path field of its config confined to its caller's uploads, at any depth.

The config types declare which fields name files (:mod:`neuralbake.core.paths`); this module is
the service's one rule for them. In a request, such a field holds a *reference*, never a path of
the server:

- ``<upload id>/<name>``: a file of an upload that the caller's token made (for a field that may
  name a folder, a folder of it too);
- ``job:<job id>/<name>``: a file that a finished job of the caller's wrote (its ``bake.json``
  lists it); at submission the job's outputs are copied into an upload of the caller's, so the new
  job reads a fixed copy and its stored config holds an upload reference like any other;
- for the model-library fields of postfx jobs, a name relative to the server's ``--models``.

Anything else is refused with an error naming the field: an absolute path, a ``..``, a path into
the data folder, an upload or job of another token (refused as not existing, so ids cannot be
probed). The stored config keeps the references; a worker turns them into paths
(:func:`resolve_paths`) when it runs the job, checking again that each stays inside its upload.
:class:`Redactor` turns the server's own paths back into references in what a client reads.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from neuralbake.core.paths import PathField, map_paths
from neuralbake.errors import ConfigError
from neuralbake.service.uploads import UploadError, UploadStore, check_name

__all__ = ["JOB_REFERENCE", "Redactor", "confine_paths", "library_path", "resolve_paths"]

JOB_REFERENCE = re.compile(r"job:([0-9a-f]{32})/(.+)", re.S)
"""``job:<job id>/<name>``: a file a finished job wrote."""
_UPLOAD_REFERENCE = re.compile(r"[0-9a-f]{64}/.+", re.S)


def _refuse(field: str, value: str, why: str, fix: str) -> ConfigError:
    return ConfigError(f"{value[:80]!r} {why}", field=f"config.{field}", fix=fix)


def library_path(models: Path | None, name: str, field: str, *, folder: bool) -> Path:
    """A model library entry (a path relative to ``--models``) as its path, never outside the library."""
    if models is None:
        raise ConfigError("this service has no model library, so it runs no postfx jobs.", field=f"config.{field}",
                          fix="start it with `neuralbake serve --models DIR` (diffusion models, ControlNets and LoRAs under DIR).")
    if not name or name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name) or "\x00" in name:
        raise _refuse(field, name, "is not a name in the model library.", "name it by its path relative to the library, e.g. sd15/base.")
    root = models.resolve()
    path = (root / name).resolve()
    if not path.is_relative_to(root):
        raise _refuse(field, name, "points outside the model library.", "name an entry under the library, without '..'.")
    if not (path.is_dir() if folder else path.is_file()):
        listing = sorted(p.name for p in root.iterdir())[:10] if root.is_dir() else []
        raise ConfigError(f"the model library has no {'folder' if folder else 'file'} {name[:80]!r}.", field=f"config.{field}",
                          fix=f"use one of the library's entries ({', '.join(listing)}), or put it there.")
    return path


def confine_paths(
    config_type: type,
    config: dict[str, Any],
    *,
    uploads: UploadStore,
    may_use: Callable[[str], bool],
    job_outputs: Callable[[str, str], str],
    models: Path | None,
) -> dict[str, Any]:
    """``config`` (a request's) with every path field checked and made canonical (see the module docstring).

    ``may_use(upload_id)``: whether the caller may read that upload; ``job_outputs(job_id, field)``:
    the id of an upload of the caller's holding that job's outputs (raising as for a missing job).
    """

    def confine(field: str, value: str, marker: PathField) -> str:
        if marker.library:
            library_path(models, value, field, folder=marker.folder)
            return value
        job = JOB_REFERENCE.fullmatch(value)
        if job is not None:
            name = _clean_name(job.group(2), field, value)
            upload_id = job_outputs(job.group(1), field)
            value = f"{upload_id}/{name}"
        elif not _UPLOAD_REFERENCE.fullmatch(value):
            raise _refuse(field, value, "is not a reference to an upload.",
                          "upload the file first (POST /api/uploads) and name it as <upload id>/<file name>, or job:<job id>/<file> for a finished job's output.")
        upload_id, _, name = value.partition("/")
        if not may_use(upload_id):
            raise UploadError(f"there is no upload {upload_id[:12]}....", field=f"config.{field}",
                              fix="upload the files first with this token; refer to them as <upload id>/<file name>.")
        path = uploads.resolve(value, field=field, folders=marker.folder)
        # Canonical: the name as the upload records it (no trailing slash, no doubled separators).
        return f"{upload_id}/{path.relative_to((uploads.root / upload_id).resolve()).as_posix()}"

    return map_paths(config_type, config, confine)


def _clean_name(name: str, field: str, value: str) -> str:
    try:
        return check_name(name)
    except UploadError as exc:
        raise _refuse(field, value, "does not name a file of the job.", "name a file its bake.json lists.") from exc


def resolve_paths(config_type: type, config: dict[str, Any], *, uploads: UploadStore, models: Path | None) -> dict[str, Any]:
    """A stored config's references -> the paths a bake reads (each checked to stay inside its upload or the library)."""

    def resolve(field: str, value: str, marker: PathField) -> str:
        if marker.library:
            return str(library_path(models, value, field, folder=marker.folder))
        if not _UPLOAD_REFERENCE.fullmatch(value):
            raise _refuse(field, value, "is not an upload reference (a job stored before this server's version, or edited by hand).",
                          "submit the job again.")
        return str(uploads.resolve(value, field=field, folders=marker.folder))

    return map_paths(config_type, config, resolve)


class Redactor:
    """Turns the server's own paths into what a client may see: an upload's files as their
    references, a job's folder as ``job:<id>``, the model library's entries by name, anything
    else under the data folder as ``<data>`` (and the library as ``<models>``).

    Only absolute paths are recognised (the data folder as given, made absolute, and as resolved),
    each ending at a path boundary, so a relative ``--data`` or a folder whose name begins like the
    data folder's is never mistaken for it.
    """

    def __init__(self, data: Path, models: Path | None = None) -> None:
        rules: dict[str, str] = {}
        for root in {str(Path(data).absolute()), str(Path(data).resolve())}:
            rules |= {f"{root}/uploads/": "", f"{root}/jobs/": "job:", root: "<data>"}
        if models is not None:
            for root in {str(Path(models).absolute()), str(Path(models).resolve())}:
                rules |= {f"{root}/": "", root: "<models>"}
        # The longest prefix first (uploads before the data folder itself); a prefix without a
        # trailing slash must end where a path component ends.
        prefixes = sorted(rules, key=len, reverse=True)
        self._pattern = re.compile("|".join(re.escape(p) + ("" if p.endswith("/") else r"(?![^/\s'\",;:)\]}])") for p in prefixes))
        self._replace = rules
        self._job_out = re.compile(r"job:([0-9a-f]{32})/out(?:/|\b)")

    def text(self, value: str) -> str:
        """``value`` with every server path replaced."""
        value = self._pattern.sub(lambda match: self._replace[match.group(0)], value)
        return self._job_out.sub(lambda match: f"job:{match.group(1)}/", value)

    def __call__(self, value: Any) -> Any:
        """Strings anywhere inside ``value`` (dicts, lists) redacted; other values as they are."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {key: self(inner) for key, inner in value.items()}
        if isinstance(value, list | tuple):
            return [self(inner) for inner in value]
        return value

"""``ServiceClient``: upload, submit, watch and fetch bakes on a neuralbake service.

It speaks HTTP through Python's own ``urllib`` and needs nothing outside the standard library and
:mod:`neuralbake.errors`, so the Blender add-on (whose Python has no neuralbake install, and no httpx)
carries a copy of this package inside its zip and talks to the service the same way the CLI does.

Events come from the server-sent event stream; a dropped connection is resumed with the last event
number seen (``Last-Event-ID``), so a watcher receives every event exactly once. ``fetch`` downloads
a finished job's files and checks each against the job's ``bake.json`` (size and sha256) before
it is moved into place. Uploads stream their files (a multipart body of known length), so a large
asset is never held in memory whole.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import io
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from neuralbake.errors import NeuralbakeError

__all__ = ["ServiceClient", "ServiceError"]

_CHUNK = 1 << 20


class ServiceError(NeuralbakeError):
    """The service refused a request (its message, field and fix) or could not be reached."""

    def __init__(self, problem: str, *, status: int | None = None, field: str | None = None, fix: str | None = None) -> None:
        super().__init__(problem, field=field, fix=fix)
        self.status = status


def _refusal(exc: urllib.error.HTTPError) -> ServiceError:
    """The service's own problem (message, field, fix) from an error response."""
    try:
        text = exc.read().decode("utf-8", errors="replace")
    except (OSError, http.client.HTTPException):
        text = ""
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {"error": text[:300]}
    return ServiceError(body.get("error") or f"HTTP {exc.code}", status=exc.code, field=body.get("field"), fix=body.get("fix"))


class _Multipart:
    """A ``multipart/form-data`` body of files under one field, read in chunks as urllib sends it."""

    def __init__(self, field: str, files: list[tuple[str, Path]]) -> None:
        self.boundary = uuid.uuid4().hex
        self.parts: list[bytes | Path] = []
        for name, path in files:
            quoted = name.replace("\\", "\\\\").replace('"', '\\"')
            self.parts.append((f'--{self.boundary}\r\nContent-Disposition: form-data; name="{field}"; filename="{quoted}"\r\n'
                               "Content-Type: application/octet-stream\r\n\r\n").encode())
            self.parts.append(path)
            self.parts.append(b"\r\n")
        self.parts.append(f"--{self.boundary}--\r\n".encode())
        self.length = sum(len(p) if isinstance(p, bytes) else p.stat().st_size for p in self.parts)

    def __iter__(self) -> Iterator[bytes]:
        for part in self.parts:
            if isinstance(part, bytes):
                yield part
                continue
            with open(part, "rb") as handle:
                while chunk := handle.read(_CHUNK):
                    yield chunk


class ServiceClient:
    """A client of one service (``url`` like ``http://127.0.0.1:8642``; ``token`` or $NEURALBAKE_TOKEN)."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 60.0) -> None:
        token = token if token is not None else os.environ.get("NEURALBAKE_TOKEN", "")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self.timeout = timeout

    def close(self) -> None:
        """Nothing to release: each request opens its own connection (kept for callers that close a client)."""

    def _open(self, method: str, path: str, *, params: dict[str, Any] | None = None, json_body: Any = None, body: Any = None,
              headers: dict[str, str] | None = None, timeout: float | None = -1.0) -> Any:
        """Send a request; return the open response, or raise :class:`ServiceError` with the service's message."""
        url = self.url + path + (f"?{urllib.parse.urlencode(params)}" if params else "")
        sent = {**self.headers, **(headers or {})}
        if json_body is not None:
            body = json.dumps(json_body).encode("utf-8")
            sent["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=body, method=method, headers=sent)
        try:
            return urllib.request.urlopen(request, timeout=self.timeout if timeout == -1.0 else timeout)
        except urllib.error.HTTPError as exc:
            raise _refusal(exc) from None
        except (OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", exc)
            raise ServiceError(f"the service at {self.url} cannot be reached ({reason}).", fix="check --server and that `neuralbake serve` runs.") from exc

    def _call(self, method: str, path: str, **kwargs: Any) -> bytes:
        """A whole response body."""
        with self._open(method, path, **kwargs) as response:
            try:
                return response.read()
            except (OSError, http.client.HTTPException) as exc:
                raise ServiceError(f"the service at {self.url} dropped the connection ({exc}).", fix="try again.") from exc

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return json.loads(self._call(method, path, **kwargs))

    def upload(self, paths: list[str | Path], *, base: str | Path | None = None) -> dict[str, Any]:
        """Upload files together, named by their path relative to ``base`` (default: their common folder);
        returns ``{"id", "files"}``. A job names a file of it ``<id>/<name>``, or a folder ``<id>/<folder>``."""
        paths = [Path(p) for p in paths]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise ServiceError(f"no such file: {missing[0]}.", field="files", fix="check the paths.")
        base = Path(base).resolve() if base is not None else Path(os.path.commonpath([p.resolve().parent for p in paths]))
        outside = [str(p) for p in paths if not p.resolve().is_relative_to(base)]
        if outside:
            raise ServiceError(f"{outside[0]} is not inside {base}.", field="files", fix="pass a base folder that holds every file.")
        form = _Multipart("files", [(p.resolve().relative_to(base).as_posix(), p) for p in paths])
        headers = {"Content-Type": f"multipart/form-data; boundary={form.boundary}", "Content-Length": str(form.length)}
        return self._json("POST", "/api/uploads", body=iter(form), headers=headers)

    def submit(self, kind: str, config: dict[str, Any] | None = None, inputs: dict[str, Any] | None = None) -> dict[str, Any]:
        """Queue a bake; returns the job."""
        return self._json("POST", "/api/jobs", json_body={"kind": kind, "config": config or {}, "inputs": inputs or {}})

    def jobs(self, status: str | None = None) -> list[dict[str, Any]]:
        """Jobs, newest first."""
        return self._json("GET", "/api/jobs", params={"status": status} if status else None)

    def job(self, job_id: str) -> dict[str, Any]:
        """One job."""
        return self._json("GET", f"/api/jobs/{job_id}")

    def cancel(self, job_id: str) -> dict[str, Any]:
        """Cancel a job (a running one stops at its next step)."""
        return self._json("POST", f"/api/jobs/{job_id}/cancel")

    def retry(self, job_id: str) -> dict[str, Any]:
        """Queue a failed or cancelled job again."""
        return self._json("POST", f"/api/jobs/{job_id}/retry")

    def events(self, job_id: str, *, after: int = 0, reconnects: int = 20) -> Iterator[dict[str, Any]]:
        """The job's events (``{"seq", "type", "data"}``) until its final one; reconnects resume."""
        seq, tries = after, 0
        while True:
            try:
                # no read timeout: a long training step sends nothing for a while
                with self._open("GET", f"/api/jobs/{job_id}/events", headers={"Last-Event-ID": str(seq), "Accept": "text/event-stream"},
                                timeout=None) as response:
                    current: dict[str, Any] = {}
                    for raw in response:
                        line = raw.decode("utf-8").rstrip("\r\n")
                        if line.startswith("id:"):
                            current["seq"] = int(line[3:].strip())
                        elif line.startswith("event:"):
                            current["type"] = line[6:].strip()
                        elif line.startswith("data:"):
                            current["data"] = json.loads(line[5:].strip() or "{}")
                        elif not line and "seq" in current:
                            seq = current["seq"]
                            yield current
                            if current["type"] in ("succeeded", "failed", "cancelled"):
                                return
                            current = {}
            except ServiceError as exc:
                if exc.status is not None:  # the service answered: no such job, not allowed...
                    raise
                tries += 1
            except (OSError, http.client.HTTPException):
                tries += 1
            if tries > reconnects:
                raise ServiceError(f"lost the event stream of job {job_id} {reconnects} times.", fix="check the service.") from None
            time.sleep(min(2.0, 0.2 * max(tries, 1)))

    def wait(self, job_id: str) -> dict[str, Any]:
        """Block until the job ends; return it."""
        for _ in self.events(job_id):
            pass
        return self.job(job_id)

    def fetch(self, job_id: str, dest: str | Path) -> list[Path]:
        """Download a finished job's files into ``dest``, each checked against its bake.json."""
        dest = Path(dest)
        files = self._json("GET", f"/api/jobs/{job_id}/files")["files"]
        written = []
        for name, entry in [*files.items(), ("bake.json", None)]:
            target = dest / name
            if not target.resolve().is_relative_to(dest.resolve()):
                raise ServiceError(f"the service listed a file outside the folder ({name!r}).", field="files")
            target.parent.mkdir(parents=True, exist_ok=True)
            data = self.file(job_id, name)
            if entry is not None and (len(data) != entry["bytes"] or hashlib.sha256(data).hexdigest() != entry["sha256"]):
                raise ServiceError(f"{name} arrived damaged (size or sha256 differs from the job's bake.json).", field=name, fix="fetch again.")
            partial = target.with_name(f".{target.name}.partial")
            partial.write_bytes(data)
            os.replace(partial, target)
            written.append(target)
        return written

    def file(self, job_id: str, name: str) -> bytes:
        """One output file of a finished job (``report.json``, ``lod.gltf``...)."""
        return self._call("GET", f"/api/jobs/{job_id}/files/{urllib.parse.quote(name)}")

    def preview(self, job_id: str, file: str) -> bytes:
        """A live picture (PNG bytes) that a ``preview`` or ``paint_view`` event names."""
        return self._call("GET", f"/api/jobs/{job_id}/previews/{urllib.parse.quote(file)}")

    def paint(self, job_id: str, strokes: Any, *, view: int = 0, mode: str = "paint", config: dict[str, Any] | None = None) -> dict[str, Any]:
        """Paint weights on a fit's paintable ``view`` and start the warm-started refit (see
        :mod:`neuralbake.service.paint`). ``strokes`` is PNG bytes or an ``[h, w]`` array of
        stroke strengths in [0, 1] over the view's picture; returns the new job and what was painted."""
        if not isinstance(strokes, bytes | bytearray):
            import numpy as np  # only for an array of strokes: the client itself needs no numpy (Blender's copy of it)
            from PIL import Image

            buffer = io.BytesIO()
            Image.fromarray(np.round(np.clip(np.asarray(strokes, np.float32), 0, 1) * 255).astype(np.uint8), mode="L").save(buffer, format="PNG")
            strokes = buffer.getvalue()
        body: dict[str, Any] = {"view": view, "mode": mode, "strokes": base64.b64encode(bytes(strokes)).decode()}
        if config:
            body["config"] = config
        return self._json("POST", f"/api/jobs/{job_id}/paint", json_body=body)

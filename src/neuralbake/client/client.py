"""``ServiceClient``: upload, submit, watch and fetch bakes on a neuralbake service, over httpx.

Events come from the server-sent event stream; a dropped connection is resumed with the last event
number seen (``Last-Event-ID``), so a watcher receives every event exactly once. ``fetch`` downloads
a finished job's files and checks each against the job's ``bake.json`` (size and sha256) before
it is moved into place.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from neuralbake.errors import NeuralbakeError

__all__ = ["ServiceClient", "ServiceError"]


class ServiceError(NeuralbakeError):
    """The service refused a request (its message, field and fix) or could not be reached."""

    def __init__(self, problem: str, *, status: int | None = None, field: str | None = None, fix: str | None = None) -> None:
        super().__init__(problem, field=field, fix=fix)
        self.status = status


class ServiceClient:
    """A client of one service (``url`` like ``http://127.0.0.1:8642``; ``token`` or $NEURALBAKE_TOKEN)."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 60.0) -> None:
        token = token if token is not None else os.environ.get("NEURALBAKE_TOKEN", "")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def close(self) -> None:
        """Close the connection pool."""
        self.http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ServiceError(f"the service at {self.url} cannot be reached ({exc}).", fix="check --server and that `neuralbake serve` runs.") from exc
        if response.status_code >= 400:
            try:
                body = response.json()
            except ValueError:
                body = {"error": response.text[:300]}
            raise ServiceError(body.get("error") or f"HTTP {response.status_code}", status=response.status_code, field=body.get("field"), fix=body.get("fix"))
        return response

    def upload(self, paths: list[str | Path], *, base: str | Path | None = None) -> dict[str, Any]:
        """Upload files together, named relative to ``base`` (default: their common folder); returns ``{"id", "files"}``."""
        paths = [Path(p) for p in paths]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise ServiceError(f"no such file: {missing[0]}.", field="files", fix="check the paths.")
        base = Path(base).resolve() if base is not None else Path(os.path.commonpath([p.resolve().parent for p in paths]))
        handles = [(p.resolve().relative_to(base).as_posix(), open(p, "rb")) for p in paths]
        try:
            return self._call("POST", "/api/uploads", files=[("files", (name, handle)) for name, handle in handles]).json()
        finally:
            for _, handle in handles:
                handle.close()

    def submit(self, kind: str, config: dict[str, Any] | None = None, inputs: dict[str, Any] | None = None) -> dict[str, Any]:
        """Queue a bake; returns the job."""
        return self._call("POST", "/api/jobs", json={"kind": kind, "config": config or {}, "inputs": inputs or {}}).json()

    def jobs(self, status: str | None = None) -> list[dict[str, Any]]:
        """Jobs, newest first."""
        return self._call("GET", "/api/jobs", params={"status": status} if status else None).json()

    def job(self, job_id: str) -> dict[str, Any]:
        """One job."""
        return self._call("GET", f"/api/jobs/{job_id}").json()

    def cancel(self, job_id: str) -> dict[str, Any]:
        """Cancel a job (a running one stops at its next step)."""
        return self._call("POST", f"/api/jobs/{job_id}/cancel").json()

    def retry(self, job_id: str) -> dict[str, Any]:
        """Queue a failed or cancelled job again."""
        return self._call("POST", f"/api/jobs/{job_id}/retry").json()

    def events(self, job_id: str, *, after: int = 0, reconnects: int = 20) -> Iterator[dict[str, Any]]:
        """The job's events (``{"seq", "type", "data"}``) until its final one; reconnects resume."""
        seq, tries = after, 0
        while True:
            try:
                with self.http.stream("GET", f"/api/jobs/{job_id}/events", headers={"Last-Event-ID": str(seq)}, timeout=None) as response:
                    if response.status_code >= 400:
                        self._call("GET", f"/api/jobs/{job_id}")  # raises the service's message
                    current: dict[str, Any] = {}
                    for line in response.iter_lines():
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
            except httpx.HTTPError:
                tries += 1
                if tries > reconnects:
                    raise ServiceError(f"lost the event stream of job {job_id} {reconnects} times.", fix="check the service.") from None
                time.sleep(min(2.0, 0.2 * tries))

    def wait(self, job_id: str) -> dict[str, Any]:
        """Block until the job ends; return it."""
        for _ in self.events(job_id):
            pass
        return self.job(job_id)

    def fetch(self, job_id: str, dest: str | Path) -> list[Path]:
        """Download a finished job's files into ``dest``, each checked against its bake.json."""
        dest = Path(dest)
        files = self._call("GET", f"/api/jobs/{job_id}/files").json()["files"]
        written = []
        for name, entry in [*files.items(), ("bake.json", None)]:
            target = dest / name
            if not target.resolve().is_relative_to(dest.resolve()):
                raise ServiceError(f"the service listed a file outside the folder ({name!r}).", field="files")
            target.parent.mkdir(parents=True, exist_ok=True)
            data = self._call("GET", f"/api/jobs/{job_id}/files/{name}").content
            if entry is not None and (len(data) != entry["bytes"] or hashlib.sha256(data).hexdigest() != entry["sha256"]):
                raise ServiceError(f"{name} arrived damaged (size or sha256 differs from the job's bake.json).", field=name, fix="fetch again.")
            partial = target.with_name(f".{target.name}.partial")
            partial.write_bytes(data)
            os.replace(partial, target)
            written.append(target)
        return written

    def file(self, job_id: str, name: str) -> bytes:
        """One output file of a finished job (``report.json``, ``lod.gltf``...)."""
        return self._call("GET", f"/api/jobs/{job_id}/files/{name}").content

    def preview(self, job_id: str, file: str) -> bytes:
        """A live picture (PNG bytes) that a ``preview`` or ``paint_view`` event names."""
        return self._call("GET", f"/api/jobs/{job_id}/previews/{file}").content

    def paint(self, job_id: str, strokes: Any, *, view: int = 0, mode: str = "paint", config: dict[str, Any] | None = None) -> dict[str, Any]:
        """Paint weights on a fit's paintable ``view`` and start the warm-started refit (see
        :mod:`neuralbake.service.paint`). ``strokes`` is PNG bytes or an ``[h, w]`` array of
        stroke strengths in [0, 1] over the view's picture; returns the new job and what was painted."""
        import base64
        import io

        if not isinstance(strokes, bytes | bytearray):
            import numpy as np
            from PIL import Image

            buffer = io.BytesIO()
            Image.fromarray(np.round(np.clip(np.asarray(strokes, np.float32), 0, 1) * 255).astype(np.uint8), mode="L").save(buffer, format="PNG")
            strokes = buffer.getvalue()
        body: dict[str, Any] = {"view": view, "mode": mode, "strokes": base64.b64encode(bytes(strokes)).decode()}
        if config:
            body["config"] = config
        return self._call("POST", f"/api/jobs/{job_id}/paint", json=body).json()


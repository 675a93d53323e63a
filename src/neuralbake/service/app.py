"""The service's HTTP API (FastAPI): uploads, jobs, live events, downloads, behind API tokens.

``create_app(settings)`` builds the app; ``neuralbake serve`` runs it with uvicorn beside the
worker processes. Every route is under ``/api`` and speaks JSON; errors are
``{"error": ..., "field": ..., "fix": ...}`` with a 4xx status (a bug answers 500 with no detail;
its traceback goes to the server's log). What a token may do (:mod:`neuralbake.service.jobs`): a
job, its events, files, previews and paint belong to the token that submitted it, an upload to
each token that sent its bytes; other tokens get 404, as for an id that does not exist; an admin
token (``token create --admin``) sees all. A job is submitted as ``{"kind": "texture", "config":
{...}, "inputs": {"image": "<upload id>/<name>"}}``: every config field that names a file, at any
depth, holds a reference to one of the caller's uploads (``inputs`` is another place to put them),
never a path of the server (:mod:`neuralbake.service.paths`); the config is parsed by the bake's
own config dataclass (the CLI's error text), and its footprint is checked against what a worker
can hold before it is queued. Requests are bounded before they are read whole: the body's size
while it streams (chunked bodies included), JSON nesting before it is parsed, ``Last-Event-ID``
to an int64. Job events stream as server-sent events numbered by the store's gap-free per-job
sequence, so a client that reconnects with ``Last-Event-ID`` receives every later event exactly
once. Downloads serve only the files a finished job's ``bake.json`` lists, after checking them
against it. Live pictures that a running bake publishes (``preview`` events) are served from
``/api/jobs/<id>/previews/<file>``; ``POST /api/jobs/<id>/paint`` turns an artist's strokes on a
fit's view into new weights and a warm-started refit (:mod:`neuralbake.service.paint`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import typing
from dataclasses import fields as dataclass_fields
from dataclasses import is_dataclass
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from sse_starlette.sse import EventSourceResponse
from starlette.datastructures import UploadFile

from neuralbake.bakes.registry import service_kinds
from neuralbake.core.config import field_docs
from neuralbake.core.paths import path_fields
from neuralbake.errors import InputError, NeuralbakeError
from neuralbake.io.limits import parse_json_text
from neuralbake.io.manifest import verify_bake_folder
from neuralbake.service.jobs import Caller, JobConfigs
from neuralbake.service.paint import parse_paint_request, refit_with_strokes
from neuralbake.service.paths import Redactor
from neuralbake.service.settings import ServiceSettings
from neuralbake.service.store import TERMINAL_STATES, JobStateError, Store
from neuralbake.service.uploads import UploadStore
from neuralbake.service.worker import bake_of, job_folder

__all__ = ["create_app", "hash_token"]

PREVIEW_FILE = re.compile(r"[A-Za-z0-9_-]{1,64}\.[0-9]{6}\.png")
"""A live preview's file name, as the runner writes it (``<name>.<number>.png``)."""
EVENT_ID = re.compile(r"[0-9]{1,19}")
"""A ``Last-Event-ID``: ASCII digits only (``str.isdigit`` also takes ``²``), within int64."""
_INT64 = 2**63

log = logging.getLogger("neuralbake.service")


def hash_token(token: str) -> str:
    """The sha256 a token is stored as."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class _HttpError(Exception):
    def __init__(self, status: int, problem: str, field: str | None = None, fix: str | None = None) -> None:
        super().__init__(problem)
        self.status, self.problem, self.field, self.fix = status, problem, field, fix


class _BodyTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit


def _error(status: int, problem: str, field: str | None = None, fix: str | None = None) -> JSONResponse:
    return JSONResponse({"error": problem, "field": field, "fix": fix}, status_code=status)


def _too_large(limit: int) -> JSONResponse:
    return _error(413, f"the request body is larger than {limit:,} bytes.", "body", "send less, or raise the server's limit.")


class _BodyLimit:
    """ASGI middleware: a request body may not exceed its route's limit, announced or not.

    ``Content-Length`` is checked first; the bytes are counted as they arrive too, so a chunked
    body (no length) or a lying length stops at the limit instead of being read whole.
    """

    def __init__(self, app: Any, limit: typing.Callable[[str], int]) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit(scope.get("path", ""))
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not re.fullmatch(rb"[0-9]{1,19}", length) or int(length) > limit):
            await _too_large(limit)(scope, receive, send)
            return
        received, started = 0, False

        async def counted() -> dict[str, Any]:
            nonlocal received
            message = await receive()
            if message.get("type") == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _BodyTooLarge(limit)
            return message

        async def watched(message: dict[str, Any]) -> None:
            nonlocal started
            started = started or message.get("type") == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except _BodyTooLarge:
            if not started:
                await _too_large(limit)(scope, receive, send)


async def _json_body(request: Request) -> Any:
    """The request body as JSON, its nesting checked before it is parsed (as every JSON input's is)."""
    raw = await request.body()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _HttpError(400, f"the request body is not UTF-8 ({exc.reason}).", "body", "send UTF-8 JSON.") from exc
    try:
        return parse_json_text(text, source="the request body", what="request body", fix="send a JSON object.")
    except InputError as exc:
        raise _HttpError(400, exc.problem, "body", exc.fix) from exc


def create_app(settings: ServiceSettings, store: Store | None = None) -> FastAPI:
    """The FastAPI app over ``store`` (default: the settings' database, migrated)."""
    if store is None:
        store = Store(settings.database_url())
        store.migrate()
    uploads = UploadStore(settings.data / "uploads", max_bytes=settings.max_upload_bytes)
    configs = JobConfigs(store, uploads, settings)
    redact = Redactor(settings.data, settings.models)
    app = FastAPI(title="neuralbake asset service", version="1", summary="Submit bakes, watch them, download what they made.")
    app.state.store = store
    app.add_middleware(_BodyLimit, limit=lambda path: settings.max_upload_bytes + (1 << 20) if path == "/api/uploads" else settings.max_request_bytes)
    if settings.cors_origins:  # off unless origins are named: a browser page elsewhere gets no access
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST"], allow_headers=["Authorization", "Content-Type", "Last-Event-ID"])

    @app.exception_handler(_HttpError)
    async def _http_error(request: Request, exc: _HttpError) -> JSONResponse:
        return _error(exc.status, exc.problem, exc.field, exc.fix)

    @app.exception_handler(_BodyTooLarge)
    async def _body_too_large(request: Request, exc: _BodyTooLarge) -> JSONResponse:
        return _too_large(exc.limit)

    @app.exception_handler(NeuralbakeError)
    async def _neuralbake_error(request: Request, exc: NeuralbakeError) -> JSONResponse:
        status = getattr(exc, "status", None) or (404 if isinstance(exc, JobStateError) and "no job" in exc.problem else 409 if isinstance(exc, JobStateError) else 422)
        return _error(status, redact.text(exc.problem), exc.field, redact.text(exc.fix) if exc.fix else None)

    @app.exception_handler(RequestValidationError)
    async def _bad_parameter(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = (exc.errors() or [{}])[0]
        where = ".".join(str(part) for part in first.get("loc", ()) if part not in ("query", "path", "header", "body"))
        return _error(422, f"{where or 'a parameter'}: {first.get('msg', 'invalid value')}.", where or None, "send a value of the documented type.")

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error on %s %s", request.method, request.url.path)
        return _error(500, "internal error (the server's log has the details).")

    def authorise(request: Request) -> Caller:
        if not settings.require_token:
            return Caller(None, store)
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        record = store.token_by_hash(hash_token(token.strip())) if scheme.lower() == "bearer" and token.strip() else None
        if record is None:
            raise _HttpError(401, "a valid API token is required.", "Authorization", "send 'Authorization: Bearer <token>' (neuralbake token create).")
        return Caller(record, store)

    def quota(caller: Caller) -> None:
        token = caller.token
        if token is not None and token.quota_jobs is not None and store.count_jobs(token.id) >= token.quota_jobs:
            raise _HttpError(429, f"this token's quota of {token.quota_jobs} jobs is used up.", "token", "ask for a token with a larger quota.")

    def shown(job: Any) -> dict[str, Any]:
        return redact(job.to_json())

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        # The web UI: one static page; it calls the API below with the token the user types in.
        page = FileResponse(Path(__file__).with_name("static") / "index.html", media_type="text/html")
        page.headers["Content-Security-Policy"] = "default-src 'self'; img-src 'self' blob:; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'"
        return page

    @app.get("/api/health")
    def health() -> dict[str, Any]:
        return {"ok": True, "kinds": list(service_kinds())}

    @app.get("/api/kinds")
    def kinds(caller: Caller = Depends(authorise)) -> dict[str, Any]:
        return {
            kind: {"inputs": [spec.name for spec in path_fields(bake_of(kind).config_type) if not spec.field.library and "[]" not in spec.name],
                   "fields": _describe(bake_of(kind).config_type)}
            for kind in service_kinds()
        }

    @app.post("/api/uploads", status_code=201)
    async def upload(request: Request, caller: Caller = Depends(authorise)) -> dict[str, Any]:
        form = await request.form(max_files=512)
        files = [(item.filename or "", item.file) for item in form.getlist("files") if isinstance(item, UploadFile)]
        record = await asyncio.to_thread(uploads.add, files)
        if caller.token_id is not None:
            await asyncio.to_thread(store.add_upload_owner, record.id, caller.token_id)
        return {"id": record.id, "files": record.files}

    @app.post("/api/jobs", status_code=201)
    async def submit(request: Request, caller: Caller = Depends(authorise)) -> dict[str, Any]:
        body = await _json_body(request)
        if not isinstance(body, dict):
            raise _HttpError(422, "the request body must be a JSON object.", "body", 'send {"kind": ..., "config": {...}, "inputs": {...}}.')
        unknown = sorted(set(body) - {"kind", "config", "inputs"})
        if unknown:
            raise _HttpError(422, f"unknown key {unknown[0][:40]!r} in the request.", unknown[0][:40], "send kind, config and inputs.")
        quota(caller)
        kind, config = await asyncio.to_thread(configs.prepare, body.get("kind"), body.get("config", {}), body.get("inputs", {}), caller)
        limit = caller.token.quota_jobs if caller.token is not None else None  # counted again as the job is stored: racing requests cannot pass it together
        job = store.create_job(kind, config, token_id=caller.token_id, max_attempts=settings.max_attempts, quota=limit)
        return shown(job)

    @app.get("/api/jobs")
    def list_jobs(status: str | None = None, limit: int = 100, caller: Caller = Depends(authorise)) -> list[dict[str, Any]]:
        mine = None if caller.sees_all else caller.token_id
        return [shown(job) for job in store.list_jobs(status=status, limit=max(1, min(limit, 10_000)), token_id=mine)]

    @app.get("/api/jobs/{job_id}")
    def get_job(job_id: str, caller: Caller = Depends(authorise)) -> dict[str, Any]:
        return shown(caller.job(job_id))

    @app.post("/api/jobs/{job_id}/cancel")
    def cancel(job_id: str, caller: Caller = Depends(authorise)) -> dict[str, Any]:
        return shown(store.request_cancel(caller.job(job_id).id))

    @app.post("/api/jobs/{job_id}/retry")
    def retry(job_id: str, caller: Caller = Depends(authorise)) -> dict[str, Any]:
        return shown(store.retry(caller.job(job_id).id))

    @app.get("/api/jobs/{job_id}/events")
    async def job_events(job_id: str, request: Request, after: int = 0, caller: Caller = Depends(authorise)) -> EventSourceResponse:
        caller.job(job_id)
        last = request.headers.get("last-event-id")
        if last is not None and not (EVENT_ID.fullmatch(last) and int(last) < _INT64):
            raise _HttpError(400, f"Last-Event-ID {last[:40]!r} is not an event number.", "Last-Event-ID", "send the id of the last event received (digits), or none.")
        if not 0 <= after < _INT64:
            raise _HttpError(422, f"after must be an event number from 0, got {after}.", "after", "send the number of the last event received.")
        start = int(last) if last is not None else after

        async def stream() -> Any:
            seq = start
            while True:
                batch = await asyncio.to_thread(store.events_after, job_id, seq)
                for item in batch:
                    seq = item.seq
                    yield {"id": str(item.seq), "event": item.type, "data": json.dumps(redact(item.data))}
                    if item.type in TERMINAL_STATES:
                        return
                if await request.is_disconnected():
                    return
                await asyncio.sleep(0.2)

        return EventSourceResponse(stream(), ping=15)

    @app.get("/api/jobs/{job_id}/previews/{file}")
    def preview(job_id: str, file: str, caller: Caller = Depends(authorise)) -> FileResponse:
        # A live picture the job's bake published (a `preview` event names it), while it runs or after.
        caller.job(job_id)
        if not PREVIEW_FILE.fullmatch(file):
            raise _HttpError(404, f"{file[:80]!r} is not a preview name.", "file", "use the file a preview event names.")
        path = job_folder(settings.data, job_id) / ".neuralbake" / "previews" / file
        if path.is_symlink() or not path.is_file():
            raise _HttpError(404, f"the job has no preview {file!r} (only the newest ones are kept).", "file", "use the file of a recent preview event.")
        return FileResponse(path, media_type="image/png", headers={"Cache-Control": "no-store"})

    @app.post("/api/jobs/{job_id}/paint", status_code=201)
    async def paint(job_id: str, request: Request, caller: Caller = Depends(authorise)) -> dict[str, Any]:
        # Interactive fitting (service.paint): strokes on a paint view -> uv0 weights -> a warm-started refit.
        job = caller.job(job_id)
        body = await _json_body(request)
        quota(caller)
        parsed = await asyncio.to_thread(parse_paint_request, body)
        made = await asyncio.to_thread(refit_with_strokes, store, uploads, configs, settings.data, job, parsed, caller=caller, max_attempts=settings.max_attempts)
        return redact(made)

    @app.get("/api/jobs/{job_id}/files")
    def list_files(job_id: str, caller: Caller = Depends(authorise)) -> dict[str, Any]:
        manifest = _finished_manifest(caller, settings, job_id)
        return {"files": manifest["files"]}

    @app.get("/api/jobs/{job_id}/files/{name:path}")
    def download(job_id: str, name: str, caller: Caller = Depends(authorise)) -> FileResponse:
        manifest = _finished_manifest(caller, settings, job_id)
        if name not in manifest["files"] and name != "bake.json":
            raise _HttpError(404, f"the job wrote no file {name[:120]!r}.", "name", "list the job's files first.")
        return FileResponse(job_folder(settings.data, job_id) / name)

    return app


def _finished_manifest(caller: Caller, settings: ServiceSettings, job_id: str) -> dict[str, Any]:
    job = caller.job(job_id)
    manifest = verify_bake_folder(job_folder(settings.data, job.id)) if job.status == "succeeded" else None
    if manifest is None:
        raise _HttpError(409, f"the job is {job.status}; it has no finished outputs.", "status", "wait for it to succeed.")
    return manifest


def _describe(config_type: type, prefix: str = "", instance: Any = None) -> list[dict[str, Any]]:
    """Every field of a config (nested ones dotted): name, type, default (the bake's), docstring."""
    hints = typing.get_type_hints(config_type)
    instance = config_type() if instance is None else instance
    docs, out = field_docs(config_type), []
    for item in dataclass_fields(config_type):
        if not item.init:
            continue
        value = getattr(instance, item.name)
        if is_dataclass(hints[item.name]):
            out += _describe(hints[item.name], f"{prefix}{item.name}.", value)
            continue
        out.append({"name": prefix + item.name, "type": str(hints[item.name]).replace("typing.", ""), "default": value if isinstance(value, int | float | str | bool | list | tuple | None) else str(value), "doc": docs.get(item.name, "")})
    return out


"""Hostile and broken HTTP requests, as a corpus: each gets a 4xx with a JSON error (``error``, ``field``,
``fix``), never a 500, never memory spent on more than the limits allow, and nothing left on disk.

Each case is a row of :data:`CASES`: a request and the status it must get. Cases that need a file
upload or a job first build it in the test.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from neuralbake.service.app import create_app, hash_token
from neuralbake.service.settings import ServiceSettings
from neuralbake.service.store import Store

TOKEN = "r" * 43
TINY_TEXTURE = {"batch_size": 64, "device": "cpu", "network": {"hidden": 16, "layers": 2}, "train": {"steps": 10, "precision": "fp32", "eval_every": 0}}


@dataclass
class Env:
    client: TestClient
    settings: ServiceSettings
    upload: str = ""
    job: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@pytest.fixture
def env(tmp_path: Path, tiny_png: Path) -> Env:
    settings = ServiceSettings(data=tmp_path / "data", max_upload_bytes=200_000, max_request_bytes=20_000, job_memory=16 * 2**30, max_steps=100_000)
    settings.data.mkdir()
    store = Store(settings.database_url())
    store.migrate()
    store.add_token("tests", hash_token(TOKEN))
    client = TestClient(create_app(settings, store), headers={"Authorization": f"Bearer {TOKEN}"}, raise_server_exceptions=False)
    upload = client.post("/api/uploads", files=[("files", ("a.png", tiny_png.read_bytes()))]).json()["id"]
    job = client.post("/api/jobs", json={"kind": "texture", "config": TINY_TEXTURE, "inputs": {"image": f"{upload}/a.png"}}).json()["id"]
    return Env(client, settings, upload, job)


def _chunks(total: int, size: int = 65536) -> Iterator[bytes]:
    sent = 0
    while sent < total:
        yield b" " * min(size, total - sent)
        sent += size


def _deep(kind: str, depth: int) -> bytes:
    return ("[" * depth + "]" * depth).encode() if kind == "arrays" else ('{"a":' * depth + "1" + "}" * depth).encode()


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _texture(env: Env, **config: Any) -> dict[str, Any]:
    merged = json.loads(json.dumps(TINY_TEXTURE))
    for dotted, value in config.items():
        target = merged
        *parents, last = dotted.split("__")
        for part in parents:
            target = target.setdefault(part, {})
        target[last] = value
    return {"json": {"kind": "texture", "config": merged, "inputs": {"image": f"{env.upload}/a.png"}}}


def _lod(env: Env, stage_options: Any) -> dict[str, Any]:
    return {"json": {"kind": "lod", "config": {"asset": f"{env.upload}/a.png", "device": "cpu", "stage_options": stage_options}}}


JSON = {"Content-Type": "application/json"}
# id, method, url (formatted with the env), request arguments (from the env), expected status, expected words in the error
CASES: list[tuple[str, str, str, Callable[[Env], dict[str, Any]], int, str]] = [
    ("chunked body past the limit", "POST", "/api/jobs", lambda e: {"content": _chunks(2_000_000), "headers": JSON}, 413, "larger than"),
    ("chunked upload past the limit", "POST", "/api/uploads", lambda e: {"content": _chunks(3_000_000), "headers": {"Content-Type": "multipart/form-data; boundary=x"}}, 413, "larger than"),
    ("content-length not a number", "POST", "/api/jobs", lambda e: {"content": b"{}", "headers": {**JSON, "Content-Length": "2x"}}, 413, "larger than"),
    ("json arrays 5000 deep", "POST", "/api/jobs", lambda e: {"content": _deep("arrays", 5000), "headers": JSON}, 400, "nests"),
    ("json objects 3000 deep", "POST", "/api/jobs", lambda e: {"content": _deep("objects", 3000), "headers": JSON}, 400, "nests"),
    ("json arrays 5000 deep on paint", "POST", "/api/jobs/{job}/paint", lambda e: {"content": _deep("arrays", 5000), "headers": JSON}, 400, "nests"),
    ("json objects 3000 deep on paint", "POST", "/api/jobs/{job}/paint", lambda e: {"content": _deep("objects", 3000), "headers": JSON}, 400, "nests"),
    ("body not utf-8", "POST", "/api/jobs", lambda e: {"content": b'{"kind": "\xff"}', "headers": JSON}, 400, "UTF-8"),
    ("body not json", "POST", "/api/jobs", lambda e: {"content": b"{nope", "headers": JSON}, 400, "not valid JSON"),
    ("integer of 5000 digits", "POST", "/api/jobs", lambda e: {"content": b'{"kind": ' + b"9" * 5000 + b"}", "headers": JSON}, 400, "cannot read"),
    ("body a list", "POST", "/api/jobs", lambda e: {"json": []}, 422, "JSON object"),
    ("unknown key", "POST", "/api/jobs", lambda e: {"json": {"kind": "texture", "secret": 1}}, 422, "unknown key"),
    ("config a list", "POST", "/api/jobs", lambda e: {"json": {"kind": "texture", "config": []}}, 422, "JSON objects"),
    ("batch size 1e9", "POST", "/api/jobs", lambda e: _texture(e, batch_size=10**9), 422, "memory"),
    ("hidden width 1e6", "POST", "/api/jobs", lambda e: _texture(e, network__hidden=10**6), 422, "memory"),
    ("steps 1e12", "POST", "/api/jobs", lambda e: _texture(e, train__steps=10**12), 422, "at most"),
    ("steps past int64", "POST", "/api/jobs", lambda e: _texture(e, train__steps=2**70), 422, "too large"),
    ("layers 1e9 (refused at once)", "POST", "/api/jobs", lambda e: _texture(e, network__layers=10**9), 422, "[0, 64]"),
    ("layers 2^62", "POST", "/api/jobs", lambda e: _texture(e, network__layers=2**62), 422, "[0, 64]"),
    ("frequencies 1e9", "POST", "/api/jobs", lambda e: _texture(e, network__frequencies=10**9), 422, "frequency"),
    ("lod stage path a number", "POST", "/api/jobs", lambda e: _lod(e, {"simplify": {"lod": 123}}), 422, "string"),
    ("lod stage path a list", "POST", "/api/jobs", lambda e: _lod(e, {"fit": {"weights": ["/etc/passwd"]}}), 422, "string"),
    ("lod stage path zero", "POST", "/api/jobs", lambda e: _lod(e, {"fit": {"warm_start": 0}}), 422, "string"),
    ("lod stage options a list", "POST", "/api/jobs", lambda e: _lod(e, []), 422, "table"),
    ("lod stage options null", "POST", "/api/jobs", lambda e: _lod(e, None), 422, "table"),
    ("lod stage a list", "POST", "/api/jobs", lambda e: _lod(e, {"fit": []}), 422, "table"),
    ("lod stage table a number", "POST", "/api/jobs", lambda e: _lod(e, {"fit": {"train": 5}}), 422, "table"),
    ("lod stage dunder", "POST", "/api/jobs", lambda e: _lod(e, {"fit": {"train.__class__": 5}}), 422, "not a setting"),
    ("lod stage trailing dot", "POST", "/api/jobs", lambda e: _lod(e, {"fit": {"asset.": "x"}}), 422, "not a setting"),
    ("input not a path field", "POST", "/api/jobs", lambda e: {"json": {"kind": "texture", "inputs": {"device": f"{e.upload}/a.png"}}}, 422, "no input"),
    ("input given twice", "POST", "/api/jobs", lambda e: {"json": {"kind": "texture", "config": {"image": f"{e.upload}/a.png"}, "inputs": {"image": f"{e.upload}/a.png"}}}, 422, "both"),
    ("input a number", "POST", "/api/jobs", lambda e: {"json": {"kind": "texture", "inputs": {"image": 5}}}, 422, "input is"),
    ("path field a number", "POST", "/api/jobs", lambda e: {"json": {"kind": "texture", "config": {"image": 5}}}, 422, "as a string"),
    ("last-event-id superscript two", "GET", "/api/jobs/{job}/events", lambda e: {"headers": {"Last-Event-ID": "²".encode("latin-1")}}, 400, "not an event number"),
    ("last-event-id past int64", "GET", "/api/jobs/{job}/events", lambda e: {"headers": {"Last-Event-ID": "99999999999999999999999"}}, 400, "not an event number"),
    ("last-event-id negative", "GET", "/api/jobs/{job}/events", lambda e: {"headers": {"Last-Event-ID": "-1"}}, 400, "not an event number"),
    ("after past int64", "GET", "/api/jobs/{job}/events?after=99999999999999999999999", lambda e: {}, 422, "after"),
    ("after not a number", "GET", "/api/jobs/{job}/events?after=x", lambda e: {}, 422, "after"),
    ("limit not a number", "GET", "/api/jobs?limit=lots", lambda e: {}, 422, "limit"),
    ("status unknown", "GET", "/api/jobs?status=exploded", lambda e: {}, 422, "unknown job status"),
    ("a file and a folder of the same name", "POST", "/api/uploads", lambda e: {"files": [("files", ("a", b"x")), ("files", ("a/b.png", b"y"))]}, 422, "both a file and a folder"),
    ("a folder and a file of the same name", "POST", "/api/uploads", lambda e: {"files": [("files", ("a/b.png", b"y")), ("files", ("a", b"x"))]}, 422, "both a file and a folder"),
    ("the index's name", "POST", "/api/uploads", lambda e: {"files": [("files", (".files.json", b"{}"))]}, 422, "index"),
    ("zip bomb", "POST", "/api/uploads", lambda e: {"files": [("files", ("bomb.zip", _zip({"zeros.bin": b"\x00" * 3_000_000})))]}, 413, "unpacks to more"),
    ("zip escaping", "POST", "/api/uploads", lambda e: {"files": [("files", ("e.zip", _zip({"ok.txt": b"1" * 1000, "../../x": b"x"})))]}, 422, "plain relative"),
    ("zip file and folder", "POST", "/api/uploads", lambda e: {"files": [("files", ("c.zip", _zip({"a": b"1", "a/b": b"2"})))]}, 422, "both a file and a folder"),
    ("no token", "GET", "/api/jobs", lambda e: {"headers": {"Authorization": ""}}, 401, "token"),
    ("unknown job", "GET", "/api/jobs/{missing}", lambda e: {}, 404, "no job"),
]


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_bad_request(env: Env, case: tuple) -> None:
    name, method, url, arguments, status, words = case
    response = env.client.request(method, url.format(job=env.job, missing="f" * 32), **arguments(env))
    assert response.status_code == status, (name, response.status_code, response.text[:500])
    body = response.json()
    assert set(body) == {"error", "field", "fix"} and words in body["error"], (name, body)
    incoming = env.settings.data / "uploads" / ".incoming"
    assert not incoming.exists() or not any(incoming.iterdir()), f"{name} left {list(incoming.iterdir())}"


def test_a_chunked_body_is_not_read_past_the_limit(env: Env) -> None:
    """On a real server (uvicorn, as `neuralbake serve` runs it), a chunked body of 200 MB with no
    length is answered 413 once the limit is passed; the server does not read the rest, so the
    client cannot push more than the limit plus the sockets' buffers."""
    import socket
    import threading
    import time

    import uvicorn

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(env.client.app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        sent, answer = 0, b""
        stop_at = time.monotonic() + 60
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(f"POST /api/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
                         "Transfer-Encoding: chunked\r\n\r\n".encode())
            chunk = b"10000\r\n" + b" " * 0x10000 + b"\r\n"
            conn.setblocking(False)
            while sent < 200 * 2**20 and b"\r\n\r\n" not in answer and time.monotonic() < stop_at:
                try:
                    sent += conn.send(chunk)
                except BlockingIOError:
                    time.sleep(0.01)
                except (BrokenPipeError, ConnectionResetError):
                    break
                try:
                    answer += conn.recv(65536)
                except BlockingIOError:
                    pass
            conn.settimeout(2.0)
            while b"\r\n\r\n" in answer and not answer.endswith(b"}"):  # the rest of the JSON error
                try:
                    answer += conn.recv(65536) or b"}"
                except (ConnectionResetError, TimeoutError):
                    break
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        assert sent < 32 * 2**20, f"the server read {sent:,} bytes of a body limited to {env.settings.max_request_bytes:,}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)

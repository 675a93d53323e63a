"""Shared test support for the glTF readers: packing a glTF document and its binary data into a
``.glb`` container (optionally with a damaged header)."""

from __future__ import annotations

import json
import struct


def glb_bytes(doc: dict, blob: bytes | None, *, version: int = 2, length: int | None = None) -> bytes:
    """A ``.glb`` container of ``doc`` (JSON chunk) and ``blob`` (BIN chunk, if any), both padded to
    4 bytes; ``version`` and ``length`` override the header fields to build damaged files."""
    text = json.dumps(doc).encode()
    text += b" " * ((-len(text)) % 4)
    body = struct.pack("<II", len(text), 0x4E4F534A) + text
    if blob is not None:
        blob = blob + b"\0" * ((-len(blob)) % 4)
        body += struct.pack("<II", len(blob), 0x004E4942) + blob
    total = 12 + len(body)
    return struct.pack("<4sII", b"glTF", version, total if length is None else length) + body

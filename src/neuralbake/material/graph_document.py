"""Reading a material document of neuralbake's JSON format from disk and checking its header.

:func:`load_material_document` reads the file with the shared JSON limits
(:func:`neuralbake.io.limits.load_json_file`: size and nesting are checked before parsing) and
:func:`check_document_header` checks the format name, the version and the top-level keys; the
nodes and layers are compiled and validated by :class:`~neuralbake.material.graph.MaterialGraph`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from neuralbake.errors import InputError
from neuralbake.io.limits import load_json_file

__all__ = ["MATERIAL_FORMAT", "MATERIAL_VERSION", "check_document_header", "load_material_document"]

MATERIAL_FORMAT = "neuralbake.material"
"""The ``format`` every material document states."""
MATERIAL_VERSION = 1
"""The document version this neuralbake reads."""
_TOP_LEVEL_KEYS = {"format", "version", "name", "description", "nodes", "surface"}


def check_document_header(document: Any, path: Path) -> None:
    """Raise :class:`InputError` naming ``path`` and the field unless ``document`` is an object of this format and version with known top-level keys."""

    def error(problem: str, field: str, fix: str) -> InputError:
        return InputError(problem, path=path, field=field, fix=fix)

    if not isinstance(document, Mapping):
        raise error("the material must be a JSON object.", "", 'start the file with {"format": "neuralbake.material", ...}.')
    if document.get("format") != MATERIAL_FORMAT:
        raise error(f"format is {document.get('format')!r}, expected {MATERIAL_FORMAT!r}.", "format", f'add "format": "{MATERIAL_FORMAT}".')
    if isinstance(document.get("version"), bool) or document.get("version") != MATERIAL_VERSION:
        raise error(f"version {document.get('version')!r} is not supported.", "version", f"use version {MATERIAL_VERSION}.")
    unknown_top = sorted(set(document) - _TOP_LEVEL_KEYS)
    if unknown_top:
        raise error(f"unknown top-level keys {unknown_top}.", unknown_top[0], "use format, version, name, description, nodes, surface.")


def load_material_document(path: str | Path) -> dict[str, Any]:
    """Read a material JSON file (errors name the file and the fix)."""
    path = Path(path)
    if not path.exists():
        raise InputError("the material file does not exist.", path=path, fix="check the path.")
    # Size and nesting limits first: a 100,000-deep document must not reach json's recursion.
    document = load_json_file(path, what="material", fix="correct the JSON syntax.")
    if not isinstance(document, dict):
        raise InputError(
            "the material must be a JSON object.", path=path, fix='start the file with {"format": "neuralbake.material", ...}.'
        )
    return document

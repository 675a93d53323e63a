"""One entry point for every material description neuralbake reads: its own JSON format and
MaterialX documents. Both compile to a callable ``material(uv, normal, position=None) -> Layer``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from neuralbake.errors import InputError
from neuralbake.material.graph import compile_material
from neuralbake.material.mtlx_compiler import compile_materialx

__all__ = ["MATERIAL_SUFFIXES", "load_material"]

MATERIAL_SUFFIXES = (".json", ".mtlx")


def load_material(path: str | Path, *, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> Any:
    """Compile a ``.json`` (neuralbake material format) or ``.mtlx`` (MaterialX) material."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".json":
        return compile_material(path, device=device, dtype=dtype)
    if suffix == ".mtlx":
        return compile_materialx(path, device=device, dtype=dtype)
    raise InputError(
        f"unknown material file type {suffix or '(none)'!r}.",
        path=path,
        fix="pass a neuralbake material (.json, see docs/material-format.md) or a MaterialX document (.mtlx).",
    )

"""The benchmarks use neuralbake through its public names only.

A bench script that reaches a private name (``from neuralbake... import _x``, ``module._x``, ``obj._x``) breaks
silently when the library renames it, and keeps the library from changing its insides. This parses every
``bench/*.py`` and flags those uses; attributes of ``self`` and ``cls`` (the script's own classes) are allowed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
SCRIPTS = sorted(BENCH.glob("*.py"))


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_uses(source: str) -> list[str]:
    """Each private use in ``source`` as ``"line N: what"``, in line order."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "neuralbake":
            module = node.module or ""
            for alias in node.names:
                if _private(alias.name) or any(_private(part) for part in module.split(".")):
                    found.append(f"line {node.lineno}: from {module} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "neuralbake" and any(_private(part) for part in alias.name.split(".")):
                    found.append(f"line {node.lineno}: import {alias.name}")
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return sorted(found, key=lambda use: int(use.split(":")[0].removeprefix("line ")))


def test_there_are_bench_scripts() -> None:
    assert len(SCRIPTS) > 20, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_bench_script_uses_public_names_only(script: Path) -> None:
    assert private_uses(script.read_text()) == []


def test_the_check_sees_each_kind_of_private_use() -> None:
    source = """
from neuralbake.kernels.training import _hidden
from neuralbake._inside import visible
import neuralbake._inside.module
trainer._graph.replay()
value = neuralbake.kernels._thing
self._mine = 1
cls._also_mine = 2
print(type(trainer).__name__)
"""
    assert [use.split(":")[0] for use in private_uses(source)] == ["line 2", "line 3", "line 4", "line 5", "line 6"]

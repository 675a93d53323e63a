"""The postfx split, read from the source (ast): the library under ``neuralbake.postfx`` sits below the
bakes and imports none of them; the bakes under ``bakes/postfx`` import nothing above the bakes; the
Blender add-on reaches neuralbake only through its client (what its zip vendors)."""

from __future__ import annotations

import ast
from pathlib import Path

import neuralbake

SRC = Path(neuralbake.__file__).resolve().parent


def _imports(file: Path) -> set[str]:
    """Every absolute module a file imports, at any depth (function-level imports too)."""
    found = set()
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def _under(modules: set[str], *packages: str) -> set[str]:
    return {m for m in modules if any(m == p or m.startswith(p + ".") for p in packages)}


def test_the_postfx_library_imports_no_bake_and_nothing_above() -> None:
    files = sorted((SRC / "postfx").glob("*.py"))
    assert {f.name for f in files} >= {"conditions.py", "models.py", "upscale.py", "compose.py", "motion.py", "adapters.py"}
    for file in files:
        above = _under(_imports(file), "neuralbake.bakes", "neuralbake.export", "neuralbake.client", "neuralbake.service", "neuralbake.cli",
                       "neuralbake.integrations")
        assert not above, (file.name, above)


def test_the_postfx_bakes_import_nothing_above_the_bakes() -> None:
    files = sorted((SRC / "bakes" / "postfx").glob("*.py"))
    assert {f.name for f in files} >= {"chain.py", "config.py", "lora.py"}
    for file in files:
        above = _under(_imports(file), "neuralbake.export", "neuralbake.client", "neuralbake.service", "neuralbake.cli", "neuralbake.integrations")
        assert not above, (file.name, above)
        assert len(file.read_text(encoding="utf-8").splitlines()) < 600, file.name


def test_the_blender_addon_reaches_neuralbake_only_through_its_client() -> None:
    for file in sorted((SRC / "integrations" / "blender").glob("*.py")):
        if file.name == "package.py":  # builds the zip outside Blender
            continue
        used = _under(_imports(file), "neuralbake")
        assert used <= {"neuralbake.client"}, (file.name, used)
        assert len(file.read_text(encoding="utf-8").splitlines()) < 600, file.name

"""The package's import graph keeps its layers (docs/architecture.md, issue 38).

Every module under ``src/neuralbake`` is parsed (never imported), so these checks cost a fraction of a
second and see imports an import-time check would miss: those inside functions and under
``if TYPE_CHECKING:``. Each failure lists every offending edge or file, with where it is, so the fix
can start from the message.
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = "neuralbake"
MAX_LINES = 600

# Lowest first. Packages on one row share a layer: each may import any lower row, none a higher row,
# and none another package of its own row. "" stands for neuralbake/__init__.py and __main__.py.
LAYERS: list[set[str]] = [
    {"errors", "version"},
    {"io"},
    {"core"},
    {"material", "nn"},
    {"render", "kernels"},
    {"postfx"},  # the AI pass's library: its conditions are renders of the scene (render), so it sits above it
    {"export"},  # shader code from baked bundles (io); a material pack bake writes its shader through it
    {"bakes"},
    {"client"},
    {"integrations"},
    {"service"},
    {"cli"},
    {"", "__main__"},
]
LAYER_OF = {package: rank for rank, row in enumerate(LAYERS) for package in row}


@dataclass(frozen=True)
class Edge:
    source: str  # importing module, dotted
    target: str  # the module the import names (a submodule where ``from pkg import sub`` names one)
    path: Path
    line: int
    in_function: bool
    type_checking: bool
    commented: bool

    def where(self) -> str:
        return f"{self.path.relative_to(SRC.parent)}:{self.line}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


MODULE_FILES: dict[str, Path] = {_module_name(p): p for p in sorted((SRC / ROOT).rglob("*.py"))}


def _package_of(module: str) -> str:
    """The top-level package (or module) under neuralbake that ``module`` belongs to; "" for the root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _comment_lines(source: str) -> set[int]:
    lines = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            lines.add(token.start[0])
    return lines


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


class _Collector(ast.NodeVisitor):
    def __init__(self, module: str, path: Path, source: str) -> None:
        self.module = module
        self.path = path
        self.package = module if _is_package(path) else module.rpartition(".")[0]
        self.comments = _comment_lines(source)
        self.lines = source.splitlines()
        self.edges: list[Edge] = []
        self.function_depth = 0
        self.type_checking_depth = 0

    def _function(self, node: ast.AST) -> None:
        self.function_depth += 1
        self.generic_visit(node)
        self.function_depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self.type_checking_depth += 1
            for child in node.body:
                self.visit(child)
            self.type_checking_depth -= 1
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def _add(self, node: ast.stmt, target: str) -> None:
        if target != ROOT and not target.startswith(ROOT + "."):
            return
        first = getattr(node, "lineno")
        last = getattr(node, "end_lineno", first) or first
        above = first - 1  # a comment line of its own just above counts; a trailing comment of the code above does not
        commented = any(line in self.comments for line in range(first, last + 1)) or (
            above in self.comments and self.lines[above - 1].lstrip().startswith("#"))
        if any(e.target == target and e.line == first for e in self.edges):
            return  # one edge per statement and module (``from m import a, b``)
        self.edges.append(Edge(self.module, target, self.path, first, self.function_depth > 0, self.type_checking_depth > 0, commented))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base_parts = self.package.split(".")
            if node.level > 1:
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
            base = ".".join(base_parts + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            # ``from pkg import sub`` loads the submodule; ``from pkg import name`` needs pkg/__init__ run.
            self._add(node, submodule if submodule in MODULE_FILES else base)


def _collect() -> list[Edge]:
    edges: list[Edge] = []
    for module, path in MODULE_FILES.items():
        source = path.read_text(encoding="utf-8")
        collector = _Collector(module, path, source)
        collector.visit(ast.parse(source, filename=str(path)))
        edges.extend(collector.edges)
    return edges


EDGES = _collect()


def test_every_package_has_a_layer() -> None:
    unplaced = sorted({_package_of(m) for m in MODULE_FILES} - set(LAYER_OF))
    assert not unplaced, f"packages missing from LAYERS in {Path(__file__).name}: {unplaced}"


def test_every_import_names_a_module_that_exists() -> None:
    # A stale import (a moved module) would otherwise slip past the layer checks as an unknown target.
    missing = [f"{e.where()}: {e.source} -> {e.target}" for e in EDGES if e.target not in MODULE_FILES]
    assert not missing, "imports of modules that do not exist:\n" + "\n".join(missing)


def _layer_violations() -> tuple[list[str], list[str]]:
    upward, sideways = [], []
    for edge in EDGES:
        source, target = _package_of(edge.source), _package_of(edge.target)
        if source == target or source not in LAYER_OF or target not in LAYER_OF:
            continue
        line = f"{edge.where()}: {edge.source} -> {edge.target}" + (" (in a function)" if edge.in_function else "")
        if LAYER_OF[target] > LAYER_OF[source]:
            upward.append(f"{line}   [{source or ROOT} imports higher layer {target or ROOT}]")
        elif LAYER_OF[target] == LAYER_OF[source]:
            sideways.append(f"{line}   [{source} and {target} share a layer]")
    return upward, sideways


def test_no_import_goes_up_a_layer() -> None:
    upward, _ = _layer_violations()
    assert not upward, f"{len(upward)} imports of a higher layer:\n" + "\n".join(upward)


def test_no_import_between_packages_of_one_layer() -> None:
    _, sideways = _layer_violations()
    assert not sideways, f"{len(sideways)} imports between packages of one layer:\n" + "\n".join(sideways)


def _import_time_graph() -> dict[str, dict[str, Edge]]:
    """Who runs whom while being imported: module-level imports, outside ``if TYPE_CHECKING:``.

    Importing ``a.b.c`` also runs ``a`` and ``a.b``; those package edges are added, except the importer's
    own ancestors, which Python has already begun (a package's ``__init__`` importing its submodules is
    no circle). An import that names an ancestor itself (``from pkg import name`` inside pkg) is kept:
    it needs pkg/__init__ to have bound ``name``, which is a circle when that __init__ imports the module.
    """
    graph: dict[str, dict[str, Edge]] = {m: {} for m in MODULE_FILES}
    for edge in EDGES:
        if edge.in_function or edge.type_checking or edge.target not in MODULE_FILES:
            continue
        own = set(_ancestors(edge.source))
        for target in [*_ancestors(edge.target), edge.target]:
            if target != edge.source and (target == edge.target or target not in own):
                graph[edge.source].setdefault(target, edge)
    return graph


def _strongly_connected(graph: dict[str, dict[str, Edge]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (no recursion limit); components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def test_strongly_connected_finds_a_circle() -> None:
    # The checker itself: a three-module circle and a tail hanging off it.
    edge = Edge("x", "y", SRC, 1, False, False, False)
    graph = {"a": {"b": edge}, "b": {"c": edge}, "c": {"a": edge, "d": edge}, "d": {}}
    assert _strongly_connected(graph) == [["a", "b", "c"]]
    assert _strongly_connected({"a": {"b": edge}, "b": {}}) == []


def test_no_import_time_circles() -> None:
    graph = _import_time_graph()
    report = []
    for component in _strongly_connected(graph):
        members = set(component)
        report.append("circle: " + ", ".join(component))
        for source in component:
            for target, edge in sorted(graph[source].items()):
                if target in members:
                    report.append(f"    {edge.where()}: {source} -> {target}" + ("" if target == edge.target else f" (package of {edge.target})"))
    assert not report, "module-level imports that form circles:\n" + "\n".join(report)


def test_no_module_is_over_the_line_limit() -> None:
    long = []
    for module, path in MODULE_FILES.items():
        count = len(path.read_text(encoding="utf-8").splitlines())
        if count > MAX_LINES:
            long.append(f"{path.relative_to(SRC.parent)}: {count} lines")
    assert not long, f"modules over {MAX_LINES} lines (split them):\n" + "\n".join(long)


def test_function_level_imports_say_why() -> None:
    # Allowed only where an optional heavy dependency (triton, bpy, diffusers, ray, ...) needs the
    # import deferred; the comment on the line or the line above says which.
    silent = [f"{e.where()}: {e.source} -> {e.target}" for e in EDGES if e.in_function and not e.commented]
    assert not silent, (
        "function-level neuralbake imports without a comment saying why (move them to module level, "
        "or say which optional dependency needs them deferred):\n" + "\n".join(silent)
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from . import config\n", "neuralbake.core.config"),
        ("from .config import load_config\n", "neuralbake.core.config"),
        ("from . import load_config\n", "neuralbake.core"),
        ("from .. import errors\n", "neuralbake.errors"),
        ("from ..io.files import json_safe\n", "neuralbake.io.files"),
        ("import neuralbake.io.files as f\n", "neuralbake.io.files"),
        ("from neuralbake import __version__\n", "neuralbake"),
    ],
)
def test_collector_resolves_imports(source: str, expected: str) -> None:
    # The checker itself, as if in neuralbake/core/report.py (a plain module of the core package).
    collector = _Collector("neuralbake.core.report", SRC / ROOT / "core" / "report.py", source)
    collector.visit(ast.parse(source))
    assert [e.target for e in collector.edges] == [expected]


def test_collector_resolves_imports_in_a_package_init() -> None:
    source = "from . import config\nfrom .. import errors\n"
    collector = _Collector("neuralbake.core", SRC / ROOT / "core" / "__init__.py", source)
    collector.visit(ast.parse(source))
    assert [e.target for e in collector.edges] == ["neuralbake.core.config", "neuralbake.errors"]


def test_collector_skips_other_packages() -> None:
    collector = _Collector("neuralbake.core.report", SRC / ROOT / "core" / "report.py", "import numpy\nfrom torch import nn\n")
    collector.visit(ast.parse("import numpy\nfrom torch import nn\n"))
    assert collector.edges == []


def test_collector_sees_function_and_type_checking_imports() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from neuralbake.io import files\n"
        "def f():\n"
        "    # deferred: needs triton\n"
        "    from neuralbake.errors import InputError\n"
        "    from neuralbake.io import limits\n"
    )
    collector = _Collector("neuralbake.core.a", SRC / ROOT / "core" / "a.py", source)
    collector.visit(ast.parse(source))
    flags = [(e.target, e.in_function, e.type_checking, e.commented) for e in collector.edges]
    assert flags == [
        ("neuralbake.io.files", False, True, False),
        ("neuralbake.errors", True, False, True),
        ("neuralbake.io.limits", True, False, False),
    ]

"""The bake registry: every bake in the package is listed once, and each listed bake has a command and a job kind."""

from __future__ import annotations

import ast
import importlib
import typing
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import neuralbake
from neuralbake.bakes.registry import BAKES, registered, service_kinds
from neuralbake.bakes.run import Bake
from neuralbake.cli import app
from neuralbake.cli.common import BAKE_COMMANDS
from neuralbake.errors import ConfigError
from neuralbake.service.worker import bake_of


def _every_bake_in_the_package() -> dict[int, tuple[str, Bake]]:
    """Every module-level ``NAME = Bake(...)`` in the sources (found by parsing, so modules that run only inside
    Blender or alembic are not imported)."""
    found: dict[int, tuple[str, Bake]] = {}
    root = Path(neuralbake.__file__).parent
    for path in sorted(root.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "Bake":
                target = node.targets[0] if isinstance(node, ast.Assign) else node.target
                module = ".".join(("neuralbake", *path.relative_to(root).with_suffix("").parts))
                bake = getattr(importlib.import_module(module), target.id)
                found[id(bake)] = (f"{module}.{target.id}", bake)
    return found


def test_every_bake_in_the_package_is_registered_once() -> None:
    listed = [entry.bake for entry in BAKES.values()]
    assert len({id(b) for b in listed}) == len(listed), "a bake is registered twice"
    assert len(_every_bake_in_the_package()) >= len(BAKES)
    missing = [where for key, (where, _) in _every_bake_in_the_package().items() if key not in {id(b) for b in listed}]
    assert not missing, f"bakes defined but not in bakes/registry.py: {missing}"
    assert len({entry.command for entry in BAKES.values()}) == len(BAKES), "two entries share a command"


def _command(words: tuple[str, ...]):  # noqa: ANN202 - a click command
    group = typer.main.get_command(app)
    for word in words:
        group = group.commands[word]  # type: ignore[attr-defined]
    return group


@pytest.mark.parametrize("kind", sorted(BAKES))
def test_every_registered_bake_has_a_command_and_a_job_kind(kind: str) -> None:
    entry = BAKES[kind]
    command = _command(entry.command)
    generated = [c for c in BAKE_COMMANDS if c.entry is entry]
    assert len(generated) == 1 and command.name == entry.command[-1] and entry.help in (command.help or "")
    assert entry.service and kind in service_kinds()
    assert bake_of(kind) is entry.bake is registered(kind).bake
    result = CliRunner().invoke(app, [*entry.command, "--help"])
    assert result.exit_code == 0, result.output
    for arg in entry.arguments:
        assert (arg.metavar or arg.field.upper()) in result.output


def test_submit_help_lists_every_kind_and_unknown_kinds_are_named() -> None:
    result = CliRunner().invoke(app, ["submit", "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0
    for kind in BAKES:
        assert kind in result.output
    with pytest.raises(ConfigError) as caught:
        bake_of("materialpack")
    assert "material-pack" in str(caught.value)
    result = CliRunner().invoke(app, ["submit", "nope", "--input", "image=a.png"])
    assert result.exit_code == 2 and "unknown job kind 'nope'" in result.output and "postfx-lora" in result.output


def test_the_settings_every_bake_has_are_declared_once() -> None:
    from neuralbake.bakes.config import BakeConfig, shared_fields
    from neuralbake.bakes.material_pack import MaterialPackConfig

    for kind, entry in BAKES.items():
        config = entry.bake.config_type
        config = typing.get_type_hints(config)["bake"] if config is MaterialPackConfig else config  # its bakes' settings
        assert issubclass(config, BakeConfig), f"{kind}: {config.__name__} does not inherit the shared settings"
    again = []
    root = Path(neuralbake.__file__).parent
    for path in sorted(root.rglob("*.py")):
        if path == root / "bakes" / "config.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef) or not any(isinstance(b, ast.Name) and b.id.endswith("Config") for b in node.bases):
                continue
            body = node.body
            for item, following in zip(body, [*body[1:], None]):
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.target.id in shared_fields():
                    documented = isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                    if item.target.id != "train" or documented:  # a bake may give train its own defaults, not its own text
                        again.append(f"{path.relative_to(root)}:{item.lineno} {node.name}.{item.target.id}")
    assert not again, f"shared settings declared again (inherit them from neuralbake.bakes.config): {again}"

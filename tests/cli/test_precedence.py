"""Every bake command: options come from its config, and settings resolve flag > --config file > default.

The runner is replaced by a function that records the config it is handed, so each case runs in
milliseconds; the bakes themselves are tested elsewhere.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from neuralbake.bakes import run as bake_runner
from neuralbake.cli import app
from neuralbake.cli.common import BAKE_COMMANDS, COMMON_OPTIONS, BakeCommand, Flag, _strip_optional

runner = CliRunner()


class _Captured(Exception):
    def __init__(self, config: Any) -> None:
        self.config = config


def _capture(bake: Any, config: Any, out: Any, **kwargs: Any) -> dict[str, Any]:
    raise _Captured(config)


def _commands() -> list[tuple[list[str], BakeCommand]]:
    """(argv prefix, registration) for every generated bake command in the CLI."""
    found = []

    def walk(command: Any, path: list[str]) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, [*path, name])
            return
        params = {p.name for p in command.params}
        for registered in BAKE_COMMANDS:
            if registered.name == path[-1] and {f.param for f in registered.flags} <= params:
                found.append((path, registered))

    walk(typer.main.get_command(app), [])
    return found


COMMANDS = _commands()


def test_every_bake_command_is_generated_and_found() -> None:
    names = {" ".join(path) for path, _ in COMMANDS}
    assert "texture bake" in names
    assert len(COMMANDS) == len(BAKE_COMMANDS), "a generated command is not reachable from the main CLI"


def _arguments(registered: BakeCommand, tmp_path: Path) -> list[str]:
    values = []
    for arg in registered.arguments:
        if arg.optional:
            continue
        values += [str(tmp_path / f"{arg.field}_{i}.png") for i in range(2 if arg.many else 1)]
    return values


def _number_flag(registered: BakeCommand) -> Flag:
    """A plain int or float option that is not a common option (one per command is enough)."""
    for flag in registered.flags:
        if flag.name not in COMMON_OPTIONS and _strip_optional(flag.hint) in (int, float):
            return flag
    raise AssertionError(f"{registered.name} has no numeric option to test")


def _value(config: Any, path: str) -> Any:
    for part in path.split("."):
        config = getattr(config, part)
    return config


def _nested(path: str, value: Any) -> dict[str, Any]:
    data: dict[str, Any] = value
    for part in reversed(path.split(".")):
        data = {part: data}
    return data


def _run(argv: list[str]) -> Any:
    result = runner.invoke(app, argv, catch_exceptions=True)
    assert isinstance(result.exception, _Captured), (argv, result.output, result.exception)
    return result.exception.config


@pytest.mark.parametrize(("path", "registered"), COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_flag_beats_file_beats_default(path: list[str], registered: BakeCommand, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bake_runner, "run_bake", _capture)
    flag = _number_flag(registered)
    default = _value(registered.bake.config_type(), flag.path)
    number = _strip_optional(flag.hint)
    from_file, from_flag = number(7), number(9)
    assert default not in (from_file, from_flag)
    base = [*path, *_arguments(registered, tmp_path), "--out", str(tmp_path / "out")]
    config_file = tmp_path / "settings.json"
    config_file.write_text(json.dumps(_nested(flag.path, from_file)))

    assert _value(_run(base), flag.path) == default
    assert _value(_run([*base, "--config", str(config_file)]), flag.path) == from_file
    assert _value(_run([*base, "--config", str(config_file), f"--{flag.name}", str(from_flag)]), flag.path) == from_flag
    # Untouched flags never override the file: every other field keeps the file's (default) value.
    captured = _run([*base, "--config", str(config_file)])
    fresh = registered.bake.config_type()
    for other in registered.flags:
        if other.path != flag.path:
            assert _value(captured, other.path) == _value(fresh, other.path), other.path


@pytest.mark.parametrize(("path", "registered"), COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_every_bake_command_has_the_common_options(path: list[str], registered: BakeCommand) -> None:
    command = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    options = {opt.lstrip("-") for param in command.params for opt in param.opts}
    assert set(COMMON_OPTIONS) <= options, set(COMMON_OPTIONS) - options


@pytest.mark.parametrize(("path", "registered"), COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_every_option_has_help_from_its_field(path: list[str], registered: BakeCommand) -> None:
    for flag in registered.flags:
        assert flag.help.strip(), f"{registered.name} --{flag.name}: its config field has no docstring"


def test_a_bad_value_names_the_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bake_runner, "run_bake", _capture)
    result = runner.invoke(app, ["texture", "bake", str(tmp_path / "a.png"), "--out", str(tmp_path / "o"), "--size", "12xq"])
    assert result.exit_code == 2
    assert "size" in result.output


def test_dataclass_fields_all_reach_the_command_line() -> None:
    for registered in BAKE_COMMANDS:
        reachable = {flag.path for flag in registered.flags} | {arg.field for arg in registered.arguments}

        def walk(cls: type, prefix: str) -> None:
            hints = typing.get_type_hints(cls)
            for item in dataclasses.fields(cls):
                path = prefix + item.name
                if dataclasses.is_dataclass(hints[item.name]):
                    walk(hints[item.name], path + ".")
                elif item.init and path not in reachable:
                    skipped.append(path)

        skipped: list[str] = []
        walk(registered.bake.config_type, "")
        # Fields a bake derives itself (e.g. the network's outputs follow the image) may be skipped;
        # they must stay few.
        assert len(skipped) <= 3, (registered.name, skipped)

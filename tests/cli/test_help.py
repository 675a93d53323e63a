"""Every command's help shows defaults one way (``[default: X]``), never ``None`` as a default, no
leftover docstring markup; and an untouched flag never overrides a ``--config`` file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from neuralbake.cli import app


def _commands(group: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if hasattr(group, "commands"):
        found = []
        for name, command in group.commands.items():
            found += _commands(command, (*prefix, name))
        return found
    return [prefix]


COMMANDS = _commands(typer.main.get_command(app))


def test_every_command_is_listed() -> None:
    names = {" ".join(c) for c in COMMANDS}
    assert {"texture bake", "texture infer", "material bake", "material render", "material preview", "fit", "mipmap", "ntc compress"} <= names


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_help_shows_defaults_one_way(command: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "(default:" not in text, text
    assert "[default: None]" not in text, text
    assert "``" not in text, text


def test_ntc_flags_left_alone_keep_the_config_file_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from neuralbake.bakes import run as bake_runner
    from neuralbake.errors import InputError

    seen: dict[str, Any] = {}

    def fake_run_bake(bake: Any, config: Any, out: Any, **kwargs: Any) -> dict:
        seen["config"] = config
        raise InputError("stop here", fix="none")

    monkeypatch.setattr(bake_runner, "run_bake", fake_run_bake)
    config = tmp_path / "ntc.json"
    config.write_text(json.dumps({"bpp": [2.0], "material": "1", "baselines": False}))
    CliRunner().invoke(app, ["ntc", "compress", "a.png", "--config", str(config), "--out", str(tmp_path / "o")])
    assert (seen["config"].bpp, seen["config"].material, seen["config"].baselines) == ([2.0], "1", False)
    CliRunner().invoke(app, ["ntc", "compress", "a.png", "--config", str(config), "--bpp", "3", "--baselines", "--out", str(tmp_path / "o")])
    assert (seen["config"].bpp, seen["config"].baselines) == ([3.0], True)
    CliRunner().invoke(app, ["ntc", "compress", "a.png", "--config", str(config), "--bpp", "3", "--bpp", "1", "--out", str(tmp_path / "o")])
    assert seen["config"].bpp == [3.0, 1.0]

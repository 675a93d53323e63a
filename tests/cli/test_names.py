"""One name per setting (issue 42, item 5): a renamed flag also takes its config field's own name, ``submit --set``
takes field paths and flag names alike, the web UI shows the field paths, ``lod --set STAGE.FIELD=VALUE``,
``--version``, and inputs of the wrong kind named as such."""

from __future__ import annotations

import json
import tomllib
import typing
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import neuralbake
from neuralbake.bakes import run as bake_runner
from neuralbake.bakes.lod import LodConfig
from neuralbake.bakes.registry import BAKES
from neuralbake.cli import app
from neuralbake.cli.common import BAKE_COMMANDS, BakeCommand, Flag, _strip_optional, entry_flags
from neuralbake.core.names import field_paths
from neuralbake.cli.service import _settings
from neuralbake.errors import ConfigError
from neuralbake.service.app import _describe

runner = CliRunner()


class _Captured(Exception):
    def __init__(self, config: Any) -> None:
        self.config = config


def _capture(bake: Any, config: Any, out: Any, **kwargs: Any) -> dict[str, Any]:
    raise _Captured(config)


def _run(argv: list[str]) -> Any:
    result = runner.invoke(app, argv, catch_exceptions=True)
    assert isinstance(result.exception, _Captured), (argv, result.output, result.exception)
    return result.exception.config


def _words(registered: BakeCommand) -> list[str]:
    return list(registered.entry.command)


def _arguments(registered: BakeCommand, tmp_path: Path) -> list[str]:
    return [str(tmp_path / f"{arg.field}_{i}.png") for arg in registered.arguments if not arg.optional for i in range(2 if arg.many else 1)]


def _sample(flag: Flag) -> str:
    """A value the flag's field accepts that differs from its default."""
    base = _strip_optional(flag.hint)
    origin = typing.get_origin(base)
    if origin is typing.Literal:
        return str(typing.get_args(base)[-1])
    if origin is tuple and typing.get_args(base) == (int, int):
        return "8x8"
    if origin in (list, tuple):
        item = typing.get_args(base)[0] if typing.get_args(base) else str
        return "1,2" if item in (int, float) else "x.safetensors"
    return {int: "7", float: "0.375"}.get(base, "steel")


RENAMED = [(registered, flag) for registered in BAKE_COMMANDS for flag in registered.flags if flag.aliases]


@pytest.mark.parametrize(("registered", "flag"), RENAMED, ids=[f"{' '.join(r.entry.command)} --{f.name}" for r, f in RENAMED])
def test_both_spellings_of_a_renamed_flag_parse_to_the_same_config(
    registered: BakeCommand, flag: Flag, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bake_runner, "run_bake", _capture)
    base = [*_words(registered), *_arguments(registered, tmp_path), "--out", str(tmp_path / "out")]
    value = _sample(flag)
    short = _run([*base, f"--{flag.name}", value])
    (alias,) = flag.aliases
    assert alias == flag.path.rsplit(".", 1)[-1].replace("_", "-")  # the field's own name
    assert _run([*base, f"--{alias}", value]) == short
    assert short != _run(base), f"--{flag.name} {value} changed nothing"


def test_every_renamed_flag_answers_to_its_fields_name_unless_another_flag_has_it() -> None:
    assert RENAMED, "no renamed flags found"
    for registered in BAKE_COMMANDS:
        primary = {flag.name for flag in registered.flags}
        for flag in registered.flags:
            own = flag.path.rsplit(".", 1)[-1].replace("_", "-")
            assert own in (flag.name, *flag.aliases) or own in primary, (registered.name, flag.path)
    texture = next(r for r in BAKE_COMMANDS if r.entry.kind == "texture")
    names = {flag.path: (flag.name, *flag.aliases) for flag in texture.flags}
    assert names["texture_size"] == ("size", "texture-size") and names["train.learning_rate"] == ("lr", "learning-rate")


def test_help_shows_both_spellings() -> None:
    result = runner.invoke(app, ["texture", "bake", "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0
    for name in ("--size", "--texture-size", "--lr", "--learning-rate", "--activation", "--hidden-activation"):
        assert name in result.output, name


@pytest.mark.parametrize("kind", sorted(BAKES))
def test_submit_set_takes_field_paths_and_every_flag_name(kind: str) -> None:
    entry = BAKES[kind]
    paths = field_paths(entry.bake.config_type)
    for flag in entry_flags(entry):
        expected = _settings(None, [f"{flag.path}=1"], kind)
        for name in (flag.name, *flag.aliases):
            key = name.replace("-", "_")
            if key in paths and key != flag.path:
                # material bake's --material is material_name, but `material` is the field of the input
                # file (the positional MATERIAL): the field path means its own field, as in config files
                assert _settings(None, [f"{name}=1"], kind) == _settings(None, [f"{key}=1"], kind) == {key: 1}
                continue
            assert _settings(None, [f"{name}=1"], kind) == expected, (kind, name)
            assert _settings(None, [f"{key}=1"], kind) == expected, (kind, name)


def test_submit_set_resolves_the_readme_spellings() -> None:
    assert _settings(None, ["size=256"], "ntc") == {"texture_size": 256}
    assert _settings(None, ["lr=0.01", "steps=50"], "texture") == {"train": {"learning_rate": 0.01, "steps": 50}}
    assert _settings(None, ["held-out=2"], "fit") == {"held_out_views": 2}
    assert _settings(None, ["stage_options.fit.epochs=5"], "lod") == {"stage_options": {"fit": {"epochs": 5}}}
    with pytest.raises(ConfigError, match="no setting 'sizes'") as caught:
        _settings(None, ["sizes=256"], "ntc")
    assert caught.value.field == "--set"


def test_the_web_ui_names_every_setting_by_its_field_path() -> None:
    """The web UI's form (``/api/kinds``) labels each field with its dotted path: the name config files and
    ``submit --set`` take, and one the command line answers to (or the flag that field had to be renamed to)."""
    for kind, entry in BAKES.items():
        shown = {field["name"] for field in _describe(entry.bake.config_type)}
        assert shown == set(field_paths(entry.bake.config_type)), kind
        for flag in entry_flags(entry):
            assert flag.path in shown
            assert _settings(None, [f"{flag.path}=1"], kind)  # the UI's name is a --set key


# --- lod --set STAGE.FIELD=VALUE ------------------------------------------------------------------------


def test_lod_set_fills_the_stages_settings_over_the_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bake_runner, "run_bake", _capture)
    (tmp_path / "lod.toml").write_text('[stage_options.fit]\nepochs = 3\nviews = 4\n"train.steps" = 9\n')
    base = ["lod", str(tmp_path / "a.glb"), "--out", str(tmp_path / "out")]
    config = _run(
        [
            *base,
            "--set",
            "fit.epochs=5",
            "--set",
            "simplify.views=8",
            "--set",
            "fit.lr=0.01",
            "--set",
            "fit.size=64",
            "--set",
            "skin.lr=0.002",
            "--set",
            "fit.target=vertex-color",
        ]
    )
    assert config.stage_options == {
        "fit": {"epochs": 5, "train.learning_rate": 0.01, "texture_size": 64, "target": "vertex-color"},
        "simplify": {"views": 8},
        "skin": {"learning_rate": 0.002},
    }
    config.validate()  # each value checked as the stage's config takes it
    config = _run([*base, "--config", str(tmp_path / "lod.toml"), "--set", "fit.epochs=5"])
    assert config.stage_options == {"fit": {"epochs": 5, "views": 4, "train.steps": 9}}
    assert _run([*base, "--config", str(tmp_path / "lod.toml")]).stage_options == {"fit": {"epochs": 3, "views": 4, "train.steps": 9}}


@pytest.mark.parametrize(
    ("item", "expect"),
    [
        ("sculpt.steps=3", "unknown stage 'sculpt'"),
        ("fit.epoch=3", "the fit stage has no setting 'epoch'"),
        ("fit.train.stepz=3", "no setting 'train.stepz'"),
        ("epochs=3", "names no stage"),
        ("fit.epochs", "is not KEY=VALUE"),
    ],
)
def test_lod_set_names_an_unknown_stage_or_field_and_the_valid_ones(item: str, expect: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(app, ["lod", str(tmp_path / "a.glb"), "--out", str(out), "--set", item], env={"COLUMNS": "10000"})
    flat = " ".join(result.output.split())
    assert result.exit_code == 2 and flat.startswith("error: --set") and expect in flat, result.output
    if "no setting" not in expect and "KEY=VALUE" not in expect:
        assert "simplify, skin, fit" in flat  # the valid stages
    if "no setting" in expect:
        assert "epochs" in flat and "held_out_views" in flat and "train.steps" in flat  # the valid ones
    assert not out.exists()


def test_lod_set_values_are_checked_as_the_stage_checks_them(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        LodConfig(asset="a.glb", stage_options={"fit": {"epochs": "many"}}).validate()
    assert caught.value.field == "stage_options.fit.epochs"
    result = runner.invoke(
        app, ["lod", str(tmp_path / "a.glb"), "--out", str(tmp_path / "o"), "--set", "fit.epochs=many"], env={"COLUMNS": "10000"}
    )
    assert result.exit_code == 2 and "stage_options.fit.epochs" in result.output, result.output


# --- --version, mipmap given a glTF ----------------------------------------------------------------------


def test_version_flag_prints_the_package_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"neuralbake {neuralbake.__version__}"
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert pyproject["project"]["version"] == neuralbake.__version__


@pytest.mark.parametrize("argv", [["{tmp}/crate.glb"], ["{tmp}/crate.gltf", "{tmp}/normal.png"], ["{tmp}/base.png", "{tmp}/crate.GLB"]])
def test_mipmap_given_a_gltf_says_it_takes_images(argv: list[str], tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(app, ["mipmap", *[a.replace("{tmp}", str(tmp_path)) for a in argv], "--out", str(out)], env={"COLUMNS": "10000"})
    flat = " ".join(result.output.split())
    assert result.exit_code == 2 and flat.startswith("error:"), result.output
    assert "Missing argument" not in flat and "takes images" in flat and "not a glTF" in flat and "Fix:" in flat
    assert ".gltf names them" in flat and ".glb holds them inside" in flat
    assert not out.exists()


def test_the_mipmap_check_covers_config_files_too(tmp_path: Path) -> None:
    from neuralbake.bakes.mipmap import MipmapConfig

    with pytest.raises(ConfigError, match="takes images") as caught:
        MipmapConfig(base_color="b.png", normal="n.png", roughness_map="crate.gltf").validate()
    assert caught.value.field == "roughness_map"
    config = tmp_path / "mip.json"
    config.write_text(json.dumps({"roughness_map": str(tmp_path / "crate.glb")}))
    argv = ["mipmap", str(tmp_path / "b.png"), str(tmp_path / "n.png"), "--config", str(config), "--out", str(tmp_path / "o")]
    result = runner.invoke(app, argv, env={"COLUMNS": "10000"})
    assert result.exit_code == 2 and "roughness_map: mipmap takes images" in result.output, result.output

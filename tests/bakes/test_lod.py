"""``neuralbake lod``: the whole chain (simplify -> skin -> fit) on a static sphere and on the skinned
example arm, stage options, refusals, and a chain killed in its fit stage and resumed."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from neuralbake.bakes.folder import STATE_DIR
from neuralbake.bakes.lod import LodConfig, make_lod
from neuralbake.errors import ConfigError, InputError
from neuralbake.io.gltf import load_gltf
from neuralbake.io.manifest import verify_bake_folder

from .test_fit import _write_asset

ARM = Path(__file__).resolve().parents[2] / "examples" / "arm" / "arm.gltf"

SMALL = {
    "simplify": {"views": 4, "held_out_views": 2, "render_size": 48, "epochs": 2},
    "skin": {"steps": 20, "views": 2, "render_size": 48, "frames": 3, "held_out_frames": 2},
    "fit": {"views": 4, "held_out_views": 2, "render_size": 48, "epochs": 3, "environment": False, "fov_y_deg": 30.0},
}


def _load(path: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_gltf(path)


def test_a_static_asset_is_simplified_and_fitted_with_its_shape(tmp_path: Path) -> None:
    model = _write_asset(tmp_path / "asset")
    config = LodConfig(asset=str(model), ratio=0.3, texture_size=32, device="cpu", shadows=False, stage_options=SMALL)
    report = make_lod(config, tmp_path / "lod", progress=False)
    assert list(report["stages"]) == ["simplify", "fit"] and not report["skinned"]
    assert report["triangles"] < report["original_triangles"] and report["stages"]["fit"]["shape"]["mean_displacement"] > 0
    assert report["psnr_union_db"] == report["stages"]["fit"]["psnr_union_db"] > report["stages"]["fit"]["initial_psnr_union_db"]
    lod = _load(tmp_path / "lod" / "lod.glb")
    assert sum(len(m.indices) for m in lod.meshes) == report["triangles"]
    material = lod.materials[lod.meshes[0].material]
    assert material.unlit and material.base_color_texture is not None and material.base_color_texture.texcoord == 1
    for name in ("simplify.png", "triptych.png", "report.json"):
        assert (tmp_path / "lod" / name).is_file()
    assert not (tmp_path / "lod" / "frames.png").exists()
    verify_bake_folder(tmp_path / "lod")
    events = [json.loads(line) for line in (tmp_path / "lod" / "events.jsonl").read_text().splitlines()]
    assert {e["stage"] for e in events if e["event"] == "stage"} == {"simplify", "fit"}


@pytest.mark.slow
def test_a_skinned_asset_keeps_its_skeleton_through_the_chain(tmp_path: Path) -> None:
    config = LodConfig(asset=str(ARM), ratio=0.3, texture_size=32, device="cpu", shadows=False, target="vertex-color", stage_options=SMALL)
    report = make_lod(config, tmp_path / "lod", progress=False)
    assert list(report["stages"]) == ["simplify", "skin", "fit"] and report["skinned"]
    assert all(report["stages"][s]["training"]["converged"] in (True, False) for s in report["stages"])
    assert report["training"]["stage"] in report["stages"]  # the chain's verdict names the stage it came from
    assert report["stages"]["fit"]["shape"] is None  # the simplify stage fitted the shape over the animation
    lod, original = _load(tmp_path / "lod" / "lod.glb"), _load(ARM)
    assert lod.rig is not None and [c.name for c in lod.rig.clips] == [c.name for c in original.rig.clips]
    assert all(m.skin is not None and m.colors is not None for m in lod.meshes)
    weights = np.concatenate([m.weights for m in lod.meshes])
    assert np.allclose(weights.sum(1), 1.0, atol=1e-3) and (tmp_path / "lod" / "frames.png").is_file()


def test_stage_options_and_inputs_are_checked(tmp_path: Path) -> None:
    model = _write_asset(tmp_path / "asset")
    with pytest.raises(ConfigError, match="unknown stage") as caught:
        make_lod(LodConfig(asset=str(model), stage_options={"bake": {}}), tmp_path / "a", progress=False)
    assert caught.value.field == "stage_options"
    with pytest.raises(ConfigError, match="'epoch' is not a setting") as caught:
        make_lod(LodConfig(asset=str(model), stage_options={"fit": {"epoch": 3}}), tmp_path / "b", progress=False)
    assert caught.value.field == "stage_options.fit.epoch"
    with pytest.raises(ConfigError, match="ratio"):
        make_lod(LodConfig(asset=str(model), ratio=1.5), tmp_path / "c", progress=False)
    with pytest.raises(InputError, match="asset: file not found"):
        make_lod(LodConfig(asset=str(tmp_path / "none.glb"), device="cpu"), tmp_path / "d", progress=False)
    assert not any((tmp_path / name).exists() for name in "abcd")


@pytest.mark.slow
def test_a_chain_killed_in_its_fit_stage_resumes_from_there(tmp_path: Path, kill_and_resume) -> None:
    model = _write_asset(tmp_path / "asset")
    options = {**SMALL, "fit": {**SMALL["fit"], "epochs": 30, "train.checkpoint_every": 1}}
    lines = ["[stage_options.simplify]", *(f"{k} = {json.dumps(v)}" for k, v in options["simplify"].items()), "[stage_options.fit]"]
    lines += [f'"{k}" = {json.dumps(v)}' for k, v in options["fit"].items()]
    (tmp_path / "lod.toml").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    argv = ["lod", str(model), "--ratio", "0.3", "--size", "16", "--no-shadows", "--device", "cpu", "--config", str(tmp_path / "lod.toml")]
    stages = out / STATE_DIR / "checkpoints" / "stages"
    # killed once the fit stage has checkpointed (the simplify stage has finished by then)
    report = kill_and_resume(argv, out, checkpoints=stages / "fit" / STATE_DIR / "checkpoints")
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    started = [e["stage"] for e in events if e["event"] == "stage" and e["stage_event"] == "bake"]
    assert started == ["simplify", "fit", "fit"]  # the finished simplify stage was not run again; the fit was, once more
    fit_report = json.loads((stages / "fit" / "report.json").read_text())
    assert fit_report["resumed"] is True and fit_report["steps"] == 30 * 4  # the fit went on from its own checkpoint
    assert report["stages"]["fit"]["epochs"] == 30 and (out / "lod.glb").is_file()

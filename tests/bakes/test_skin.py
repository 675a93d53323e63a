"""Skin-weight fitting: weights transferred from the closest original surface, fitted over the clip
(lower animated error where a LOD vertex lies between the original's), pruned to four influences,
non-negative and normalised; the skinned LOD plays its clip; bad inputs are refused clearly."""

from __future__ import annotations

import subprocess
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from neuralbake.bakes.skin import SkinConfig, skin_lod
from neuralbake.errors import ConfigError, InputError
from neuralbake.io.gltf import Material, Mesh, Scene, load_gltf, write_gltf
from neuralbake.render.skinning import pose_scene

from ..render.test_skinning import _write_rig

ROOT = Path(__file__).resolve().parents[2]
ARM = ROOT / "examples" / "arm" / "arm.gltf"


def _load(path: Path) -> Scene:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_gltf(path)


def _static(scene: Scene, folder: Path) -> Path:
    """``scene`` (at rest) without its skin, written as a plain mesh."""
    folder.mkdir(parents=True, exist_ok=True)
    meshes = [replace(m, skin=None, bind_positions=None, bind_normals=None, bind_tangents=None, joints=None, weights=None) for m in scene.meshes]
    return write_gltf(folder / "lod.gltf", replace(scene, meshes=meshes, rig=None))


def _quick(**changes) -> SkinConfig:
    base = {"steps": 150, "views": 2, "render_size": 24, "frames": 4, "held_out_frames": 2, "image_weight": 0.0, "device": "cpu"}
    return SkinConfig(**{**base, **changes})


def test_a_vertex_between_the_originals_follows_it_better_after_the_fit(tmp_path: Path) -> None:
    # the two-bone strip: rows at y = 0 (root), 1 (half and half) and 2 (child); the LOD strip has a
    # row at y = 1.5, whose transferred weights (0.25 / 0.75) do not follow the original's surface there
    rig = _write_rig(tmp_path / "rig")
    points = np.array([[x, y, 0] for y in (0.0, 0.5, 1.5, 2.0) for x in (-0.1, 0.1)], np.float32)
    faces = np.array([[0, 1, 3], [0, 3, 2], [2, 3, 5], [2, 5, 4], [4, 5, 7], [4, 7, 6]])
    strip = Scene(meshes=[Mesh(positions=points, indices=faces, normals=np.tile([0, 0, 1.0], (8, 1)).astype(np.float32))], materials=[Material()])
    lod = write_gltf((tmp_path / "lod").mkdir() or tmp_path / "lod" / "lod.gltf", strip)
    report = skin_lod(_quick(lod=str(lod), reference=str(rig), steps=300, learning_rate=0.05), tmp_path / "out", progress=False)
    assert report["transferred_vertex_error"] > 0
    assert report["vertex_error"] < 0.8 * report["transferred_vertex_error"], report
    skinned = _load(tmp_path / "out" / "lod.glb")
    weights = skinned.meshes[0].weights
    assert (weights >= 0).all() and np.allclose(weights.sum(1), 1.0, atol=1e-5) and ((weights > 0).sum(1) <= 4).all()
    assert skinned.meshes[0].skin == 0 and skinned.rig.clip("bend") is not None


def test_the_arm_is_skinned_sparsely_and_plays_its_clip(tmp_path: Path) -> None:
    from neuralbake.bakes.simplify import decimate_scene

    arm = _load(ARM)
    lod = _static(decimate_scene(arm, 400).scene, tmp_path / "static")
    report = skin_lod(_quick(lod=str(lod), reference=str(ARM), influences=2), tmp_path / "out", progress=False)
    assert report["vertex_error"] < 0.002 and report["pruning_cost"] >= -1e-9 and report["influences"] == 2
    skinned = _load(tmp_path / "out" / "lod.glb")
    weights = skinned.meshes[0].weights
    assert ((weights > 0).sum(1) <= 2).all() and np.allclose(weights.sum(1), 1.0, atol=1e-5)
    assert (tmp_path / "out" / "frames.png").is_file()
    for time in (0.5, 1.0):  # the LOD bends with the original
        ref = pose_scene(arm, 0, time).meshes[0].positions
        ours = pose_scene(skinned, 0, time).meshes[0].positions
        gap = np.sqrt(((ours[:, None] - ref[None]) ** 2).sum(-1)).min(1)
        assert gap.max() < 0.05


def test_skin_refuses_bad_inputs_clearly(tmp_path: Path) -> None:
    crate = ROOT / "examples" / "crate" / "crate.gltf"
    still = _load(ARM)
    (tmp_path / "still").mkdir()
    write_gltf(tmp_path / "still" / "arm.gltf", replace(still, rig=replace(still.rig, clips=[])))
    cases = [
        (_quick(lod=str(ARM), reference=str(crate)), InputError, "has no skin"),
        (_quick(lod=str(ARM), reference=str(tmp_path / "still" / "arm.gltf")), InputError, "no animation clip"),
        (_quick(lod=str(tmp_path / "none.gltf"), reference=str(ARM)), InputError, "lod: file not found"),
        (_quick(lod=str(ARM), reference=str(ARM), influences=5), ConfigError, "influences"),
        (_quick(lod=str(ARM), reference=str(ARM), candidates=2, influences=4), ConfigError, "candidates"),
        (_quick(lod=str(ARM), reference=""), ConfigError, "reference"),
    ]
    for k, (config, error, message) in enumerate(cases):
        with pytest.raises(error, match=message):
            skin_lod(config, tmp_path / f"o{k}", progress=False)
        assert not (tmp_path / f"o{k}").exists()


def test_skin_runs_from_the_command_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "neuralbake", "skin", str(ARM), "--reference", str(ARM), "--out", str(tmp_path / "cli"), "--steps", "20",
         "--views", "2", "--render-size", "24", "--frames", "2", "--held-out-frames", "1", "--device", "cpu"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "transferred" in result.stdout + result.stderr and (tmp_path / "cli" / "lod.glb").is_file()

"""Blender plays what neuralbake writes: a skinned glTF written by `write_gltf` (the tiny two-bone
rig, and a simplified BrainStem LOD) is imported by Blender's own glTF importer (bpy 5.0.1, in its
own environment because bpy needs numpy < 2), posed at frames of its clip, and every vertex Blender
shows lies where our skinning puts it. Skipped, with the reason, where bpy cannot be installed."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).with_name("blender_pose.py")
BPY = "bpy==5.0.1"


@pytest.fixture(scope="module")
def blender_python() -> Path:
    """A Python with bpy (a virtual environment cached per user, made on first use)."""
    folder = Path.home() / ".cache" / "neuralbake-tests" / "bpy-5.0.1"
    python = folder / "bin" / "python"
    ready = folder / ".installed"
    if not ready.is_file():
        made = subprocess.run([sys.executable, "-m", "venv", "--clear", str(folder)], capture_output=True, text=True, timeout=300, check=False)
        if made.returncode != 0:
            pytest.skip(f"could not make a virtual environment for bpy: {made.stderr.strip()[:300]}")
        done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", BPY, "numpy<2"], capture_output=True, text=True, timeout=900, check=False)
        if done.returncode != 0:
            pytest.skip(f"pip could not install {BPY} (it needs Python 3.11 and PyPI): {done.stderr.strip()[-300:]}")
        ready.write_text("ok\n")
    return python


def _blender_pose(python: Path, gltf: Path, seconds: float) -> dict:
    done = subprocess.run([str(python), str(SCRIPT), str(gltf), str(seconds)], capture_output=True, text=True, timeout=600, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("POSE")]
    assert lines, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(lines[-1][4:])


def _our_pose(gltf: Path, seconds: float) -> np.ndarray:
    from neuralbake.io.gltf import load_gltf
    from neuralbake.render.skinning import pose_scene

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scene = load_gltf(gltf)
    return np.concatenate([m.positions for m in pose_scene(scene, 0, seconds).meshes]).astype(np.float64)


def _farthest_from_ours(blender: np.ndarray, ours: np.ndarray) -> float:
    from scipy.spatial import cKDTree

    return float(cKDTree(ours).query(blender)[0].max())


@pytest.mark.slow
def test_blender_poses_a_written_rig_as_we_do(blender_python: Path, tmp_path: Path) -> None:
    from neuralbake.io.gltf import load_gltf, write_gltf

    from ..render.test_skinning import _write_rig

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scene = load_gltf(_write_rig(tmp_path / "rig"))
    (tmp_path / "out").mkdir()
    written = write_gltf(tmp_path / "out" / "rig.gltf", scene)
    # Blender interpolates quaternion keys component-wise (normalised lerp) where glTF says slerp: the
    # two agree at the keys and half-way between two keys, so those are the times compared here
    for seconds in (0.0, 0.5, 1.0):
        posed = _blender_pose(blender_python, written, seconds)
        assert posed["actions"] == ["bend"]
        points = np.array(posed["points"])
        assert len(points) == 6 and _farthest_from_ours(points, _our_pose(written, seconds)) < 1e-4


@pytest.mark.slow
def test_blender_plays_a_simplified_brainstem(blender_python: Path, tmp_path: Path, shared_dir: Path) -> None:
    from neuralbake.bakes.simplify import SimplifyConfig, simplify_lod

    config = SimplifyConfig(asset=str(shared_dir / "assets" / "BrainStem" / "BrainStem.glb"), ratio=0.1, render_size=24, views=2, held_out_views=1,
                            epochs=1, frames=2, device="cpu")
    simplify_lod(config, tmp_path / "lod", progress=False)
    lod = tmp_path / "lod" / "lod.glb"
    rest, later = _blender_pose(blender_python, lod, 0.0), _blender_pose(blender_python, lod, 3.0)
    assert len(rest["actions"]) == 1
    ours_rest, ours_later = _our_pose(lod, 0.0), _our_pose(lod, 3.0)
    size = float(np.linalg.norm(ours_rest.max(0) - ours_rest.min(0)))
    for blender, ours in ((np.array(rest["points"]), ours_rest), (np.array(later["points"]), ours_later)):
        assert _farthest_from_ours(blender, ours) < 1e-4 * size
    assert np.abs(np.array(later["points"]).mean(0) - np.array(rest["points"]).mean(0)).max() > 1e-3 * size  # the clip moves it

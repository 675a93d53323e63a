"""Joint shape + appearance fitting (``fit --shape``): the large-steps parameters and their optimiser
state, a LOD that is too small growing back to its original, resume, and the refusals."""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from neuralbake.bakes.fit import fit_lod
from neuralbake.bakes.fit.shape import ShapeParameters
from neuralbake.bakes.folder import STATE_DIR
from neuralbake.errors import ConfigError, InputError
from neuralbake.io.gltf import Scene, load_gltf, write_gltf
from neuralbake.nn.trainer import TrainingInterrupted

from .test_fit import _config, _sphere, _stop_at, _write_asset


def _shrunk(tmp_path: Path, model: Path, scale: float = 0.85) -> Path:
    """The asset with every vertex pulled towards the centre: a LOD whose shape is off."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scene = load_gltf(model)
    meshes = [replace(m, positions=np.ascontiguousarray(m.positions * scale)) for m in scene.meshes]
    (tmp_path / "lod").mkdir()
    return write_gltf(tmp_path / "lod" / "lod.gltf", Scene(meshes=meshes, materials=scene.materials))


def _radius(path: Path) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(np.linalg.norm(load_gltf(path).meshes[0].positions, axis=1).mean())


def test_shape_parameters_round_trip_keep_seams_closed_and_checkpoint_their_optimiser() -> None:
    mesh = _sphere(6, 8)
    positions = torch.from_numpy(mesh.positions)
    faces = torch.from_numpy(mesh.indices)
    shape = ShapeParameters(positions, faces, lam=2.0)
    assert shape.welded_vertices < len(positions)  # the uv seam and the poles are welded
    assert torch.allclose(shape.positions(), positions, atol=1e-5)  # x = (I + lam L)^-1 (I + lam L) x
    twin = ShapeParameters(positions, faces, lam=2.0)
    gradient = torch.randn_like(shape.u, generator=torch.Generator().manual_seed(0))
    for _ in range(3):
        shape.grad = gradient.clone()
        assert shape.step(0.01)
    twin.load_state_dict(shape.state_dict())  # what a checkpoint holds: u, both moments and the step count
    assert int(twin.t) == 3
    shape.grad, twin.grad = gradient.clone(), gradient.clone()
    shape.step(0.01), twin.step(0.01)
    assert torch.equal(shape.u, twin.u) and torch.equal(shape.g2, twin.g2)
    moved = shape.positions().detach()
    seam = shape.group
    for w in seam.unique():
        members = moved[seam == w]
        assert torch.allclose(members, members[:1].expand_as(members))  # split vertices move together
    assert not torch.allclose(moved, positions, atol=1e-4)
    shape.grad = torch.full_like(shape.u, float("nan"))
    before = shape.u.detach().clone()
    assert not shape.step(0.01) and torch.equal(shape.u, before)  # a non-finite gradient is skipped


@pytest.mark.slow
def test_a_shrunk_lod_grows_back_to_its_original_with_shape(tmp_path: Path) -> None:
    model = _write_asset(tmp_path / "asset")
    lod = _shrunk(tmp_path, model)
    settings = dict(reference=str(model), render_size=48, views=8, epochs=6, shape_learning_rate=0.01)
    plain = fit_lod(_config(lod, **settings), tmp_path / "plain", progress=False)
    shaped = fit_lod(_config(lod, shape=True, **settings), tmp_path / "shaped", progress=False)
    assert plain["judged_by"] == shaped["judged_by"] == "psnr_union_db"
    assert shaped["psnr_union_db"] > plain["psnr_union_db"] + 1.0  # the silhouette error is gone, not only the colours
    assert plain["psnr_db"] > plain["psnr_union_db"]  # judged on its own hits alone, a too-small LOD would look better
    assert 0.85 < 0.9 < _radius(tmp_path / "shaped" / "lod.gltf") and _radius(tmp_path / "plain" / "lod.gltf") == pytest.approx(0.85, abs=1e-3)
    assert shaped["shape"]["mean_displacement"] > 0.01 and shaped["shape"]["welded_vertices"] < shaped["vertices"]
    assert "shape" not in plain


@pytest.mark.slow
def test_an_interrupted_shape_fit_resumes_to_the_same_mesh(tmp_path: Path) -> None:
    model = _write_asset(tmp_path / "asset")
    lod = _shrunk(tmp_path, model)
    config = _config(lod, reference=str(model), shape=True, texture_size=16, render_size=24, views=4, held_out_views=1, epochs=3)
    straight = fit_lod(config, tmp_path / "straight", progress=False)
    with pytest.raises(TrainingInterrupted):
        fit_lod(config, tmp_path / "stopped", progress=False, on_step=_stop_at(5))
    resumed = fit_lod(config, tmp_path / "stopped", progress=False, resume=True)
    assert resumed["psnr_union_db"] == straight["psnr_union_db"]
    a = torch.load(tmp_path / "straight" / STATE_DIR / "checkpoints" / "fit.pt", weights_only=True)["buffers"]
    b = torch.load(tmp_path / "stopped" / STATE_DIR / "checkpoints" / "fit.pt", weights_only=True)["buffers"]
    assert {"shape.u", "shape.g1", "shape.g2", "shape.t"} <= a.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (tmp_path / "stopped" / "lod.gltf").read_bytes() == (tmp_path / "straight" / "lod.gltf").read_bytes()


def test_shape_refusals(tmp_path: Path) -> None:
    from ..render.test_skinning import _write_rig

    model = _write_asset(tmp_path / "asset")
    with pytest.raises(ConfigError, match="luma-chroma") as caught:
        fit_lod(_config(model, shape=True, target="luma-chroma"), tmp_path / "a", progress=False)
    assert caught.value.field == "shape"
    with pytest.raises(ConfigError, match="shape_learning_rate"):
        fit_lod(_config(model, shape=True, shape_learning_rate=-1.0), tmp_path / "b", progress=False)
    rig = _write_rig(tmp_path / "rig")
    with pytest.raises(InputError, match="skinned") as caught:
        fit_lod(_config(rig, shape=True), tmp_path / "c", progress=False)
    assert caught.value.field == "shape" and not (tmp_path / "c").exists()

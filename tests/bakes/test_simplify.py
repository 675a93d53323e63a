"""QEM decimation for LODs: budgets reached, uv charts kept, per-vertex weights steer the plain path
and protect on the textured one, skinned meshes stay skinned and pose like their original; bad
budgets are refused."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from neuralbake.bakes.simplify import decimate_scene, triangle_budget
from neuralbake.errors import InputError
from neuralbake.io.gltf import Mesh, Scene, load_gltf

ROOT = Path(__file__).resolve().parents[2]


def _load(path: Path) -> Scene:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_gltf(path)


def _uv_area(mesh: Mesh) -> float:
    a = mesh.uv0[mesh.indices]
    e1, e2 = a[:, 1] - a[:, 0], a[:, 2] - a[:, 0]
    return float(0.5 * np.abs(e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]).sum())


def _sphere(rows: int = 24, cols: int = 48) -> Scene:
    """A closed sphere without uvs (welded poles), one material."""
    theta = np.linspace(0, math.pi, rows + 1)[1:-1]
    phi = np.linspace(0, 2 * math.pi, cols, endpoint=False)
    t, p = np.meshgrid(theta, phi, indexing="ij")
    ring = np.stack((np.sin(t) * np.cos(p), np.sin(t) * np.sin(p), np.cos(t)), -1).reshape(-1, 3)
    points = np.concatenate((ring, [[0, 0, 1], [0, 0, -1]])).astype(np.float32)
    top, bottom = len(ring), len(ring) + 1
    faces = []
    for i in range(rows - 2):
        for j in range(cols):
            a, b, c, d = i * cols + j, i * cols + (j + 1) % cols, (i + 1) * cols + j, (i + 1) * cols + (j + 1) % cols
            faces += [(a, c, b), (b, c, d)]
    for j in range(cols):
        faces += [(top, j, (j + 1) % cols), (bottom, (rows - 3) * cols + (j + 1) % cols, (rows - 3) * cols + j)]
    return Scene(meshes=[Mesh(positions=points, indices=np.array(faces, np.int64), normals=points.copy())], materials=[])


def test_budgets_are_checked() -> None:
    assert triangle_budget(1000, ratio=0.25) == 250 and triangle_budget(1000, triangles=300) == 300 and triangle_budget(10, triangles=99) == 10
    for bad in (0.0, 1.5, -0.1, float("nan"), True, None):
        with pytest.raises(InputError, match="ratio"):
            triangle_budget(1000, ratio=bad)
    with pytest.raises(InputError, match="triangles"):
        triangle_budget(1000, triangles=-3)
    with pytest.raises(InputError, match="no triangles"):
        decimate_scene(Scene(meshes=[], materials=[]), 10)


def test_a_textured_mesh_reaches_its_budget_and_keeps_its_uv_charts() -> None:
    crate = _load(ROOT / "examples" / "crate" / "crate.gltf")
    result = decimate_scene(crate, 500)
    mesh = result.scene.meshes[0]
    assert abs(result.triangles_after - 500) <= 5 and result.triangles_before == crate.num_triangles
    assert _uv_area(mesh) == pytest.approx(_uv_area(crate.meshes[0]), rel=0.05)  # the charts are still covered
    assert np.allclose(np.linalg.norm(mesh.normals, axis=1), 1.0, atol=1e-4)
    assert mesh.indices.max() < len(mesh.positions) and len(result.source_vertex[0]) == len(mesh.positions)
    # every new vertex lies where the original surface was (QEM moves vertices only slightly)
    nearest = np.sqrt(((mesh.positions[:, None] - crate.meshes[0].positions[None]) ** 2).sum(-1)).min(1)
    assert nearest.max() < 0.1 * float(np.linalg.norm(np.subtract(*crate.bounds())))


def test_weights_keep_vertices_on_the_plain_path_and_protection_keeps_faces_whole() -> None:
    sphere = _sphere()
    plain = decimate_scene(sphere, 300).scene.meshes[0]
    heavy = np.where(sphere.meshes[0].positions[:, 2] > 0.3, 50.0, 1.0)
    weighted = decimate_scene(sphere, 300, vertex_weights=[heavy]).scene.meshes[0]
    top = lambda m: int((m.positions[:, 2] > 0.3).sum())  # noqa: E731
    assert top(weighted) > 1.5 * top(plain)  # the heavy cap keeps its vertices

    crate = _load(ROOT / "examples" / "crate" / "crate.gltf")
    original = crate.meshes[0]
    keep = original.positions[:, 1] > np.quantile(original.positions[:, 1], 0.8)  # the top of the crate
    protected = decimate_scene(crate, 500, protect=[keep]).scene.meshes[0]
    kept = {tuple(p) for p in np.round(protected.positions, 5)}
    assert all(tuple(p) in kept for p in np.round(original.positions[keep], 5))  # untouched where protected
    # on a textured mesh, weights protect the heaviest vertices, a bounded number of them
    heavy = decimate_scene(crate, 500, vertex_weights=[np.where(keep, 10.0, 1.0)])
    assert 495 <= heavy.triangles_after <= 1.25 * 500  # the protected faces cost at most a quarter more


def test_a_skinned_character_stays_skinned_and_poses_like_its_original(shared_dir: Path) -> None:
    from neuralbake.render.skinning import pose_scene

    brainstem = _load(shared_dir / "assets" / "BrainStem" / "BrainStem.glb")
    result = decimate_scene(brainstem, round(0.1 * brainstem.num_triangles))
    assert abs(result.triangles_after - 0.1 * brainstem.num_triangles) < 0.02 * brainstem.num_triangles
    assert all(m.skin == 0 and m.bind_positions is not None and m.weights is not None for m in result.scene.meshes)
    for time in (0.0, 12.0):
        lod, original = pose_scene(result.scene, 0, time), pose_scene(brainstem, 0, time)
        ref = np.concatenate([m.positions for m in original.meshes])
        sample = np.concatenate([m.positions for m in lod.meshes])[::7]
        gap = np.sqrt(((sample[:, None] - ref[None, ::3]) ** 2).sum(-1)).min(1)
        assert np.quantile(gap, 0.95) < 0.03 * float(np.linalg.norm(ref.max(0) - ref.min(0)))  # follows the animated body


# --- large steps and the shape fit -----------------------------------------------------------------


def test_large_steps_round_trip_and_gradient_is_the_inverse_solve() -> None:
    import torch

    from neuralbake.bakes.simplify.shape import LargeSteps

    sphere = _sphere(8, 12).meshes[0]
    positions = torch.from_numpy(sphere.positions).float()
    faces = torch.from_numpy(sphere.indices)
    steps = LargeSteps(positions, faces, lam=5.0)
    x = steps.positions()
    assert torch.allclose(x, positions, atol=1e-4)  # u = (I + lam L) x and back
    weights = torch.randn_like(x)
    (x * weights).sum().backward()
    dense = steps.matrix.to_dense()
    assert torch.allclose(steps.u.grad, torch.linalg.solve(dense, weights), atol=1e-4)  # (I + lam L) is symmetric
    assert torch.allclose(dense, dense.T) and torch.allclose(dense.sum(1), torch.ones(len(positions)))  # Laplacian rows sum to 0
    steps.close()


def _crate_views(rs, cameras, size, lighting):
    import torch

    from neuralbake.bakes.simplify.shape import ShapeView
    from neuralbake.render.deferred import render

    views = []
    for camera in cameras:
        with torch.no_grad():
            out = render(rs, camera, size, size, lighting, antialias=True)
        views.append(ShapeView(camera, out.ldr, out.alpha))
    return views


def test_the_shape_fit_grows_a_shrunk_mesh_back_to_the_original() -> None:
    import torch

    from neuralbake.bakes.simplify.decimate import weld
    from neuralbake.bakes.simplify.shape import fit_shape
    from neuralbake.render.camera import fibonacci_orbit
    from neuralbake.render.deferred import DirectionalLight, Lighting
    from neuralbake.render.scene import prepare_scene

    crate = _load(ROOT / "examples" / "crate" / "crate.gltf")
    lighting = Lighting(directional=[DirectionalLight(direction=(-0.45, 0.75, 0.5), irradiance=2.0)], shadows=False)
    original = prepare_scene(crate)
    views = _crate_views(original, fibonacci_orbit(6, 3.5), 48, lighting)
    dented = prepare_scene(crate)
    group, _ = weld(dented.positions.numpy())
    group = torch.from_numpy(group)
    shrunk = 0.85 * dented.positions  # a smooth deformation: the crate shrunk by 15 %
    dented.set_positions(shrunk)
    fit, best = fit_shape(dented, group, group[dented.faces], views, lighting, epochs=8, learning_rate=0.1, lam=2.0)
    assert torch.equal(best, dented.positions)
    assert fit.best_loss < 0.3 * fit.losses[0], fit.losses
    assert fit.best_loss == min(fit.losses) and fit.steps == 8 * len(views)
    error = (dented.positions - original.positions).norm(dim=1).mean()
    assert error < 0.4 * (original.positions - shrunk).norm(dim=1).mean()  # the vertices went most of the way back


def test_a_fit_with_nothing_to_gain_stops_after_its_patience() -> None:
    """The crate fitted against its own renders: every pass can only make it worse, so each is undone; with patience 2
    the fit stops after two of its eight epochs and keeps the starting shape."""
    import torch

    from neuralbake.bakes.simplify.decimate import weld
    from neuralbake.bakes.simplify.shape import fit_shape
    from neuralbake.render.camera import fibonacci_orbit
    from neuralbake.render.deferred import DirectionalLight, Lighting
    from neuralbake.render.scene import prepare_scene

    crate = _load(ROOT / "examples" / "crate" / "crate.gltf")
    lighting = Lighting(directional=[DirectionalLight(direction=(-0.45, 0.75, 0.5), irradiance=2.0)], shadows=False)
    exact = prepare_scene(crate)
    views = _crate_views(exact, fibonacci_orbit(4, 3.5), 32, lighting)
    start = exact.positions.clone()
    group = torch.from_numpy(weld(start.numpy())[0])
    fit, best = fit_shape(exact, group, group[exact.faces], views, lighting, epochs=8, learning_rate=0.1, lam=2.0, patience=2)
    assert fit.stopped_by == "patience" and fit.backtracks == 2, fit.losses
    assert fit.steps == 2 * len(views) and len(fit.losses) == 3
    assert torch.allclose(best, start, atol=1e-5)  # the undone passes left the shape where it was
    full, _ = fit_shape(prepare_scene(crate), group, group[exact.faces], views, lighting, epochs=3, learning_rate=0.1, lam=2.0)
    assert full.stopped_by == "epochs" and full.steps == 3 * len(views)  # patience 0: every epoch runs


# --- the bake and its command --------------------------------------------------------------------


def _tiny(**changes):
    from neuralbake.bakes.simplify import SimplifyConfig

    base = {"asset": str(ROOT / "examples" / "crate" / "crate.gltf"), "ratio": 0.3, "render_size": 48, "views": 6, "held_out_views": 2, "epochs": 2, "device": "cpu"}
    return SimplifyConfig(**{**base, **changes})


def test_simplify_writes_a_lod_a_triptych_and_a_report_comparing_with_qem(tmp_path: Path) -> None:
    import json

    from neuralbake.bakes.simplify import simplify_lod
    from neuralbake.io.manifest import verify_bake_folder

    report = simplify_lod(_tiny(), tmp_path / "out", progress=False)
    assert verify_bake_folder(tmp_path / "out") is not None
    lod = _load(tmp_path / "out" / "lod.glb")
    assert lod.num_triangles == report["triangles"] and abs(report["triangles"] - 0.3 * 1728) <= 6
    assert lod.materials[0].base_color_texture is not None  # the original's material and textures
    for key in ("psnr_db", "flip", "start_psnr_db", "start_flip", "backtracks", "ms_per_step", "high_error_regions"):
        assert key in report
    assert report["steps"] == 2 * 6 and len(report["train_loss_curve"]) == 3
    assert min(report["train_loss_curve"]) <= report["train_loss_curve"][0]
    assert report["training"]["quality_key"] == "loss_db" and report["training"]["converged"] in (True, False)
    assert 0 < len(report["high_error_regions"]) <= 5 and report["high_error_regions"][0]["peak_error"] > 0
    assert (tmp_path / "out" / "triptych.png").is_file()
    saved = json.loads((tmp_path / "out" / "report.json").read_text())
    assert saved["bake"] == "simplify" and saved["device_defaults"] == {}


def test_simplify_refuses_bad_inputs_clearly(tmp_path: Path) -> None:
    import json

    from neuralbake.bakes.simplify import simplify_lod
    from neuralbake.errors import ConfigError

    from ..render.test_skinning import _write_rig

    rig = _write_rig(tmp_path / "rig")
    two = json.loads(rig.read_text())  # a second skin on a second copy of the mesh
    two["skins"].append(dict(two["skins"][0]))
    two["nodes"].append({"mesh": 0, "skin": 1})
    two["scenes"][0]["nodes"].append(len(two["nodes"]) - 1)
    (tmp_path / "rig" / "two.gltf").write_text(json.dumps(two))
    cases = [
        (_tiny(asset=str(tmp_path / "rig" / "two.gltf")), InputError, "several skins"),
        (_tiny(protect_materials=["gold"]), InputError, "protect_materials"),
        (_tiny(protect_mask=str(tmp_path / "nope.png")), InputError, "protect_mask: file not found"),
        (_tiny(asset=str(tmp_path / "none.gltf")), InputError, "asset: file not found"),
        (_tiny(ratio=0.0), ConfigError, "ratio"),
        (_tiny(ratio=1.5), ConfigError, "ratio"),
        (_tiny(learning_rate=-1.0), ConfigError, "learning_rate"),
        (_tiny(lod=str(tmp_path / "missing.gltf")), InputError, "lod: file not found"),
        (_tiny(lod=str(rig), image_guidance=2.0), ConfigError, "fitted as it is"),
    ]
    for k, (config, error, message) in enumerate(cases):
        with pytest.raises(error, match=message):
            simplify_lod(config, tmp_path / f"o{k}", progress=False)
        assert not (tmp_path / f"o{k}").exists()


def test_simplify_protects_a_material_and_runs_from_the_command_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    crate = ROOT / "examples" / "crate" / "crate.gltf"
    name = _load(crate).materials[0].name
    result = subprocess.run(
        [sys.executable, "-m", "neuralbake", "simplify", str(crate), "--out", str(tmp_path / "cli"), "--ratio", "0.3", "--render-size", "32",
         "--views", "4", "--held-out", "2", "--epochs", "1", "--device", "cpu", "--protect-materials", name],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "QEM decimation alone" in result.stdout + result.stderr
    lod = _load(tmp_path / "cli" / "lod.glb")
    assert lod.num_triangles == 1728  # its only material is protected: nothing to decimate


def test_a_lod_equal_to_its_original_is_reported_not_a_crash(tmp_path: Path) -> None:
    """One triangle cannot be decimated: the LOD renders exactly as the original, so its PSNRs are infinite. The command
    finishes with its summary (``inf dB (exact)``) and report.json is plain JSON: null with a note, never a traceback."""
    import json

    from typer.testing import CliRunner

    from neuralbake.cli import app
    from neuralbake.io.gltf import Material, write_gltf

    triangle = Mesh(positions=np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], np.float32), indices=np.array([[0, 1, 2]], np.int64),
                    normals=np.array([[0, 0, 1]] * 3, np.float32))
    asset = write_gltf(tmp_path / "triangle.glb", Scene(meshes=[triangle], materials=[Material()]))
    out = tmp_path / "out"
    argv = ["simplify", str(asset), "--out", str(out), "--render-size", "16", "--views", "2", "--held-out", "1", "--epochs", "1",
            "--device", "cpu", "-q"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0 and result.exception is None, result.output
    assert "held-out PSNR inf dB (exact)" in " ".join(result.output.split())

    def refuse(constant: str) -> None:
        raise AssertionError(f"report.json holds {constant}, which is not JSON")

    report = json.loads((out / "report.json").read_text(), parse_constant=refuse)
    assert report["psnr_db"] is None and report["non_finite"]["psnr_db"].startswith("inf: the result equals the reference exactly")


def test_a_given_lod_is_fitted_instead_of_decimating(tmp_path: Path) -> None:
    from neuralbake.bakes.simplify import simplify_lod
    from neuralbake.io.gltf import write_gltf

    crate = _load(ROOT / "examples" / "crate" / "crate.gltf")
    (tmp_path / "artist").mkdir()
    write_gltf(tmp_path / "artist" / "lod.gltf", decimate_scene(crate, 300).scene)
    report = simplify_lod(_tiny(lod=str(tmp_path / "artist" / "lod.gltf"), ratio=0.9), tmp_path / "out", progress=False)
    assert report["start"] == "the given lod" and report["start_triangles"] == report["triangles"] == _load(tmp_path / "artist" / "lod.gltf").num_triangles


def test_a_skinned_character_is_simplified_over_its_animation_and_keeps_playing(tmp_path: Path, shared_dir: Path) -> None:
    from neuralbake.bakes.simplify import simplify_lod
    from neuralbake.render.skinning import pose_scene

    brainstem = shared_dir / "assets" / "BrainStem" / "BrainStem.glb"
    report = simplify_lod(_tiny(asset=str(brainstem), ratio=0.1, render_size=32, views=4, held_out_views=2, epochs=1, frames=2), tmp_path / "out", progress=False)
    assert report["skinned"] and report["frames"] == 2
    assert report["joint_weighted_vertices"] == 0  # BrainStem is rigidly skinned: every vertex follows one joint
    lod = _load(tmp_path / "out" / "lod.glb")
    original = _load(brainstem)
    assert len(lod.rig.clips) == 1 and all(m.skin == 0 and m.weights is not None for m in lod.meshes)
    assert abs(lod.num_triangles - 0.1 * original.num_triangles) < 0.02 * original.num_triangles
    for time in (3.0, 20.0):  # the LOD plays the clip and follows the animated body
        ref = np.concatenate([m.positions for m in pose_scene(original, 0, time).meshes])
        sample = np.concatenate([m.positions for m in pose_scene(lod, 0, time).meshes])[::9]
        gap = np.sqrt(((sample[:, None] - ref[None, ::3]) ** 2).sum(-1)).min(1)
        assert np.quantile(gap, 0.95) < 0.03 * float(np.linalg.norm(ref.max(0) - ref.min(0)))


def test_a_tiny_rig_is_simplified_and_written_with_its_skin(tmp_path: Path) -> None:
    from neuralbake.bakes.simplify import simplify_lod

    from ..render.test_skinning import _write_rig

    rig = _write_rig(tmp_path / "rig")
    report = simplify_lod(_tiny(asset=str(rig), ratio=1.0, render_size=24, views=2, held_out_views=1, epochs=1, frames=2), tmp_path / "out", progress=False)
    assert report["skinned"] and report["clip"] == "bend"
    assert report["joint_weighted_vertices"] == 2  # the middle row is shared half and half
    lod = _load(tmp_path / "out" / "lod.glb")
    assert lod.meshes[0].skin == 0 and lod.rig.clip("bend").duration == pytest.approx(1.0)


def test_the_triptych_shows_every_held_out_view(tmp_path: Path) -> None:
    from PIL import Image

    from neuralbake.bakes.simplify import simplify_lod

    simplify_lod(_tiny(held_out_views=5, epochs=1), tmp_path / "out", progress=False)
    width, height = Image.open(tmp_path / "out" / "triptych.png").size
    assert height == 5 * 48 + 4 * 4  # five rows of 48-pixel panels, 4-pixel gaps (it showed three)
    assert width == 4 * 48 + 3 * 4  # target | QEM | ours | error

"""ControlNet conditions from render passes: Canny on a known square, depth and normals on known
surfaces, EXR passes as Blender names them (and the errors when one is missing), id masks, and the
passes of neuralbake's own renderer on a sphere."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from neuralbake.errors import InputError
from neuralbake.io.images import save_exr
from neuralbake.postfx import (
    canny_condition,
    depth_condition,
    id_masks,
    normal_condition,
    read_exr_passes,
    render_passes,
    segmentation_condition,
)


def test_canny_finds_the_border_of_a_square_and_nothing_else() -> None:
    image = np.zeros((40, 40, 3), np.float32)
    image[10:30, 10:30] = 1.0
    edges = canny_condition(image)
    assert edges.shape == (40, 40, 3) and set(np.unique(edges)) <= {0.0, 1.0}
    on = np.argwhere(edges[..., 0] > 0)
    assert len(on) > 60  # about the square's perimeter of 80 pixels
    assert np.all((np.abs(on - 9.5).min(1) <= 1.0) | (np.abs(on - 29.5).min(1) <= 1.0))  # every edge pixel hugs the square's border
    assert edges[20, 20, 0] == 0 and edges[2, 2, 0] == 0
    assert not canny_condition(np.full((16, 16, 3), 0.5, np.float32)).any()  # a flat image has no edges
    with pytest.raises(InputError, match="thresholds"):
        canny_condition(image, low=200, high=100)


def test_a_missing_library_is_named_with_its_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from neuralbake.errors import ConfigError

    monkeypatch.setitem(sys.modules, "cv2", None)  # import cv2 now raises ImportError
    with pytest.raises(ConfigError, match="cv2 cannot be imported") as caught:
        canny_condition(np.zeros((8, 8, 3), np.float32))
    assert "pip install opencv-python-headless" in str(caught.value)


def test_depth_is_normalised_inverse_depth_near_white_background_black() -> None:
    depth = np.full((4, 4), np.inf, np.float32)
    depth[0, :] = 2.0
    depth[1, :] = 4.0
    depth[2, :] = 1e10  # Blender's "nothing hit"
    out = depth_condition(depth)
    assert out.shape == (4, 4, 3)
    assert np.allclose(out[0], 1.0) and np.allclose(out[1], 0.1) and np.all(out[2:] == 0.0)
    depth[1, 0] = 3.0  # inverse depth, not depth: 1/3 lies 1/3 of the way from 1/4 to 1/2
    assert depth_condition(depth)[1, 0, 0] == pytest.approx(0.1 + 0.9 * (1 / 3 - 1 / 4) / (1 / 2 - 1 / 4))
    assert not depth_condition(np.full((3, 3), np.inf)).any()


def test_normals_are_turned_into_view_space() -> None:
    normal = np.zeros((2, 2, 3), np.float32)
    normal[0, 0] = (0, 0, 1)  # towards a camera on +z looking down -z
    normal[0, 1] = (1, 0, 0)
    out = normal_condition(normal, np.eye(3))
    assert np.allclose(out[0, 0], (0.5, 0.5, 1.0)) and np.allclose(out[0, 1], (1.0, 0.5, 0.5))
    assert np.allclose(out[1, 1], (0.5, 0.5, 1.0))  # background: facing the camera
    c, s = math.cos(math.pi / 2), math.sin(math.pi / 2)  # a camera on +x looking down -x: right is -z, towards the camera is +x
    world_to_view = np.array([[c, 0, -s], [0, 1, 0], [s, 0, c]])
    assert np.allclose(normal_condition(normal, world_to_view)[0, 1], (0.5, 0.5, 1.0), atol=1e-6)


def test_passes_are_read_from_blender_style_exr_files(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    depth = rng.uniform(1, 5, (6, 8)).astype(np.float32)
    normal = rng.normal(size=(6, 8, 3)).astype(np.float32)
    ids = rng.integers(0, 3, (6, 8)).astype(np.float32)
    layer = "ViewLayer"
    save_exr(tmp_path / "multilayer.exr", np.concatenate((depth[..., None], normal, ids[..., None]), -1),
             channels=[f"{layer}.Depth.Z", f"{layer}.Normal.X", f"{layer}.Normal.Y", f"{layer}.Normal.Z", f"{layer}.IndexOB.X"])
    passes = read_exr_passes(depth=tmp_path / "multilayer.exr", normal=tmp_path / "multilayer.exr", ids=tmp_path / "multilayer.exr")
    assert np.array_equal(passes.depth, depth) and np.array_equal(passes.normal, normal) and np.array_equal(passes.ids, ids.astype(np.int32))
    save_exr(tmp_path / "z.exr", depth[..., None], channels=["Z"])
    assert np.array_equal(read_exr_passes(depth=tmp_path / "z.exr").depth, depth)
    save_exr(tmp_path / "rgb.exr", normal)
    with pytest.raises(InputError, match="no depth channel") as caught:
        read_exr_passes(depth=tmp_path / "rgb.exr")
    assert caught.value.field == "depth" and "Passes > Data > Z" in str(caught.value)
    save_exr(tmp_path / "small.exr", depth[:3, :4, None], channels=["Z"])
    with pytest.raises(InputError, match="differ in size"):
        read_exr_passes(depth=tmp_path / "small.exr", normal=tmp_path / "rgb.exr")
    (tmp_path / "junk.exr").write_bytes(b"not an exr")
    with pytest.raises(InputError, match="not a readable OpenEXR"):
        read_exr_passes(normal=tmp_path / "junk.exr")
    save_exr(tmp_path / "half.exr", (ids + 0.5)[..., None], channels=["IndexOB.X"])
    with pytest.raises(InputError, match="whole"):
        read_exr_passes(ids=tmp_path / "half.exr")


def test_id_masks_partition_the_covered_pixels_and_colours_are_stable() -> None:
    ids = np.array([[0, 1, 1], [2, 2, 0]], np.int32)
    masks = id_masks(ids)
    assert sorted(masks) == [1, 2] and masks[1].sum() == 2 and masks[2].sum() == 2 and not (masks[1] & masks[2]).any()
    seg = segmentation_condition(ids)
    assert np.all(seg[0, 0] == 0) and np.array_equal(seg[0, 1], seg[0, 2]) and not np.array_equal(seg[0, 1], seg[1, 0])
    assert np.array_equal(segmentation_condition(ids[::-1])[1, 1], seg[0, 1])  # an id's colour does not depend on the frame


def test_our_renderer_gives_true_depth_and_normals_of_a_sphere(tmp_path: Path) -> None:
    from neuralbake.io.gltf import load_gltf
    from neuralbake.render.camera import look_at
    from neuralbake.render.scene import prepare_scene

    from ..bakes.test_fit import _write_asset

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the sphere's generated tangents
        scene = prepare_scene(load_gltf(_write_asset(tmp_path / "asset")))
    camera = look_at((0.0, 0.0, 4.0), (0.0, 0.0, 0.0), fov_y_deg=30.0)
    passes = render_passes(scene, camera, 48, 48)
    centre = (24, 24)
    assert passes.depth[centre] == pytest.approx(3.0, abs=0.03)  # the unit sphere's front, 4 - 1 away
    assert np.isinf(passes.depth[0, 0]) and passes.ids[0, 0] == 0 and passes.ids[centre] == 1
    view = normal_condition(passes.normal, passes.world_to_view)
    assert np.allclose(view[centre], (0.5, 0.5, 1.0), atol=0.05)  # facing the camera
    left, right = view[24, 24 - 12], view[24, 24 + 12]
    assert left[0] < 0.5 < right[0]  # x grows to the right of the image
    depth = depth_condition(passes.depth)
    assert depth[centre][0] == pytest.approx(1.0, abs=0.02) and depth[0, 0, 0] == 0.0



def test_the_passes_of_a_mask_card_show_what_lies_behind_its_cut_outs() -> None:
    """examples/cards/decal.gltf's wall behind the foliage card's cut-outs: a card (MASK) in front of the wall; the depth,
    normal and id passes show the wall where the card is cut out and the card on its leaves, as the image does."""
    import dataclasses

    from neuralbake.io.gltf import load_gltf
    from neuralbake.render.camera import look_at
    from neuralbake.render.scene import prepare_scene

    cards = Path(__file__).resolve().parents[2] / "examples" / "cards"
    foliage, decal = load_gltf(cards / "foliage.gltf"), load_gltf(cards / "decal.gltf")
    wall = dataclasses.replace(decal.meshes[0], positions=decal.meshes[0].positions * 2 + np.float32([0, 0.5, -0.4]), material=1)
    scene = prepare_scene(dataclasses.replace(foliage, meshes=[foliage.meshes[0], wall], materials=[foliage.materials[0], decal.materials[0]]))
    passes = render_passes(scene, look_at((0.0, 0.5, 2.5), (0.0, 0.5, 0.0), fov_y_deg=30.0), 48, 48)
    assert set(np.unique(passes.ids)) == {1, 2}  # the card or the wall everywhere: the wall fills the frame behind
    card, wall_seen = passes.ids == 1, passes.ids == 2
    assert card.sum() > 50 and wall_seen.sum() > 50
    assert passes.depth[card].max() < passes.depth[wall_seen].min()  # the card in front, the wall through its cut-outs
    rows, columns = np.nonzero(card)
    inside = wall_seen[rows.min() : rows.max() + 1, columns.min() : columns.max() + 1]
    assert inside.sum() > 0.2 * inside.size  # between the leaves, within the card's extent


def test_cli_writes_conditions_from_exr_passes_and_from_a_gltf_scene(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from neuralbake.cli import app
    from neuralbake.io.images import load_image, save_png

    image = np.zeros((24, 32, 3), np.float32)
    image[6:18, 8:24] = 0.9
    save_png(tmp_path / "render.png", image)
    depth = np.full((24, 32), 1e10, np.float32)
    depth[6:18, 8:24] = 3.0
    ids = np.zeros((24, 32), np.float32)
    ids[6:18, 8:24] = 4
    save_exr(tmp_path / "passes.exr", np.stack((depth, ids), -1), channels=["ViewLayer.Depth.Z", "ViewLayer.IndexOB.X"])
    runner = CliRunner()
    done = runner.invoke(app, ["postfx", "conditions", str(tmp_path / "render.png"), "--depth", str(tmp_path / "passes.exr"), "--ids",
                               str(tmp_path / "passes.exr"), "--out", str(tmp_path / "out")])
    assert done.exit_code == 0, done.output
    written = json.loads((tmp_path / "out" / "conditions.json").read_text())
    assert written["masks"]["4"]["pixels"] == 12 * 16 and "normal" not in written
    mask, _ = load_image(tmp_path / "out" / "masks" / "id_4.png")
    assert mask[..., 0].sum() == 12 * 16 and load_image(tmp_path / "out" / "depth.png")[0][10, 10, 0] == 1.0
    done = runner.invoke(app, ["postfx", "conditions", str(tmp_path / "render.png"), "--normal", str(tmp_path / "passes.exr"), "--out", str(tmp_path / "bad")])
    message = " ".join(done.output.split())  # the console wraps long lines
    assert done.exit_code == 2 and "no normal channels" in message and "Passes > Data > Normal" in message
    assert not (tmp_path / "bad").exists()
    crate = Path(__file__).resolve().parents[2] / "examples" / "crate" / "crate.gltf"
    done = runner.invoke(app, ["postfx", "conditions", str(crate), "--size", "48", "--out", str(tmp_path / "crate")])
    assert done.exit_code == 0, done.output
    for name in ("render", "canny", "depth", "normal", "segmentation"):
        assert (tmp_path / "crate" / f"{name}.png").is_file()
    assert json.loads((tmp_path / "crate" / "conditions.json").read_text())["normal_space"] == "view"


def test_blender_5_multipart_exr_passes_are_read(tmp_path: Path) -> None:
    """Blender 5 writes a multilayer EXR as one part per pass and names the index pass "Object Index"."""
    import OpenEXR

    depth = np.full((4, 6), 3.0, np.float32)
    ids = np.zeros((4, 6), np.float32)
    ids[1:3, 2:4] = 2
    normal = np.zeros((4, 6, 3), np.float32)
    normal[..., 2] = 1.0
    header = {"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage}
    parts = [
        OpenEXR.Part(dict(header), {"ViewLayer.Depth.Z": depth}, "ViewLayer.Depth"),
        OpenEXR.Part(dict(header), {f"ViewLayer.Normal.{a}": np.ascontiguousarray(normal[..., k]) for k, a in enumerate("XYZ")}, "ViewLayer.Normal"),
        OpenEXR.Part(dict(header), {"ViewLayer.Object Index.X": ids}, "ViewLayer.Object Index"),
    ]
    OpenEXR.File(parts).write(str(tmp_path / "blender5.exr"))
    passes = read_exr_passes(depth=tmp_path / "blender5.exr", normal=tmp_path / "blender5.exr", ids=tmp_path / "blender5.exr")
    assert np.array_equal(passes.depth, depth) and np.array_equal(passes.normal, normal)
    assert np.array_equal(passes.ids, ids.astype(np.int32)) and sorted(id_masks(passes.ids)) == [2]  # background (0) has no mask

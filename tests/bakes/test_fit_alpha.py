"""Fits of see-through assets (glTF MASK and BLEND): the LOD keeps the source's alpha in its unlit texture and its
alphaMode, its colours are fitted through the composite, and settings that cannot keep alpha are refused by name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from neuralbake.bakes.fit import FitConfig, fit_lod
from neuralbake.bakes.fit.model import LodAppearance
from neuralbake.bakes.fit.views import Composite, View
from neuralbake.errors import InputError
from neuralbake.io.images import load_image
from neuralbake.render.transparency import composite_layers

CARDS = Path(__file__).resolve().parents[2] / "examples" / "cards"
pytest.importorskip("warp")  # the renderer peels see-through layers with Warp's ray caster


def _config(asset: Path, **kw: object) -> FitConfig:
    base = dict(asset=str(asset), texture_size=64, render_size=48, views=6, held_out_views=2, epochs=4, environment=False,  # noqa: C408
                device="cpu", shadows=False)
    base.update(kw)
    return FitConfig(**base)


def _opaque_copy(asset: Path, folder: Path) -> Path:
    """The same asset with every material made OPAQUE (the old behaviour): ``examples/cards/fit_cards.py``'s own helper."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fit_cards", CARDS / "fit_cards.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.opaque_copy(asset, folder)


def _coverage(asset: Path) -> torch.Tensor:
    """``[H, W]`` alpha of a front render of ``asset`` over an empty background (what the cut-outs leave)."""
    from neuralbake.io.gltf import load_gltf
    from neuralbake.render.camera import look_at
    from neuralbake.render.deferred import Lighting, render
    from neuralbake.render.scene import prepare_scene

    lighting = Lighting(directional=[], shadows=False, background=(0.0, 0.0, 0.0))
    result = render(prepare_scene(load_gltf(asset)), look_at((0.0, 0.5, 2.5), (0.0, 0.5, 0.0), fov_y_deg=30.0), 64, 64, lighting)
    return result.alpha


def test_a_mask_card_fits_with_its_cut_outs_and_the_lod_ships_them(tmp_path: Path) -> None:
    fit_lod(_config(CARDS / "foliage.gltf"), tmp_path / "alpha", progress=False)
    lod = json.loads((tmp_path / "alpha" / "lod.gltf").read_text())
    material = lod["materials"][lod["meshes"][0]["primitives"][0]["material"]]
    assert material["alphaMode"] == "MASK" and material["alphaCutoff"] == 0.5
    texture, _ = load_image(tmp_path / "alpha" / lod["images"][0]["uri"])
    assert texture.shape[2] == 4 and (texture[..., 3] < 0.1).mean() > 0.2 and (texture[..., 3] > 0.9).mean() > 0.2
    # rendered, the shipped LOD leaves the card's cut-outs open where the source does (the old, opaque LOD filled them)
    source, shipped = _coverage(CARDS / "foliage.gltf") > 0.5, _coverage(tmp_path / "alpha" / "lod.gltf") > 0.5
    cards = _coverage(_opaque_copy(CARDS / "foliage.gltf", tmp_path / "src")) > 0.5
    iou = lambda a, b: float((a & b).sum() / (a | b).sum())  # noqa: E731
    assert iou(source, shipped) > 0.85 and iou(source, cards) < 0.7, (iou(source, shipped), iou(source, cards))


def test_a_blend_decal_fits_over_its_wall_and_the_lod_blends(tmp_path: Path) -> None:
    report = fit_lod(_config(CARDS / "decal.gltf"), tmp_path / "decal", progress=False)
    lod = json.loads((tmp_path / "decal" / "lod.gltf").read_text())
    # the wall stays on an OPAQUE material (depth-written, not sorted), the decal blends; both read the one texture
    modes = {m["name"]: m.get("alphaMode", "OPAQUE") for m in lod["materials"]}
    assert modes == {"lod_unlit": "OPAQUE", "lod_unlit_alpha": "BLEND"} and report["alpha_mode"] == "BLEND"
    assert len(lod["images"]) == 1 and sorted(p["material"] for m in lod["meshes"] for p in m["primitives"]) == [0, 1]
    texture, _ = load_image(tmp_path / "decal" / lod["images"][0]["uri"])
    alpha = texture[..., 3]
    assert (alpha > 0.99).mean() > 0.3 and ((alpha > 0.05) & (alpha < 0.95)).mean() > 0.01  # the wall, and the decal's blend
    # the decal's alpha carried over: its mean over the decal's texels matches the source texture's
    source, _ = load_image(CARDS / "decal_base_color.png")
    decal = alpha[alpha < 0.999]
    assert abs(float(decal.mean()) - float(source[..., 3][source[..., 3] < 0.999].mean())) < 0.1


@pytest.mark.parametrize(("setting", "field"), [({"target": "vertex-color"}, "target"), ({"shape": True}, "shape"), ({"tonemap": "fit"}, "tonemap")])
def test_settings_that_cannot_keep_alpha_are_refused_by_name(tmp_path: Path, setting: dict, field: str) -> None:
    with pytest.raises(InputError) as caught:
        fit_lod(_config(CARDS / "foliage.gltf", **setting), tmp_path / "o", progress=False)
    assert field in str(caught.value) and "alphaMode" in str(caught.value) and not (tmp_path / "o").exists()


def test_an_opaque_lod_of_a_see_through_reference_is_refused(tmp_path: Path) -> None:
    solid = _opaque_copy(CARDS / "foliage.gltf", tmp_path / "src")
    with pytest.raises(InputError) as caught:
        fit_lod(_config(solid, reference=str(CARDS / "foliage.gltf")), tmp_path / "o", progress=False)
    assert "reference" in str(caught.value) and not (tmp_path / "o").exists()


def _layered_view() -> tuple[View, torch.Tensor]:
    """Three pixels: one opaque layer, two layers, three layers (rows front layer first); uv1 picks alpha texels."""
    pixel = torch.tensor([0, 1, 2])
    rows_pixel = torch.tensor([0, 1, 2, 1, 2, 2])
    uv = torch.tensor([[0.25, 0.25], [0.75, 0.25], [0.25, 0.75], [0.75, 0.75], [0.75, 0.25], [0.25, 0.25]])
    zero = torch.zeros(6, 2)
    view = View(pixel=rows_pixel, triangle=torch.zeros(6, dtype=torch.int64), barycentrics=zero, uv=(uv, uv), uv_dx=(zero, zero), uv_dy=(zero, zero),
                reference=torch.zeros(3, 3), weight=None, hdr=torch.zeros(3, 3),
                composite=Composite(pixel=pixel, slot=torch.tensor([0, 1, 2, 1, 2, 2]), layer_ends=(3, 5, 6), behind=torch.full((3, 3), 0.5)))
    return view, uv


def test_the_lods_composite_matches_the_renderers_and_has_gradients() -> None:
    config = FitConfig(asset="a.gltf", texture_size=2, render_size=8)
    model = LodAppearance(config, torch.zeros(1, 3, dtype=torch.int64), 3, torch.device("cpu"))
    alpha = torch.tensor([[[1.0], [0.2]], [[0.6], [0.0]]])  # texel (row, col): (0,0) 1, (0,1) 0.2, (1,0) 0.6, (1,1) 0
    model.cut_out(alpha, "BLEND")
    view, _ = _layered_view()
    colours = torch.rand(6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0), requires_grad=True)
    out = model.composite(colours, view)
    cover = model.coverage(view).double()
    assert torch.allclose(cover, torch.tensor([1.0, 0.2, 0.6, 0.0, 0.2, 1.0], dtype=torch.float64))
    # the renderer's front-to-back "over" on the same layers, as [1, 3] images
    layers = [(torch.tensor([0, 1, 2]), torch.tensor([0, 1, 2])), (torch.tensor([3, 4]), torch.tensor([1, 2])), (torch.tensor([5]), torch.tensor([2]))]
    images, covers = [], []
    for rows, pixels in layers:
        image, c = torch.zeros(3, 3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
        image[pixels], c[pixels] = colours[rows], cover[rows]
        images.append(image[None])
        covers.append(c[None])
    behind = model.decode(torch.full((3,), 0.5, dtype=torch.float64))
    expected, _ = composite_layers(images, covers, behind)
    assert torch.allclose(out, expected[0])
    assert torch.autograd.gradcheck(lambda c: model.composite(c, view), (colours,))
    chosen = model.front_rows(view)
    assert chosen.tolist() == [0, -1, 2]  # pixel 1's layers cover 0.2 and 0: none is solid; pixel 2's front one covers 0.6


def _grid_card(folder: Path, cells: int = 8) -> Path:
    """The foliage texture on one finely divided double-sided MASK card (``cells`` x ``cells`` quads), facing +z: a mesh
    that a decimation can simplify while the holes stay in the texture."""
    from neuralbake.io.gltf import Material, Mesh, Scene, TextureRef, write_gltf

    texture, _ = load_image(CARDS / "foliage_base_color.png")
    t = np.linspace(0.0, 1.0, cells + 1, dtype=np.float32)
    u, v = np.meshgrid(t, t, indexing="xy")
    positions = np.stack((u - 0.5, 1.0 - v, np.zeros_like(u)), -1).reshape(-1, 3).astype(np.float32)
    uv = np.stack((u, v), -1).reshape(-1, 2).astype(np.float32)
    faces = []
    for row in range(cells):
        for col in range(cells):
            a = row * (cells + 1) + col
            faces += [(a, a + cells + 1, a + 1), (a + 1, a + cells + 1, a + cells + 2)]
    normals = np.tile(np.array([0.0, 0.0, 1.0], np.float32), (len(positions), 1))
    material = Material(name="leaf", base_color_texture=TextureRef(np.ascontiguousarray(texture, np.float32), name="leaf"), alpha_mode="MASK",
                        alpha_cutoff=0.5, double_sided=True, metallic_factor=0.0, roughness_factor=0.8)
    folder.mkdir(parents=True, exist_ok=True)
    return write_gltf(folder / "card.gltf", Scene(meshes=[Mesh(positions, np.asarray(faces, np.int64), normals, uv0=uv, name="card")], materials=[material]))


def test_simplify_and_lod_keep_the_holes_that_alpha_makes(tmp_path: Path) -> None:
    from neuralbake.bakes.lod import LodConfig, make_lod
    from neuralbake.bakes.simplify import SimplifyConfig, simplify_lod
    from neuralbake.io.gltf import load_gltf

    card = _grid_card(tmp_path / "card")
    source = _coverage(card) > 0.5
    iou = lambda a, b: float((a & b).sum() / (a | b).sum())  # noqa: E731
    simplify_lod(SimplifyConfig(asset=str(card), ratio=0.25, render_size=32, views=4, held_out_views=1, epochs=1, device="cpu"),
                 tmp_path / "simple", progress=False)
    assert [m.alpha_mode for m in load_gltf(tmp_path / "simple" / "lod.glb").materials] == ["MASK"]
    assert iou(source, _coverage(tmp_path / "simple" / "lod.glb") > 0.5) > 0.85
    config = LodConfig(asset=str(card), ratio=0.25, shadows=False, device="cpu", texture_size=64,
                       stage_options={"simplify": {"render_size": 32, "views": 4, "held_out_views": 1, "epochs": 1},
                                      "fit": {"render_size": 32, "views": 4, "held_out_views": 1, "epochs": 2, "environment": False}})
    make_lod(config, tmp_path / "lod", progress=False)
    lod = load_gltf(tmp_path / "lod" / "lod.glb")
    assert {lod.materials[m.material].alpha_mode for m in lod.meshes} == {"MASK"}
    assert iou(source, _coverage(tmp_path / "lod" / "lod.glb") > 0.5) > 0.85



def test_lod_of_a_skinned_blend_asset_keeps_its_blending_and_its_skin(tmp_path: Path) -> None:
    from neuralbake.bakes.lod import LodConfig, make_lod
    from neuralbake.io.gltf import load_gltf

    arm = Path(__file__).resolve().parents[2] / "examples" / "arm"
    (tmp_path / "src").mkdir()
    shutil.copy(arm / "arm.bin", tmp_path / "src" / "arm.bin")
    document = json.loads((arm / "arm.gltf").read_text())
    document["materials"][0]["alphaMode"] = "BLEND"
    document["materials"][0]["pbrMetallicRoughness"]["baseColorFactor"] = [1.0, 1.0, 1.0, 0.6]
    (tmp_path / "src" / "arm.gltf").write_text(json.dumps(document))
    small = {"render_size": 24, "views": 3, "held_out_views": 1}
    config = LodConfig(asset=str(tmp_path / "src" / "arm.gltf"), ratio=0.5, shadows=False, device="cpu", texture_size=32,
                       stage_options={"simplify": {**small, "epochs": 1}, "skin": {"render_size": 24, "views": 2, "steps": 4, "frames": 2, "held_out_frames": 1},
                                      "fit": {**small, "epochs": 1, "environment": False}})
    report = make_lod(config, tmp_path / "lod", progress=False)
    lod = load_gltf(tmp_path / "lod" / "lod.glb")
    assert "skin" in report["stages"] and lod.rig is not None and all(m.skin is not None for m in lod.meshes)
    assert {lod.materials[m.material].alpha_mode for m in lod.meshes} == {"BLEND"}

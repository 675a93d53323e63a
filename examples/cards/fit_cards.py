"""Fit the example cards into unlit LODs with their alpha and with it ignored, and picture what ships (CC0).

Writes ``fit_transparency.png`` beside this script: per card (the MASK foliage, the BLEND decal) the source rendered
with the fit's lights, the shipped ``lod.gltf`` fitted with its alpha, and the one fitted with every material made
OPAQUE (what neuralbake did before it kept alpha), each over the fit's background grey. The fits run with
``neuralbake fit``'s own code at small CPU sizes (four fits, about two and a half minutes on 2 cores)::

    python examples/cards/fit_cards.py
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from neuralbake.bakes.fit import FitConfig, fit_lod
from neuralbake.bakes.fit.views import display_background, fit_lighting
from neuralbake.io.gltf import load_gltf
from neuralbake.io.images import save_png
from neuralbake.render.camera import look_at
from neuralbake.render.deferred import Lighting, render
from neuralbake.render.pictures import panel_grid
from neuralbake.render.scene import prepare_scene

HERE = Path(__file__).resolve().parent
CAMERAS = {"foliage": look_at((0.6, 0.7, 2.4), (0.0, 0.5, 0.0), fov_y_deg=32.0), "decal": look_at((0.4, 0.1, 2.2), (0.0, 0.0, 0.0), fov_y_deg=32.0)}
SIZE = 256


def opaque_copy(asset: Path, folder: Path) -> Path:
    """``asset`` with every material's alphaMode set to OPAQUE."""
    folder.mkdir(parents=True, exist_ok=True)
    for item in asset.parent.iterdir():
        if item.suffix in (".bin", ".png"):
            shutil.copy(item, folder / item.name)
    document = json.loads(asset.read_text())
    for material in document["materials"]:
        material["alphaMode"] = "OPAQUE"
    (folder / asset.name).write_text(json.dumps(document))
    return folder / asset.name


def picture(asset: Path, camera: object, lighting: Lighting, background: torch.Tensor, *, unlit: bool) -> np.ndarray:
    """A front render over the display background: lit as the fit's references (source) or as a viewer shows an unlit LOD."""
    dark = Lighting(directional=lighting.directional, environment=lighting.environment, environment_samples=64, shadows=False, background=(0.0, 0.0, 0.0))
    out = render(prepare_scene(load_gltf(asset)), camera, SIZE, SIZE, dark, tone_map="linear" if unlit else "aces")
    image = out.ldr + (1.0 - out.alpha)[..., None] * background  # the renders are over black: lay them over the grey
    return image.clamp(0.0, 1.0).numpy()


def main() -> None:
    config = dict(render_size=192, texture_size=128, views=24, held_out_views=4, epochs=10, shadows=False, device="cpu")  # noqa: C408
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        for name in ("foliage", "decal"):
            asset = HERE / f"{name}.gltf"
            kept = fit_lod(FitConfig(asset=str(asset), **config), work / f"{name}_alpha", progress=False)
            solid = fit_lod(FitConfig(asset=str(opaque_copy(asset, work / f"{name}_src")), **config), work / f"{name}_opaque", progress=False)
            print(f"{name}: held-out PSNR {kept['psnr_union_db']:.2f} dB with alpha ({kept['alpha_mode']}), "
                  f"{solid['psnr_union_db']:.2f} dB fitted opaque (against its own opaque references)", file=sys.stderr)
            fit = FitConfig(asset=str(asset), **config)
            lighting = fit_lighting(fit, torch.device("cpu"))
            grey = display_background(fit, lighting, torch.device("cpu"))
            camera = CAMERAS[name]
            rows.append([picture(asset, camera, lighting, grey, unlit=False),
                         picture(work / f"{name}_alpha" / "lod.gltf", camera, lighting, grey, unlit=True),
                         picture(work / f"{name}_opaque" / "lod.gltf", camera, lighting, grey, unlit=True)])
    save_png(HERE / "fit_transparency.png", panel_grid(rows), bits=8)


if __name__ == "__main__":
    main()

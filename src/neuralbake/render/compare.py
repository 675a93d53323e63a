"""Side-by-side comparison of two materials on the preview scenes: reference | test | error.

Used to judge a baked material (a neural material, later a fitted LOD material) against the
layered material it came from, the way a user sees it: both are rendered on the preview scenes
(:mod:`neuralbake.render.preview`) with the *reference's* BSDF sampling and the same seed, so
both images use the same random directions and their difference is the materials' difference,
not Monte Carlo noise (common random numbers; still unbiased for both, see
``render_preview(sampling_material=...)``).

Scores per scene:

* ``psnr_db``: PSNR of the tone-mapped sRGB images (ACES fitted curve at the given exposure,
  values in [0, 1]), background included;
* ``flip``: mean NVIDIA FLIP error (HDR FLIP on the linear images, via the ``flip-evaluator``
  package, NVIDIA's own implementation), 0 = identical; FLIP sweeps the exposures a viewer
  could pick, so it also weighs highlights that the tone-mapped PSNR compresses.

The picture (``comparison.png``) has one row per scene: reference | test | FLIP error map (magma).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import flip_evaluator
import numpy as np
import torch

from neuralbake.core.metrics import psnr
from neuralbake.io.files import prepare_output_dir
from neuralbake.io.images import save_exr, save_png
from neuralbake.render.pictures import panel_grid
from neuralbake.render.preview import SCENES, render_preview
from neuralbake.render.tonemap import tone_map

__all__ = ["compare_materials", "flip_error", "flip_error_ldr"]


def flip_error(reference: torch.Tensor, test: torch.Tensor) -> tuple[float, np.ndarray]:
    """Mean HDR FLIP error of two linear ``[H, W, 3]`` images and the magma-coloured error map ``[H, W, 3]``."""
    ref = np.ascontiguousarray(reference.detach().float().clamp(min=0).cpu().numpy())
    tst = np.ascontiguousarray(test.detach().float().clamp(min=0).cpu().numpy())
    error_map, mean, _ = flip_evaluator.evaluate(ref, tst, "HDR", inputsRGB=False, applyMagma=True)
    return float(mean), np.asarray(error_map, dtype=np.float32)


def flip_error_ldr(reference: torch.Tensor, test: torch.Tensor) -> float:
    """Mean LDR FLIP error of two display (sRGB-encoded, [0, 1]) ``[H, W, 3]`` images."""
    ref = np.ascontiguousarray(reference.detach().float().clamp(0, 1).cpu().numpy())
    tst = np.ascontiguousarray(test.detach().float().clamp(0, 1).cpu().numpy())
    _, mean, _ = flip_evaluator.evaluate(ref, tst, "LDR", inputsRGB=True, applyMagma=False)
    return float(mean)


def compare_materials(
    reference: Callable[[torch.Tensor, torch.Tensor], Any],
    test: Callable[[torch.Tensor, torch.Tensor], Any],
    out_dir: str | Path | None = None,
    *,
    size: int = 128,
    spp: int = 32,
    scenes: tuple[str, ...] = SCENES,
    device: torch.device | str = "cpu",
    seed: int = 7,
    exposure: float = 0.0,
    labels: tuple[str, str] = ("reference", "test"),
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Render both materials on ``scenes`` and score ``test`` against ``reference``.

    Returns ``{"scenes": {scene: {"psnr_db", "flip"}}, "psnr_db", "flip"`` (means over scenes),
    ``"reference_seconds", "test_seconds", "size", "spp"}``. With ``out_dir`` it also writes
    ``comparison.png`` and per scene ``<scene>_<label>.exr`` (linear) for both materials.
    ``progress`` is called with pixels finished (``2 * len(scenes) * size * size`` in all).
    """
    common = {"size": size, "spp": spp, "scenes": scenes, "device": device, "seed": seed, "sampling_material": reference, "progress": progress}
    ref_images = render_preview(reference, **common)
    test_images = render_preview(test, **common)
    scores: dict[str, dict[str, float]] = {}
    rows = []
    for scene in scenes:
        ref, tst = ref_images[scene], test_images[scene]
        ref_ldr, tst_ldr = tone_map(ref, exposure=exposure), tone_map(tst, exposure=exposure)
        mean_flip, flip_map = flip_error(ref * 2.0**exposure, tst * 2.0**exposure)
        scores[scene] = {"psnr_db": round(psnr(tst_ldr, ref_ldr), 3), "flip": round(mean_flip, 5)}
        rows.append([ref_ldr, tst_ldr, flip_map])
    result: dict[str, Any] = {
        "scenes": scores,
        "psnr_db": float(np.mean([s["psnr_db"] for s in scores.values()])),
        "flip": float(np.mean([s["flip"] for s in scores.values()])),
        "reference_seconds": round(float(ref_images.stats["seconds"]), 3),
        "test_seconds": round(float(test_images.stats["seconds"]), 3),
        "size": size,
        "spp": spp,
        "method": "preview scenes rendered with the reference's BSDF sampling and one seed for both; "
        "psnr_db on ACES-tone-mapped sRGB, flip = mean HDR FLIP (0 = identical)",
    }
    if out_dir is not None:
        out = prepare_output_dir(out_dir)
        save_png(out / "comparison.png", panel_grid(rows, gap=3))
        for scene in scenes:
            save_exr(out / f"{scene}_{labels[0]}.exr", ref_images[scene])
            save_exr(out / f"{scene}_{labels[1]}.exr", test_images[scene])
    return result

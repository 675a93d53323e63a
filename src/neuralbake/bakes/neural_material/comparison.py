"""Scoring a bake: preview renders against the reference, flat texture views, and throughput.

``renders/comparison.png`` (sphere and tile: reference | neural | FLIP error) gives the headline
PSNR and FLIP; ``texture_views.png`` shows the flat texture under five held-out (light, view)
pairs, scored in fp32, fp16 and with 8-bit latents.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from neuralbake.bakes.neural_material.config import NeuralMaterialConfig
from neuralbake.bakes.neural_material.latents import uv_grid
from neuralbake.bakes.neural_material.model import NeuralMaterial, directions_above
from neuralbake.core.metrics import psnr
from neuralbake.io.images import save_png
from neuralbake.material.frame import square_to_cosine_hemisphere
from neuralbake.nn.quantize import dequantize_latents_affine_u8, quantize_latents_affine_u8
from neuralbake.render.compare import compare_materials
from neuralbake.render.pictures import comparison_row, panel_grid
from neuralbake.render.tonemap import tone_map

__all__ = ["as_baked", "compare", "throughput"]


def _render_directional(material: Any, normal: torch.Tensor, light: torch.Tensor, resolution: int, view: torch.Tensor) -> torch.Tensor:
    """A flat, noise-free comparison image: ``f(wi, wo) cos * E`` at texel centres for one light and view."""
    uv = uv_grid(resolution, normal.device)
    n = len(uv)
    with torch.no_grad():
        value = material(uv, normal.expand(n, 3)).eval(light.expand(n, 3), view.expand(n, 3))
    return value.reshape(resolution, resolution, 3)


def _held_out_directions(device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(12345)
    pairs = []
    for _ in range(4):
        wi = square_to_cosine_hemisphere(torch.rand(1, 2, generator=generator))
        wo = square_to_cosine_hemisphere(torch.rand(1, 2, generator=generator))
        pairs.append((wi.to(device), wo.to(device)))
    # and the mirror configuration, where the highlights are
    wo = torch.nn.functional.normalize(torch.tensor([[0.3, 0.1, 0.9]]), dim=1).to(device)
    pairs.append((wo * torch.tensor([-1.0, -1.0, 1.0], device=device), wo))
    return pairs


def _auto_exposed(x: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Tone-mapped sRGB of ``x`` with the exposure that puts ``reference``'s mean at 0.18 (per view)."""
    key = float(reference.mean().clamp(min=1e-8))
    return tone_map(x * (0.18 / key))

def compare(
    out: Path, reference: Any, neural: NeuralMaterial, normal: torch.Tensor, config: NeuralMaterialConfig, *, progress: Callable[[int], None] | None = None
) -> dict[str, Any]:
    """Score the bake: preview renders (the headline numbers) and flat texture views (fp32, fp16, u8)."""
    baked = as_baked(reference, normal)
    renders = compare_materials(
        baked, neural, out / "renders", size=config.compare_size, spp=config.compare_spp, device=normal.device, labels=("reference", "neural"),
        progress=progress,
    )
    size = min(config.texture_size, 128)
    half = neural.to(torch.float16)
    u8 = NeuralMaterial([dequantize_latents_affine_u8(*quantize_latents_affine_u8(level)) for level in neural.latents], neural.decoder, neural.direction_inputs)
    scores: dict[str, list[float]] = {"fp32": [], "fp16": [], "u8": []}
    rows = []
    for wi, wo in _held_out_directions(normal.device):
        ref = _render_directional(reference, normal, wi, size, wo)
        ref_ldr = _auto_exposed(ref, ref)
        net = _render_directional(neural, normal, wi, size, wo)
        net_ldr = _auto_exposed(net, ref)
        scores["fp32"].append(psnr(net_ldr, ref_ldr))
        scores["fp16"].append(psnr(_auto_exposed(_render_directional(half, normal, wi, size, wo), ref), ref_ldr))
        scores["u8"].append(psnr(_auto_exposed(_render_directional(u8, normal, wi, size, wo), ref), ref_ldr))
        rows += comparison_row(ref_ldr, net_ldr, error="heat", heat_scale=0.25, colormap="red")
    save_png(out / "texture_views.png", panel_grid(rows, gap=2))
    return {
        "psnr_db": renders["psnr_db"],
        "flip": renders["flip"],
        "renders": renders,
        "texture_views": {
            "psnr_db": float(np.mean(scores["fp32"])),
            "psnr_per_view_db": [round(v, 3) for v in scores["fp32"]],
            "psnr_fp16_db": float(np.mean(scores["fp16"])),
            "psnr_u8_latents_db": float(np.mean(scores["u8"])),
            "method": "flat texture at texel centres, one (light, view) pair per row, each tone-mapped with the exposure that "
            "puts the reference's mean at 0.18; texture_views.png: reference | neural | |error| x4",
        },
        "comparison": "renders/comparison.png: sphere and tile, reference | neural | FLIP error",
    }


def throughput(reference: Any, neural: NeuralMaterial, normal: torch.Tensor, samples: int = 1 << 16, repeats: int = 3) -> dict[str, Any]:
    """Samples/s of the reference graph and of the neural material on the bake's device (its ``kernels`` path).

    The neural path runs in fp16 on a GPU (as shipped) and fp32 on a CPU; ``bench/neural_material.py``
    measures larger batches and the torch.compile path.
    """
    device = normal.device
    generator = torch.Generator(device=device).manual_seed(1)
    uv = torch.rand(samples, 2, generator=generator, device=device)
    wi = directions_above(samples, generator, device)
    wo = directions_above(samples, generator, device)
    normals = normal.expand(samples, 3)
    shipped = neural.to(torch.float16) if device.type == "cuda" else neural

    def rate(run: Any) -> float:
        best = math.inf
        with torch.no_grad():
            for _ in range(repeats + 1):
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                start = time.perf_counter()
                run()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                best = min(best, time.perf_counter() - start)
        return samples / best

    reference_rate = rate(lambda: reference(uv, normals).eval(wi, wo))
    neural_rate = rate(lambda: shipped.decode(uv, wi, wo))
    return {
        "reference_samples_per_second": round(reference_rate),
        "neural_samples_per_second": round(neural_rate),
        "speedup": round(neural_rate / reference_rate, 2),
        "samples": samples,
        "neural_precision": "fp16" if device.type == "cuda" else "fp32",
        "neural_kernels": shipped.kernels,
        "neural_kernel": shipped.decode_kernel,
        "method": "best of several runs on the bake's device (the neural path on neural_kernels: eager PyTorch or the fused decode, whose kernel neural_kernel names: triton or gluon); bench/kernels.py for large batches and torch.compile",
    }


def as_baked(reference: Any, normal: torch.Tensor) -> Any:
    """The reference material evaluated for the baked world normal (orientation masks as baked)."""

    def material(uv: torch.Tensor, _: torch.Tensor) -> Any:
        return reference(uv, normal.expand(uv.shape[0], 3))

    return material


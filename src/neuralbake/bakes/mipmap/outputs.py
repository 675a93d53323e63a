"""What a learned-mipmap bake writes: the chain as 8-bit PNGs (and read back, as a renderer would
sample it), the comparison image, and the report's per-level tables."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from neuralbake.bakes.mipmap.maps import MaterialMaps
from neuralbake.bakes.mipmap.shading import shade_maps
from neuralbake.io.images import save_png
from neuralbake.material.frame import normalize
from neuralbake.material.texture import linear_to_srgb, srgb_to_linear
from neuralbake.render.mip import box_downsample
from neuralbake.render.pictures import panel_grid
from neuralbake.render.tonemap import tone_map

__all__ = [
    "BASELINES",
    "COMPARISON_PAIRS",
    "METHODS",
    "class_tables",
    "comparison_fields",
    "comparison_image",
    "decode_8bit",
    "encode_chain_8bit",
    "level_tables",
    "write_chain",
]

METHODS = ("box", "toksvig", "toksvig_phong", "learned", "learned_8bit")
"""Mip chains compared in the report (``learned_8bit``: the learned chain re-read from its PNGs)."""


def encode_chain_8bit(chain: Sequence[MaterialMaps]) -> list[dict[str, np.ndarray]]:
    """The chain as the 8-bit images written to disk (base colour sRGB, normals 0.5 n + 0.5)."""
    images = []
    for level in chain:
        images.append(
            {
                "base_color": linear_to_srgb(level.base_color).clamp(0, 1).cpu().numpy(),
                "normal": (0.5 * normalize(level.normal.reshape(-1, 3)).reshape(level.normal.shape) + 0.5).cpu().numpy(),
                "roughness": level.roughness.clamp(0, 1).cpu().numpy(),
                "metallic": level.metallic.clamp(0, 1).cpu().numpy(),
            }
        )
    return images


def decode_8bit(images: dict[str, np.ndarray], device: torch.device) -> MaterialMaps:
    q = {name: torch.from_numpy(np.round(np.clip(a, 0, 1) * 255.0) / 255.0).float().to(device) for name, a in images.items()}
    normal = normalize((2.0 * q["normal"] - 1.0).reshape(-1, 3)).reshape(q["normal"].shape)
    return MaterialMaps(srgb_to_linear(q["base_color"]), normal, q["roughness"], q["metallic"])


COMPARISON_PAIRS = {
    "mirror_35deg": (35.0, 0.0, 35.0, 180.0),
    "light_50deg_view_20deg": (50.0, 0.0, 20.0, 120.0),
    "grazing_light_80deg_view_80deg": (80.0, 0.0, 80.0, 180.0),
}
"""(light theta, light phi, view theta, view phi) in degrees of the comparison image's blocks: a mirror pair, one off
the mirror, a grazing one."""
DISPLAY_WHITE = 2.0
"""Each block of the comparison is exposed so that its reference's 99th percentile of radiance lands here before
Reinhard's ``x / (1 + x)`` (display 0.67): highlights keep their shape instead of clipping to white."""


def _direction(theta: float, phi: float, device: torch.device) -> torch.Tensor:
    t, p = math.radians(theta), math.radians(phi)
    return torch.tensor([[math.sin(t) * math.cos(p), math.sin(t) * math.sin(p), math.cos(t)]], device=device)


def _fit_panel(image: torch.Tensor, panel: int) -> torch.Tensor:
    """``[H, W, 3]`` shown at ``panel`` x ``panel``: enlarged by pixel repetition, or area-averaged when larger."""
    if image.shape[0] == panel:
        return image
    mode = "nearest" if image.shape[0] < panel else "area"
    return torch.nn.functional.interpolate(image.permute(2, 0, 1)[None], size=(panel, panel), mode=mode)[0].permute(1, 2, 0)


def comparison_image(maps: MaterialMaps, chains: dict[str, list[MaterialMaps]], light_intensity: float, panel: int) -> np.ndarray:
    """Rows per level; per light/view pair of ``COMPARISON_PAIRS``: reference | box | toksvig | learned, each block
    exposed at :data:`DISPLAY_WHITE`, then Reinhard and sRGB."""
    device = maps.base_color.device
    blocks = []
    with torch.no_grad():
        for light_theta, light_phi, view_theta, view_phi in COMPARISON_PAIRS.values():
            wi, wo = _direction(light_theta, light_phi, device), _direction(view_theta, view_phi, device)
            full = shade_maps(maps, wi, wo, light_intensity=light_intensity)[0]
            exposure = DISPLAY_WHITE / float(torch.quantile(full.reshape(-1).float(), 0.99)) if float(full.max()) > 0 else 1.0
            rows = []
            for k in range(len(chains["box"])):
                reference = box_downsample(full, 2 ** (k + 1))
                panels = [reference] + [
                    shade_maps(chains[name][k], wi, wo, light_intensity=light_intensity)[0] for name in ("box", "toksvig", "learned")
                ]
                rows.append([_fit_panel(tone_map(p * exposure, operator="reinhard"), panel) for p in panels])
            blocks.append(panel_grid(rows, gap=4))
    return panel_grid([blocks], gap=16)


def write_chain(folder: Path, base: MaterialMaps, chain_images: list[dict[str, np.ndarray]], write_metallic: bool) -> list[str]:
    folder.mkdir(exist_ok=True)
    names = ["base_color", "normal", "roughness"] + (["metallic"] if write_metallic else [])
    written = []
    for k, images in enumerate(encode_chain_8bit([base]) + chain_images):
        for name in names:
            path = folder / f"{name}_L{k}.png"
            save_png(path, images[name])
            written.append(f"{folder.name}/{path.name}")
    return written


def comparison_fields() -> dict[str, Any]:
    """How ``comparison.png`` is laid out, for the report."""
    return {
        "file": "comparison.png",
        "rows": "levels 1..L",
        "blocks": {name: {"light_theta_phi_deg": list(v[:2]), "view_theta_phi_deg": list(v[2:])} for name, v in COMPARISON_PAIRS.items()},
        "columns_per_block": ["reference (box of full-res shading)", "box", "toksvig", "learned"],
        "display": f"each block scaled so its reference's 99th percentile of radiance is {DISPLAY_WHITE:g}, then Reinhard x/(1+x) and sRGB",
    }


def level_tables(
    side: int, per_method: dict[str, list[dict[str, float]]], per_method_mirror: dict[str, list[dict[str, float]]]
) -> tuple[dict[str, float], dict[str, Any]]:
    """The report's metrics (mean PSNR per method) and tables (per level, on held-out and on mirror pairs)."""
    levels = len(per_method["box"])
    per_level, per_level_mirror = [], []
    for k in range(levels):
        per_level.append({"level": k + 1, "side": side >> (k + 1), **{name: per_method[name][k] for name in METHODS}})
        per_level_mirror.append({"level": k + 1, "side": side >> (k + 1), **{name: per_method_mirror[name][k] for name in METHODS}})
    mean_mirror = {
        f"mean_mirror_psnr_{name}_db": round(float(np.mean([row[name]["psnr_db"] for row in per_level_mirror])), 4) for name in METHODS
    }
    mean_psnr = {name: round(float(np.mean([row[name]["psnr_db"] for row in per_level])), 4) for name in METHODS}
    beats = {
        f"learned_beats_{name}_every_level": all(row["learned"]["psnr_db"] > row[name]["psnr_db"] for row in per_level)
        for name in ("box", "toksvig", "toksvig_phong")
    }
    metrics = {f"mean_psnr_{name}_db": value for name, value in mean_psnr.items()}
    return metrics, {**beats, **mean_mirror, "per_level": per_level, "per_level_mirror": per_level_mirror}


BASELINES = ("box", "toksvig", "toksvig_phong")
"""The chains the learned one must not lose to in any class."""


def class_tables(side: int, per_class: dict[str, dict[str, list[dict[str, float]]] | None]) -> dict[str, Any]:
    """The report's ``per_class`` table (class -> per level, every method's PSNR) and ``learned_loses``: the worst
    (class, level, baseline) where the learned chain shades worse than a baseline, or None where it never does."""
    table: dict[str, Any] = {}
    worst = None
    for cls, methods in per_class.items():
        if methods is None:
            table[cls] = None
            continue
        rows = []
        for k in range(len(methods["box"])):
            rows.append({"level": k + 1, "side": side >> (k + 1), **{name: methods[name][k]["psnr_db"] for name in METHODS}})
            for baseline in BASELINES:
                margin = methods[baseline][k]["psnr_db"] - methods["learned"][k]["psnr_db"]
                if margin > 0 and (worst is None or margin > worst["by_db"]):
                    worst = {"class": cls, "level": k + 1, "baseline": baseline, "learned_db": methods["learned"][k]["psnr_db"],
                             "baseline_db": methods[baseline][k]["psnr_db"], "by_db": round(margin, 4)}
        table[cls] = rows
    return {"per_class": table, "learned_loses": worst}

"""Which tool fits a glTF asset's material: the neural material, NTC of its maps, or its BC set.

``material bake MODEL.gltf`` scores its neural material on renders of the asset against the
asset's own textures and their BC set (:mod:`.asset_scoring`). The verdict adds NTC at the neural
material's bytes: :func:`ntc_at_bytes` compresses the material's maps with ``neuralbake ntc
compress`` (through a caller's ``compress``: the bake runs it as a stage of itself, the bench on
its own) at the rate that gives the bytes the neural material ships, clamped to NTC's range
(:data:`~neuralbake.bakes.ntc.layout.BPP_RANGE`), and decodes them into the asset's scene; the
asset comparison then renders that scene with the same views, lights and samples as the others.
:func:`verdict_block` sets the three side by side and :func:`recommend` applies the rule:

A competitor (NTC, the BC set) beats the neural material when it is at most as large (bytes as
shipped) and more than :data:`MARGIN_DB` better in PSNR on the asset's renders. If one beats it,
that one is recommended; if both do, NTC (the one compared at the neural material's own bytes),
unless the BC set is also more than :data:`MARGIN_DB` better than NTC. Otherwise the neural
material stands: it is within the margin of each competitor, better, or smaller than one that is
better. The sentence that says so (``why``) carries the figures.

Maps NTC does not hold (a metal/rough map without an occlusion map) stay BC textures on its side
and count in its bytes, as the neural material's kept occlusion and emission do on its. The
verdict trains NTC for :data:`VERDICT_STEPS` steps, fewer than ``ntc compress``'s default, and on
a CPU on the maps resampled to at most 256 a side (as ``ntc compress`` does there): a longer run
only raises NTC's figure. The report says what NTC ran with and the command that repeats it.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from neuralbake.bakes.neural_material.asset import AssetMaterial
from neuralbake.bakes.neural_material.asset_scoring import bc_set_bytes, block_compressed
from neuralbake.bakes.ntc.config import NTCConfig
from neuralbake.bakes.ntc.config import device_defaults as ntc_device_defaults
from neuralbake.bakes.ntc.container import open_container
from neuralbake.bakes.ntc.decode import decode_all_levels
from neuralbake.bakes.ntc.layout import BPP_RANGE, choose_layout
from neuralbake.bakes.ntc.texture_set import TextureSet, check_texture_set, load_gltf_material
from neuralbake.errors import ConfigError, InputError
from neuralbake.io.gltf import Scene
from neuralbake.io.images import resize_image
from neuralbake.render.scene import RenderScene, prepare_scene

__all__ = ["MARGIN_DB", "RULE", "VERDICT_STEPS", "Figures", "NTCAtBytes", "map_texels", "ntc_at_bytes", "recommend", "verdict_block"]

MARGIN_DB = 3.0
"""How much better (PSNR on the asset's renders) a competitor at most as large must be to replace the neural material."""
RULE = (
    f"NTC or the BC set beats the neural material when it is at most as large (bytes as shipped) and more than "
    f"{MARGIN_DB:g} dB better on the asset's renders; the one that beats it is recommended (both: NTC, unless the BC set "
    f"is also more than {MARGIN_DB:g} dB better than NTC); otherwise the neural material stands."
)
"""The rule :func:`recommend` applies, as the report states it (``verdict.rule``)."""
VERDICT_STEPS = {"cpu": 1000, "cuda": 30_000}
"""NTC's main-phase steps for the verdict by device type (``ntc compress`` trains 3,000 on a CPU,
400,000 on a GPU). On the crate on a 2-core CPU, 1,000 steps took 29 s (45.3 dB on its renders, 2026-11-29); on
DamagedHelmet (H200, 3.69 bpp) 30,000 steps gave 34.26 dB against 35.00 dB at 100,000
(docs/benchmarks.md), well inside :data:`MARGIN_DB`."""
_SLOTS_OF_GROUP = {"base_color": ("base_color",), "normal": ("normal",), "orm": ("occlusion", "metallic_roughness"), "emissive": ("emissive",)}
"""The glTF slots each group of an NTC glTF set (:func:`~neuralbake.bakes.ntc.texture_set.load_gltf_material`) replaces."""


@dataclass(frozen=True)
class Figures:
    """One form of the material in the verdict: its PSNR on the asset's renders and its bytes as shipped."""

    name: str
    """As the sentence names it: ``the neural material``, ``NTC``, ``the BC set``."""
    psnr_db: float | None
    """Mean PSNR over the views that show the material (``None``: not scored)."""
    bytes: int
    bits_per_texel: float
    """``bytes`` * 8 over the texels of the material's largest map: every form on the same scale."""
    note: str = ""
    """Why it was not scored, when ``psnr_db`` is ``None``."""


def recommend(neural: Figures, bc: Figures | None, ntc: Figures | None) -> dict[str, str]:
    """``{"tool": "neural_material" | "ntc" | "bc", "why": one sentence with the figures}`` by :data:`RULE`."""

    def beats(c: Figures | None) -> bool:
        return c is not None and c.psnr_db is not None and c.bytes <= neural.bytes and c.psnr_db - neural.psnr_db > MARGIN_DB

    def at(c: Figures) -> str:
        return f"{c.psnr_db:.1f} dB at {c.bits_per_texel:.1f} bpp"

    if neural.psnr_db is None:
        return {"tool": "neural_material", "why": f"Not judged: {neural.note or 'no held-out view shows the material'}."}
    if beats(ntc) or beats(bc):
        pick = ntc if beats(ntc) and not (beats(bc) and bc.psnr_db - ntc.psnr_db > MARGIN_DB) else bc
        tool = "ntc" if pick is ntc else "bc"
        name = pick.name[0].upper() + pick.name[1:]
        return {"tool": tool, "why": f"{name} fits this asset better: {at(pick)} against the neural material's {at(neural)}."}

    def relation(c: Figures) -> str:
        if c.psnr_db is None:
            return f"{c.name} was not compared ({c.note})"
        gain = c.psnr_db - neural.psnr_db
        if gain <= 0:
            return f"it is {-gain:.1f} dB better than {c.name} ({at(c)})"
        if gain <= MARGIN_DB:
            return f"it is within {MARGIN_DB:g} dB of {c.name} ({at(c)})"
        return f"it is {c.bytes / max(neural.bytes, 1):.1f}x smaller than {c.name}, which is {gain:.1f} dB better ({at(c)})"

    reasons = [relation(c) for c in (ntc, bc) if c is not None]
    return {"tool": "neural_material", "why": f"The neural material stands at {at(neural)}: {'; '.join(reasons)}."}


@dataclass
class NTCAtBytes:
    """NTC of a material's maps at a neural material's bytes: the scene to render it with and what the report records."""

    scene: RenderScene | None
    """The asset with the material's maps NTC-decoded (the slots NTC does not hold BC-compressed); ``None`` if NTC could not run."""
    record: dict[str, Any]


def _gltf_set(material: AssetMaterial) -> TextureSet:
    """The material's maps as NTC reads a glTF material (full size)."""
    return load_gltf_material(material.path, material=str(material.index))


def ntc_at_bytes(
    material: AssetMaterial, target_bytes: int, folder: Path, compress: Callable[[NTCConfig, Path], dict[str, Any]], *,
    device: torch.device, seed: int = 0, steps: int | None = None, reuse: bool = False,
) -> NTCAtBytes:
    """Compress ``material``'s maps with NTC into ``folder`` so that they ship in ``target_bytes`` (the
    maps NTC does not hold counted as BC textures), clamped to NTC's range; decode them into the scene.

    ``compress(config, folder)`` runs ``ntc compress`` and returns its report. ``steps``: the main
    phase's (``None``: :data:`VERDICT_STEPS` for ``device``). ``reuse``: keep a finished run in
    ``folder`` made with the same settings (a resumed bake). A material NTC cannot take (no maps,
    maps of different or non-power-of-two sizes, maps too small for NTC's smallest file at the rate)
    gives ``scene=None`` and the reason.
    """
    try:
        full = _gltf_set(material)
        config = NTCConfig(sources=[str(material.path)], material=str(material.index), baselines=False, device=str(device))
        config.texture_size = ntc_device_defaults(config, device).get("texture_size")
        size = config.texture_size
        texture_set = full.resized(size) if size is not None and max(full.width, full.height) > size else full
        check_texture_set(texture_set)
        held = {slot for group in texture_set.groups for slot in _SLOTS_OF_GROUP[group.name]}
        kept = {slot: n for slot, n in bc_set_bytes(material.scene, material.index).items() if slot not in held}
        texels = texture_set.width * texture_set.height
        rate = (target_bytes - sum(kept.values())) * 8.0 / texels
        asked = min(max(math.floor(rate * 1000) / 1000, BPP_RANGE[0]), BPP_RANGE[1])
        # refused here rather than inside the run: maps so small that NTC's decoder alone is past the rate
        choose_layout(texture_set.width, texture_set.height, texture_set.groups, asked, hidden=config.hidden, pe_frequencies=config.pe_frequencies)
    except (InputError, ConfigError) as exc:
        return NTCAtBytes(None, {"skipped": f"NTC cannot take this material's maps: {exc}"})
    config.bpp = [asked]
    config.train.steps = steps or VERDICT_STEPS.get(device.type, VERDICT_STEPS["cuda"])
    config.train.seed = seed
    config.train.half_run = False  # the comparison needs NTC's figure, not whether doubling its steps would pay
    default_steps = ntc_device_defaults(config, device)["train.steps"]
    report = _finished(folder, config) if reuse else None
    if report is None:
        report = compress(config, folder)
    levels = decode_all_levels(open_container(folder).to(device))
    scene = _ntc_scene(block_compressed(material.scene, material.index), material.index, levels[0], texture_set)
    file_bytes = int(report["bytes"])
    total = file_bytes + sum(kept.values())
    where = f"{texture_set.width}x{texture_set.height}" + (f" (resampled from {full.width}x{full.height})" if texture_set is not full else "")
    note = f"the neural material's bytes over NTC's {where} texels: {rate:.2f} bpp"
    if not BPP_RANGE[0] <= rate <= BPP_RANGE[1]:
        note += f", outside NTC's {BPP_RANGE[0]:g}-{BPP_RANGE[1]:g} bpp: compressed at {asked:g} bpp"
    command = ["neuralbake", "ntc", "compress", material.path.name, "--material", str(material.index), "--bpp", f"{asked:g}",
               "--steps", str(config.train.steps), "--no-baselines", "--out", "OUT"]
    if size is not None:
        command[-2:-2] = ["--size", str(size)]
    record = {
        "bytes": total,
        "file_bytes": file_bytes,
        "kept_textures_bc": kept,
        "bits_per_texel": round(total * 8.0 / map_texels(material), 3),
        "asked_bpp": asked,
        "rate": note,
        "size": [texture_set.width, texture_set.height],
        "maps_size": [full.width, full.height],
        "groups": [group.name for group in texture_set.groups],
        "steps": report.get("steps"),
        "seconds": report.get("compress_seconds"),
        "texture_psnr_db": report.get("psnr_db"),
        "training": f"{config.train.steps} main-phase steps; ntc compress trains {default_steps:,} by default on this device, and more steps "
        "only raise NTC's figure",
        "command": shlex.join(command),
    }
    return NTCAtBytes(prepare_scene(scene, device=device), record)


def _finished(folder: Path, config: NTCConfig) -> dict[str, Any] | None:
    """The report of a finished NTC run in ``folder`` made with ``config``'s settings, else ``None``."""
    try:
        done = json.loads((folder / "config.json").read_text())
        report = json.loads((folder / "report.json").read_text())
    except (OSError, ValueError):
        return None
    if not (folder / "bake.json").is_file():
        return None
    wanted = dataclasses.asdict(config)
    same = all(done.get(key) == wanted[key] for key in ("sources", "material", "bpp", "texture_size", "device"))
    trained = done.get("train", {})
    return report if same and all(trained.get(key) == getattr(config.train, key) for key in ("steps", "seed", "schedule", "decay_fraction")) else None


def _ntc_scene(scene: Scene, index: int, level0: np.ndarray, texture_set: TextureSet) -> Scene:
    """``scene`` with material ``index``'s maps that NTC holds replaced by its decoded mip 0 (sRGB colour as
    stored, normal XY with Z rebuilt); its other maps stay as they are (the BC set's, for the verdict)."""
    decoded, offset = {}, 0
    for group in texture_set.groups:
        decoded[group.name] = np.clip(level0[..., offset : offset + len(group.channels)], 0.0, 1.0)
        offset += len(group.channels)
    out = copy.copy(scene)
    out.materials = list(scene.materials)
    material = out.materials[index] = copy.copy(scene.materials[index])

    def replace(attr: str, image: np.ndarray) -> None:
        ref = getattr(material, attr)
        if ref is not None:
            setattr(material, attr, dataclasses.replace(ref, image=np.ascontiguousarray(image, np.float32)))

    if "base_color" in decoded:
        base = material.base_color_texture.image
        rgb = decoded["base_color"]
        if base.shape[2] == 4:  # NTC holds RGB; alpha stays the BC set's, resampled to NTC's size
            alpha = base[..., 3:4] if base.shape[:2] == rgb.shape[:2] else resize_image(base[..., 3:4], rgb.shape[1], rgb.shape[0])
            rgb = np.concatenate([rgb, alpha], -1)
        replace("base_color_texture", rgb)
    if "normal" in decoded:
        n = decoded["normal"] * 2.0 - 1.0
        z = np.sqrt(np.clip(1.0 - (n * n).sum(-1, keepdims=True), 0.0, 1.0))
        replace("normal_texture", np.concatenate([decoded["normal"], z * 0.5 + 0.5], -1))
    if "orm" in decoded:
        orm = decoded["orm"]
        replace("occlusion_texture", np.repeat(orm[..., 0:1], 3, axis=2))
        replace("metallic_roughness_texture", np.concatenate([np.zeros_like(orm[..., :1]), orm[..., 1:3]], -1))
    if "emissive" in decoded:
        replace("emissive_texture", decoded["emissive"])
    return out


def map_texels(material: AssetMaterial) -> int:
    """Texels of the material's largest map: the verdict's bits per texel are over these, for every form."""
    return max((t.texels.shape[0] * t.texels.shape[1] for t in material.material.textures.values()), default=1)


def verdict_block(asset: dict[str, Any], ntc: NTCAtBytes | None, *, texels: int) -> dict[str, Any]:
    """The report's ``verdict``: the neural material, the BC set and NTC (PSNR, FLIP, bytes) from the asset
    comparison ``asset`` and ``ntc``'s record, the rule and the recommendation (:func:`recommend`)."""
    sizes = asset["bytes"]

    def figures(name: str, scores: dict[str, Any] | None, nbytes: int, note: str = "") -> tuple[Figures, dict[str, Any]]:
        psnr = (scores or {}).get("psnr_db")
        shown = {"psnr_db": psnr, "flip": (scores or {}).get("flip"), "bytes": nbytes, "bits_per_texel": round(nbytes * 8.0 / texels, 3)}
        return Figures(name, psnr, nbytes, nbytes * 8.0 / texels, note), shown

    neural, neural_shown = figures("the neural material", asset, sizes["neural_total"])
    bc, bc_shown = figures("the BC set", asset.get("bc"), sizes["bc_set_total"])
    block: dict[str, Any] = {"rule": RULE, "neural_material": neural_shown, "bc": bc_shown}
    ntc_figures = None
    if ntc is not None and ntc.scene is not None:
        ntc_figures, shown = figures("NTC", asset.get("ntc"), ntc.record["bytes"])
        block["ntc"] = {**shown, **{k: v for k, v in ntc.record.items() if k not in shown}}
    elif ntc is not None:
        ntc_figures = Figures("NTC", None, 0, 0.0, ntc.record["skipped"])
        block["ntc"] = dict(ntc.record)
    block["bits_per_texel_over"] = f"the {texels} texels of the material's largest map"
    block["recommendation"] = recommend(neural, bc, ntc_figures)
    return block

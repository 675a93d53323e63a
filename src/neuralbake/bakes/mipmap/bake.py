"""The learned-mipmap bake as the one runner (:mod:`neuralbake.bakes.run`) runs it: load the maps,
build the baseline chains, train the learned chain in one phase, measure every chain, write the
outputs into the staging folder."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from neuralbake.bakes.mipmap.config import SLOPE_PARAMETERISATION, MipmapConfig, check_bake_memory, device_defaults, mipmap_footprint
from neuralbake.bakes.mipmap.maps import box_mip_chain, load_material_maps, renormalised, toksvig_chain
from neuralbake.bakes.mipmap.model import LearnedMipChain, MipReferenceSampler
from neuralbake.bakes.mipmap.outputs import (
    METHODS,
    comparison_fields,
    comparison_image,
    decode_8bit,
    encode_chain_8bit,
    level_tables,
    write_chain,
)
from neuralbake.bakes.mipmap.shading import (
    level_errors,
    level_slices,
    mirror_directions,
    sample_directions,
    shade_directions,
    tone_mapped_loss,
)
from neuralbake.bakes.run import Bake, BakeOutcome, BakeRun
from neuralbake.errors import ConfigError, TrainingError
from neuralbake.io.images import save_png

__all__ = ["MIPMAP", "bake_mipmap"]

HELD_OUT_SEED_OFFSET = 7919
"""The held-out directions are drawn with ``train.seed + 7919``, apart from the training ones."""


def _bake_body(run: BakeRun) -> BakeOutcome:
    config: MipmapConfig = run.config
    device = run.device
    if config.texture_size is not None:  # before the maps are resampled to it
        check_bake_memory(config.texture_size, config, device)
    maps_cpu, facts = load_material_maps(config)
    side = maps_cpu.side
    check_bake_memory(side, config, device)
    max_levels = int(math.log2(side))
    if config.levels is not None and config.levels > max_levels:
        raise ConfigError(
            f"a {side}x{side} map has {max_levels} levels below it, {config.levels} were asked for.",
            field="levels",
            fix=f"use --levels {max_levels} or fewer.",
        )
    levels = config.levels or max_levels

    maps = maps_cpu.to(device)
    box = box_mip_chain(maps, levels)
    chains = {"box": renormalised(box), "toksvig": toksvig_chain(box), "toksvig_phong": toksvig_chain(box, variant="phong")}
    learn_metallic = bool(facts["metallic_from_map"])
    model = LearnedMipChain(
        chains["toksvig"] if config.init == "toksvig" else box, light_intensity=config.light_intensity, learn_metallic=learn_metallic
    ).to(device)
    sampler = MipReferenceSampler(maps, levels, config)
    slices = level_slices(side, levels)

    held_generator = torch.Generator(device="cpu").manual_seed(config.train.seed + HELD_OUT_SEED_OFFSET)
    held_out = sample_directions(
        config.held_out_directions, held_generator, torch.device("cpu"), specular_fraction=config.specular_fraction
    ).to(device)
    held_targets = sampler.targets(held_out)

    def evaluate(module: torch.nn.Module) -> dict[str, float]:
        with torch.no_grad():
            rows = level_errors(shade_directions(module.chain(), held_out, config.light_intensity), held_targets, slices)
        return {"psnr_db": float(np.mean([r["psnr_db"] for r in rows]))}

    compatibility = {
        "maps_sha256": facts["sha256"],
        "size": side,
        "levels": levels,
        "init": config.init,
        "slope_parameterisation": SLOPE_PARAMETERISATION,
    }
    try:
        result = run.train(model, sampler, tone_mapped_loss(slices), config.train, evaluate=evaluate, compatibility=compatibility)
    except TrainingError as exc:
        if exc.field != "slope_parameterisation":
            raise
        raise TrainingError(
            "the checkpoint was made by an older neuralbake that stored absolute normal slopes; this version learns "
            f"offsets from the initial slopes ({SLOPE_PARAMETERISATION}), so its texels cannot be resumed.",
            path=exc.path,
            field="slope_parameterisation",
            fix="run without --resume to start the bake over.",
        ) from exc

    with run.task("measuring the chains", 2 * len(METHODS), unit="chains") as advance, torch.no_grad():
        chains["learned"] = model.chain()
        chain_images = encode_chain_8bit(chains["learned"])
        chains["learned_8bit"] = [decode_8bit(images, device) for images in chain_images]
        per_method = {}
        for name in METHODS:
            per_method[name] = level_errors(shade_directions(chains[name], held_out, config.light_intensity), held_targets, slices)
            advance(1)
        mirror = mirror_directions(device)
        mirror_targets = sampler.targets(mirror)
        per_method_mirror = {}
        for name in METHODS:
            per_method_mirror[name] = level_errors(shade_directions(chains[name], mirror, config.light_intensity), mirror_targets, slices)
            advance(1)
    files = write_chain(run.stage / "mips", maps, chain_images, learn_metallic)
    panel = int(min(256, max(128, side)))
    save_png(run.stage / "comparison.png", comparison_image(maps, chains, config.light_intensity, panel))

    metrics, tables = level_tables(side, per_method, per_method_mirror)
    fields: dict[str, Any] = {
        **tables,
        "mirror_directions": "12 exact mirror pairs (view at 10/35/60 degrees, 4 azimuths): every flat texel on its highlight peak",
        "error_space": "PSNR and RMSE of Reinhard-tone-mapped radiance x/(1+x) (peak 1); rmse_linear on radiance",
        "held_out_directions": config.held_out_directions,
        "steps": result.steps,
        "final_loss": result.final_loss,
        "seconds": round(result.train_seconds, 3),
        "maps": facts,
        "levels": levels,
        "learned_parameters": sum(p.numel() for p in model.parameters()),
        "comparison": comparison_fields(),
        "files": files,
    }
    return BakeOutcome(metrics, fields, curve_title="learned mipmaps", quality_key="psnr_db")


MIPMAP = Bake("mipmap", MipmapConfig, _bake_body, device_defaults=device_defaults, title="learned mipmaps", footprint=mipmap_footprint)
"""The learned-mipmap bake, as the runner (:mod:`neuralbake.bakes.run`) runs it."""


def bake_mipmap(config: MipmapConfig, out_dir: str | Path, **options: Any) -> dict[str, Any]:
    """Learn a mip chain for a texture set and write it with a comparison image and a report.

    Runs through :func:`neuralbake.bakes.run.run_bake` (validation, device defaults, lock,
    staging, checkpoints, manifest). Everything (config, device, maps) is checked before any
    optimisation. Returns the report as a dict; raises
    :class:`~neuralbake.nn.trainer.TrainingInterrupted` when stopped with Ctrl-C or SIGTERM (a
    checkpoint is saved; ``resume=True`` continues it).
    """
    return MIPMAP.run(config, out_dir, **options)

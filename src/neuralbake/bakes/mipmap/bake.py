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
from neuralbake.bakes.mipmap.maps import MaterialMaps, box_mip_chain, load_material_maps, renormalised, toksvig_chain
from neuralbake.bakes.mipmap.model import LearnedMipChain, MipReferenceSampler
from neuralbake.bakes.mipmap.outputs import (
    METHODS,
    comparison_fields,
    class_tables,
    comparison_image,
    decode_8bit,
    encode_chain_8bit,
    level_tables,
    write_chain,
)
from neuralbake.bakes.mipmap.shading import (
    CLASSES,
    class_of,
    class_weighted_loss,
    grazing_directions,
    level_errors,
    level_mse,
    level_slices,
    mirror_directions,
    sample_directions,
    shade_directions,
    shade_maps,
)
from neuralbake.bakes.run import Bake, BakeOutcome, BakeRun
from neuralbake.errors import ConfigError, TrainingError
from neuralbake.io.images import save_png
from neuralbake.material.frame import normalize

__all__ = ["CLASS_TARGET", "MIPMAP", "bake_mipmap", "update_class_weights"]

HELD_OUT_SEED_OFFSET = 7919
"""The held-out directions are drawn with ``train.seed + 7919``, apart from the training ones."""
CONTROL_SEED_OFFSET = 104729
"""The off-mirror pairs that steer the class weights are drawn with ``train.seed + 104729``: neither the training's nor
the report's."""
CONTROL_DIRECTIONS = 64

CLASS_UPDATE_EVERY = 20
"""Steps between updates of the class weights (each shades the steering pairs, about 3.5 steps' worth of directions)."""
CLASS_TARGET = 0.9
"""The class weights aim at the learned chain's error in every (class, level) being at most 0.9x box filtering's."""
MAX_CLASS_WEIGHT = 1000.0


def update_class_weights(weights: torch.Tensor, learned_mse: torch.Tensor, box_mse: torch.Tensor) -> None:
    """Raise, in place, the loss weight of each (class, level) ``[C, L]`` where the learned chain's error exceeds
    :data:`CLASS_TARGET` x box filtering's, and lower it back towards 1 where it is below.

    A mean over random directions lets the chain trade one class for another: a footprint of narrow and wide lobes
    has a sharper peak and wider flanks than any one lobe, and an unweighted loss gave up the peak, so on a metal
    set whose roughness varies per texel the learned chain lost 8-9 dB to box filtering at the mirror directions
    while winning on average. The step is the square root of the error ratio (at most x4 or /2 per evaluation);
    the weights stay in [1, :data:`MAX_CLASS_WEIGHT`].
    """
    ratio = torch.nan_to_num(learned_mse / (CLASS_TARGET * box_mse).clamp(min=1e-12), nan=1.0)  # a class without pairs: unchanged
    weights.mul_(ratio.sqrt().clamp(0.5, 4.0).to(weights.dtype)).clamp_(1.0, MAX_CLASS_WEIGHT)


GUARD_SHARES = (1.0, 0.75, 0.5, 0.25, 0.0)
"""The learned share of a level tried, largest first, by :func:`guard_levels` (0: box filtering's level)."""


def _blend(box: MaterialMaps, learned: MaterialMaps, share: float) -> MaterialMaps:
    if share == 1.0:
        return learned
    mix = lambda a, b: a + share * (b - a)  # noqa: E731
    normal = mix(box.normal, learned.normal)
    normal = normalize(normal.reshape(-1, 3)).reshape(normal.shape)
    return MaterialMaps(mix(box.base_color, learned.base_color), normal, mix(box.roughness, learned.roughness), mix(box.metallic, learned.metallic))


def guard_levels(learned: list[MaterialMaps], box: list[MaterialMaps], box_mse: torch.Tensor, pairs: dict[str, torch.Tensor],
                 targets: dict[str, torch.Tensor], slices: list[slice], light_intensity: float) -> tuple[list[MaterialMaps], list[float]]:
    """The chain shipped: per level, the learned texels blended towards box filtering's by the largest share of
    :data:`GUARD_SHARES` that shades no class of ``pairs`` (in :data:`CLASSES` order) worse than box filtering does,
    whose errors are ``box_mse`` ``[classes, levels]`` (share 0 is box's level, so one always qualifies). The class
    weights make this rare; where the footprint's mix of lobes defeats them (the finest level of a metal set with
    per-texel roughness kept 0.25 of the learned texels), it keeps the chain from shipping a level that loses to the
    plain one."""
    chain, shares = [], []
    for k, (mine, plain) in enumerate(zip(learned, box, strict=True)):
        def error(level: MaterialMaps, cls: str) -> float:
            d = pairs[cls]
            shaded = shade_maps(level, d[:, :3], d[:, 3:], light_intensity=light_intensity).reshape(d.shape[0], -1)
            return float(level_mse(shaded, targets[cls][:, slices[k]], [slice(None)])[0])

        floor = {cls: float(box_mse[c, k]) for c, cls in enumerate(CLASSES) if len(pairs[cls])}
        for share in GUARD_SHARES:
            candidate = _blend(plain, mine, share)
            if share == 0.0 or all(error(candidate, cls) <= limit for cls, limit in floor.items()):
                chain.append(candidate)
                shares.append(share)
                break
    return chain, shares


def _class_sets(held_out: torch.Tensor, device: torch.device) -> dict[str, torch.Tensor]:
    """The report's pairs per class: the fixed mirror and grazing pairs, and the held-out pairs off the mirror."""
    return {"mirror": mirror_directions(device), "off_mirror": held_out[class_of(held_out) == 1], "grazing": grazing_directions(device)}


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

    # the class weights are steered on pairs of their own: mirror and grazing pairs at other angles than the report's,
    # off-mirror pairs of another draw
    control_generator = torch.Generator(device="cpu").manual_seed(config.train.seed + CONTROL_SEED_OFFSET)
    control_random = sample_directions(CONTROL_DIRECTIONS, control_generator, torch.device("cpu"), specular_fraction=0.0).to(device)
    control = {
        "mirror": mirror_directions(device, thetas=(20.0, 45.0, 70.0), phi_offset=45.0),
        "off_mirror": control_random[class_of(control_random) == 1],
        "grazing": grazing_directions(device, phi_offset=45.0),
    }
    control_targets = {name: sampler.targets(d) for name, d in control.items()}
    control_box = torch.stack([level_mse(shade_directions(chains["box"], control[name], config.light_intensity), control_targets[name], slices)
                               for name in CLASSES])

    def steer(trainer: Any, step: int) -> None:
        if step % CLASS_UPDATE_EVERY:
            return
        with torch.no_grad():
            chain = model.chain()
            learned = torch.stack([level_mse(shade_directions(chain, control[name], config.light_intensity), control_targets[name], slices)
                                   for name in CLASSES])
            update_class_weights(model.class_weights, learned, control_box)

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
        "loss": "class_weighted",  # the class weights live in the checkpoint
    }
    try:
        result = run.train(model, sampler, class_weighted_loss(slices, model.class_weights), config.train, evaluate=evaluate,
                           compatibility=compatibility, on_step=steer)
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
        chains["learned"], shares = guard_levels(model.chain(), chains["box"], control_box, control, control_targets, slices,
                                                  config.light_intensity)
        chain_images = encode_chain_8bit(chains["learned"])
        chains["learned_8bit"] = [decode_8bit(images, device) for images in chain_images]
        per_method = {}
        for name in METHODS:
            per_method[name] = level_errors(shade_directions(chains[name], held_out, config.light_intensity), held_targets, slices)
            advance(1)
        per_class: dict[str, dict[str, list[dict[str, float]]] | None] = {}
        for cls, pairs in _class_sets(held_out, device).items():
            if len(pairs) == 0:
                per_class[cls] = None  # no held-out pair fell off the mirror
                continue
            targets = sampler.targets(pairs)
            per_class[cls] = {name: level_errors(shade_directions(chains[name], pairs, config.light_intensity), targets, slices) for name in METHODS}
        advance(len(METHODS))
        per_method_mirror = per_class["mirror"]
    files = write_chain(run.stage / "mips", maps, chain_images, learn_metallic)
    panel = int(min(256, max(128, side)))
    save_png(run.stage / "comparison.png", comparison_image(maps, chains, config.light_intensity, panel))

    metrics, tables = level_tables(side, per_method, per_method_mirror)
    fields: dict[str, Any] = {
        **tables,
        **class_tables(side, per_class),
        "class_weights": [[round(float(w), 4) for w in row] for row in model.class_weights],
        "learned_share": shares,
        "classes": {
            "mirror": "12 exact mirror pairs (view at 10/35/60 degrees, 4 azimuths): every flat texel on its highlight peak",
            "off_mirror": "the held-out pairs with view and light within 75 degrees of the normal and the half vector more than 5 from it",
            "grazing": "12 pairs with (view, light) at (80, 80), (80, 45) and (45, 80) degrees from the normal, 4 azimuths",
            "learned_share": "per level, the share of the learned texels shipped (the rest box filtering's): the largest of "
                             f"{', '.join(f'{v:g}' for v in GUARD_SHARES)} that shades no class worse than box on the steering pairs",
            "class_weights": f"the loss weight per class (rows: {', '.join(CLASSES)}) and level at the end, raised during training where "
                             f"learned shaded a class worse than {CLASS_TARGET}x box's error on pairs of their own",
        },
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

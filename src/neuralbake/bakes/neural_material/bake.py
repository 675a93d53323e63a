"""The neural material bake as the runner runs it: train, bake the latent texture, write, score.

:func:`bake_material` is one material's whole bake inside a running :class:`BakeRun`; the neural
material bake runs it once into the staging folder, the material pack once per material (each in
its own phase and sub-folder).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from torch.func import functional_call

from neuralbake.bakes.neural_material.asset import AssetMaterial, AssetSurface, asset_comparison, is_asset, load_asset_material, place_material
from neuralbake.bakes.neural_material.comparison import compare, throughput
from neuralbake.bakes.neural_material.config import NeuralMaterialConfig, device_defaults
from neuralbake.bakes.neural_material.latents import bake_latent_pyramid, load_neural_material, write_material_bundle
from neuralbake.bakes.neural_material.model import NeuralMaterial, NeuralMaterialModel, ReferenceSampler, relative_l1, texel_features
from neuralbake.bakes.run import Bake, BakeOutcome, BakeRun
from neuralbake.errors import ConfigError
from neuralbake.io.files import sha256_file
from neuralbake.kernels import resolve_kernels, try_kernels, unsupported_reason
from neuralbake.material.loader import load_material
from neuralbake.nn.precision import compute_dtype
from neuralbake.render.preview import SCENES

__all__ = ["NEURAL_MATERIAL", "bake_material", "bake_neural_material"]


def _shared_decoder(config: NeuralMaterialConfig, model: NeuralMaterialModel, device: torch.device, recorded_as: str | None) -> dict[str, Any] | None:
    """Start ``model``'s decoder from ``config.shared_decoder`` (frozen leading layers); what the report records."""
    if not config.shared_decoder:
        return None
    source = load_neural_material(config.shared_decoder, device=device)  # read_bundle: verifies the folder's bake.json
    if tuple(source.direction_inputs) != tuple(config.direction_inputs):
        raise ConfigError(
            f"the shared decoder reads directions {list(source.direction_inputs)}, this bake {list(config.direction_inputs)}.",
            field="direction_inputs",
            fix="use the shared bundle's direction inputs.",
        )
    model.share_decoder(source.decoder, config.shared_layers)
    return {"bundle": recorded_as or str(Path(config.shared_decoder).resolve()), "layers": config.shared_layers,
            "sha256": [sha256_file(Path(config.shared_decoder) / "network.safetensors")]}


def bake_material(
    run: BakeRun, config: NeuralMaterialConfig, folder: Path, *, phase: str = "train", shared_as: str | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Train ``config``'s material as training phase ``phase`` and write its bundle and pictures into ``folder``.

    ``shared_as``: the path the report and manifest record for ``config.shared_decoder`` (a pack
    shares a folder that is still in staging). Returns the report's metrics and fields.
    """
    device = run.device
    kernels = decode_kernels(config, device)
    material = load_reference(config, device)
    if isinstance(material, AssetMaterial):  # recorded: the bundle and its shader are named after the asset's material
        config = dataclasses.replace(config, material_name=material.name)
    if isinstance(material, AssetMaterial) and config.texture_size > material.texture_side:
        run.note(f"latent texture {material.texture_side}x{material.texture_side}: no larger than the asset's largest texture")
        config = dataclasses.replace(config, texture_size=material.texture_side)
    normal = torch.nn.functional.normalize(torch.tensor(config.normal, dtype=torch.float32, device=device), dim=0)[None]
    features = texel_features(material, torch.full((1, 2), 0.5, device=device), normal).shape[1]
    model = NeuralMaterialModel(features, config).to(device)
    shared = _shared_decoder(config, model, device, shared_as)
    training_kernels = _training_kernels(run, config, model, device)
    sampler = ReferenceSampler(
        material, normal, config.batch_size, config.material_sampling, device, chunk=config.reference_chunk, uniform_views=config.uniform_views
    )
    compatibility = {
        "material": sha256_file(config.material), "features": features, "latent": config.latent, "shared": shared,
        "asset": sha256_file(config.asset) if config.asset else None, "material_name": config.material_name,
        # the objective: resuming under another loss or view distribution changes the run silently
        "loss": "relative_l1", "uniform_views": config.uniform_views,
    }
    try:
        result = run.train(model, sampler, relative_l1, config.train, phase=phase, compatibility=compatibility)
    finally:
        model.encoder.kernels = model.decoder.kernels = "torch"  # the shipped decoder decodes on the decode path below

    run.note(f"baking the {config.texture_size}x{config.texture_size} latent texture and scoring it")
    levels = bake_latent_pyramid(model, material, normal, config.texture_size)
    neural = NeuralMaterial(levels, model.decoder, config.direction_inputs)
    if kernels == "triton":
        neural.kernels = "triton"
        probe = torch.full((4, 2), 0.5, device=device), torch.tensor([[0.0, 0.0, 1.0]] * 4, device=device)
        kernels = try_kernels(config.kernels, kernels, lambda: neural.decode(probe[0], probe[1], probe[1]), run.note)
    neural.kernels = kernels
    folder.mkdir(parents=True, exist_ok=True)
    bundle = write_material_bundle(folder, neural, config, features, shared)
    with run.task("comparison renders", 2 * len(SCENES) * config.compare_size**2, unit="pixels") as advance:
        scores = compare(folder, material, neural, normal, config, progress=advance)
    metrics = {"psnr_db": scores.pop("psnr_db"), "flip": scores.pop("flip"), "final_loss": result.final_loss}
    asset: dict[str, Any] | None = None
    if isinstance(material, AssetSurface):
        with run.task("asset renders", ASSET_VIEWS * config.compare_size**2, unit="pixels") as advance:
            asset = asset_comparison(
                folder, material, neural, size=config.compare_size, spp=config.compare_spp, views=ASSET_VIEWS, progress=advance,
                latent_bytes=bundle["bytes"]["latents.u8.safetensors"], decoder_bytes=bundle["bytes"]["network.fp16.bin"],
            )
        # the asset's own renders are the headline; the sphere and tile previews stay under "preview"
        scores["preview"] = {"psnr_db": metrics["psnr_db"], "flip": metrics["flip"]}
        metrics.update(psnr_db=asset["psnr_db"], flip=asset["flip"])
    fields: dict[str, Any] = {
        **scores,
        "throughput": throughput(material, neural, normal),
        "kernels": {"train": training_kernels, "decode": neural.kernels},
        "steps": result.steps,
        "samples_seen": result.samples_seen,
        "seconds": round(result.train_seconds, 3),
        "decoder_params": sum(layer.weight.numel() + layer.bias.numel() for layer in model.decoder.layers),
        "decoder_trained_params": model.decoder.parameter_count(),
        "shared_decoder": shared,
        "encoder_params": model.encoder.parameter_count(),
        "texel_inputs": features,
        "latent": config.latent,
        "resolution": config.texture_size,  # the report's key since the first bakes (README, docs/results)
        "mip_levels": len(levels),
        "bundle": bundle,
        "asset": asset if asset is not None else {"note": "no asset: a layered material baked for one world normal "
                                                  f"{list(config.normal)}, scored on the preview sphere and tile"},
        "source_material_parameter_bytes": sum(t.numel() * t.element_size() for t in getattr(material, "parameters", {}).values()),
    }
    return metrics, fields


ASSET_VIEWS = 4
"""Held-out views of an asset the bake is scored on."""


def load_reference(config: NeuralMaterialConfig, device: torch.device) -> Any:
    """The material a bake learns: a layered material (.json, .mtlx) or one material of a glTF asset."""
    if is_asset(config.material):
        if config.asset:
            raise ConfigError(
                f"--asset places a layered material on an asset, and {Path(config.material).name} is an asset itself.",
                field="asset",
                fix="leave --asset out when baking a glTF asset's own material.",
            )
        return load_asset_material(config.material, config.material_name, device=device)
    if config.material_name and not config.asset:
        raise ConfigError(
            f"material_name {config.material_name!r} picks a material of a glTF asset, and {Path(config.material).name} is not one.",
            field="material_name",
            fix="leave --material out for .json and .mtlx materials, or give the asset with --asset.",
        )
    layered = load_material(config.material, device=device)
    if not config.asset:
        return layered
    up = torch.nn.functional.normalize(torch.tensor(config.normal, dtype=torch.float32, device=device), dim=0)
    return place_material(layered, config.material, config.asset, config.material_name, fallback_normal=up, device=device)


def _training_kernels(run: BakeRun, config: NeuralMaterialConfig, model: NeuralMaterialModel, device: torch.device) -> str:
    """Train the encoder and the decoder through the fused kernels (``triton``) or PyTorch; sets the MLPs' path.

    Each MLP's forward and backward is a fused kernel inside autograd
    (:class:`neuralbake.kernels.fused.FusedMLP`); the loss, the glue between encoder and decoder
    and the optimiser stay PyTorch. Only ``--kernels triton`` takes it: on an H100 it measured
    1.0-1.5x the CUDA-graph autograd step (``bench/kernels.py --only train_material``), which does
    not pay for compiling the kernels, so ``auto`` trains with PyTorch.
    """
    if config.kernels != "triton":
        return "torch"
    reason = None
    for name, mlp in (("encoder", model.encoder), ("decoder", model.decoder)):
        why = unsupported_reason(mlp.config.widths(), [mlp.config.hidden_activation, mlp.config.output_activation], training=True)
        if why is not None and reason is None:
            reason = f"the {name}: {why}"
    kernels = resolve_kernels(config.kernels, device, reason, dtype=compute_dtype(config.train.precision))

    def trial() -> None:
        # in the training precision: the kernels the steps will use (an fp32 compile alone takes minutes)
        dtype = compute_dtype(config.train.precision)
        params = {name: value.detach().to(dtype).requires_grad_() for name, value in model.named_parameters()}
        probe = torch.zeros(4, model.features + 6, device=device, dtype=dtype)
        probe[:, -1] = probe[:, -4] = 1.0
        functional_call(model, params, (probe,)).float().sum().backward()

    model.encoder.kernels = model.decoder.kernels = kernels
    kernels = try_kernels(config.kernels, kernels, trial, run.note)
    model.encoder.kernels = model.decoder.kernels = kernels
    return kernels


def decode_kernels(config: NeuralMaterialConfig, device: torch.device) -> str:
    """``triton`` or ``torch`` for the decode of a bake with ``config`` on ``device`` (see :mod:`neuralbake.kernels`).

    Resolved before training, so an impossible ``--kernels triton`` fails before the work.
    """
    directions = len(config.direction_inputs)
    widths = [config.latent + 3 * directions, *[config.decoder_hidden] * config.decoder_layers, 3]
    reason = unsupported_reason(widths, ["relu", "none"])
    if reason is None and directions > 3:
        reason = f"the fused decode reads at most 3 direction features, and the bake has {directions}"
    return resolve_kernels(config.kernels, device, reason, dtype=torch.float32)  # the trained decoder decodes in fp32


def _bake_body(run: BakeRun) -> BakeOutcome:
    config: NeuralMaterialConfig = run.config
    metrics, fields = bake_material(run, config, run.stage)
    return BakeOutcome(metrics, fields, curve_title=f"neural material: {Path(config.material).name}")


NEURAL_MATERIAL = Bake("neural_material", NeuralMaterialConfig, _bake_body, device_defaults=device_defaults(), title="neural material")
"""The neural material bake, as the runner (:mod:`neuralbake.bakes.run`) runs it."""


def bake_neural_material(config: NeuralMaterialConfig, out_dir: str | Path, **options: Any) -> dict[str, Any]:
    """Train, bake and write a neural material (see the package docstring); returns the report.

    Runs through :func:`neuralbake.bakes.run.run_bake` (device defaults, validation, lock,
    staging, checkpoints, ``bake.json``). Raises :class:`~neuralbake.nn.trainer.TrainingInterrupted`
    when stopped with Ctrl-C or SIGTERM (``resume=True`` continues from the checkpoint).
    """
    return NEURAL_MATERIAL.run(config, out_dir, **options)

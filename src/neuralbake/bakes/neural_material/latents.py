"""The latent texture: baked per texel by the encoder (with its mip pyramid), written with the decoder
as a bundle, and read back.

What ships is the latent texture (fp16, and 8-bit with a per-channel scale and offset) and the
decoder in the network bundle format with its packed device layouts; the encoder is dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save

from neuralbake.bakes.neural_material.config import NeuralMaterialConfig
from neuralbake.bakes.neural_material.model import NeuralMaterial, NeuralMaterialModel, texel_features
from neuralbake.bakes.neural_material.sampling import SamplingHead
from neuralbake.errors import BundleError
from neuralbake.io.bundle import read_bundle, write_bundle
from neuralbake.io.files import atomic_write_bytes, sha256_file
from neuralbake.io.neural_material_bundle import (
    MAX_TILT,
    MAX_W,
    MIN_ALPHA,
    SAMPLER_FILE,
    read_latent_levels,
    read_neural_material_manifest,
    read_sampler_weights,
)
from neuralbake.nn.mlp import MLP, MLPConfig
from neuralbake.nn.quantize import dequantize_latents_affine_u8, quantize_latents_affine_u8
from neuralbake.render.mip import build_mip_pyramid

__all__ = ["BUNDLE_FILES", "BUNDLE_KIND", "bake_latent_pyramid", "load_neural_material", "read_sampler", "uv_grid", "write_material_bundle"]

BUNDLE_KIND = "neural_material"
BUNDLE_FILES = ("network.json", "network.safetensors", "network.fp16.bin", "network.fp32.bin", "latents.fp16.safetensors", "latents.u8.safetensors")
"""The files of a neural material bundle (decoder, its device layouts, the latent textures)."""


def uv_grid(resolution: int, device: torch.device) -> torch.Tensor:
    """Texel-centre UVs of a ``resolution`` squared texture, row-major: ``[resolution^2, 2]``."""
    centres = (torch.arange(resolution, device=device, dtype=torch.float32) + 0.5) / resolution
    v, u = torch.meshgrid(centres, centres, indexing="ij")
    return torch.stack([u, v], dim=-1).reshape(-1, 2)


def bake_latent_pyramid(
    model: NeuralMaterialModel, material: Any, normal: torch.Tensor, resolution: int, *, chunk: int = 1 << 15, supersample: int = 1
) -> list[torch.Tensor]:
    """Run the encoder per texel: mip 0 from the inputs at texel centres, each lower mip from the
    encoder applied to 2x2 box-filtered inputs of the level above. Returns ``[R_k, R_k, latent]`` per level.

    ``supersample`` ``k > 1``: mip 0's inputs are the box average of ``k x k`` samples per texel (a
    glTF asset's maps finer than the latent texture are filtered, not point-sampled), as the lower
    mips' inputs are."""
    device = normal.device
    fine = resolution * supersample
    uv = uv_grid(fine, device)
    with torch.no_grad():
        features = torch.cat([texel_features(material, part, normal.expand(len(part), 3)) for part in uv.split(chunk)])
        if supersample > 1:
            features = features.reshape(resolution, supersample, resolution, supersample, -1).mean(dim=(1, 3))
        levels = []
        for grid in build_mip_pyramid(features.reshape(resolution, resolution, -1), odd="ceil"):
            flat = grid.reshape(-1, grid.shape[-1])
            latent = torch.cat([model.encoder(part) for part in flat.split(chunk)])
            levels.append(latent.reshape(grid.shape[0], grid.shape[1], -1).float())
    return levels


def write_material_bundle(
    out: Path, neural: NeuralMaterial, config: NeuralMaterialConfig, features: int, shared: dict[str, Any] | None = None,
    shown: Callable[[Any], Any] = lambda value: value,
) -> dict[str, Any]:
    """Write the latent textures and the decoder bundle into ``out``; returns their names and sizes.
    ``shown`` says how the manifest names the bake's inputs (:meth:`~neuralbake.bakes.run.BakeRun.shown`).

    The manifest keeps ``latent.resolution`` (the config field is ``texture_size``), so bundles
    read the same whichever neuralbake wrote them.
    """
    latents = {f"latent.mip{k}": level for k, level in enumerate(neural.latents)}
    atomic_write_bytes(out / "latents.fp16.safetensors", save({k: v.detach().cpu().half().contiguous() for k, v in latents.items()}))
    quantized: dict[str, torch.Tensor] = {}
    for key, level in latents.items():
        codes, scale, offset = quantize_latents_affine_u8(level.detach().cpu())
        quantized.update({f"{key}.codes": codes, f"{key}.scale": scale, f"{key}.offset": offset})
    atomic_write_bytes(out / "latents.u8.safetensors", save(quantized))
    extra = {"latents_fp16": "latents.fp16.safetensors", "latents_u8": "latents.u8.safetensors"}
    sampler_meta = None
    if neural.sampler is not None:  # the importance-sampling head (sampling.py), in its own file
        atomic_write_bytes(out / SAMPLER_FILE, save({k: v.detach().cpu().float().contiguous() for k, v in neural.sampler.state_dict().items()}))
        extra["sampler"] = SAMPLER_FILE
        sampler_meta = {"file": SAMPLER_FILE, "latent": int(neural.latents[0].shape[-1]), "hidden": neural.sampler.mlp.config.hidden,
                        "proxy": "GGX reflection lobe (weight w, alpha, normal tilted by tilt) + cosine lobe (1 - w); see bakes/neural_material/sampling.py",
                        "min_alpha": MIN_ALPHA, "max_tilt": MAX_TILT, "max_w": MAX_W}
    decoder = neural.decoder
    layers = decoder.linear_layers("decoder.")
    write_bundle(
        out,
        {f"decoder.{k}": v for k, v in decoder.state_dict().items()},
        kind=BUNDLE_KIND,
        metadata={
            "architecture": {**asdict(decoder.config), "direction_inputs": list(neural.direction_inputs),
                             "inputs_layout": "latent (L), then each of direction_inputs (3 each; wi, wo, half = normalize(wi + wo)): local frame, normal +z", "output": "log(1 + f cos); f cos = max(exp(y) - 1, 0)"},
            "latent": {"channels": config.latent, "resolution": config.texture_size, "mip_levels": len(neural.latents),
                       "fp16": "latents.fp16.safetensors", "u8": "latents.u8.safetensors", "wrap": "repeat", "filter": "bilinear",
                       "u8_decode": "latent = codes * scale + offset (per channel)"},
            "precision": {"training": "fp32", "inference": "fp16 or fp32"},
            "shared_decoder": shown(shared),
            "sampler": sampler_meta,
            "material": shown({"source": str(Path(config.material).resolve()), "sha256": sha256_file(config.material), "texel_inputs": features,
                         "baked_normal": list(config.normal),
                         **({"name": config.material_name} if config.material_name and not config.asset else {}),
                         **({"asset": str(Path(config.asset).resolve()), "asset_material": config.material_name or None} if config.asset else {})}),
        },
        layers=layers,
        extra_files=extra,
    )
    files = [*BUNDLE_FILES, *([SAMPLER_FILE] if sampler_meta else [])]
    return {"files": files, "bytes": {name: (out / name).stat().st_size for name in files}}


def load_neural_material(bundle_dir: str | Path, *, device: torch.device | str = "cpu", quantized: bool = False) -> NeuralMaterial:
    """Read a baked neural material (decoder bundle + fp16 or 8-bit latents).

    The manifest, the weights and the latent file are checked before use
    (:func:`neuralbake.io.neural_material_bundle.read_neural_material_manifest` and
    ``read_latent_levels``): anything missing, mistyped, truncated or inconsistent is a
    BundleError naming the file and the field.
    """
    bundle = read_bundle(bundle_dir, kind=BUNDLE_KIND)
    info = read_neural_material_manifest(bundle)
    arch = {key: info.fields[f"architecture.{key}"] for key in ("inputs", "hidden", "layers", "outputs", "hidden_activation", "output_activation", "leak")}
    try:
        decoder = MLP(MLPConfig(**arch))
        decoder.load_state_dict({k.removeprefix("decoder."): v for k, v in bundle.tensors.items()})
    except (ValueError, TypeError, RuntimeError) as exc:
        raise BundleError(
            f"the weights do not fit the decoder the manifest describes ({exc}).",
            path=bundle.manifest_path,
            field="architecture",
            fix="the weights and manifest come from different bakes; copy a matching pair.",
        ) from exc
    levels = []
    for data, scale, offset in read_latent_levels(bundle, info, "u8" if quantized else "fp16"):
        tensor = torch.from_numpy(data.copy())
        if quantized:
            levels.append(dequantize_latents_affine_u8(tensor, torch.from_numpy(scale), torch.from_numpy(offset)))
        else:
            levels.append(tensor.float())
    device = torch.device(device)
    material = NeuralMaterial([level.to(device) for level in levels], decoder.to(device), info.fields["architecture.direction_inputs"])
    material.sampler = read_sampler(bundle, int(levels[0].shape[-1]))
    if material.sampler is not None:
        material.sampler.to(device)
    return material


def read_sampler(bundle: Any, latent: int) -> SamplingHead | None:
    """The bundle's importance-sampling head, checked against its manifest entry (``None`` for bundles without one)."""
    read = read_sampler_weights(bundle, latent)
    if read is None:
        return None
    hidden, state = read
    head = SamplingHead(latent, hidden)
    head.load_state_dict(state)
    return head.eval()


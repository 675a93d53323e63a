"""``ntc export``: a compressed NTC folder as a Slang module + HLSL that decode it where the texture is sampled.

The shader code and its buffers come from :mod:`neuralbake.export.ntc` (which sits below the bakes and
takes plain data); this module reads the container, hands its codes and int8 decoder over
(:func:`shader_set`), measures the stochastic filter's bias and noise on the set in PyTorch
(:func:`stochastic_error`, written into the export's manifest) and checks the folders.

The stochastic filter decodes one texel per sample, chosen with probability equal to its trilinear
weight, so its expectation is the trilinear sample: its bias is zero up to float rounding, and what
it costs is noise. :func:`stochastic_error` measures both on random ``(uv, lod)`` of the set: the
mean signed difference from :func:`~neuralbake.bakes.ntc.decode.sample_filtered` (with its standard
error, so "~0" can be judged) and its root mean square. The tests measure the exported shader on the
same queries (:func:`stochastic_queries`) and find the same figures.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from neuralbake.bakes.ntc.container import NTCContainer, open_container, refuse_rate_sweep
from neuralbake.bakes.ntc.decode import sample_filtered, sample_stochastic
from neuralbake.errors import BundleError, ConfigError, InputError
from neuralbake.export.ntc import NTCGroup, NTCShaderExport, NTCShaderSet, export_ntc_shader, shader_identifier
from neuralbake.io.device_layout import LayerTensors
from neuralbake.io.files import sha256_file
from neuralbake.io.limits import load_json_file
from neuralbake.io.manifest import BAKE_MANIFEST
from neuralbake.nn.activations import activation_fn
from neuralbake.nn.quantize import latent_codes

__all__ = [
    "STOCHASTIC_DRAWS",
    "STOCHASTIC_SAMPLES",
    "default_name",
    "error_statistics",
    "export_ntc",
    "shader_set",
    "stochastic_error",
    "stochastic_queries",
    "tensor_decoder_reference",
]

STOCHASTIC_SAMPLES = 4096
"""Random (uv, lod) the stochastic filter is measured at."""
STOCHASTIC_DRAWS = 4
"""Random numbers (stochastic samples) per (uv, lod)."""


def shader_set(container: NTCContainer, info: dict[str, Any] | None = None) -> NTCShaderSet:
    """The container as the shader export's plain data: the latent codes (re-derived from the dequantised latents, the
    container's own codes), the int8 decoder, the grid sizes."""
    layout = container.layout
    bits = layout.shape.bits
    layers = tuple(
        LayerTensors(f"decoder.layers.{index}", codes.cpu(), bias.float().cpu(), scale=float(scale))
        for index, (codes, scale, bias) in enumerate(zip(container.weights_int8, container.scales, container.biases, strict=True))
    )
    return NTCShaderSet(
        groups=tuple(NTCGroup(group.name, tuple(group.channels), group.kind) for group in layout.groups),
        level_sizes=tuple(layout.level_sizes),
        high_dims=tuple(layout.high_dims),
        low_dims=tuple(layout.low_dims),
        features=layout.shape.features,
        bits=bits,
        high_codes=latent_codes(container.latents_high.cpu(), bits).numpy(),
        low_codes=latent_codes(container.latents_low.cpu(), bits).numpy(),
        pe_frequencies=layout.pe_frequencies,
        activation=layout.activation,
        leak=layout.leak,
        layers=layers,
        info=info or {},
    )


def tensor_decoder_reference(container: NTCContainer, features: torch.Tensor) -> torch.Tensor:
    """The tensor kernels' decoder arithmetic in PyTorch: ``[N, inputs]`` -> ``[N, channels]`` (not clamped).

    Inputs and hidden activations rounded to fp16, weights ``code * scale`` rounded to fp16, products summed in fp32,
    fp32 biases: what :mod:`neuralbake.export.ntc_tensor` computes, up to the order of the sums.
    """
    act = activation_fn(container.layout.activation, container.layout.leak)
    x = features.float().half().float()
    last = len(container.weights_int8) - 1
    for index, (codes, scale, bias) in enumerate(zip(container.weights_int8, container.scales, container.biases, strict=True)):
        weight = (codes.float() * scale.float()).half().float()
        y = x @ weight.T + bias.float()
        x = act(y).half().float() if index < last else y
    return x


def stochastic_queries(
    levels: int, count: int = STOCHASTIC_SAMPLES, draws: int = STOCHASTIC_DRAWS, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The queries :func:`stochastic_error` measures at: ``uv`` ``[count, 2]`` uniform in [0, 1), ``lod`` ``[count]``
    uniform in [0, levels - 1], and ``random`` ``[draws, count]`` uniform in [0, 1) (float32, CPU)."""
    generator = torch.Generator().manual_seed(seed)
    uv = torch.rand(count, 2, generator=generator)
    lod = torch.rand(count, generator=generator) * (levels - 1)
    random = torch.rand(draws, count, generator=generator)
    return uv, lod, random


def error_statistics(stochastic: torch.Tensor, filtered: torch.Tensor, groups: list[tuple[str, slice]]) -> dict[str, Any]:
    """Bias and noise of stochastic samples ``[draws, N, C]`` against the filtered values ``[N, C]``."""
    error = (stochastic.double() - filtered.double()[None]).reshape(-1, filtered.shape[1])  # [draws * N, C]
    per_channel = error.mean(dim=0)
    standard_error = error.std(dim=0) / math.sqrt(error.shape[0])
    z = (per_channel.abs() / standard_error.clamp(min=1e-30)).max()
    mean_of_draws = stochastic.double().mean(dim=0) - filtered.double()
    return {
        "bias": float(error.mean()),
        "bias_standard_error": float(error.mean(dim=1).std() / math.sqrt(error.shape[0])),
        "max_channel_bias": float(per_channel.abs().max()),
        "max_channel_bias_in_standard_errors": round(float(z), 3),
        "noise_rmse": float(error.pow(2).mean().sqrt()),
        "noise_rmse_per_group": {name: float(error[:, part].pow(2).mean().sqrt()) for name, part in groups},
        "mean_of_draws_rmse": float(mean_of_draws.pow(2).mean().sqrt()),
    }


def stochastic_error(
    container: NTCContainer, *, samples: int = STOCHASTIC_SAMPLES, draws: int = STOCHASTIC_DRAWS, seed: int = 0
) -> dict[str, Any]:
    """The stochastic filter's bias and noise against the filtered samples (module docstring), for fractional levels of
    detail (against trilinear) and whole ones (against bilinear); values in the decoded [0, 1] scale."""
    layout = container.layout
    device = container.latents_high.device
    uv, lod, random = (t.to(device) for t in stochastic_queries(layout.levels, samples, draws, seed))
    groups, start = [], 0
    for group in layout.groups:
        groups.append((group.name, slice(start, start + len(group.channels))))
        start += len(group.channels)
    result: dict[str, Any] = {
        "what": "stochastic samples (one texel decoded, chosen with probability = its filter weight) minus the filtered sample at the same "
        "(uv, lod): bias = their mean over every sample, draw and channel (0 in expectation); noise_rmse = their root mean square; "
        "max_channel_bias_in_standard_errors: the largest channel's mean over its standard error (below ~4 is noise); "
        "mean_of_draws_rmse: the error of the mean of the draws per (uv, lod)",
        "samples": samples,
        "draws": draws,
        "seed": seed,
        "queries": "uv uniform in [0, 1)^2, lod uniform in [0, levels - 1] (trilinear) or that rounded to a whole level (bilinear), random uniform in [0, 1) per draw (bench/ntc_shader.py and the tests use the same)",
        "scale": "decoded values in [0, 1]",
    }
    for name, levels in (("trilinear", lod), ("bilinear", torch.floor(lod + 0.5))):
        filtered = sample_filtered(container, uv, levels)
        stochastic = torch.stack([sample_stochastic(container, uv, levels, random[d]) for d in range(draws)])
        result[name] = error_statistics(stochastic.cpu(), filtered.cpu(), groups)
    return result


def default_name(folder: Path) -> str:
    """The shader name of an NTC folder: its name (``out/crate_ntc`` -> ``crate_ntc``; a sweep's ``bpp_4`` -> ``<sweep>_bpp_4``)."""
    folder = folder.resolve()
    name = folder.name if not folder.name.startswith("bpp_") else f"{folder.parent.name}_{folder.name}"
    return shader_identifier(name)


def _check_out(folder: Path, out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise InputError(
            "the output path exists and is a file, not a folder.", path=out, fix="pass a folder path with --out, or remove the file."
        )
    if (out / BAKE_MANIFEST).is_file():
        raise InputError(
            "the output folder holds a bake (bake.json); the shader files would be mixed into it.",
            path=out,
            fix="pass a new or empty folder with --out.",
        )
    if out.resolve() == folder.resolve():
        raise InputError("the output folder is the NTC folder itself.", path=out, fix="pass another folder with --out.")


def export_ntc(folder: str | Path, out_dir: str | Path, *, name: str | None = None, samples: int = STOCHASTIC_SAMPLES) -> dict[str, Any]:
    """Export the NTC set in ``folder`` (written by ``ntc compress``, one rate) as a shader into ``out_dir``; returns a summary.

    Writes ``<name>.slang``, ``<name>.hlsl``, ``<name>.weights.int8.bin``, ``<name>.latents.bin`` and ``<name>.json``
    (:func:`neuralbake.export.ntc.export_ntc_shader`); the manifest carries the stochastic filter's measured bias and
    noise (:func:`stochastic_error`). ``name`` defaults to :func:`default_name`. The folder and every check run
    before a file is written.

    Raises
    ------
    BundleError
        The folder is missing, damaged or holds a container the shader cannot decode.
    InputError
        The output path is a file or a bake's folder, or ``folder`` is a rate-distortion sweep.
    ConfigError
        A bad ``name``.
    """
    folder, out = Path(folder), Path(out_dir)
    if name is not None and shader_identifier(name) != name:
        raise ConfigError(
            f"{name!r} is not a usable shader name.",
            field="--name",
            fix="use lower-case letters, digits and underscores, starting with a letter.",
        )
    _check_out(folder, out)
    refuse_rate_sweep(folder)
    container = open_container(folder)
    name = name or default_name(folder)
    shape = container.layout.shape
    info = {
        "folder": str(folder),
        "container_bytes": (folder / "texture.ntc").stat().st_size,
        "container_sha256": sha256_file(folder / "texture.ntc"),
        "latent_shape": {"name": shape.name, "high_div": shape.high_div, "features": shape.features, "bits": shape.bits},
    }
    data = shader_set(container, info)
    try:
        measured = {"stochastic": stochastic_error(container, samples=samples)}
        written = export_ntc_shader(data, out, name=name, measurements=measured)
    except ConfigError as exc:
        if exc.field == "name":
            raise ConfigError(exc.problem, field="--name", fix=exc.fix) from exc
        raise BundleError(f"no shader can be generated: {exc.problem}", path=folder / "texture.ntc", field=exc.field, fix=exc.fix) from exc
    return _summary(written, info, measured)


def _summary(written: NTCShaderExport, info: dict[str, Any], measured: dict[str, Any]) -> dict[str, Any]:
    manifest = load_json_file(written.manifest, what="shader manifest", fix="export again.")
    return {
        "name": written.name,
        "files": [str(path) for path in (written.slang, written.hlsl, written.weights, written.latents, written.manifest)],
        "gpu_bytes": manifest["gpu_bytes"]["total"],
        "gpu_bpp": manifest["gpu_bytes"]["bpp"],
        "container_bytes": info["container_bytes"],
        "entry_points": [entry["name"] for entry in manifest["entry_points"] if entry["name"]],
        "stochastic": {
            key: {k: measured["stochastic"][key][k] for k in ("bias", "bias_standard_error", "noise_rmse")}
            for key in ("trilinear", "bilinear")
        },
    }

"""Shader export of baked neural materials: latent texture lookup + decoder MLP as Slang and HLSL.

A neural material bundle (``neuralbake material bake``) ships a latent mip pyramid and a decoder
MLP. This module turns one bundle, or a *pack* of bundles for one scene, into a Slang module and
an HLSL file that evaluate ``f(wi, wo) cos(theta_i)`` on the GPU, plus the two binary buffers
they bind and a JSON manifest describing both. The decoder code comes from
:mod:`neuralbake.export.slang` (the same generator that exports every other MLP); this module adds
the latent fetch, the decoder's input assembly, the output transform and the material switch.

The code generation is :mod:`neuralbake.export.neural_material_codegen` (the functions and
bindings it generates are described there); the weight and latent buffer layouts and the
bundle's neural-material manifest are :mod:`neuralbake.io.neural_material_bundle`; this module reads the bundles, checks a pack
and writes the files. The Slang module also gets a tensor-core batch kernel per material
(:mod:`neuralbake.export.neural_material_tensor`), described under ``tensor_kernels`` in the
manifest.

A hand-written generator rather than a library: there is no maintained tool that emits shader
code for a given latent layout and MLP; the layout follows the bundle's own device layout so no
weight is repacked beyond copying. Buffers rather than textures so the code runs unchanged on
slangpy's CPU device, where it is parity-tested; engines that prefer ``Texture2DArray`` latents
with hardware filtering can upload the same levels (channels as slices) and replace
``nb_<m>_latent``. Arithmetic is fp32 in every format.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from neuralbake.errors import BundleError, ConfigError
from neuralbake.export.neural_material_codegen import POINT_FLOATS, generate_material_shader
from neuralbake.export.neural_material_sampling import sampler_summary
from neuralbake.export.neural_material_tensor import POINTS_PER_GROUP as TENSOR_POINTS_PER_GROUP
from neuralbake.export.neural_material_tensor import THREADS as TENSOR_THREADS
from neuralbake.export.neural_material_tensor import tensor_kernel_shape
from neuralbake.export.slang import THREADS_PER_GROUP
from neuralbake.io.bundle import LATENT_FORMATS, read_bundle, read_device_layout
from neuralbake.io.device_layout import LayerTensors, pack_device_layout
from neuralbake.io.files import atomic_write_bytes, atomic_write_json, atomic_write_text, prepare_output_dir, sha256_file
from neuralbake.io.neural_material_bundle import (
    ELEMENT_BYTES,
    PACK_COMPATIBILITY_FIELDS,
    ExportMaterial,
    LatentBufferLevel,
    NeuralMaterialManifest,
    pack_latents,
    pack_weights,
    read_latent_levels,
    read_neural_material_manifest,
    read_sampler_weights,
)

__all__ = ["NeuralMaterialShaderExport", "export_material_pack_shader", "export_neural_material_shader"]

SHADER_FORMAT = "neuralbake.neural_material_shader"
SHADER_FORMAT_VERSION = 1
_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")
_KIND = "neural_material"


@dataclass(frozen=True)
class NeuralMaterialShaderExport:
    """The files an export wrote, and what the shader calls things."""

    slang: Path
    """``<module>.slang``."""
    hlsl: Path
    """``<module>.hlsl``."""
    weights: Path
    """``<module>.weights.<precision>.bin``, bound as ``nb_<module>_weights``."""
    latents: Path
    """``<module>.latents.<format>.bin``, bound as ``nb_<module>_latents``."""
    manifest: Path
    """``<module>.json``: bindings, buffer layout, per-material tables."""
    module: str
    """The module name (prefix of every binding and of the kernel ``nb_<module>_kernel``)."""
    materials: tuple[str, ...]
    """Material names in id order; ``nb_<name>_eval`` evaluates each."""



def _identifier(text: str) -> str:
    name = _NOT_IDENTIFIER.sub("_", text).strip("_").lower() or "material"
    return name if not name[0].isdigit() else f"m_{name}"


def _material_name(manifest: NeuralMaterialManifest, directory: Path) -> str:
    if manifest.name:  # baked from a glTF asset: its material's name, not the asset file's
        return _identifier(manifest.name)
    return _identifier(Path(manifest.source).stem if manifest.source else directory.resolve().name)



def _read_material(bundle_dir: str | Path, precision: str, latent_format: str) -> ExportMaterial:
    directory = Path(bundle_dir)
    if not directory.is_dir():
        raise BundleError("the neural material folder does not exist.", path=directory, fix="pass the folder `neuralbake material bake --out` wrote.")
    bundle = read_bundle(directory, kind=_KIND)
    info = read_neural_material_manifest(bundle)
    weights, _ = read_device_layout(bundle, precision)
    layers = [dict(layer) for layer in bundle.manifest["device_layouts"][precision]["layers"]]
    levels = [
        LatentBufferLevel(int(data.shape[1]), int(data.shape[0]), data.tobytes(), scale, offset)
        for data, scale, offset in read_latent_levels(bundle, info, latent_format)
    ]
    head = read_sampler_weights(bundle, int(info.fields["latent.channels"]))
    sampler_weights, sampler_layers = b"", None
    if head is not None:  # the importance-sampling head: its own device layout, packed after the decoders
        state = head[1]
        head_layers = [LayerTensors(f"sampler.layers.{i}", state[f"mlp.layers.{i}.weight"], state[f"mlp.layers.{i}.bias"]) for i in range(2)]
        sampler_weights, sampler_layers = pack_device_layout(head_layers, precision)
    return ExportMaterial(_material_name(info, directory), directory, bundle.manifest_path, info.fields, layers, weights, levels, sampler_layers, sampler_weights)


def _check_options(precision: str, latent_format: str) -> None:
    if precision not in ELEMENT_BYTES:
        raise ConfigError(f"unknown weight precision {precision!r}.", field="precision", fix=f"use one of {sorted(ELEMENT_BYTES)}.")
    if latent_format not in LATENT_FORMATS:
        raise ConfigError(f"unknown latent format {latent_format!r}.", field="latent_format", fix=f"use one of {list(LATENT_FORMATS)}.")


def _check_pack(materials: Sequence[ExportMaterial]) -> None:
    first = materials[0]
    for material in materials[1:]:
        for field in PACK_COMPATIBILITY_FIELDS:
            if material.fields[field] != first.fields[field]:
                raise BundleError(
                    f"{field} is {material.fields[field]!r} here but {first.fields[field]!r} in {first.directory}; a pack holds materials "
                    "with one decoder shape and latent size.",
                    path=material.manifest_path,
                    field=field,
                    fix="bake every material of the pack with the same --latent and decoder settings, or export it on its own.",
                )



# -- export -----------------------------------------------------------------------------------------


def _unique_names(materials: list[ExportMaterial], reserved: set[str]) -> list[ExportMaterial]:
    """Materials renamed ``<name>_2``, ``<name>_3`` ... where two would share a name (or take a reserved one)."""
    used = set(reserved)
    renamed = []
    for material in materials:
        name, k = material.name, 2
        while name in used:
            name, k = f"{material.name}_{k}", k + 1
        used.add(name)
        renamed.append(replace(material, name=name))
    return renamed


def _shader_manifest(
    written: NeuralMaterialShaderExport,
    pack: bool,
    precision: str,
    latent_format: str,
    stored_layers: int,
    materials: Sequence[ExportMaterial],
    weight_tables: list[list[dict[str, Any]]],
    latent_tables: list[list[dict[str, int]]],
    sampler_tables: list[list[dict[str, Any]] | None],
) -> dict[str, Any]:
    """``<module>.json``: the files with their sha256, the bindings, both buffer layouts and the per-material tables."""
    module = written.module
    return {
        "format": SHADER_FORMAT,
        "format_version": SHADER_FORMAT_VERSION,
        "module": module,
        "pack": pack,
        "files": {
            key: {"file": path.name, "bytes": path.stat().st_size, "sha256": sha256_file(path)}
            for key, path in (("slang", written.slang), ("hlsl", written.hlsl), ("weights", written.weights), ("latents", written.latents))
        },
        "bindings": {
            f"nb_{module}_weights": "ByteAddressBuffer: files.weights",
            f"nb_{module}_latents": "ByteAddressBuffer: files.latents",
        },
        "functions": {
            "eval": f"float3 nb_{module}_eval(uint material_id, float2 uv, float3 wi, float3 wo, uint mip)" if pack else f"float3 nb_{module}_eval(float2 uv, float3 wi, float3 wo, uint mip)",
            "sample": (f"float3 nb_{module}_sample(uint material_id, float2 uv, float3 wo, float2 u, uint mip, out float pdf)" if pack
                       else f"float3 nb_{module}_sample(float2 uv, float3 wo, float2 u, uint mip, out float pdf)"),
            "pdf": (f"float nb_{module}_pdf(uint material_id, float2 uv, float3 wi, float3 wo, uint mip)" if pack
                    else f"float nb_{module}_pdf(float2 uv, float3 wi, float3 wo, uint mip)"),
            "kernel": f"nb_{module}_kernel ({THREADS_PER_GROUP} threads per group)",
            "kernel_buffers": {
                f"nb_{module}_points": f"StructuredBuffer<float>: u, v, wi.xyz, wo.xyz per point ({POINT_FLOATS} floats)",
                f"nb_{module}_mips": "StructuredBuffer<uint>: mip level per point",
                **({f"nb_{module}_material_ids": "StructuredBuffer<uint>: material id per point"} if pack else {}),
                f"nb_{module}_values": "RWStructuredBuffer<float>: f cos, 3 per point",
                f"nb_{module}_constants": f"cbuffer {{ uint nb_{module}_point_count; }}",
            },
        },
        "tensor_kernels": [_tensor_kernel_entry(material) for material in materials],
        "weights": {
            "precision": precision,
            "layout": "neuralbake device layout: per layer a row-major [outputs, inputs] matrix (64-byte aligned) then the bias (16-byte aligned), little-endian",
            "layers_stored": stored_layers,
            "layers_referenced": sum(len(table) for table in weight_tables) + sum(len(table) for table in sampler_tables if table is not None),
            "sampling_head_layers": sum(len(table) for table in sampler_tables if table is not None),
        },
        "latents": {
            "format": latent_format,
            "layout": "per material, per mip level (16-byte aligned): texels row by row, the channels of a texel together; element "
            "(row * width + column) * channels + c. fp16: little-endian halfs. u8: bytes, value = code * scale[c] + offset[c] with fp32 "
            "scale[channels] then offset[channels] at scale_offset (16-byte aligned).",
            "filter": "bilinear, repeat wrap, texel centres at (i + 0.5) / size; mip clamped to the last level",
        },
        "output": "f(wi, wo) cos = max(exp(y) - 1, 0) of the decoder output y; zero unless wi.z > 0 and wo.z > 0 (local frame, normal +z)",
        "materials": [
            {
                "id": index,
                "name": material.name,
                "function": f"nb_{material.name}_eval",
                "bundle": str(material.directory),
                "channels": material.fields["latent.channels"],
                "direction_inputs": material.fields["architecture.direction_inputs"],
                "decoder_layers": weight_table,
                "mips": latent_table,
                "sampling": sampler_summary(material, sampler_table),
            }
            for index, (material, weight_table, latent_table, sampler_table) in enumerate(
                zip(materials, weight_tables, latent_tables, sampler_tables, strict=True)
            )
        ],
    }


def _tensor_kernel_entry(material: ExportMaterial) -> dict[str, Any]:
    """The manifest's description of a material's tensor-core kernel (or why it has none)."""
    shape, reason = tensor_kernel_shape(material.layers)
    if shape is None:
        return {"material": material.name, "entry": None, "reason": reason}
    return {
        "material": material.name,
        "entry": f"nb_{material.name}_tensor_kernel",
        "language": "slang",
        "threads_per_group": TENSOR_THREADS,
        "points_per_group": TENSOR_POINTS_PER_GROUP,
        "dispatch": f"ceil(points / {TENSOR_POINTS_PER_GROUP}) * {TENSOR_THREADS} threads",
        "groupshared_bytes": shape.shared_bytes,
        "groupshared_bytes_loop_form": shape.loop_shared_bytes,
        "arithmetic": "fp16 weights and activations, fp32 sums (tensor cores); CoopMat on CUDA and Vulkan, loops elsewhere",
        "subgroup_size": 32,
    }


def _export(
    bundle_dirs: Sequence[str | Path], out_dir: str | Path, module: str | None, precision: str, latent_format: str, pack: bool
) -> NeuralMaterialShaderExport:
    _check_options(precision, latent_format)
    if module is not None and (not module or _identifier(module) != module):
        raise ConfigError(f"{module!r} is not a usable shader name.", field="name", fix="use lower-case letters, digits and underscores, starting with a letter.")
    if not bundle_dirs:
        raise ConfigError("no neural material bundles given.", field="bundle_dirs", fix="pass one or more folders written by `neuralbake material bake`.")
    resolved = [Path(path).resolve() for path in bundle_dirs]
    for index, path in enumerate(resolved):
        if path in resolved[:index]:
            raise ConfigError("the same bundle is given twice.", field=f"bundle_dirs[{index}]", fix=f"name {bundle_dirs[index]} once; each material gets one id.")
    materials = [_read_material(path, precision, latent_format) for path in bundle_dirs]
    if pack:
        _check_pack(materials)
        module = module or "material_pack"
        materials = _unique_names(materials, {module})
    else:
        # One material: the module and the material share the name (nb_<name>_eval, nb_<name>_weights ...).
        module = module or materials[0].name
        materials = [replace(materials[0], name=module)]
    weights, weight_tables, stored_layers, sampler_tables = pack_weights(materials, precision)
    latents, latent_tables = pack_latents(materials, latent_format)
    sources = {
        language: generate_material_shader(language, module, materials, weight_tables, latent_tables, precision, latent_format, pack, sampler_tables)
        for language in ("slang", "hlsl")
    }

    out = prepare_output_dir(out_dir)
    written = NeuralMaterialShaderExport(
        slang=out / f"{module}.slang",
        hlsl=out / f"{module}.hlsl",
        weights=out / f"{module}.weights.{precision}.bin",
        latents=out / f"{module}.latents.{latent_format}.bin",
        manifest=out / f"{module}.json",
        module=module,
        materials=tuple(material.name for material in materials),
    )
    atomic_write_bytes(written.weights, weights)
    atomic_write_bytes(written.latents, latents)
    atomic_write_text(written.slang, sources["slang"])
    atomic_write_text(written.hlsl, sources["hlsl"])
    atomic_write_json(written.manifest, _shader_manifest(written, pack, precision, latent_format, stored_layers, materials, weight_tables, latent_tables, sampler_tables))
    return written


def export_neural_material_shader(
    bundle_dir: str | Path,
    out_dir: str | Path,
    *,
    precision: str = "fp32",
    latent_format: str = "fp16",
    name: str | None = None,
) -> NeuralMaterialShaderExport:
    """Write ``<name>.slang``, ``<name>.hlsl``, their weight and latent buffers and ``<name>.json``.

    Parameters
    ----------
    bundle_dir:
        A folder written by ``neuralbake material bake`` (manifest kind ``neural_material``).
    out_dir:
        Output folder (created; may be the bundle folder).
    precision:
        ``"fp32"`` or ``"fp16"``: which of the bundle's device layouts the weight buffer holds.
    latent_format:
        ``"fp16"`` or ``"u8"`` (see the module docstring for both layouts).
    name:
        Shader name (identifier); default: the baked material's file stem, e.g. ``antique_copper_tray``,
        giving ``nb_antique_copper_tray_eval``.

    Raises
    ------
    BundleError
        When the bundle is missing, corrupt or inconsistent (names the file and the field).
    ConfigError
        On an unknown precision, latent format or a bad name.
    """
    return _export([bundle_dir], out_dir, name, precision, latent_format, pack=False)


def export_material_pack_shader(
    bundle_dirs: Sequence[str | Path],
    out_dir: str | Path,
    *,
    precision: str = "fp32",
    latent_format: str = "fp16",
    name: str = "material_pack",
) -> NeuralMaterialShaderExport:
    """One shader for exactly the given neural materials, dispatched by ``switch (material_id)``.

    Material ids follow the order of ``bundle_dirs``. Every material's decoder is generated (and
    only those); their layers share one weight buffer in which byte-identical layers are stored
    once, and their latents share one latent buffer with per-material tables of level offsets
    and sizes. Writes ``<name>.slang``, ``<name>.hlsl``, ``<name>.weights.<precision>.bin``,
    ``<name>.latents.<latent_format>.bin`` and ``<name>.json``.

    Raises
    ------
    BundleError
        When a bundle is missing or corrupt, or when materials differ in a field of
        :data:`PACK_COMPATIBILITY_FIELDS` (the error names the bundle and the field).
    ConfigError
        On no bundles, a bundle given twice, an unknown precision or latent format, or a bad name.
    """
    return _export(list(bundle_dirs), out_dir, name, precision, latent_format, pack=True)

"""HLSL and Slang code of an exported neural material shader: latent fetch, decoder input assembly,
decoder, output transform, the material switch and the compute entry point.

Generated functions (``<m>`` a material name, ``<module>`` the module name; for a single
material they are the same):

- ``nb_<m>_taps(uv, mip, out level, out texels[4], out t)``: the four bilinear taps (clamped level,
  repeat-wrapped texel indices, fractions), shared by every latent fetch, the tensor kernel's too.
- ``float3 nb_<m>_eval(float2 uv, float3 wi, float3 wo, uint mip)``: bilinear, repeat-wrapped
  latent lookup at ``uv`` in mip ``mip`` (clamped to the last level), decoder input
  ``[latent, direction features...]`` (``wi``, ``wo`` and/or ``half = normalize(wi + wo)``, in the
  order of the manifest's ``architecture.direction_inputs``; local frame, normal +z), decoder,
  then ``max(exp(y) - 1, 0)``; zero unless ``wi.z > 0`` and ``wo.z > 0``. Exactly
  ``NeuralMaterial.latent_at`` followed by ``NeuralMaterial.evaluate``.
- ``float3 nb_<m>_eval_lod(float2 uv, float3 wi, float3 wo, float lod)``: the same with the
  latents filtered trilinearly (bilinear in the two levels around ``lod``, clamped to the
  pyramid, blended linearly): ``NeuralMaterial.latent_filtered``.
- ``float nb_<m>_lod(float2 duv_dx, float2 duv_dy)``: the isotropic level of a pixel footprint
  from the uv derivatives along the screen axes (``ddx(uv)``, ``ddy(uv)``, or ray differentials):
  ``log2`` of the longer axis in level-0 texels (``lod_from_derivatives`` in PyTorch).
- ``nb_<m>_latent_footprint(uv, duv_dx, duv_dy, out latent)`` and ``float3
  nb_<m>_eval_filtered(float2 uv, float2 duv_dx, float2 duv_dy, float3 wi, float3 wo)``: the
  latents filtered anisotropically over the footprint, up to 8 trilinear probes along its major
  axis (``NeuralMaterial.latent_footprint`` / ``footprint_probes`` in PyTorch), and the material
  evaluated with them.
- pack only: ``float3 nb_<module>_eval(uint material_id, float2 uv, float3 wi, float3 wo, uint
  mip)`` and ``nb_<module>_eval_lod(uint material_id, ..., float lod)``, a ``switch (material_id)`` over the packed materials (ids in the order given, also as
  ``NB_<MODULE>_ID_<M>`` constants); unknown ids give black.
- ``nb_<m>_sample(uv, wo, u, mip, out pdf)`` and ``nb_<m>_pdf(uv, wi, wo, mip)`` (pack: ``nb_<module>_sample``
  / ``nb_<module>_pdf`` with the material id first): importance sampling with the material's
  sampling head, or cosine sampling without one (:mod:`neuralbake.export.neural_material_sampling`).
- ``nb_<module>_kernel``: a 64-thread compute entry point for batch use and testing. Point ``p``
  reads ``u, v, wi.xyz, wo.xyz`` from ``StructuredBuffer<float> nb_<module>_points[p * 8 + k]``,
  its mip from ``StructuredBuffer<uint> nb_<module>_mips[p]`` (and in a pack its material from
  ``nb_<module>_material_ids[p]``) and writes ``RWStructuredBuffer<float> nb_<module>_values[p * 3
  + c]``; the point count is ``cbuffer nb_<module>_constants { uint nb_<module>_point_count; }``.
- Slang only: ``nb_<m>_tensor_kernel`` per material, the same evaluation for the same buffers in
  warp tiles with the decoder on the tensor cores (:mod:`neuralbake.export.neural_material_tensor`).

Bindings: ``ByteAddressBuffer nb_<module>_weights`` (``<module>.weights.<precision>.bin``) and
``ByteAddressBuffer nb_<module>_latents`` (``<module>.latents.<format>.bin``).

The decoder functions come from :mod:`neuralbake.export.slang` (the generator every exported MLP
uses); the buffers they read are laid out by :mod:`neuralbake.io.neural_material_bundle`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from neuralbake.export.neural_material_inputs import direction_input_lines
from neuralbake.export.neural_material_sampling import helper_code, sampling_code, sampling_switch_code
from neuralbake.export.neural_material_tensor import tensor_kernel_code
from neuralbake.export.slang import THREADS_PER_GROUP, generate_mlp_hlsl, generate_mlp_slang
from neuralbake.io.neural_material_bundle import MAX_PROBES, ExportMaterial

__all__ = ["POINT_FLOATS", "generate_material_shader"]

POINT_FLOATS = 8
"""Floats per point in the compute entry point's input buffer: u, v, wi.xyz, wo.xyz."""

def _decoder_code(
    language: str, material: ExportMaterial, table: list[dict[str, Any]], precision: str, module: str, network: str = "decoder"
) -> str:
    """The network function ``nb_<m>_decoder`` (or ``nb_<m>_sampler``, the sampling head: ReLU, linear output) from the MLP
    generator, without its test kernel and bindings."""
    function = f"nb_{material.name}_{network}"
    generate = generate_mlp_slang if language == "slang" else generate_mlp_hlsl
    activations = (
        (material.fields["architecture.hidden_activation"], material.fields["architecture.output_activation"], material.fields["architecture.leak"])
        if network == "decoder"
        else ("relu", "none", 0.0)
    )
    source = generate(
        table,
        hidden_activation=activations[0],
        output_activation=activations[1],
        leak=activations[2],
        precision=precision,
        function_name=function,
        function_only=True,  # a material module binds one weight buffer for all its decoders and has its own kernel
    )
    return "\n".join([*source.rstrip().splitlines(), f"// The offsets above are bytes into nb_{module}_weights.", ""])


def _uint_array(name: str, values: Sequence[int]) -> str:
    return f"static const uint {name}[{len(values)}] = {{ {', '.join(str(int(v)) for v in values)} }};"


def _latent_code(material: ExportMaterial, table: list[dict[str, int]], module: str, latent_format: str) -> list[str]:
    m, M = material.name, material.name.upper()
    channels = material.fields["latent.channels"]
    lines = [
        f"static const uint NB_{M}_CHANNELS = {channels};",
        f"static const uint NB_{M}_MIP_LEVELS = {len(table)};",
        f"// Byte offsets into nb_{module}_latents of each mip level's texels, and the level sizes.",
        _uint_array(f"NB_{M}_MIP_OFFSET", [entry["offset"] for entry in table]),
        _uint_array(f"NB_{M}_MIP_WIDTH", [entry["width"] for entry in table]),
        _uint_array(f"NB_{M}_MIP_HEIGHT", [entry["height"] for entry in table]),
    ]
    if latent_format == "u8":
        lines += [
            "// Byte offsets of each level's fp32 scale[CHANNELS] then offset[CHANNELS].",
            _uint_array(f"NB_{M}_MIP_SCALE_OFFSET", [entry["scale_offset"] for entry in table]),
        ]
    lines += ["", f"float nb_{m}_latent_value(uint level, uint texel, uint channel)", "{"]
    if latent_format == "fp16":
        lines.append(f"    return nb_{module}_load_half(NB_{M}_MIP_OFFSET[level] + (texel * NB_{M}_CHANNELS + channel) * 2u);")
    else:
        lines += [
            f"    float code = float(nb_{module}_load_byte(NB_{M}_MIP_OFFSET[level] + texel * NB_{M}_CHANNELS + channel));",
            f"    uint table = NB_{M}_MIP_SCALE_OFFSET[level];",
            (
                f"    return code * asfloat(nb_{module}_latents.Load(table + channel * 4u))"
                f" + asfloat(nb_{module}_latents.Load(table + (NB_{M}_CHANNELS + channel) * 4u));"
            ),
        ]
    lines += [
        "}",
        "",
        "// The four bilinear taps at uv in mip (clamped to the last level): repeat-wrapped, texel centres at",
        "// (i + 0.5) / size; texels (row-major index in the level) top-left, top-right, bottom-left, bottom-right,",
        "// and the fractions t between them.",
        f"void nb_{m}_taps(float2 uv, uint mip, out uint level, out uint texels[4], out float2 t)",
        "{",
        f"    level = min(mip, NB_{M}_MIP_LEVELS - 1u);",
        f"    int width = int(NB_{M}_MIP_WIDTH[level]);",
        f"    int height = int(NB_{M}_MIP_HEIGHT[level]);",
        "    float x = uv.x * float(width) - 0.5f;",
        "    float y = uv.y * float(height) - 0.5f;",
        "    float x_floor = floor(x);",
        "    float y_floor = floor(y);",
        "    t = float2(x - x_floor, y - y_floor);",
        f"    uint column0 = nb_{module}_wrap(int(x_floor), width);",
        f"    uint column1 = nb_{module}_wrap(int(x_floor) + 1, width);",
        f"    uint row0 = nb_{module}_wrap(int(y_floor), height) * uint(width);",
        f"    uint row1 = nb_{module}_wrap(int(y_floor) + 1, height) * uint(width);",
        "    texels[0] = row0 + column0;",
        "    texels[1] = row0 + column1;",
        "    texels[2] = row1 + column0;",
        "    texels[3] = row1 + column1;",
        "}",
        "",
        "// Bilinear, repeat-wrapped (nb_<m>_taps).",
        f"void nb_{m}_latent(float2 uv, uint mip, out float latent[{channels}])",
        "{",
        "    uint level;",
        "    uint texels[4];",
        "    float2 t;",
        f"    nb_{m}_taps(uv, mip, level, texels, t);",
        f"    for (uint c = 0; c < NB_{M}_CHANNELS; ++c)",
        "    {",
        f"        float top = nb_{m}_latent_value(level, texels[0], c) * (1.0f - t.x) + nb_{m}_latent_value(level, texels[1], c) * t.x;",
        f"        float bottom = nb_{m}_latent_value(level, texels[2], c) * (1.0f - t.x) + nb_{m}_latent_value(level, texels[3], c) * t.x;",
        "        latent[c] = top * (1.0f - t.y) + bottom * t.y;",
        "    }",
        "}",
        "",
        "// Trilinear: bilinear in the two levels around lod (clamped to the pyramid), blended linearly.",
        f"void nb_{m}_latent_lod(float2 uv, float lod, out float latent[{channels}])",
        "{",
        f"    float level = clamp(lod, 0.0f, float(NB_{M}_MIP_LEVELS - 1u));",
        "    uint below = uint(floor(level));",
        f"    uint above = min(below + 1u, NB_{M}_MIP_LEVELS - 1u);",
        "    float t = level - float(below);",
        f"    float coarse[{channels}] = {{ {', '.join(['0.0f'] * channels)} }};",
        f"    nb_{m}_latent(uv, below, latent);",
        f"    nb_{m}_latent(uv, above, coarse);",
        f"    for (uint c = 0; c < NB_{M}_CHANNELS; ++c)",
        "        latent[c] = latent[c] * (1.0f - t) + coarse[c] * t;",
        "}",
        "",
        "// Level of detail of a pixel footprint: uv derivatives along the screen axes (ddx(uv), ddy(uv) in a",
        "// pixel shader, or ray differentials), isotropic, log2 of the longer axis in level-0 texels.",
        f"float nb_{m}_lod(float2 duv_dx, float2 duv_dy)",
        "{",
        f"    float2 size = float2(float(NB_{M}_MIP_WIDTH[0]), float(NB_{M}_MIP_HEIGHT[0]));",
        "    float footprint = max(length(duv_dx * size), length(duv_dy * size));",
        "    return log2(max(footprint, 1e-8f));",
        "}",
        "",
        f"// Anisotropic: up to {MAX_PROBES} trilinear probes spaced along the footprint's major axis, each at",
        "// log2(major / probes) (texels of level 0); their mean. One probe at nb_<m>_lod's level when round.",
        f"void nb_{m}_latent_footprint(float2 uv, float2 duv_dx, float2 duv_dy, out float latent[{channels}])",
        "{",
        f"    float2 size = float2(float(NB_{M}_MIP_WIDTH[0]), float(NB_{M}_MIP_HEIGHT[0]));",
        "    float along_x = length(duv_dx * size);",
        "    float along_y = length(duv_dy * size);",
        "    bool x_major = along_x >= along_y;",
        "    float major = x_major ? along_x : along_y;",
        "    float minor = x_major ? along_y : along_x;",
        f"    float probes = clamp(ceil(major / max(minor, 1e-8f)), 1.0f, {float(MAX_PROBES)}f);",
        "    float lod = log2(max(major / probes, 1e-8f));",
        "    float2 axis = x_major ? duv_dx : duv_dy;",
        f"    float probe[{channels}] = {{ {', '.join(['0.0f'] * channels)} }};",
        f"    for (uint c = 0; c < NB_{M}_CHANNELS; ++c)",
        "        latent[c] = 0.0f;",
        f"    for (uint i = 0; i < {MAX_PROBES}u; ++i)",
        "    {",
        "        if (float(i) >= probes)",
        "            break;",
        f"        nb_{m}_latent_lod(uv + ((float(i) + 0.5f) / probes - 0.5f) * axis, lod, probe);",
        f"        for (uint c = 0; c < NB_{M}_CHANNELS; ++c)",
        "            latent[c] += probe[c];",
        "    }",
        f"    for (uint c = 0; c < NB_{M}_CHANNELS; ++c)",
        "        latent[c] /= probes;",
        "}",
    ]
    return lines


def _eval_code(material: ExportMaterial, module: str) -> list[str]:
    m = material.name
    layout = material.inputs
    channels, inputs, first = layout.latent.width, layout.width, layout.latent.offset
    zeros = f"{{ {', '.join(['0.0f'] * channels)} }}"
    lines = [
        "",
        f"// f(wi, wo) cos(theta_i) of material {m}; wi, wo in the local shading frame (normal +z).",
        f"float3 nb_{m}_eval(float2 uv, float3 wi, float3 wo, uint mip)",
        "{",
        f"    float latent[{channels}] = {zeros};",
        f"    nb_{m}_latent(uv, mip, latent);",
        f"    return nb_{m}_shade(latent, wi, wo);",
        "}",
        "",
        "// The same with the latents filtered trilinearly at a fractional level of detail.",
        f"float3 nb_{m}_eval_lod(float2 uv, float3 wi, float3 wo, float lod)",
        "{",
        f"    float latent[{channels}] = {zeros};",
        f"    nb_{m}_latent_lod(uv, lod, latent);",
        f"    return nb_{m}_shade(latent, wi, wo);",
        "}",
        "",
        "// The same with the latents filtered over the pixel footprint given by the uv derivatives",
        "// (nb_<m>_latent_footprint).",
        f"float3 nb_{m}_eval_filtered(float2 uv, float2 duv_dx, float2 duv_dy, float3 wi, float3 wo)",
        "{",
        f"    float latent[{channels}] = {zeros};",
        f"    nb_{m}_latent_footprint(uv, duv_dx, duv_dy, latent);",
        f"    return nb_{m}_shade(latent, wi, wo);",
        "}",
    ]
    shade = [
        "",
        f"float3 nb_{m}_shade(float latent[{channels}], float3 wi, float3 wo)",
        "{",
        "    if (wi.z <= 0.0f || wo.z <= 0.0f)",
        "        return float3(0.0f, 0.0f, 0.0f);",
        f"    float inputs[{inputs}] = {{ {', '.join(['0.0f'] * inputs)} }};",
        f"    for (uint c = 0; c < {channels}u; ++c)",
        f"        inputs[{first}u + c] = latent[c];",
        *direction_input_lines(layout, module, lambda index, value: f"inputs[{index}] = {value};", "    "),
    ]
    shade += [
        "    float y[3] = { 0.0f, 0.0f, 0.0f };",
        f"    nb_{m}_decoder(nb_{module}_weights, inputs, y);",
        "    // The decoder predicts log(1 + f cos).",
        "    return max(exp(float3(y[0], y[1], y[2])) - 1.0f, float3(0.0f, 0.0f, 0.0f));",
        "}",
    ]
    return shade + lines


def _preamble(module: str, latent_format: str, materials: Sequence[ExportMaterial], precision: str, language: str) -> list[str]:
    names = ", ".join(material.name for material in materials)
    lines = [
        f"// Generated by neuralbake ({language}): neural material shader {module!r} for {names}.",
        f"// Bind {module}.weights.{precision}.bin as nb_{module}_weights and {module}.latents.{latent_format}.bin as nb_{module}_latents;",
        f"// {module}.json describes both buffers. Arithmetic is fp32.",
        "",
        f"ByteAddressBuffer nb_{module}_weights;",
        f"ByteAddressBuffer nb_{module}_latents;",
        "",
        f"uint nb_{module}_wrap(int i, int n)",
        "{",
        "    int m = i % n;",
        "    return uint(m < 0 ? m + n : m);",
        "}",
        "",
        f"float3 nb_{module}_halfway(float3 wi, float3 wo)",
        "{",
        "    float3 h = wi + wo;",
        "    return h / max(length(h), 1e-8f);",
        "}",
        "",
    ]
    if latent_format == "fp16":
        lines += [
            f"float nb_{module}_load_half(uint address)",
            "{",
            f"    uint word = nb_{module}_latents.Load(address & ~3u);",
            "    return f16tof32((address & 2u) != 0u ? word >> 16 : word);",
            "}",
        ]
    else:
        lines += [
            f"uint nb_{module}_load_byte(uint address)",
            "{",
            f"    uint word = nb_{module}_latents.Load(address & ~3u);",
            "    return (word >> ((address & 3u) * 8u)) & 0xFFu;",
            "}",
        ]
    return lines


def _switch_code(module: str, materials: Sequence[ExportMaterial]) -> list[str]:
    lines = [""]
    lines += [f"static const uint NB_{module.upper()}_ID_{material.name.upper()} = {index};" for index, material in enumerate(materials)]
    for function, last_parameter in (("eval", "uint mip"), ("eval_lod", "float lod")):
        argument = last_parameter.split()[1]
        lines += ["", f"float3 nb_{module}_{function}(uint material_id, float2 uv, float3 wi, float3 wo, {last_parameter})", "{", "    switch (material_id)", "    {"]
        lines += [f"    case {index}: return nb_{material.name}_{function}(uv, wi, wo, {argument});" for index, material in enumerate(materials)]
        lines += ["    default: return float3(0.0f, 0.0f, 0.0f);", "    }", "}"]
    return lines


def _kernel_code(language: str, module: str, materials: Sequence[ExportMaterial], pack: bool) -> list[str]:
    call = f"nb_{module}_eval(nb_{module}_material_ids[p], uv, wi, wo, nb_{module}_mips[p])" if pack else f"nb_{materials[0].name}_eval(uv, wi, wo, nb_{module}_mips[p])"
    return [
        "",
        f"StructuredBuffer<float> nb_{module}_points;   // point p: u, v, wi.xyz, wo.xyz at [p * {POINT_FLOATS} + k]",
        f"StructuredBuffer<uint> nb_{module}_mips;      // point p's mip level",
        *([f"StructuredBuffer<uint> nb_{module}_material_ids; // point p's material id"] if pack else []),
        f"RWStructuredBuffer<float> nb_{module}_values; // point p's f cos at [p * 3 + c]",
        f"cbuffer nb_{module}_constants",
        "{",
        f"    uint nb_{module}_point_count;",
        "};",
        "",
        *(['[shader("compute")]'] if language == "slang" else []),
        f"[numthreads({THREADS_PER_GROUP}, 1, 1)]",
        f"void nb_{module}_kernel(uint3 thread_id : SV_DispatchThreadID)",
        "{",
        "    uint p = thread_id.x;",
        f"    if (p >= nb_{module}_point_count)",
        "        return;",
        f"    uint base = p * {POINT_FLOATS}u;",
        f"    float2 uv = float2(nb_{module}_points[base], nb_{module}_points[base + 1u]);",
        f"    float3 wi = float3(nb_{module}_points[base + 2u], nb_{module}_points[base + 3u], nb_{module}_points[base + 4u]);",
        f"    float3 wo = float3(nb_{module}_points[base + 5u], nb_{module}_points[base + 6u], nb_{module}_points[base + 7u]);",
        f"    float3 value = {call};",
        f"    nb_{module}_values[p * 3u] = value.x;",
        f"    nb_{module}_values[p * 3u + 1u] = value.y;",
        f"    nb_{module}_values[p * 3u + 2u] = value.z;",
        "}",
    ]


def generate_material_shader(
    language: str,
    module: str,
    materials: Sequence[ExportMaterial],
    weight_tables: list,
    latent_tables: list,
    precision: str,
    latent_format: str,
    pack: bool,
    sampler_tables: list | None = None,
) -> str:
    """The whole shader source in ``language`` (``"slang"`` or ``"hlsl"``) for the materials and their buffer tables."""
    sampler_tables = sampler_tables if sampler_tables is not None else [None] * len(materials)
    lines = _preamble(module, latent_format, materials, precision, language)
    lines += helper_code(module)
    for material, weight_table, latent_table, sampler_table in zip(materials, weight_tables, latent_tables, sampler_tables, strict=True):
        lines += ["", f"// ---- material {material.name} " + "-" * max(0, 80 - len(material.name)), ""]
        lines.append(_decoder_code(language, material, weight_table, precision, module))
        if sampler_table is not None:
            lines.append(_decoder_code(language, material, sampler_table, precision, module, network="sampler"))
        lines += _latent_code(material, latent_table, module, latent_format)
        lines += _eval_code(material, module)
        lines += sampling_code(material, module)
    if pack:
        lines += _switch_code(module, materials)
        lines += sampling_switch_code(module, materials)
    lines += _kernel_code(language, module, materials, pack)
    if language == "slang":
        first = True
        for material in materials:
            code, shape, _ = tensor_kernel_code(material, module, first, latent_format)
            lines += code
            first = first and shape is None
    return "\n".join(lines) + "\n"

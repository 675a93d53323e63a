"""The tensor-core batch kernel of an exported neural material (Slang only): ``nb_<m>_tensor_kernel``.

The scalar kernel (``nb_<module>_kernel``) runs one thread per sample and walks the decoder's
weights in a ``ByteAddressBuffer`` with scalar loops. This kernel evaluates the same material for
the same buffers in warp tiles with the decoder on the tensor cores:

- a thread group is :data:`WARPS` warps of 32 lanes; it first stages every decoder layer into
  ``groupshared`` memory as fp16 ``[outputs, inputs]`` zero-padded to multiples of 16 (rows
  padded so a fragment's loads hit distinct banks), biases as fp32; then each warp evaluates
  :data:`STEPS_PER_WARP` steps of :data:`ROWS` consecutive points (one point per lane, two
  16-row tiles), so a group covers :data:`POINTS_PER_GROUP` points;
- per step each lane fetches its point's latents (bilinear, repeat wrap; with fp16 latents and a
  multiple of 8 channels, 8 channels per 128-bit load) and direction features into an fp16 input
  tile in groupshared memory;
- every layer is a set of 16x16x16 ``linalg.CoopMat`` products (fp16 x fp16 -> fp32), each weight
  fragment used for both row tiles; accumulators start at the bias, the hidden activation is
  applied to their elements and they become the next layer's fp16 A fragments without leaving the
  registers; the output layer goes through a small fp32 tile, then ``max(exp(y) - 1, 0)`` and the
  hemisphere test, as ``nb_<m>_eval`` does.

Numerics: fp16 weights, inputs and hidden activations, fp32 sums (the tensor cores' fp16 mode), so
the result is the fp16 decoder's whatever precision the weight buffer stores;
:func:`neuralbake.bakes.neural_material.model.tensor_kernel_reference` is that arithmetic in PyTorch.

Targets, chosen with ``__target_switch``:

- CUDA (slangpy's CUDA device; measured on an H100): ``CoopMat`` ``mma.sync`` products with the
  fragments filled and read element by element in PTX's ``mma.m16n8k16`` register layout (see
  :func:`neuralbake.export.tensor_tiles.fragment_form` for why not ``CoopMat.Load``);
- SPIR-V (Vulkan with cooperative matrices and their NV conversions): the same products with
  ``CoopMat.Load``/``Store``; generated and compiled, not run here;
- every other target: the same tiles with the products as loops, in the same precision. This is
  the form slangpy's CPU device runs (what CI tests): there a group's threads run one after
  another without barriers, so each warp's first lane does the warp's work and stages the weights
  itself. On GPU targets without cooperative matrices (D3D12, Metal) the loop form needs
  ``groupshared_bytes_loop_form`` (about 63 KB for the default decoder), over their 32 KB: not
  usable there as generated; use the scalar kernel.

The kernel assumes 32-lane subgroups (warps): true on NVIDIA GPUs; a Vulkan device with another
subgroup size needs a required subgroup size of 32 for it.

A pack gives every material its own tensor kernel over the scalar kernel's buffers (the material
id buffer is not read: dispatch each material's kernel over points of that material). Dispatch
``ceil(points / POINTS_PER_GROUP) * THREADS`` threads. The decoder must fit CUDA's 48 KB of static
groupshared memory with the tiles (the default 64-wide, three-hidden-layer decoder takes 47 KB);
a larger one gets no tensor kernel (:func:`tensor_kernel_shape` says why, and so does the shader
manifest). The HLSL file keeps the scalar kernel only.

The decoder's tiles (staging, the ``CoopMat`` and loop forms, the groupshared layout) are
:mod:`neuralbake.export.tensor_tiles`, shared with the NTC export's batch kernel; this module adds
the material's inputs (latents, directions), the output transform and the entry point.

Hand-written for the same reason as the rest of the export (see :mod:`neuralbake.export.neural_material`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from neuralbake.export.neural_material_inputs import direction_input_lines
from neuralbake.export.tensor_tiles import (
    LANES,
    ROWS,
    SHARED_BYTES_LIMIT,
    TensorKernelShape,
    TileNames,
    fragment_form,
    loop_form,
    prelude,
    stage_code,
    tile_arrays,
    tile_shape,
)
from neuralbake.io.neural_material_bundle import ExportMaterial

__all__ = [
    "POINTS_PER_GROUP",
    "SHARED_BYTES_LIMIT",
    "THREADS",
    "TensorKernelShape",
    "tensor_kernel_code",
    "tensor_kernel_shape",
]

WARPS = 4
"""Warps per thread group."""
THREADS = WARPS * LANES
"""Threads per group of the tensor kernel."""
STEPS_PER_WARP = 4
"""Consecutive steps of :data:`ROWS` points each warp evaluates (the staged weights serve them all)."""
POINTS_PER_GROUP = WARPS * STEPS_PER_WARP * ROWS
"""Points one thread group evaluates."""


def tensor_kernel_shape(layers: Sequence[dict[str, Any]]) -> tuple[TensorKernelShape | None, str]:
    """The kernel's layout for a decoder layer table, or ``(None, why not)`` when it does not fit."""
    return tile_shape(layers, WARPS, 4)  # 4 bytes per point: its visibility flag


def _names(m: str, module: str) -> TileNames:
    return TileNames(net=f"nb_{m}", helpers=f"nb_{module}", decoder=f"nb_{m}_decoder", weights=f"nb_{module}_weights")


def _inputs(material: ExportMaterial, m: str, module: str, latent_format: str) -> list[str]:
    """``nb_<m>_tc_inputs``: the decoder inputs of a warp's ROWS points into its input tile."""
    M = m.upper()
    layout = material.inputs
    channels, first = layout.latent.width, layout.latent.offset
    # fp16 latents with a multiple of 8 channels: 8 channels per 128-bit load
    wide = latent_format == "fp16" and channels % 8 == 0
    lines = [
        "",
        f"void nb_{m}_tc_inputs(uint warp, uint lane, uint first_point)",
        "{",
        f"    for (uint s = lane; s < {ROWS}u; s += nb_{module}_tc_lanes())",
        "    {",
        "        uint p = first_point + s;",
        f"        uint row = (warp * {ROWS}u + s) * NB_{M}_TC_INPUTS;",
        "        uint visible = 0u;",
        f"        for (uint k = 0; k < NB_{M}_TC_INPUTS; ++k)",
        f"            nb_{m}_tc_input[row + k] = half(0.0f);",
        f"        if (p < nb_{module}_point_count)",
        "        {",
        "            uint base = p * 8u;",
        f"            float2 uv = float2(nb_{module}_points[base], nb_{module}_points[base + 1u]);",
        f"            float3 wi = float3(nb_{module}_points[base + 2u], nb_{module}_points[base + 3u], nb_{module}_points[base + 4u]);",
        f"            float3 wo = float3(nb_{module}_points[base + 5u], nb_{module}_points[base + 6u], nb_{module}_points[base + 7u]);",
        "            visible = wi.z > 0.0f && wo.z > 0.0f ? 1u : 0u;",
    ]
    if wide:
        # fp16 latents, 8 channels per 16 bytes: one 128-bit load per tap and 8 channels.
        lines += [
            "            uint level;",
            "            uint texels[4];",
            "            float2 t;",
            f"            nb_{m}_taps(uv, nb_{module}_mips[p], level, texels, t);",
            "            float weights[4] = { (1.0f - t.x) * (1.0f - t.y), t.x * (1.0f - t.y), (1.0f - t.x) * t.y, t.x * t.y };",
            f"            for (uint g = 0; g < {channels // 8}u; ++g)",
            "            {",
            "                float sums[8] = { 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f };",
            "                for (uint tap = 0; tap < 4u; ++tap)",
            "                {",
            f"                    uint4 words = nb_{module}_latents.Load4(NB_{M}_MIP_OFFSET[level] + (texels[tap] * {channels}u + g * 8u) * 2u);",
            "                    uint packed[4] = { words.x, words.y, words.z, words.w };",
            "                    for (uint q = 0; q < 4u; ++q)",
            "                    {",
            "                        sums[2u * q] += weights[tap] * f16tof32(packed[q]);",
            "                        sums[2u * q + 1u] += weights[tap] * f16tof32(packed[q] >> 16);",
            "                    }",
            "                }",
            "                for (uint c = 0; c < 8u; ++c)",
            f"                    nb_{m}_tc_input[row + {first}u + g * 8u + c] = half(sums[c]);",
            "            }",
        ]
    else:
        lines += [
            f"            float latent[{channels}] = {{ {', '.join(['0.0f'] * channels)} }};",
            f"            nb_{m}_latent(uv, nb_{module}_mips[p], latent);",
            f"            for (uint c = 0; c < {channels}u; ++c)",
            f"                nb_{m}_tc_input[row + {first}u + c] = half(latent[c]);",
        ]
    lines += direction_input_lines(layout, module, lambda index, value: f"nb_{m}_tc_input[row + {index}u] = half({value});", " " * 12)
    lines += [
        "        }",
        f"        nb_{m}_tc_visible[warp * {ROWS}u + s] = visible;",
        "    }",
        "}",
    ]
    return lines


def _kernel(m: str, module: str, shape: TensorKernelShape) -> list[str]:
    out_n = shape.outputs[-1]
    return [
        "",
        f"// {POINTS_PER_GROUP} points per group of {THREADS} threads: dispatch ceil(points / {POINTS_PER_GROUP}) * {THREADS} threads.",
        '[shader("compute")]',
        f"[numthreads({THREADS}, 1, 1)]",
        f"void nb_{m}_tensor_kernel(uint3 group_id : SV_GroupID, uint3 group_thread : SV_GroupThreadID)",
        "{",
        "    uint thread = group_thread.x;",
        f"    uint warp = thread / {LANES}u;",
        f"    uint lanes = nb_{module}_tc_lanes();",
        f"    uint lane = thread % {LANES}u;",
        "    if (lane >= lanes)",
        "        return;  // only on the CPU target (one lane per warp there)",
        "    if (lanes == 1u)",
        f"        nb_{m}_tc_stage(0u, 1u);",
        "    else",
        "    {",
        f"        nb_{m}_tc_stage(thread, {THREADS}u);",
        f"        nb_{module}_tc_group_sync();",
        "    }",
        f"    for (uint step = 0; step < {STEPS_PER_WARP}u; ++step)",
        "    {",
        f"        uint first_point = ((group_id.x * {WARPS}u + warp) * {STEPS_PER_WARP}u + step) * {ROWS}u;",
        f"        nb_{m}_tc_inputs(warp, lane, first_point);",
        f"        nb_{module}_tc_warp_sync();",
        "        __target_switch",
        "        {",
        "        case cuda:",
        f"            nb_{m}_tc_decode_cuda(warp, lane);",
        "        case spirv:",
        f"            nb_{m}_tc_decode_mma(warp);",
        "        default:",
        f"            nb_{m}_tc_decode_loops(warp, lane);",
        "        }",
        f"        nb_{module}_tc_warp_sync();",
        f"        for (uint s = lane; s < {ROWS}u; s += lanes)",
        "        {",
        "            uint p = first_point + s;",
        f"            if (p >= nb_{module}_point_count)",
        "                continue;",
        f"            bool visible = nb_{m}_tc_visible[warp * {ROWS}u + s] != 0u;",
        f"            uint row = (warp * {ROWS}u + s) * {out_n}u;",
        "            for (uint c = 0; c < 3u; ++c)",
        "            {",
        f"                float y = nb_{m}_decoder_output_activation(nb_{m}_tc_output[row + c]);",
        "                // The decoder predicts log(1 + f cos).",
        f"                nb_{module}_values[p * 3u + c] = visible ? max(exp(y) - 1.0f, 0.0f) : 0.0f;",
        "            }",
        "        }",
        f"        nb_{module}_tc_warp_sync();",
        "    }",
        "}",
    ]


def tensor_kernel_code(material: ExportMaterial, module: str, first: bool, latent_format: str) -> tuple[list[str], TensorKernelShape | None, str]:
    """Lines of ``nb_<m>_tensor_kernel`` for one material (helpers too when ``first``), its shape, or why none."""
    shape, reason = tensor_kernel_shape(material.layers)
    if shape is None:
        return ["", f"// No tensor kernel for {material.name}: {reason}."], None, reason
    m = material.name
    names = _names(m, module)
    lines = prelude(names.helpers) if first else []
    lines += ["", f"// ---- material {m}: tensor-core batch kernel " + "-" * max(0, 50 - len(m)), ""]
    lines += tile_arrays(names, shape, [f"groupshared uint nb_{m}_tc_visible[{WARPS * ROWS}];"])
    lines += stage_code(names, shape)
    lines += _inputs(material, m, module, latent_format)
    lines += fragment_form(names, shape, cuda=False)
    lines += fragment_form(names, shape, cuda=True)
    lines += loop_form(names, shape)
    lines += _kernel(m, module, shape)
    return lines, shape, ""

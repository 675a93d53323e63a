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
  :func:`_fragment_form` for why not ``CoopMat.Load``);
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

Hand-written for the same reason as the rest of the export (see :mod:`neuralbake.export.neural_material`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from neuralbake.export.neural_material_inputs import direction_input_lines
from neuralbake.io.device_layout import align
from neuralbake.io.neural_material_bundle import ExportMaterial

__all__ = [
    "POINTS_PER_GROUP",
    "SHARED_BYTES_LIMIT",
    "THREADS",
    "TensorKernelShape",
    "tensor_kernel_code",
    "tensor_kernel_shape",
]

TILE = 16
"""Rows, columns and depth of one ``CoopMat`` fragment product (16x16x16)."""
M_TILES = 2
"""Row tiles a warp evaluates together (each staged weight fragment is used for all of them)."""
ROWS = M_TILES * TILE
"""Points per warp step: one per lane."""
WARPS = 4
"""Warps per thread group."""
LANES = 32
"""Lanes per warp."""
THREADS = WARPS * LANES
"""Threads per group of the tensor kernel."""
STEPS_PER_WARP = 4
"""Consecutive steps of :data:`ROWS` points each warp evaluates (the staged weights serve them all)."""
POINTS_PER_GROUP = WARPS * STEPS_PER_WARP * ROWS
"""Points one thread group evaluates."""
SHARED_BYTES_LIMIT = 48 * 1024
"""Static groupshared memory a CUDA kernel may declare."""


@dataclass(frozen=True)
class TensorKernelShape:
    """Padded layer sizes and groupshared offsets of one material's tensor kernel."""

    inputs: tuple[int, ...]
    """Padded inputs (K) of each layer."""
    outputs: tuple[int, ...]
    """Padded outputs (N) of each layer."""
    weight_offsets: tuple[int, ...]
    """Element offset of each layer's ``[N, K]`` fp16 matrix in the staged weight array."""
    bias_offsets: tuple[int, ...]
    """Element offset of each layer's N fp32 biases in the staged bias array."""
    strides: tuple[int, ...]
    """Row stride (elements) of each layer's staged ``[N, K]`` matrix: K plus padding that puts the 16-byte
    loads of one fragment on distinct shared-memory banks (16 or 48 mod 64 halves)."""
    width: int
    """Row stride (elements) of the loop form's activation tiles: the widest padded layer side."""
    shared_bytes: int
    """Groupshared bytes of the tensor-core form (weights, biases, input and output tiles)."""
    loop_shared_bytes: int
    """Groupshared bytes of the loop form (the same plus two activation tiles per warp)."""

    @property
    def weight_elements(self) -> int:
        return self.weight_offsets[-1] + self.strides[-1] * self.outputs[-1]

    @property
    def bias_elements(self) -> int:
        return self.bias_offsets[-1] + self.outputs[-1]


def tensor_kernel_shape(layers: Sequence[dict[str, Any]]) -> tuple[TensorKernelShape | None, str]:
    """The kernel's layout for a decoder layer table, or ``(None, why not)`` when it does not fit."""
    inputs = tuple(align(int(layer["inputs"]), TILE) for layer in layers)
    outputs = tuple(align(int(layer["outputs"]), TILE) for layer in layers)
    strides = tuple(k + 16 if k % 32 == 0 else k for k in inputs)
    weight_offsets, bias_offsets, w, b = [], [], 0, 0
    for stride, n in zip(strides, outputs, strict=True):
        weight_offsets.append(w)
        bias_offsets.append(b)
        w, b = w + stride * n, b + n
    width = max(inputs + outputs)
    tiles = WARPS * ROWS * (inputs[0] * 2 + outputs[-1] * 4 + 4)
    shared = w * 2 + b * 4 + tiles
    loop_shared = shared + WARPS * 2 * TILE * width * 2
    if shared > SHARED_BYTES_LIMIT:
        return None, (
            f"the decoder needs {shared / 1024:.1f} KB of groupshared memory in the tensor kernel (fp16 weights "
            f"{w * 2 / 1024:.1f} KB + tiles), more than CUDA's {SHARED_BYTES_LIMIT // 1024} KB"
        )
    return TensorKernelShape(inputs, outputs, tuple(weight_offsets), tuple(bias_offsets), strides, width, shared, loop_shared), ""


def _prelude(module: str) -> list[str]:
    """Helpers shared by every material's tensor kernel of a module."""
    return [
        "",
        "// ---- tensor-core batch kernels: helpers " + "-" * 40,
        "",
        "using namespace linalg;",
        f"typealias nb_{module}_tc_a = CoopMat<half, MemoryScope.Subgroup, {TILE}, {TILE}, CoopMatMatrixUse.MatrixA>;",
        f"typealias nb_{module}_tc_b = CoopMat<half, MemoryScope.Subgroup, {TILE}, {TILE}, CoopMatMatrixUse.MatrixB>;",
        f"typealias nb_{module}_tc_sum = CoopMat<float, MemoryScope.Subgroup, {TILE}, {TILE}, CoopMatMatrixUse.MatrixAccumulator>;",
        "",
        "// Lanes that share a warp's work: 32 on GPUs; 1 on Slang's CPU target, whose group threads run",
        "// one after another without barriers (each warp's first lane then does the warp's work).",
        f"uint nb_{module}_tc_lanes()",
        "{",
        "    __target_switch",
        "    {",
        "    case cpp:",
        "        return 1u;",
        "    default:",
        f"        return {LANES}u;",
        "    }",
        "}",
        "",
        f"void nb_{module}_tc_warp_sync()",
        "{",
        "    __target_switch",
        "    {",
        "    case cpp:",
        "        return;",
        "    case cuda:",
        "        GroupMemoryBarrierWithWaveSync();",
        "    default:",
        "        GroupMemoryBarrierWithGroupSync();",
        "    }",
        "}",
        "",
        f"void nb_{module}_tc_group_sync()",
        "{",
        "    __target_switch",
        "    {",
        "    case cpp:",
        "        return;",
        "    default:",
        "        GroupMemoryBarrierWithGroupSync();",
        "    }",
        "}",
    ]


def _arrays(m: str, shape: TensorKernelShape) -> list[str]:
    M = m.upper()
    return [
        f"static const uint NB_{M}_TC_WIDTH = {shape.width};",
        f"static const uint NB_{M}_TC_INPUTS = {shape.inputs[0]};",
        f"groupshared half nb_{m}_tc_weights[{shape.weight_elements}];   // per layer [N, K] row-major, zero-padded",
        f"groupshared float nb_{m}_tc_biases[{shape.bias_elements}];",
        f"groupshared half nb_{m}_tc_input[{WARPS * ROWS * shape.inputs[0]}];   // per warp {ROWS} x INPUTS decoder inputs",
        f"groupshared float nb_{m}_tc_output[{WARPS * ROWS * shape.outputs[-1]}];   // per warp {ROWS} x {shape.outputs[-1]} decoder outputs",
        f"groupshared uint nb_{m}_tc_visible[{WARPS * ROWS}];",
        f"groupshared half nb_{m}_tc_act[{WARPS * 2 * TILE * shape.width}];   // loop form: per warp two {TILE} x WIDTH tiles",
    ]


def _stage(m: str, module: str, shape: TensorKernelShape) -> list[str]:
    D = f"NB_{m.upper()}_DECODER"
    lines = [
        "",
        "// Every decoder layer into groupshared memory: fp16 [N, K] (zero-padded), fp32 biases.",
        f"void nb_{m}_tc_stage(uint first, uint stride)",
        "{",
    ]
    for index, (k, n) in enumerate(zip(shape.inputs, shape.outputs, strict=True)):
        L = f"{D}_L{index}"
        lines += [
            f"    for (uint e = first; e < {k * n}u; e += stride)",
            "    {",
            f"        uint n = e / {k}u;",
            f"        uint k = e % {k}u;",
            f"        float w = k < {L}_INPUTS && n < {L}_OUTPUTS ? nb_{m}_decoder_load(nb_{module}_weights, {L}_WEIGHT_OFFSET + (n * {L}_INPUTS + k) * {D}_ELEMENT_BYTES) : 0.0f;",
            f"        nb_{m}_tc_weights[{shape.weight_offsets[index]}u + n * {shape.strides[index]}u + k] = half(w);",
            "    }",
            f"    for (uint e = first; e < {n}u; e += stride)",
            f"        nb_{m}_tc_biases[{shape.bias_offsets[index]}u + e] = e < {L}_OUTPUTS ? nb_{m}_decoder_load(nb_{module}_weights, {L}_BIAS_OFFSET + e * {D}_ELEMENT_BYTES) : 0.0f;",
        ]
    return [*lines, "}"]


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


def _fragment_form(m: str, module: str, shape: TensorKernelShape, *, cuda: bool) -> list[str]:
    """The decoder on the tensor cores, activations kept in fragments between layers.

    Per layer and 16-column block: the bias, plus the sum over 16-deep blocks of fragment products
    (fp16 x fp16 -> fp32), for all :data:`M_TILES` row tiles with each weight fragment; the
    activation is applied to the accumulator's elements and the result becomes the next layer's
    fp16 A fragment (same lanes).

    ``cuda=False``: ``nb_<m>_tc_decode_mma``, fragments moved with ``CoopMat.Load``/``Store``
    (any target with cooperative matrices). ``cuda=True``: ``nb_<m>_tc_decode_cuda``, the fragments
    filled and read element by element instead. Slang's CUDA ``CoopMat.Load``/``Store`` redistribute
    every fragment through 16-32 warp shuffles behind divergent branches (Slang 2026.12), which cost
    about 25 instructions per tensor-core instruction here. On CUDA a fragment's elements follow
    PTX's ``mma.m16n8k16`` register layout (element ``e`` of lane ``l``: row/k ``(l >> 2) + 8 *
    ((e >> 1) & 1)`` and column ``2 * (l & 3) + (e & 1) + 8 * (e >> 2)`` for A and the
    accumulator; for B, k ``2 * (l & 3) + (e & 1) + 8 * ((e >> 1) & 1)`` and n ``(l >> 2) + 8 * (e
    >> 2)``), so the fragments are filled from groupshared memory with one load per element and the
    biases added per element. The GPU parity check (``bench/neural_material_shader_cuda.py``)
    guards this layout against Slang changing it.
    """
    T = TILE
    M = m.upper()
    last = len(shape.inputs) - 1
    a, b, sm = f"nb_{module}_tc_a", f"nb_{module}_tc_b", f"nb_{module}_tc_sum"
    each = ["[unroll]", "for (uint e = 0; e < 8u; ++e)"]  # the 8 elements a lane holds of a 16x16 fragment (CUDA)

    def indent(depth: int, lines: list[str]) -> list[str]:
        return [" " * depth + line for line in lines]

    if cuda:
        lines = [
            "",
            f"void nb_{m}_tc_decode_cuda(uint warp, uint lane)",
            "{",
            "    uint g = lane >> 2;",
            "    uint t = lane & 3u;",
            "    // element e of a lane: rows (A, accumulator) / k (B) and columns (A, accumulator) / n (B)",
            "    uint ra[8], ca[8], kb[8], nb[8];",
            *indent(4, each),
            "    {",
            "        ra[e] = g + 8u * ((e >> 1) & 1u);",
            "        ca[e] = 2u * t + (e & 1u) + 8u * (e >> 2);",
            "        kb[e] = 2u * t + (e & 1u) + 8u * ((e >> 1) & 1u);",
            "        nb[e] = g + 8u * (e >> 2);",
            "    }",
        ]
    else:
        lines = [
            "",
            f"// Tensor cores: per layer and {T}-column block, bias + sum over {T}-deep blocks of fragment products",
            f"// (fp16 x fp16 -> fp32), for all {M_TILES} row tiles with each weight fragment; the activation is applied",
            "// to the accumulator's elements and the result becomes the next layer's fp16 A fragment (same lanes).",
            f"void nb_{m}_tc_decode_mma(uint warp)",
            "{",
        ]
    for mt in range(M_TILES):
        for kt in range(shape.inputs[0] // T):
            row = f"(warp * {ROWS}u + {mt * T}u"
            if cuda:
                lines += [f"    {a} x0_{mt}_{kt};", *indent(4, each), f"        x0_{mt}_{kt}[e] = nb_{m}_tc_input[{row} + ra[e]) * NB_{M}_TC_INPUTS + {kt * T}u + ca[e]];"]
            else:
                lines.append(f"    {a} x0_{mt}_{kt} = {a}.Load<CoopMatMatrixLayout.RowMajor>(nb_{m}_tc_input, {row}) * NB_{M}_TC_INPUTS + {kt * T}u, NB_{M}_TC_INPUTS);")
    for index, (k, n) in enumerate(zip(shape.inputs, shape.outputs, strict=True)):
        stride, bias = shape.strides[index], shape.bias_offsets[index]
        lines.append(f"    // layer {index}: {k} -> {n} (padded)")
        if index < last:
            lines += [f"    {a} x{index + 1}_{mt}_{j};" for mt in range(M_TILES) for j in range(n // T)]
        for j in range(n // T):
            lines.append("    {")
            if cuda:
                lines += [f"        {sm} s{mt};" for mt in range(M_TILES)]
                copies = [f"            s{mt}[e] = s0[e];" for mt in range(1, M_TILES)]
                lines += [*indent(8, each), "        {", f"            s0[e] = nb_{m}_tc_biases[{bias + j * T}u + ca[e]];", *copies, "        }"]
            else:
                # stride 0: every row of the accumulator starts as the bias row
                lines += [f"        {sm} s{mt} = {sm}.Load<CoopMatMatrixLayout.RowMajor>(nb_{m}_tc_biases, {bias + j * T}u, 0u);" for mt in range(M_TILES)]
            for kt in range(k // T):
                block = shape.weight_offsets[index] + j * T * stride + kt * T
                if cuda:
                    lines += [f"        {b} w{kt};", *indent(8, each), f"            w{kt}[e] = nb_{m}_tc_weights[{block}u + nb[e] * {stride}u + kb[e]];"]
                else:
                    # [N, K] row-major is K x N column-major: the loader's fast layout for B
                    lines.append(f"        {b} w{kt} = {b}.Load<CoopMatMatrixLayout.ColumnMajor>(nb_{m}_tc_weights, {block}u, {stride}u);")
                lines += [f"        s{mt} = coopMatMulAdd<float, false>(x{index}_{mt}_{kt}, w{kt}, s{mt});" for mt in range(M_TILES)]
            for mt in range(M_TILES):
                row = f"(warp * {ROWS}u + {mt * T}u"
                if index < last and cuda:
                    lines += [*indent(8, each), f"            x{index + 1}_{mt}_{j}[e] = half(nb_{m}_decoder_hidden_activation(s{mt}[e]));"]
                elif index < last:
                    lines += [
                        "        [unroll]",
                        f"        for (uint e = 0; e < {sm}.GetLength(); ++e)",
                        f"            s{mt}[e] = nb_{m}_decoder_hidden_activation(s{mt}[e]);",
                        f"        x{index + 1}_{mt}_{j} = {a}(s{mt});",
                    ]
                elif cuda:
                    lines += [*indent(8, each), f"            nb_{m}_tc_output[{row} + ra[e]) * {n}u + {j * T}u + ca[e]] = s{mt}[e];"]
                else:
                    lines.append(f"        s{mt}.Store<CoopMatMatrixLayout.RowMajor>(nb_{m}_tc_output, {row}) * {n}u + {j * T}u, {n}u);")
            lines.append("    }")
    return [*lines, "}"]


def _loop_form(m: str, module: str, shape: TensorKernelShape) -> list[str]:
    """``nb_<m>_tc_decode_loops``: the same products as loops over groupshared tiles, same precision."""
    M = m.upper()
    T = TILE
    last = len(shape.inputs) - 1
    out_n = shape.outputs[-1]
    lines = [
        "",
        f"// Targets without cooperative matrices: the same {T}x{T} tile products as loops (fp16 products summed",
        f"// in fp32) over two {T} x WIDTH activation tiles per warp.",
        f"void nb_{m}_tc_product(uint a, uint b, uint b_stride, uint k_tiles, uint lane, out float result[{T * T}])",
        "{",
        f"    for (uint e = 0; e < {T * T}u; ++e)",
        "        result[e] = 0.0f;",
        f"    for (uint e = lane; e < {T * T}u; e += nb_{module}_tc_lanes())",
        "    {",
        f"        uint row = e / {T}u;",
        f"        uint column = e % {T}u;",
        "        float total = 0.0f;",
        f"        for (uint k = 0; k < k_tiles * {T}u; ++k)",
        f"            total += float(nb_{m}_tc_act[a + row * NB_{M}_TC_WIDTH + k]) * float(nb_{m}_tc_weights[b + column * b_stride + k]);",
        "        result[e] = total;",
        "    }",
        "}",
        "",
        f"void nb_{m}_tc_decode_loops(uint warp, uint lane)",
        "{",
        f"    uint lanes = nb_{module}_tc_lanes();",
        f"    uint tile0 = warp * {2 * T}u * NB_{M}_TC_WIDTH;",
        f"    uint tile1 = tile0 + {T}u * NB_{M}_TC_WIDTH;",
        f"    float result[{T * T}];",
        f"    for (uint mt = 0; mt < {M_TILES}u; ++mt)",
        "    {",
        f"        for (uint e = lane; e < {T}u * NB_{M}_TC_WIDTH; e += lanes)",
        "        {",
        f"            uint row = e / NB_{M}_TC_WIDTH;",
        f"            uint k = e % NB_{M}_TC_WIDTH;",
        f"            nb_{m}_tc_act[tile0 + e] = k < NB_{M}_TC_INPUTS ? nb_{m}_tc_input[(warp * {ROWS}u + mt * {T}u + row) * NB_{M}_TC_INPUTS + k] : half(0.0f);",
        "        }",
        f"        nb_{module}_tc_warp_sync();",
    ]
    D = f"NB_{M}_DECODER"
    for index, (k, n) in enumerate(zip(shape.inputs, shape.outputs, strict=True)):
        source, target = ("tile0", "tile1") if index % 2 == 0 else ("tile1", "tile0")
        lines += [
            f"        // layer {index}: {k} -> {n} (padded)",
            f"        for (uint nt = 0; nt < {n // T}u; ++nt)",
            "        {",
            f"            nb_{m}_tc_product({source}, {shape.weight_offsets[index]}u + nt * {T * shape.strides[index]}u, {shape.strides[index]}u, {k // T}u, lane, result);",
            f"            for (uint e = lane; e < {T * T}u; e += lanes)",
            "            {",
            f"                uint n = nt * {T}u + e % {T}u;",
            f"                float x = result[e] + nb_{m}_tc_biases[{shape.bias_offsets[index]}u + n];",
        ]
        if index < last:
            lines.append(f"                nb_{m}_tc_act[{target} + (e / {T}u) * NB_{M}_TC_WIDTH + n] = n < {D}_L{index}_OUTPUTS ? half(nb_{m}_decoder_hidden_activation(x)) : half(0.0f);")
        else:
            lines.append(f"                nb_{m}_tc_output[(warp * {ROWS}u + mt * {T}u + e / {T}u) * {out_n}u + n] = x;")
        lines += ["            }", f"            nb_{module}_tc_warp_sync();", "        }"]
    lines += ["    }", "}"]
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
    lines = _prelude(module) if first else []
    lines += ["", f"// ---- material {m}: tensor-core batch kernel " + "-" * max(0, 50 - len(m)), ""]
    lines += _arrays(m, shape)
    lines += _stage(m, module, shape)
    lines += _inputs(material, m, module, latent_format)
    lines += _fragment_form(m, module, shape, cuda=False)
    lines += _fragment_form(m, module, shape, cuda=True)
    lines += _loop_form(m, module, shape)
    lines += _kernel(m, module, shape)
    return lines, shape, ""

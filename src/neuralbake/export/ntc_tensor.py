"""The tensor-core batch kernels of an exported NTC set (Slang only): ``ntc_<n>_tensor_texel_kernel`` and
``ntc_<n>_tensor_sample_kernel``.

The scalar kernels (:mod:`neuralbake.export.ntc_codegen`) decode each texel in one thread with scalar
loops over the int8 weights. These evaluate the same decodes for the same buffers and queries in warp
tiles, the decoder on the tensor cores (:mod:`neuralbake.export.tensor_tiles`):

- a thread group is ``warps`` warps of 32 lanes (4, or 2 or 1 when the decoder's tiles would not fit
  CUDA's 48 KB of groupshared memory; the manifest gives the number). It stages the decoder into
  groupshared memory (int8 codes times their layer's scale, as fp16), then each warp runs
  :data:`STEPS_PER_WARP` steps of 32 *rows*: a row is one texel decode. A texel query takes one row;
  a sample query takes as many rows as its filter has taps (trilinear 8, bilinear 4, stochastic 1:
  the stochastic tap is picked before the decode), so a step covers 32, 8, 4 or 32 queries;
- each lane assembles its row's decoder inputs (``ntc_<n>_features``, the scalar code's own) into an
  fp16 input tile and its filter weight into ``ntc_<n>_tc_weight``; the decoder runs on the tiles
  (``CoopMat`` products on CUDA and Vulkan, loops elsewhere); each query's value is the weighted sum
  of its rows' outputs clamped to [0, 1].

Numerics: fp16 weights (``code * scale`` rounded to fp16), fp16 inputs and hidden activations, fp32
sums, as :func:`neuralbake.bakes.ntc.export.tensor_decoder_reference` computes in PyTorch. Dispatch
``ceil(queries / queries_per_group) * threads`` threads (both in the manifest, per filter). Slang's CPU
device runs the loop form (what CI tests); CUDA the fragment form.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from neuralbake.export.tensor_tiles import (
    LANES,
    ROWS,
    TensorKernelShape,
    TileNames,
    fragment_form,
    loop_form,
    prelude,
    stage_code,
    tile_arrays,
    tile_shape,
)

__all__ = ["STEPS_PER_WARP", "TAPS_PER_QUERY", "tensor_kernel_code", "tensor_kernel_entries", "tensor_kernel_shape"]

STEPS_PER_WARP = 4
"""Steps of :data:`ROWS` decodes each warp runs (the staged weights serve them all)."""
WARP_CHOICES = (4, 2, 1)
"""Warps per group, the first whose tiles fit."""
TAPS_PER_QUERY = {"texel": 1, "trilinear": 8, "bilinear": 4, "stochastic": 1}
"""Rows (decodes) per query of each kernel and filter."""


def tensor_kernel_shape(layers: Sequence[dict[str, Any]]) -> tuple[TensorKernelShape | None, str]:
    """The tiles for a decoder layer table with the most warps per group that fit, or ``(None, why not)``."""
    reason = ""
    for warps in WARP_CHOICES:
        shape, reason = tile_shape(layers, warps, 4)  # 4 bytes per row: its filter weight
        if shape is not None:
            return shape, ""
    return None, reason


def _names(n: str) -> TileNames:
    return TileNames(net=f"ntc_{n}", helpers=f"ntc_{n}", decoder=f"ntc_{n}_decoder", weights=f"ntc_{n}_weights")


def tensor_kernel_entries(n: str, layers: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The manifest's entries of the two tensor kernels (or one entry saying why there are none)."""
    shape, reason = tensor_kernel_shape(layers)
    if shape is None:
        return [{"name": None, "kind": "tensor", "reason": reason}]
    threads = shape.warps * LANES
    rows = shape.warps * STEPS_PER_WARP * ROWS
    common = {
        "languages": ["slang"],
        "threads_per_group": [threads, 1, 1],
        "groupshared_bytes": shape.shared_bytes,
        "groupshared_bytes_loop_form": shape.loop_shared_bytes,
        "subgroup_size": LANES,
        "arithmetic": "fp16 weights and activations, fp32 sums (tensor cores); CoopMat on CUDA and Vulkan, loops elsewhere",
    }
    per_filter = {name: rows // TAPS_PER_QUERY[name] for name in ("trilinear", "bilinear", "stochastic")}
    return [
        {
            "name": f"ntc_{n}_tensor_texel_kernel",
            "kind": "tensor",
            **common,
            "queries_per_group": rows,
            "dispatch": f"ceil(count / {rows}) groups of {threads} threads",
            "reads": f"ntc_{n}_texel_queries",
            "writes": f"ntc_{n}_values",
        },
        {
            "name": f"ntc_{n}_tensor_sample_kernel",
            "kind": "tensor",
            **common,
            "queries_per_group": per_filter,
            "dispatch": f"ceil(count / queries_per_group[filter]) groups of {threads} threads",
            "reads": f"ntc_{n}_sample_queries",
            "writes": f"ntc_{n}_values",
        },
    ]


def _rows(n: str, channels: int) -> list[str]:
    """Inputs of a warp's rows, and the outputs of its queries."""
    p, P = f"ntc_{n}", f"NTC_{n.upper()}"
    return [
        "",
        "// Row s of a warp's step decodes tap s % taps of query first_query + s / taps: its inputs into the input tile,",
        "// its filter weight beside them (texel queries and stochastic samples: one row of weight 1).",
        f"void {p}_tc_inputs(uint warp, uint lane, uint first_query, uint taps, bool texels)",
        "{",
        f"    for (uint s = lane; s < {ROWS}u; s += {p}_tc_lanes())",
        "    {",
        f"        uint row = (warp * {ROWS}u + s) * {P}_TC_INPUTS;",
        f"        for (uint k = 0; k < {P}_TC_INPUTS; ++k)",
        f"            {p}_tc_input[row + k] = half(0.0f);",
        "        float weight = 0.0f;",
        "        uint q = first_query + s / taps;",
        f"        if (q < {p}_count)",
        "        {",
        "            uint level, x, y;",
        "            if (texels)",
        "            {",
        f"                level = min({p}_texel_queries[q * 3u], {P}_LEVELS - 1u);",
        f"                x = min({p}_texel_queries[q * 3u + 1u], {P}_LEVEL_WIDTH[level] - 1u);",
        f"                y = min({p}_texel_queries[q * 3u + 2u], {P}_LEVEL_HEIGHT[level] - 1u);",
        "                weight = 1.0f;",
        "            }",
        "            else",
        "            {",
        "                uint b = q * 4u;",
        f"                float2 uv = float2({p}_sample_queries[b], {p}_sample_queries[b + 1u]);",
        "                uint levels[8];",
        "                uint xs[8];",
        "                uint ys[8];",
        "                float weights[8];",
        f"                {p}_taps(uv, {p}_sample_queries[b + 2u], taps == 4u, levels, xs, ys, weights);",
        f"                uint tap = taps == 1u ? {p}_stochastic_tap(weights, {p}_sample_queries[b + 3u]) : s % taps;",
        "                level = levels[tap];",
        "                x = xs[tap];",
        "                y = ys[tap];",
        "                weight = taps == 1u ? 1.0f : weights[tap];",
        "            }",
        f"            float features[{P}_INPUTS];",
        f"            {p}_features(level, x, y, features);",
        f"            for (uint k = 0; k < {P}_INPUTS; ++k)",
        f"                {p}_tc_input[row + k] = half(features[k]);",
        "        }",
        f"        {p}_tc_weight[warp * {ROWS}u + s] = weight;",
        "    }",
        "}",
        "",
        "// Each query of the step: the weighted sum of its rows' outputs, clamped to [0, 1] each.",
        f"void {p}_tc_outputs(uint warp, uint lane, uint first_query, uint taps, uint out_stride)",
        "{",
        f"    for (uint s = lane; s < {ROWS}u / taps; s += {p}_tc_lanes())",
        "    {",
        "        uint q = first_query + s;",
        f"        if (q >= {p}_count)",
        "            continue;",
        f"        for (uint c = 0; c < {channels}u; ++c)",
        "        {",
        "            float sum = 0.0f;",
        "            for (uint j = 0; j < taps; ++j)",
        "            {",
        f"                uint r = warp * {ROWS}u + s * taps + j;",
        f"                sum += {p}_tc_weight[r] * saturate({p}_tc_output[r * out_stride + c]);",
        "            }",
        f"            {p}_values[q * {channels}u + c] = sum;",
        "        }",
        "    }",
        "}",
    ]


def _entries(n: str, shape: TensorKernelShape) -> list[str]:
    p = f"ntc_{n}"
    threads = shape.warps * LANES
    lines = [
        "",
        f"void {p}_tc_run(uint group, uint thread, bool texels)",
        "{",
        f"    uint warp = thread / {LANES}u;",
        f"    uint lanes = {p}_tc_lanes();",
        f"    uint lane = thread % {LANES}u;",
        "    if (lane >= lanes)",
        "        return;  // only on the CPU target (one lane per warp there)",
        "    if (lanes == 1u)",
        f"        {p}_tc_stage(0u, 1u);",
        "    else",
        "    {",
        f"        {p}_tc_stage(thread, {threads}u);",
        f"        {p}_tc_group_sync();",
        "    }",
        f"    uint taps = texels || {p}_filter == 2u ? 1u : ({p}_filter == 1u ? 4u : 8u);",
        f"    for (uint step = 0; step < {STEPS_PER_WARP}u; ++step)",
        "    {",
        f"        uint first_query = ((group * {shape.warps}u + warp) * {STEPS_PER_WARP}u + step) * ({ROWS}u / taps);",
        f"        {p}_tc_inputs(warp, lane, first_query, taps, texels);",
        f"        {p}_tc_warp_sync();",
        "        __target_switch",
        "        {",
        "        case cuda:",
        f"            {p}_tc_decode_cuda(warp, lane);",
        "        case spirv:",
        f"            {p}_tc_decode_mma(warp);",
        "        default:",
        f"            {p}_tc_decode_loops(warp, lane);",
        "        }",
        f"        {p}_tc_warp_sync();",
        f"        {p}_tc_outputs(warp, lane, first_query, taps, {shape.outputs[-1]}u);",
        f"        {p}_tc_warp_sync();",
        "    }",
        "}",
    ]
    for kind, texels in (("texel", "true"), ("sample", "false")):
        lines += [
            "",
            f"// {kind} queries in tiles: dispatch ceil(count / queries per group) groups of {threads} threads (the manifest gives both).",
            '[shader("compute")]',
            f"[numthreads({threads}, 1, 1)]",
            f"void {p}_tensor_{kind}_kernel(uint3 group_id : SV_GroupID, uint3 group_thread : SV_GroupThreadID)",
            "{",
            f"    {p}_tc_run(group_id.x, group_thread.x, {texels});",
            "}",
        ]
    return lines


def tensor_kernel_code(n: str, layers: Sequence[dict[str, Any]], channels: int) -> list[str]:
    """Lines of the two tensor kernels of set ``n`` (after the scalar code, whose functions and bindings they use)."""
    shape, reason = tensor_kernel_shape(layers)
    if shape is None:
        return ["", f"// No tensor kernels: {reason}."]
    names = _names(n)
    lines = prelude(names.helpers)
    lines += ["", f"// ---- set {n}: tensor-core batch kernels " + "-" * max(0, 50 - len(n)), ""]
    lines += tile_arrays(names, shape, [f"groupshared float ntc_{n}_tc_weight[{shape.warps * ROWS}];   // per row: its filter weight"])
    lines += stage_code(names, shape, int8=True)
    lines += _rows(n, channels)
    lines += fragment_form(names, shape, cuda=False)
    lines += fragment_form(names, shape, cuda=True)
    lines += loop_form(names, shape)
    lines += _entries(n, shape)
    return lines

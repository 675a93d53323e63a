"""Slang and HLSL code of an exported NTC texture set (:mod:`neuralbake.export.ntc`).

Generated for a set named ``<n>`` (every name starts with ``ntc_<n>_``, every constant with ``NTC_<N>_``):

- ``struct ntc_<n>_channels``: one field per channel group (``float`` to ``float4``, the group's
  name as an identifier), e.g. ``base_color``, ``normal``;
- ``ntc_<n>_channels ntc_<n>_texel(uint level, uint x, uint y)``: one texel of one mip level (both
  clamped into the set), decoded: the decoder inputs are assembled from the latent buffer exactly as
  :func:`neuralbake.bakes.ntc.model.sample_features` does (four high-resolution cells, the
  low-resolution grid sampled bilinearly, the frequency-encoded position in the high-resolution cell,
  the level within the mip pair), the int8 decoder runs in fp32 and its outputs are clamped to [0, 1];
- ``ntc_<n>_channels ntc_<n>_sample(float2 uv, float lod)``: trilinear filtering of decoded texels
  (bilinear in the two levels around ``lod``, clamped to the chain, repeat wrap; 8 decodes, 4 at a
  whole ``lod``); ``ntc_<n>_sample_bilinear(uv, lod)``: bilinear in the level nearest ``lod`` (4
  decodes); ``ntc_<n>_sample_stochastic(uv, lod, random)``: one of the trilinear filter's 8 texels,
  chosen with probability equal to its weight by ``random`` (uniform in [0, 1)), so one decode; its
  mean is ``ntc_<n>_sample``. :mod:`neuralbake.bakes.ntc.decode` is the PyTorch reference of all
  three (:func:`~neuralbake.bakes.ntc.decode.filter_taps`: the same taps in the same order);
- ``float ntc_<n>_lod(float2 duv_dx, float2 duv_dy)``: the level of detail of a pixel footprint
  (log2 of the longer uv derivative in level-0 texels); ``float3 ntc_<n>_unpack_normal(float2 xy)``;
- the same functions with ``_values`` (``ntc_<n>_texel_values(level, x, y, out float values[C])``
  ...) write every channel into an array instead (group offsets: ``NTC_<N>_<FIELD>_OFFSET``);
- compute entry points (64 threads per group, one query per thread): ``ntc_<n>_texel_kernel`` reads
  ``level, x, y`` per query from ``StructuredBuffer<uint> ntc_<n>_texel_queries``,
  ``ntc_<n>_sample_kernel`` reads ``u, v, lod, random`` from ``StructuredBuffer<float>
  ntc_<n>_sample_queries`` and filters as ``ntc_<n>_filter`` says (:data:`FILTER_MODES`); both write
  ``C`` floats per query to ``RWStructuredBuffer<float> ntc_<n>_values`` and take the query count
  from ``cbuffer ntc_<n>_constants { uint ntc_<n>_count; uint ntc_<n>_filter; }``;
- Slang only: the tensor-core batch kernels ``ntc_<n>_tensor_texel_kernel`` and
  ``ntc_<n>_tensor_sample_kernel`` over the same buffers (:mod:`neuralbake.export.ntc_tensor`).

The decoder function is :mod:`neuralbake.export.slang`'s MLP generator in its int8 precision.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from neuralbake.errors import ConfigError
from neuralbake.export.ntc_tensor import tensor_kernel_code
from neuralbake.export.slang import THREADS_PER_GROUP, float_literal, generate_mlp_hlsl, generate_mlp_slang, zeros_initializer

if TYPE_CHECKING:  # the set's plain data is defined beside the exporter, which imports this module
    from neuralbake.export.ntc import NTCShaderSet

__all__ = ["FILTER_MODES", "SAMPLE_FLOATS", "TAPS", "TEXEL_UINTS", "generate_ntc_shader", "group_fields"]

FILTER_MODES = {"trilinear": 0, "bilinear": 1, "stochastic": 2}
"""Values of ``ntc_<n>_filter`` for the sample kernels."""
TEXEL_UINTS = 3
"""uints per texel query: level, x, y."""
SAMPLE_FLOATS = 4
"""floats per sample query: u, v, lod, random."""
TAPS = 8
"""Texels a trilinear sample blends."""
_RESERVED = {
    "bool", "break", "buffer", "case", "cbuffer", "const", "continue", "default", "do", "double", "else", "export", "extern", "false",
    "float", "for", "half", "if", "in", "inout", "int", "interface", "matrix", "namespace", "out", "register", "return", "sampler",
    "static", "struct", "switch", "texture", "this", "true", "typedef", "uint", "uniform", "vector", "void", "volatile", "while",
}  # fmt: skip


def group_fields(names: Sequence[str]) -> list[str]:
    """The struct field of each channel group: its name as a lower-case identifier (``_`` for other characters, a
    leading letter, not a keyword); ConfigError when two groups come out the same."""
    fields = []
    for name in names:
        field = re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_") or "group"
        field = field if field[0].isalpha() else f"g_{field}"
        field = f"{field}_" if field in _RESERVED else field
        if field in fields:
            raise ConfigError(
                f"the groups {names[fields.index(field)]!r} and {name!r} give one shader field name {field!r}.",
                field="groups",
                fix="rename one of the textures and compress again.",
            )
        fields.append(field)
    return fields


def _array(name: str, values: Sequence[int]) -> str:
    return f"static const uint {name}[{len(values)}] = {{ {', '.join(str(int(v)) for v in values)} }};"


def _decoder(language: str, data: NTCShaderSet, n: str, layer_table: list[dict[str, Any]]) -> list[str]:
    generate = generate_mlp_slang if language == "slang" else generate_mlp_hlsl
    source = generate(
        layer_table,
        hidden_activation=data.activation,
        output_activation="none",
        leak=data.leak,
        precision="int8",
        function_name=f"ntc_{n}_decoder",
        function_only=True,
    )
    return [*source.rstrip().splitlines(), f"// The offsets above are bytes into ntc_{n}_weights.", ""]


def _constants(data: NTCShaderSet, n: str, streams: dict[str, int], fields: list[str]) -> list[str]:
    P = f"NTC_{n.upper()}"
    widths, heights = [w for w, _ in data.level_sizes], [h for _, h in data.level_sizes]
    lines = [
        f"static const uint {P}_CHANNELS = {data.channels};",
        f"static const uint {P}_LEVELS = {len(data.level_sizes)};",
        _array(f"{P}_LEVEL_WIDTH", widths),
        _array(f"{P}_LEVEL_HEIGHT", heights),
        f"static const uint {P}_FEATURES = {data.features};",
        f"static const uint {P}_BITS = {data.bits};",
        f"static const uint {P}_CODE_MASK = {(1 << data.bits) - 1}u;",
        f"static const float {P}_STEP = {float_literal(2.0 / (2**data.bits - 1))};   // latent = code * STEP - 1",
        "// Byte offsets of the two code streams in ntc_<n>_latents; per mip pair, each grid's size and first cell.",
        f"static const uint {P}_HIGH_STREAM = {streams['high_offset']};",
        f"static const uint {P}_LOW_STREAM = {streams['low_offset']};",
        _array(f"{P}_HIGH_WIDTH", [w for w, _ in data.high_dims]),
        _array(f"{P}_HIGH_HEIGHT", [h for _, h in data.high_dims]),
        _array(f"{P}_HIGH_CELL", data.cell_offsets(data.high_dims)),
        _array(f"{P}_LOW_WIDTH", [w for w, _ in data.low_dims]),
        _array(f"{P}_LOW_HEIGHT", [h for _, h in data.low_dims]),
        _array(f"{P}_LOW_CELL", data.cell_offsets(data.low_dims)),
        f"static const uint {P}_FREQUENCIES = {data.pe_frequencies};",
        f"static const float {P}_FREQUENCY_SCALES[{data.pe_frequencies}] = {{ {', '.join(float_literal(2.0**k) for k in range(data.pe_frequencies))} }};",
        f"static const uint {P}_INPUTS = {data.inputs};",
        "// First channel of each group in the value arrays (ntc_<n>_..._values, ntc_<n>_values).",
    ]
    offset = 0
    for group, field in zip(data.groups, fields, strict=True):
        lines.append(f"static const uint {P}_{field.upper()}_OFFSET = {offset};")
        offset += len(group.channels)
    lines += ["", f"struct ntc_{n}_channels", "{"]
    for group, field in zip(data.groups, fields, strict=True):
        count = len(group.channels)
        lines.append(
            f"    {'float' if count == 1 else f'float{count}'} {field};   // {group.name}: {', '.join(group.channels)} ({group.kind})"
        )
    return [*lines, "};", ""]


def _fetch(n: str) -> list[str]:
    """Latent codes, grid cells and the decoder inputs of a texel: ``sample_features`` in shader code."""
    p, P = f"ntc_{n}", f"NTC_{n.upper()}"
    return [
        "// Code `index` of the stream at byte `stream` (bits index * BITS ..., least significant first), as a latent in [-1, 1].",
        f"float {p}_latent(uint stream, uint index)",
        "{",
        f"    uint bit = index * {P}_BITS;",
        "    uint address = stream + (bit >> 5) * 4u;",
        "    uint shift = bit & 31u;",
        f"    uint code = {p}_latents.Load(address) >> shift;",
        f"    if (shift + {P}_BITS > 32u)",
        f"        code |= {p}_latents.Load(address + 4u) << (32u - shift);",
        f"    return float(code & {P}_CODE_MASK) * {P}_STEP - 1.0f;",
        "}",
        "",
        "// The two cell-centred cells around coord (in [0, 1]) on a grid of `size` cells, clamped to the edge, and the fraction.",
        f"void {p}_cells(float coord, uint size, out uint a, out uint b, out float f)",
        "{",
        "    float position = coord * float(size) - 0.5f;",
        "    float first = floor(position);",
        "    f = position - first;",
        "    int i = int(first);",
        "    a = uint(clamp(i, 0, int(size) - 1));",
        "    b = uint(clamp(i + 1, 0, int(size) - 1));",
        "}",
        "",
        "// The decoder inputs of texel (level, x, y): the four high-resolution cells around it (concatenated), the",
        "// low-resolution grid sampled bilinearly, sin/cos of its position in the high-resolution cell, its level in the pair.",
        f"void {p}_features(uint level, uint x, uint y, out float features[{P}_INPUTS])",
        "{",
        f"    for (uint i = 0; i < {P}_INPUTS; ++i)",
        "        features[i] = 0.0f;",
        "    uint pair = level >> 1;",
        f"    float u = (float(x) + 0.5f) / float({P}_LEVEL_WIDTH[level]);",
        f"    float v = (float(y) + 0.5f) / float({P}_LEVEL_HEIGHT[level]);",
        "    uint xa, xb, ya, yb;",
        "    float fx, fy;",
        f"    {p}_cells(u, {P}_HIGH_WIDTH[pair], xa, xb, fx);",
        f"    {p}_cells(v, {P}_HIGH_HEIGHT[pair], ya, yb, fy);",
        f"    uint row_a = {P}_HIGH_CELL[pair] + ya * {P}_HIGH_WIDTH[pair];",
        f"    uint row_b = {P}_HIGH_CELL[pair] + yb * {P}_HIGH_WIDTH[pair];",
        "    uint cells[4] = { row_a + xa, row_a + xb, row_b + xa, row_b + xb };",
        "    for (uint corner = 0; corner < 4u; ++corner)",
        f"        for (uint f = 0; f < {P}_FEATURES; ++f)",
        f"            features[corner * {P}_FEATURES + f] = {p}_latent({P}_HIGH_STREAM, cells[corner] * {P}_FEATURES + f);",
        "    uint lxa, lxb, lya, lyb;",
        "    float lfx, lfy;",
        f"    {p}_cells(u, {P}_LOW_WIDTH[pair], lxa, lxb, lfx);",
        f"    {p}_cells(v, {P}_LOW_HEIGHT[pair], lya, lyb, lfy);",
        f"    uint low_a = {P}_LOW_CELL[pair] + lya * {P}_LOW_WIDTH[pair];",
        f"    uint low_b = {P}_LOW_CELL[pair] + lyb * {P}_LOW_WIDTH[pair];",
        f"    for (uint f = 0; f < {P}_FEATURES; ++f)",
        "    {",
        f"        float l00 = {p}_latent({P}_LOW_STREAM, (low_a + lxa) * {P}_FEATURES + f);",
        f"        float l10 = {p}_latent({P}_LOW_STREAM, (low_a + lxb) * {P}_FEATURES + f);",
        f"        float l01 = {p}_latent({P}_LOW_STREAM, (low_b + lxa) * {P}_FEATURES + f);",
        f"        float l11 = {p}_latent({P}_LOW_STREAM, (low_b + lxb) * {P}_FEATURES + f);",
        f"        features[4u * {P}_FEATURES + f] = (l00 * (1.0f - lfx) + l10 * lfx) * (1.0f - lfy) + (l01 * (1.0f - lfx) + l11 * lfx) * lfy;",
        "    }",
        "    float position[2] = { fx, fy };",
        "    for (uint c = 0; c < 2u; ++c)",
        f"        for (uint k = 0; k < {P}_FREQUENCIES; ++k)",
        "        {",
        f"            float turns = position[c] * {P}_FREQUENCY_SCALES[k];",
        "            float phase = 3.14159265358979f * (turns - 2.0f * floor(0.5f * turns));  // reduced exactly, as frequency_encode",
        f"            features[5u * {P}_FEATURES + (c * {P}_FREQUENCIES + k) * 2u] = sin(phase);",
        f"            features[5u * {P}_FEATURES + (c * {P}_FREQUENCIES + k) * 2u + 1u] = cos(phase);",
        "        }",
        f"    features[{P}_INPUTS - 1u] = float(level & 1u);",
        "}",
        "",
    ]


def _sampling(data: NTCShaderSet, n: str, fields: list[str]) -> list[str]:
    """Texel decode, the filter taps, trilinear / bilinear / stochastic samples, the struct wrappers, lod and normals."""
    p, P = f"ntc_{n}", f"NTC_{n.upper()}"
    C = data.channels
    zeros = zeros_initializer(C)
    lines = [
        "// Texel (level, x, y), both clamped into the set: decoded, each channel clamped to [0, 1].",
        f"void {p}_texel_values(uint level, uint x, uint y, out float values[{C}])",
        "{",
        f"    uint l = min(level, {P}_LEVELS - 1u);",
        f"    float features[{P}_INPUTS] = {zeros_initializer(data.inputs)};",
        f"    {p}_features(l, min(x, {P}_LEVEL_WIDTH[l] - 1u), min(y, {P}_LEVEL_HEIGHT[l] - 1u), features);",
        f"    {p}_decoder({p}_weights, features, values);",
        f"    for (uint c = 0; c < {C}u; ++c)",
        "        values[c] = saturate(values[c]);",
        "}",
        "",
        f"uint {p}_wrap(int i, int size)",
        "{",
        "    int m = i % size;",
        "    return uint(m < 0 ? m + size : m);",
        "}",
        "",
        "// The texels a filtered sample blends and their weights (sum 1): taps 0-3 in level floor(lod), 4-7 in the next",
        "// (lod clamped to the chain; `nearest`: rounded to a whole level, taps 4-7 then weigh 0), each four in the order",
        "// (x0, y0), (x1, y0), (x0, y1), (x1, y1); texel centres at (i + 0.5) / size, repeat wrap.",
        f"void {p}_taps(float2 uv, float lod, bool nearest, out uint levels[{TAPS}], out uint xs[{TAPS}], out uint ys[{TAPS}], out float weights[{TAPS}])",
        "{",
        f"    float level = clamp(lod, 0.0f, float({P}_LEVELS - 1u));",
        "    if (nearest)",
        "        level = floor(level + 0.5f);",
        "    float below = floor(level);",
        "    float t = level - below;",
        "    uint first = uint(below);",
        f"    uint second = min(first + 1u, {P}_LEVELS - 1u);",
        "    for (uint side = 0; side < 2u; ++side)",
        "    {",
        "        uint l = side == 0u ? first : second;",
        "        float blend = side == 0u ? 1.0f - t : t;",
        f"        int width = int({P}_LEVEL_WIDTH[l]);",
        f"        int height = int({P}_LEVEL_HEIGHT[l]);",
        "        float px = uv.x * float(width) - 0.5f;",
        "        float py = uv.y * float(height) - 0.5f;",
        "        float x0 = floor(px);",
        "        float y0 = floor(py);",
        "        float fx = px - x0;",
        "        float fy = py - y0;",
        f"        uint column[2] = {{ {p}_wrap(int(x0), width), {p}_wrap(int(x0) + 1, width) }};",
        f"        uint row[2] = {{ {p}_wrap(int(y0), height), {p}_wrap(int(y0) + 1, height) }};",
        "        float bilinear[4] = { (1.0f - fx) * (1.0f - fy), fx * (1.0f - fy), (1.0f - fx) * fy, fx * fy };",
        "        for (uint j = 0; j < 4u; ++j)",
        "        {",
        "            uint tap = side * 4u + j;",
        "            levels[tap] = l;",
        "            xs[tap] = column[j & 1u];",
        "            ys[tap] = row[j >> 1];",
        "            weights[tap] = bilinear[j] * blend;",
        "        }",
        "    }",
        "}",
        "",
        "// The tap a stochastic sample decodes: the first i with random < weights[0] + ... + weights[i] (float sums in tap",
        "// order), so tap i with probability weights[i]; past the total (rounding), the last tap of positive weight.",
        f"uint {p}_stochastic_tap(float weights[{TAPS}], float random)",
        "{",
        "    float total = 0.0f;",
        "    uint last = 0u;",
        f"    for (uint tap = 0; tap < {TAPS}u; ++tap)",
        "    {",
        "        total += weights[tap];",
        "        if (weights[tap] > 0.0f)",
        "            last = tap;",
        "        if (random < total)",
        "            return tap;",
        "    }",
        "    return last;",
        "}",
        "",
        "// Filtered: the weighted sum of the decoded texels of the taps (taps of weight 0 are not decoded).",
        f"void {p}_filtered_values(float2 uv, float lod, bool nearest, out float values[{C}])",
        "{",
        f"    uint levels[{TAPS}];",
        f"    uint xs[{TAPS}];",
        f"    uint ys[{TAPS}];",
        f"    float weights[{TAPS}];",
        f"    {p}_taps(uv, lod, nearest, levels, xs, ys, weights);",
        f"    for (uint c = 0; c < {C}u; ++c)",
        "        values[c] = 0.0f;",
        f"    float texel[{C}] = {zeros};",
        f"    for (uint tap = 0; tap < {TAPS}u; ++tap)",
        "    {",
        "        if (weights[tap] <= 0.0f)",
        "            continue;",
        f"        {p}_texel_values(levels[tap], xs[tap], ys[tap], texel);",
        f"        for (uint c = 0; c < {C}u; ++c)",
        "            values[c] += weights[tap] * texel[c];",
        "    }",
        "}",
        "",
        "// Trilinear (8 decodes; 4 at a whole lod), bilinear in the nearest level (4), stochastic (1).",
        f"void {p}_sample_values(float2 uv, float lod, out float values[{C}]) {{ {p}_filtered_values(uv, lod, false, values); }}",
        f"void {p}_sample_bilinear_values(float2 uv, float lod, out float values[{C}]) {{ {p}_filtered_values(uv, lod, true, values); }}",
        f"void {p}_sample_stochastic_values(float2 uv, float lod, float random, out float values[{C}])",
        "{",
        f"    uint levels[{TAPS}];",
        f"    uint xs[{TAPS}];",
        f"    uint ys[{TAPS}];",
        f"    float weights[{TAPS}];",
        f"    {p}_taps(uv, lod, false, levels, xs, ys, weights);",
        f"    uint tap = {p}_stochastic_tap(weights, random);",
        f"    {p}_texel_values(levels[tap], xs[tap], ys[tap], values);",
        "}",
        "",
        f"{p}_channels {p}_channels_of(float values[{C}])",
        "{",
        f"    {p}_channels result;",
    ]
    offset = 0
    for group, field in zip(data.groups, fields, strict=True):
        count = len(group.channels)
        parts = ", ".join(f"values[{offset + k}]" for k in range(count))
        lines.append(f"    result.{field} = {parts};" if count == 1 else f"    result.{field} = float{count}({parts});")
        offset += count
    lines += ["    return result;", "}", ""]
    for function, parameters, call in (
        ("texel", "uint level, uint x, uint y", "level, x, y"),
        ("sample", "float2 uv, float lod", "uv, lod"),
        ("sample_bilinear", "float2 uv, float lod", "uv, lod"),
        ("sample_stochastic", "float2 uv, float lod, float random", "uv, lod, random"),
    ):
        lines += [
            f"{p}_channels {p}_{function}({parameters})",
            "{",
            f"    float values[{C}] = {zeros};",
            f"    {p}_{function}_values({call}, values);",
            f"    return {p}_channels_of(values);",
            "}",
            "",
        ]
    lines += [
        "// Level of detail of a pixel footprint from the uv derivatives along the screen axes (ddx(uv), ddy(uv) or ray",
        "// differentials): log2 of the longer one in texels of level 0.",
        f"float {p}_lod(float2 duv_dx, float2 duv_dy)",
        "{",
        f"    float2 size = float2(float({P}_LEVEL_WIDTH[0]), float({P}_LEVEL_HEIGHT[0]));",
        "    return log2(max(max(length(duv_dx * size), length(duv_dy * size)), 1e-8f));",
        "}",
        "",
        "// A normal_xy group's decoded X, Y (0.5 + 0.5 n) as a unit normal, Z rebuilt.",
        f"float3 {p}_unpack_normal(float2 xy)",
        "{",
        "    float2 n = xy * 2.0f - 1.0f;",
        "    return float3(n, sqrt(saturate(1.0f - dot(n, n))));",
        "}",
        "",
    ]
    return lines


def _kernels(language: str, data: NTCShaderSet, n: str) -> list[str]:
    p = f"ntc_{n}"
    C = data.channels
    attribute = ['[shader("compute")]'] if language == "slang" else []
    return [
        f"StructuredBuffer<uint> {p}_texel_queries;    // query q: level, x, y at [q * {TEXEL_UINTS}]",
        f"StructuredBuffer<float> {p}_sample_queries;  // query q: u, v, lod, random at [q * {SAMPLE_FLOATS}]",
        f"RWStructuredBuffer<float> {p}_values;        // query q's channel c at [q * {C} + c]",
        f"cbuffer {p}_constants",
        "{",
        f"    uint {p}_count;    // queries",
        f"    uint {p}_filter;   // sample kernels: {', '.join(f'{v} {k}' for k, v in FILTER_MODES.items())}",
        "};",
        "",
        *attribute,
        f"[numthreads({THREADS_PER_GROUP}, 1, 1)]",
        f"void {p}_texel_kernel(uint3 thread_id : SV_DispatchThreadID)",
        "{",
        "    uint q = thread_id.x;",
        f"    if (q >= {p}_count)",
        "        return;",
        f"    float values[{C}] = {zeros_initializer(C)};",
        f"    {p}_texel_values({p}_texel_queries[q * {TEXEL_UINTS}u], {p}_texel_queries[q * {TEXEL_UINTS}u + 1u], {p}_texel_queries[q * {TEXEL_UINTS}u + 2u], values);",
        f"    for (uint c = 0; c < {C}u; ++c)",
        f"        {p}_values[q * {C}u + c] = values[c];",
        "}",
        "",
        *attribute,
        f"[numthreads({THREADS_PER_GROUP}, 1, 1)]",
        f"void {p}_sample_kernel(uint3 thread_id : SV_DispatchThreadID)",
        "{",
        "    uint q = thread_id.x;",
        f"    if (q >= {p}_count)",
        "        return;",
        f"    uint b = q * {SAMPLE_FLOATS}u;",
        f"    float2 uv = float2({p}_sample_queries[b], {p}_sample_queries[b + 1u]);",
        f"    float lod = {p}_sample_queries[b + 2u];",
        f"    float values[{C}] = {zeros_initializer(C)};",
        f"    if ({p}_filter == {FILTER_MODES['stochastic']}u)",
        f"        {p}_sample_stochastic_values(uv, lod, {p}_sample_queries[b + 3u], values);",
        "    else",
        f"        {p}_filtered_values(uv, lod, {p}_filter == {FILTER_MODES['bilinear']}u, values);",
        f"    for (uint c = 0; c < {C}u; ++c)",
        f"        {p}_values[q * {C}u + c] = values[c];",
        "}",
    ]


def generate_ntc_shader(language: str, data: NTCShaderSet, n: str, layer_table: list[dict[str, Any]], streams: dict[str, int]) -> str:
    """The Slang (``language="slang"``, with the tensor-core kernels) or HLSL source of set ``n`` (module docstring)."""
    fields = group_fields([group.name for group in data.groups])
    groups = ", ".join(f"{group.name} {len(group.channels)}" for group in data.groups)
    widths = " -> ".join(str(w) for w in [data.inputs] + [int(layer.weight.shape[0]) for layer in data.layers])
    (width, height), levels = data.level_sizes[0], len(data.level_sizes)
    lines = [
        f"// Generated by neuralbake ({language}): NTC texture set {n}, {width}x{height}, {levels} mip levels, {data.channels} channels ({groups}).",
        f"// Latents: {data.features} features x {data.bits} bits per cell; decoder MLP {widths}, int8 weights, {data.activation} hidden layers.",
        f"// Bind {n}.latents.bin as ntc_{n}_latents and {n}.weights.int8.bin as ntc_{n}_weights (ByteAddressBuffer); {n}.json",
        "// describes the buffers, the entry points and their dispatch.",
        "",
        f"ByteAddressBuffer ntc_{n}_latents;",
        f"ByteAddressBuffer ntc_{n}_weights;",
        "",
        *_constants(data, n, streams, fields),
        *_decoder(language, data, n, layer_table),
        *_fetch(n),
        *_sampling(data, n, fields),
        *_kernels(language, data, n),
    ]
    if language == "slang":
        lines += tensor_kernel_code(n, layer_table, data.channels)
    return "\n".join(lines) + "\n"

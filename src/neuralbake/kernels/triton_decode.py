"""The fused decodes, each a whole small MLP on chip (the network of :mod:`neuralbake.kernels.triton_network`):

- :func:`mlp_kernel`: rows of inputs (or coordinates, frequency-encoded in the kernel) -> outputs;
- :func:`neural_material_kernel`: the neural-material decode, latent fetch included (bilinear
  with repeat wrap, or trilinear between two levels of the latent pyramid, the level per sample),
  the direction features built in the kernel, ``expm1`` and the hemisphere test fused;
- :func:`ntc_kernel`: NTC decode, the features of :func:`neuralbake.bakes.ntc.model.sample_features`
  (four high-resolution cells, the bilinear low-resolution cell, the positional encoding, the
  level within the mip pair) gathered in the kernel, for random texels or a whole mip level; the
  decoder in fp16/bf16/fp32, or in int8 arithmetic (:func:`_network_int8`: int8 activations x the
  container's int8 weights, int32 sums).

Launched by :mod:`neuralbake.kernels.packing` and :mod:`neuralbake.kernels.decoders`.
"""

from __future__ import annotations

import triton
import triton.language as tl

from neuralbake.kernels.triton_network import (
    _frequency_tile,
    _network,
    _network_int8,
    _sin_cos_turns,
    _wide,
)


@triton.jit
def mlp_kernel(
    in_ptr,
    out_ptr,
    N,
    w_in,
    b_in,
    w_hid,
    b_hid,
    w_out,
    b_out,
    K: tl.constexpr,
    O: tl.constexpr,
    FREQ: tl.constexpr,
    KP: tl.constexpr,
    HP: tl.constexpr,
    OP: tl.constexpr,
    HIDDEN: tl.constexpr,
    HACT: tl.constexpr,
    OACT: tl.constexpr,
    LEAK: tl.constexpr,
    DOT: tl.constexpr,
    BM: tl.constexpr,
    WIDE: tl.constexpr,
    HALF_SUMS: tl.constexpr,
):
    """``out[N, O] = mlp(in[N, K])``; with ``FREQ > 0`` the ``K`` inputs are coordinates, encoded here."""
    dtype = w_in.dtype.element_ty
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    at = _wide(rows, WIDE)  # for addresses: rows x width can pass 2^31
    rmask = rows < N
    cols = tl.arange(0, KP)
    if FREQ > 0:
        x = _frequency_tile(in_ptr, at, rmask, K, FREQ, KP)
    else:
        x = tl.load(in_ptr + at[:, None] * K + cols[None, :], mask=rmask[:, None] & (cols < K)[None, :], other=0.0)
    y = _network(x.to(dtype), w_in, b_in, w_hid, b_hid, w_out, b_out, KP, HP, OP, HIDDEN, HACT, OACT, LEAK, DOT, HALF_SUMS)
    o = tl.arange(0, OP)
    tl.store(out_ptr + at[:, None] * O + o[None, :], y.to(out_ptr.dtype.element_ty), mask=rmask[:, None] & (o < O)[None, :])


@triton.jit
def _bilinear_repeat(lat_ptr, offset, width, height, u, v, cols, cmask, C: tl.constexpr, WIDE: tl.constexpr):
    """Bilinear taps of an ``[height, width, C]`` texture at ``offset`` (repeat wrap), ``[BM, len(cols)]`` fp32.

    ``offset``/``width``/``height`` are per-row int tensors or scalars; row 0 of the texture is
    ``v = 0`` and texel ``(i, j)`` is centred at ``((j + 0.5) / width, (i + 0.5) / height)``, as in
    :func:`neuralbake.material.texture.sample_texture`.
    """
    fw = width.to(tl.float32)
    fh = height.to(tl.float32)
    x = u * fw - 0.5
    y = v * fh - 0.5
    xf = tl.floor(x)
    yf = tl.floor(y)
    tx = (x - xf)[:, None]
    ty = (y - yf)[:, None]
    # wrap while still float, so a huge uv cannot overflow the int conversion
    x0 = tl.minimum(tl.maximum((xf - fw * tl.floor(xf / fw)).to(tl.int32), 0), width - 1)
    y0 = tl.minimum(tl.maximum((yf - fh * tl.floor(yf / fh)).to(tl.int32), 0), height - 1)
    x1 = tl.where(x0 + 1 == width, 0, x0 + 1)
    y1 = tl.where(y0 + 1 == height, 0, y0 + 1)
    c = cols[None, :]
    t00 = tl.load(lat_ptr + (_wide(offset + y0 * width + x0, WIDE) * C)[:, None] + c, mask=cmask, other=0.0).to(tl.float32)
    t01 = tl.load(lat_ptr + (_wide(offset + y0 * width + x1, WIDE) * C)[:, None] + c, mask=cmask, other=0.0).to(tl.float32)
    t10 = tl.load(lat_ptr + (_wide(offset + y1 * width + x0, WIDE) * C)[:, None] + c, mask=cmask, other=0.0).to(tl.float32)
    t11 = tl.load(lat_ptr + (_wide(offset + y1 * width + x1, WIDE) * C)[:, None] + c, mask=cmask, other=0.0).to(tl.float32)
    top = t00 * (1.0 - tx) + t01 * tx
    bottom = t10 * (1.0 - tx) + t11 * tx
    return top * (1.0 - ty) + bottom * ty


@triton.jit
def _direction_tile(wi_ptr, wo_ptr, rows, rmask, cols, FIRST: tl.constexpr, CODE: tl.constexpr):
    """One direction feature (wi, wo or the half vector) in columns ``FIRST .. FIRST + 2``, zero elsewhere."""
    inside = (cols >= FIRST) & (cols < FIRST + 3)
    comp = tl.where(inside, cols - FIRST, 0)
    mask = rmask[:, None] & inside[None, :]
    if CODE == 0:
        value = tl.load(wi_ptr + rows[:, None] * 3 + comp[None, :], mask=mask, other=0.0)
    elif CODE == 1:
        value = tl.load(wo_ptr + rows[:, None] * 3 + comp[None, :], mask=mask, other=0.0)
    else:
        half = tl.load(wi_ptr + rows[:, None] * 3 + comp[None, :], mask=mask, other=0.0)
        half += tl.load(wo_ptr + rows[:, None] * 3 + comp[None, :], mask=mask, other=0.0)
        norm = tl.sqrt(tl.sum(half * half, axis=1))
        value = half / tl.maximum(norm, 1e-8)[:, None]
    return value


@triton.jit
def neural_material_kernel(
    uv_ptr,
    wi_ptr,
    wo_ptr,
    lod_ptr,
    lat_ptr,
    level_offset,
    level_width,
    level_height,
    LEVELS,
    out_ptr,
    N,
    w_in,
    b_in,
    w_hid,
    b_hid,
    w_out,
    b_out,
    C: tl.constexpr,
    FP: tl.constexpr,
    DIR0: tl.constexpr,
    DIR1: tl.constexpr,
    DIR2: tl.constexpr,
    TRILINEAR: tl.constexpr,
    KP: tl.constexpr,
    HP: tl.constexpr,
    OP: tl.constexpr,
    HIDDEN: tl.constexpr,
    HACT: tl.constexpr,
    LEAK: tl.constexpr,
    DOT: tl.constexpr,
    BM: tl.constexpr,
    WIDE: tl.constexpr,
    HALF_SUMS: tl.constexpr,
):
    """``out[N, 3] = f(wi, wo) cos`` of a neural material at ``uv`` (see the module docstring).

    ``FP == KP // 2``: the latents and the direction features are built as two ``[BM, FP]`` tiles
    (latents in columns ``[0, C)``, directions from column 0) and joined side by side, so the
    bilinear taps cover only ``FP`` columns; ``w_in``'s rows are laid out to match
    (:class:`neuralbake.kernels.decoders.FusedNeuralMaterial`). ``FP == KP``: one ``[BM, KP]`` tile,
    the directions after the latents in column ``C``.
    """
    dtype = w_in.dtype.element_ty
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    at = _wide(rows, WIDE)  # for addresses: rows x width can pass 2^31
    rmask = rows < N
    cols = tl.arange(0, FP)
    u = tl.load(uv_ptr + at * 2, mask=rmask, other=0.0)
    v = tl.load(uv_ptr + at * 2 + 1, mask=rmask, other=0.0)
    cmask = rmask[:, None] & (cols < C)[None, :]
    if TRILINEAR:
        lod = tl.load(lod_ptr + at, mask=rmask, other=0.0)
        lod = tl.minimum(tl.maximum(lod, 0.0), LEVELS - 1.0)
        lower = tl.minimum(tl.floor(lod).to(tl.int32), LEVELS - 1)
        upper = tl.minimum(lower + 1, LEVELS - 1)
        t = (lod - lower.to(tl.float32))[:, None]
        a = _bilinear_repeat(
            lat_ptr, tl.load(level_offset + lower), tl.load(level_width + lower), tl.load(level_height + lower), u, v, cols, cmask, C, WIDE
        )
        b = _bilinear_repeat(
            lat_ptr, tl.load(level_offset + upper), tl.load(level_width + upper), tl.load(level_height + upper), u, v, cols, cmask, C, WIDE
        )
        x = a * (1.0 - t) + b * t
    else:
        x = _bilinear_repeat(lat_ptr, 0, tl.load(level_width), tl.load(level_height), u, v, cols, cmask, C, WIDE)
    FIRST: tl.constexpr = C * (FP // KP)  # directions after the latents in one tile, or from column 0 of their own
    d = tl.zeros((BM, FP), tl.float32)
    if DIR0 >= 0:
        d += _direction_tile(wi_ptr, wo_ptr, at, rmask, cols, FIRST, DIR0)
    if DIR1 >= 0:
        d += _direction_tile(wi_ptr, wo_ptr, at, rmask, cols, FIRST + 3, DIR1)
    if DIR2 >= 0:
        d += _direction_tile(wi_ptr, wo_ptr, at, rmask, cols, FIRST + 6, DIR2)
    if FP < KP:
        x = tl.reshape(tl.permute(tl.join(x, d), (0, 2, 1)), (BM, KP))
    else:
        x += d
    y = _network(x.to(dtype), w_in, b_in, w_hid, b_hid, w_out, b_out, KP, HP, OP, HIDDEN, HACT, 0, LEAK, DOT, HALF_SUMS)
    wiz = tl.load(wi_ptr + at * 3 + 2, mask=rmask, other=0.0)
    woz = tl.load(wo_ptr + at * 3 + 2, mask=rmask, other=0.0)
    valid = ((wiz > 0.0) & (woz > 0.0))[:, None]
    value = tl.where(valid, tl.exp(tl.maximum(y, 0.0)) - 1.0, 0.0)
    o = tl.arange(0, OP)
    tl.store(out_ptr + at[:, None] * 3 + o[None, :], value.to(out_ptr.dtype.element_ty), mask=rmask[:, None] & (o < 3)[None, :])


@triton.jit
def _cell(u, v, width, height):
    """Clamped neighbour cells and fractions on a cell-centred grid (``_cell_coords`` of the NTC model)."""
    px = u * width.to(tl.float32) - 0.5
    py = v * height.to(tl.float32) - 0.5
    x0f = tl.floor(px)
    y0f = tl.floor(py)
    fx = px - x0f
    fy = py - y0f
    x0 = x0f.to(tl.int32)
    y0 = y0f.to(tl.int32)
    xa = tl.minimum(tl.maximum(x0, 0), width - 1)
    xb = tl.minimum(tl.maximum(x0 + 1, 0), width - 1)
    ya = tl.minimum(tl.maximum(y0, 0), height - 1)
    yb = tl.minimum(tl.maximum(y0 + 1, 0), height - 1)
    return xa, xb, ya, yb, fx, fy


@triton.jit
def ntc_kernel(
    level_ptr,
    x_ptr,
    y_ptr,
    FRAME_LEVEL,
    FRAME_WIDTH,
    high_ptr,
    low_ptr,
    tables,
    LEVELS,
    out_ptr,
    N,
    w_in,
    b_in,
    w_hid,
    b_hid,
    w_out,
    b_out,
    inverse_ptr,
    factor_ptr,
    F: tl.constexpr,
    PE: tl.constexpr,
    CH: tl.constexpr,
    FRAME: tl.constexpr,
    INT8: tl.constexpr,
    KP: tl.constexpr,
    HP: tl.constexpr,
    OP: tl.constexpr,
    HIDDEN: tl.constexpr,
    HACT: tl.constexpr,
    LEAK: tl.constexpr,
    DOT: tl.constexpr,
    BM: tl.constexpr,
    WIDE: tl.constexpr,
    HALF_SUMS: tl.constexpr,
):
    """NTC decode -> ``out[N, CH]`` clamped to [0, 1]; texels from arrays, or (``FRAME``) the rows of one level.

    ``INT8``: the decoder in int8 arithmetic (int8 weights; ``inverse_ptr`` / ``factor_ptr`` fp32 per layer,
    see :mod:`neuralbake.bakes.ntc.int8`), else in the weights' float dtype.

    ``tables`` is int32 ``[8, levels]``: level width, height, then per mip pair the high grid's
    width, height, offset and the low grid's width, height, offset (indexed by level // 2).
    """
    dtype = w_in.dtype.element_ty
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    at = _wide(rows, WIDE)  # for addresses: rows x width can pass 2^31
    rmask = rows < N
    if FRAME:
        level = tl.zeros((BM,), tl.int32) + FRAME_LEVEL
        tx = rows % FRAME_WIDTH
        ty = rows // FRAME_WIDTH
    else:
        level = tl.load(level_ptr + at, mask=rmask, other=0)
        tx = tl.load(x_ptr + at, mask=rmask, other=0)
        ty = tl.load(y_ptr + at, mask=rmask, other=0)
    lw = tl.load(tables + level, mask=rmask, other=1)
    lh = tl.load(tables + LEVELS + level, mask=rmask, other=1)
    pair = level // 2
    in_pair = (level - 2 * pair).to(tl.float32)
    hw = tl.load(tables + 2 * LEVELS + pair, mask=rmask, other=1)
    hh = tl.load(tables + 3 * LEVELS + pair, mask=rmask, other=1)
    ho = tl.load(tables + 4 * LEVELS + pair, mask=rmask, other=0)
    low_w = tl.load(tables + 5 * LEVELS + pair, mask=rmask, other=1)
    low_h = tl.load(tables + 6 * LEVELS + pair, mask=rmask, other=1)
    low_o = tl.load(tables + 7 * LEVELS + pair, mask=rmask, other=0)
    u = (tx.to(tl.float32) + 0.5) / lw.to(tl.float32)
    v = (ty.to(tl.float32) + 0.5) / lh.to(tl.float32)
    cols = tl.arange(0, KP)
    c = cols[None, :]
    # Four high-resolution cells, concatenated: columns [0, 4F).
    xa, xb, ya, yb, fx, fy = _cell(u, v, hw, hh)
    corner = c // F
    cell = tl.where(corner == 0, (ya * hw + xa)[:, None], (ya * hw + xb)[:, None])
    cell = tl.where(corner == 2, (yb * hw + xa)[:, None], cell)
    cell = tl.where(corner == 3, (yb * hw + xb)[:, None], cell)
    high_mask = rmask[:, None] & (c < 4 * F)
    x = tl.load(high_ptr + _wide(cell + ho[:, None], WIDE) * F + c % F, mask=high_mask, other=0.0).to(tl.float32)
    # The low-resolution grid, bilinear: columns [4F, 5F).
    lxa, lxb, lya, lyb, lfx, lfy = _cell(u, v, low_w, low_h)
    low_mask = rmask[:, None] & (c >= 4 * F) & (c < 5 * F)
    f = tl.where(low_mask, c - 4 * F, 0)
    l00 = tl.load(low_ptr + (_wide(low_o + lya * low_w + lxa, WIDE) * F)[:, None] + f, mask=low_mask, other=0.0).to(tl.float32)
    l10 = tl.load(low_ptr + (_wide(low_o + lya * low_w + lxb, WIDE) * F)[:, None] + f, mask=low_mask, other=0.0).to(tl.float32)
    l01 = tl.load(low_ptr + (_wide(low_o + lyb * low_w + lxa, WIDE) * F)[:, None] + f, mask=low_mask, other=0.0).to(tl.float32)
    l11 = tl.load(low_ptr + (_wide(low_o + lyb * low_w + lxb, WIDE) * F)[:, None] + f, mask=low_mask, other=0.0).to(tl.float32)
    wx = lfx[:, None]
    wy = lfy[:, None]
    x += (l00 * (1.0 - wx) + l10 * wx) * (1.0 - wy) + (l01 * (1.0 - wx) + l11 * wx) * wy
    # The position inside the high-resolution cell, frequency-encoded: columns [5F, 5F + 4 PE).
    j = c - 5 * F
    pe_cols = (j >= 0) & (j < 4 * PE)
    octave = tl.where(pe_cols, (j % (2 * PE)) // 2, 0).to(tl.float32)
    x += tl.where(pe_cols, _sin_cos_turns(tl.where(j < 2 * PE, fx[:, None], fy[:, None]) * tl.exp2(octave), j % 2 == 1), 0.0)
    # The level within the mip pair: the last column.
    x += tl.where(j == 4 * PE, in_pair[:, None], 0.0)
    if INT8:
        y = _network_int8(x, w_in, b_in, w_hid, b_hid, w_out, b_out, inverse_ptr, factor_ptr, KP, HP, OP, HIDDEN, HACT, LEAK)
    else:
        y = _network(x.to(dtype), w_in, b_in, w_hid, b_hid, w_out, b_out, KP, HP, OP, HIDDEN, HACT, 0, LEAK, DOT, HALF_SUMS)
    y = tl.minimum(tl.maximum(y, 0.0), 1.0)
    o = tl.arange(0, OP)
    tl.store(out_ptr + at[:, None] * CH + o[None, :], y.to(out_ptr.dtype.element_ty), mask=rmask[:, None] & (o < CH)[None, :])

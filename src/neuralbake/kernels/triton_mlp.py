"""Triton kernels that keep a whole small MLP on chip: one pass over the inputs, every layer's
matrix product on the tensor cores (``tl.dot``), activations fused, nothing between layers
written to device memory.

Four kernels share one network body (:func:`_network`):

- :func:`_mlp_kernel`: rows of inputs (or coordinates, frequency-encoded in the kernel) -> outputs;
- :func:`_neural_material_kernel`: the neural-material decode, latent fetch included (bilinear
  with repeat wrap, or trilinear between two levels of the latent pyramid, the level per sample),
  the direction features built in the kernel, ``expm1`` and the hemisphere test fused;
- :func:`_ntc_kernel`: NTC decode, the features of :func:`neuralbake.bakes.ntc.model.sample_features`
  (four high-resolution cells, the bilinear low-resolution cell, the positional encoding, the
  level within the mip pair) gathered in the kernel, for random texels or a whole mip level; the
  decoder in fp16/bf16/fp32, or in int8 arithmetic (:func:`_network_int8`: int8 activations x the
  container's int8 weights, int32 sums);
- :func:`_mlp_train_kernel`: forward and backward of one training batch with the loss and its
  gradient fused; each program keeps a running weight gradient (in registers across its tiles
  where it fits, else in its slot in memory) and writes it to its own slot (no atomics, so the
  result is deterministic); one sum over the slots finishes the reduction;
- the rest of a training step around it in three launches (:func:`_pack_kernel`: the masters into
  the packed compute weights; :func:`_reduce_slots_kernel`: the slots' sum, unscaled and checked
  for inf/NaN; :func:`_adam_kernel`: Adam on the fp32 masters, its last program closing the step with
  :func:`_finish_step`: step count, loss scale and the trainer's sums), where PyTorch takes about
  fifty small launches.

The decodes of fp16 networks sum their hidden layers in fp16 on the tensor cores (``HALF_SUMS``,
:func:`_layer`; :data:`neuralbake.kernels.fused.HALF_SUMS`), the output layer in fp32; the
training kernel sums in fp32 everywhere.

Weights are packed by :class:`neuralbake.kernels.fused.PackedMLP`: transposed (``[in, out]``),
zero-padded to powers of two (16 at least where a width is a product's depth, as ``tl.dot`` needs;
a decode's outputs to 4 at least), every hidden layer padded to the
widest, so one loop body serves every layer. Padded neurons see zero weights and bias and feed
zero weights onward, so they never change a result.

Written with Triton rather than found in a library: tiny-cuda-nn's fully fused MLPs are CUDA C++
with their own build and no latent-texture fetch or NTC feature gather, and nothing on PyPI fuses
these inputs with the network.
"""

from __future__ import annotations

import triton
import triton.language as tl

from neuralbake.kernels import ACTIVATION_CODES, DIRECTION_CODES, LOSS_CODES, TRAINABLE_ACTIVATIONS  # noqa: F401  (re-exported)


@triton.jit
def _wide(x, WIDE: tl.constexpr):
    """``x`` as int64 when the kernel's buffers pass 2^31 elements (``WIDE``), else as it is (int32 is faster)."""
    if WIDE:
        x = x.to(tl.int64)
    return x


@triton.jit
def _activate(x, ACT: tl.constexpr, LEAK: tl.constexpr):
    if ACT == 1:
        x = tl.maximum(x, 0.0)
    elif ACT == 2:
        x = tl.where(x > 0.0, x, x * LEAK)
    elif ACT == 3:
        x = 2.0 / (1.0 + tl.exp(-2.0 * x)) - 1.0
    elif ACT == 4:
        x = tl.exp(x)
    elif ACT == 5:
        x = 1.0 / (1.0 + tl.exp(-x))
    elif ACT == 6:
        x = tl.minimum(x, 3.0) * tl.minimum(tl.maximum(x / 3.0 + 0.5, 0.0), 1.0)
    return x


@triton.jit
def _activation_slope(a, ACT: tl.constexpr, LEAK: tl.constexpr):
    """d act / d z, from the activation's output ``a`` (fp32)."""
    if ACT == 0:
        d = _zeros_as(a) + 1.0  # ones in a's layout (the Gluon training kernel calls this too)
    elif ACT == 1:
        d = tl.where(a > 0.0, 1.0, 0.0)
    elif ACT == 2:
        d = tl.where(a > 0.0, 1.0, LEAK)
    elif ACT == 3:
        d = 1.0 - a * a
    elif ACT == 4:
        d = a
    else:
        d = a * (1.0 - a)
    return d


@triton.jit
def _activate_half(x, ACT: tl.constexpr, LEAK: tl.constexpr):
    """:func:`_activate` on fp16 values: ReLU and leaky ReLU in packed fp16 arithmetic, the others through fp32."""
    if ACT == 1:
        x = tl.maximum(x, tl.zeros_like(x))
    elif ACT == 2:
        x = tl.maximum(x, x * tl.full(x.shape, LEAK, x.dtype))  # where(x > 0, x, LEAK x) for 0 <= LEAK <= 1 (PackedMLP.half_sums)
    elif ACT != 0:
        x = _activate(x.to(tl.float32), ACT, LEAK).to(tl.float16)
    return x


@triton.jit
def _zeros_as(x):
    """Zeros of ``x``'s dtype in ``x``'s layout (``tl.zeros_like`` has no layout to give a Gluon caller)."""
    return tl.where(x == x, 0.0, 0.0).to(x.dtype)  # noqa: PLR0124


@triton.jit
def _activate_rounded(z, ACT: tl.constexpr, LEAK: tl.constexpr):
    """ReLU or leaky ReLU of fp16 values ``z`` as PyTorch's fp16 ``relu`` / ``leaky_relu`` compute it, bit for bit: the
    leak's product in fp32, rounded once (an fp16 leak, 0.01 -> 0.0100021, would round differently)."""
    tl.static_assert(ACT == 1 or ACT == 2, "rounded activations are ReLU and leaky ReLU")
    if ACT == 1:
        a = tl.maximum(z, _zeros_as(z))
    else:
        a = tl.where(z > 0.0, z, (z.to(tl.float32) * LEAK).to(z.dtype))
    return a


@triton.jit
def _times_slope(da, a, ACT: tl.constexpr, LEAK: tl.constexpr, HALF_ACT: tl.constexpr):
    """``da * act'(z)`` in ``a``'s dtype, from the activation's output ``a``. With ``HALF_ACT`` (fp16, ReLU or leaky
    ReLU with LEAK >= 0, so that ``a > 0`` where ``z > 0``) as PyTorch's fp16 backward computes it: ``da`` rounded to fp16 (PyTorch's is the output
    of an fp16 product), then for a negative ``a`` times the leak in fp32, rounded once."""
    if HALF_ACT:
        tl.static_assert(ACT == 1 or ACT == 2, "rounded activations are ReLU and leaky ReLU")
        g = da.to(a.dtype)
        if ACT == 1:
            dz = tl.where(a > 0.0, g, _zeros_as(g))
        else:
            dz = tl.where(a > 0.0, g, (g.to(tl.float32) * LEAK).to(g.dtype))
    else:
        dz = (da * _activation_slope(a.to(tl.float32), ACT, LEAK)).to(a.dtype)
    return dz


@triton.jit
def _layer(a, w, bias, ACT: tl.constexpr, LEAK: tl.constexpr, DOT: tl.constexpr, HALF_SUMS: tl.constexpr, HALF_ACT: tl.constexpr = False):
    """One hidden layer: ``act(a @ w + bias)`` in ``a``'s dtype.

    ``HALF_SUMS`` (fp16 only): the products summed in fp16 from the bias, on the tensor cores, and
    the activation in packed fp16, as tiny-cuda-nn's fully fused MLPs do; else fp32 sums. ``HALF_ACT``
    (fp16, ReLU or leaky ReLU): fp32 sums rounded to fp16, then the activation on the fp16 values
    (:func:`_activate_rounded`), as the training kernel computes its forward and as PyTorch's fp16
    layers do: the linear layer's output is rounded before the activation.
    """
    if HALF_SUMS:
        start = tl.zeros((a.shape[0], w.shape[1]), tl.float16) + bias.to(tl.float16)[None, :]
        return _activate_half(tl.dot(a, w, acc=start, out_dtype=tl.float16), ACT, LEAK)
    elif HALF_ACT:
        return _activate_rounded((tl.dot(a, w, input_precision=DOT) + bias[None, :]).to(a.dtype), ACT, LEAK)
    else:
        return _activate(tl.dot(a, w, input_precision=DOT) + bias[None, :], ACT, LEAK).to(a.dtype)


@triton.jit
def _network(
    x,
    w_in,
    b_in,
    w_hid,
    b_hid,
    w_out,
    b_out,
    KP: tl.constexpr,
    HP: tl.constexpr,
    OP: tl.constexpr,
    HIDDEN: tl.constexpr,
    HACT: tl.constexpr,
    OACT: tl.constexpr,
    LEAK: tl.constexpr,
    DOT: tl.constexpr,
    HALF_SUMS: tl.constexpr = False,
    HALF_ACT: tl.constexpr = False,
):
    """``x`` ``[BM, KP]`` in the weights' dtype -> ``[BM, OP]`` fp32, output activation applied.

    ``HALF_SUMS``: the hidden layers sum in fp16 (see :func:`_layer`); the output layer always sums in fp32.
    """
    k = tl.arange(0, KP)
    h = tl.arange(0, HP)
    o = tl.arange(0, OP)
    a = _layer(x, tl.load(w_in + k[:, None] * HP + h[None, :]), tl.load(b_in + h), HACT, LEAK, DOT, HALF_SUMS, HALF_ACT)
    for layer in tl.static_range(HIDDEN):
        w = tl.load(w_hid + layer * HP * HP + h[:, None] * HP + h[None, :])
        a = _layer(a, w, tl.load(b_hid + layer * HP + h), HACT, LEAK, DOT, HALF_SUMS, HALF_ACT)
    w = tl.load(w_out + h[:, None] * OP + o[None, :])
    y = tl.dot(a, w, input_precision=DOT) + tl.load(b_out + o)[None, :]
    return _activate(y, OACT, LEAK)


@triton.jit
def _quantize(x, inverse):
    """fp32 -> int8 ``clamp(floor(x * inverse + 1/2), -127, 127)`` (:func:`neuralbake.bakes.ntc.int8.quantize_activations`)."""
    return tl.minimum(tl.maximum(tl.floor(x * inverse + 0.5), -127.0), 127.0).to(tl.int8)


@triton.jit
def _network_int8(
    x,
    w_in,
    b_in,
    w_hid,
    b_hid,
    w_out,
    b_out,
    inverse_ptr,
    factor_ptr,
    KP: tl.constexpr,
    HP: tl.constexpr,
    OP: tl.constexpr,
    HIDDEN: tl.constexpr,
    HACT: tl.constexpr,
    LEAK: tl.constexpr,
):
    """``x`` ``[BM, KP]`` fp32 -> ``[BM, OP]`` fp32 (linear output) in int8 arithmetic: each layer's input quantised
    with its step (``inverse_ptr[l]``), int8 x int8 products summed in int32, rescaled by ``factor_ptr[l]``, biased."""
    k = tl.arange(0, KP)
    h = tl.arange(0, HP)
    o = tl.arange(0, OP)
    w = tl.load(w_in + k[:, None] * HP + h[None, :])
    acc = tl.dot(_quantize(x, tl.load(inverse_ptr)), w, out_dtype=tl.int32)
    a = _activate(acc.to(tl.float32) * tl.load(factor_ptr) + tl.load(b_in + h)[None, :], HACT, LEAK)
    for layer in tl.static_range(HIDDEN):
        w = tl.load(w_hid + layer * HP * HP + h[:, None] * HP + h[None, :])
        acc = tl.dot(_quantize(a, tl.load(inverse_ptr + 1 + layer)), w, out_dtype=tl.int32)
        a = _activate(acc.to(tl.float32) * tl.load(factor_ptr + 1 + layer) + tl.load(b_hid + layer * HP + h)[None, :], HACT, LEAK)
    w = tl.load(w_out + h[:, None] * OP + o[None, :])
    acc = tl.dot(_quantize(a, tl.load(inverse_ptr + 1 + HIDDEN)), w, out_dtype=tl.int32)
    return acc.to(tl.float32) * tl.load(factor_ptr + 1 + HIDDEN) + tl.load(b_out + o)[None, :]


@triton.jit
def _sin_cos_turns(t, cosine):
    """``sin(pi t)``, or ``cos(pi t)`` where ``cosine``, with one sine: ``t`` reduced to [0, 2) half-turns
    first (exactly: ``t - 2 floor(t / 2)``), then a quarter turn added for the cosines. Callers pass
    ``t = x 2^k``, exact too, so the phase is as accurate at high octaves as at low ones (more than
    PyTorch's ``sin(x * pi 2^k)``), at half the transcendental work of a sine and a cosine.

    The sine itself: the phase, in [0, 2.5] half-turns (2.5 where fp32 rounds a cosine's just below it up), less its
    nearest whole half-turn ``k`` (0 to 3) leaves ``u`` in [-1/2, 1/2], and ``sin(pi t) = (-1)^k sin(pi u)``, the
    latter by its Taylor series to the 11th power (the first term left out is under 6e-8 on that range, below fp32's
    rounding of the result): a dozen multiply-adds and no branch, where the library's sine reduces its argument again
    and carries a slow path for huge ones."""
    r = t - 2.0 * tl.floor(0.5 * t) + tl.where(cosine, 0.5, 0.0)
    k = tl.floor(r + 0.5)
    x = 3.141592653589793 * (r - k)
    x2 = x * x
    p = -2.505210838544172e-08 * x2 + 2.755731922398589e-06
    p = p * x2 - 1.984126984126984e-04
    p = p * x2 + 8.333333333333333e-03
    p = p * x2 - 1.666666666666667e-01
    s = x + x * x2 * p
    return tl.where(k - 2.0 * tl.floor(0.5 * k) == 1.0, -s, s)  # odd k


@triton.jit
def _frequency_tile(coords_ptr, rows, rmask, D: tl.constexpr, FREQ: tl.constexpr, KP: tl.constexpr):
    """Frequency encoding of ``D`` coordinates per row as a ``[BM, KP]`` fp32 tile (zero past ``2 D FREQ``).

    Column ``j``: coordinate ``j // (2 FREQ)``, octave ``(j % (2 FREQ)) // 2``, sin for even ``j``,
    cos for odd, the order of :func:`neuralbake.nn.encoding.frequency_encode`.
    """
    return _frequency_columns(coords_ptr, rows, rmask, tl.arange(0, KP), D, FREQ)


@triton.jit
def _frequency_columns(coords_ptr, rows, rmask, cols, D: tl.constexpr, FREQ: tl.constexpr):
    """:func:`_frequency_tile` at the columns ``cols`` (their layout is the tile's: the Gluon training kernel passes its own)."""
    used = cols < D * 2 * FREQ
    coord = tl.minimum(cols // (2 * FREQ), D - 1)
    value = tl.load(coords_ptr + rows[:, None] * D + coord[None, :], mask=rmask[:, None] & used[None, :], other=0.0)
    return _encode_at(value, cols, D, FREQ)


@triton.jit
def _encode_columns(value, D: tl.constexpr, FREQ: tl.constexpr, KP: tl.constexpr):
    """:func:`_frequency_tile` of ``value`` ``[BM, KP]``, column ``j`` holding its coordinate ``j // (2 FREQ)``."""
    return _encode_at(value, tl.arange(0, KP), D, FREQ)


@triton.jit
def _encode_at(value, cols, D: tl.constexpr, FREQ: tl.constexpr):
    """:func:`_encode_columns` at the columns ``cols``."""
    used = cols < D * 2 * FREQ
    octave = (cols % (2 * FREQ)) // 2
    encoded = _sin_cos_turns(value * tl.exp2(octave.to(tl.float32))[None, :], (cols % 2 == 1)[None, :])
    return tl.where(used[None, :], encoded, 0.0)


@triton.jit
def _draw_uv(SEED, rows, draw, TRANSFORM: tl.constexpr, IMG_W, IMG_H):
    """The training kernel's own batch (``SAMPLE``): uniform ``(u, v)`` in [0, 1) per row from Philox (key ``SEED``,
    counter ``(row, draw)``: a new batch each step), and the row-major index of the nearest texel of an ``IMG_H x IMG_W``
    image at the transformed ``(u, v)`` (``TRANSFORM`` 0 identity, 1 flip: u and v swapped, 2 zoom: the centre
    half), as :class:`neuralbake.bakes.neural_texture.ImageSampler` draws with ``texel_lookup``."""
    u, v, _, _ = tl.rand4x(SEED, rows.to(tl.int64) + (draw << 32))
    if TRANSFORM == 1:
        tu, tv = v, u
    elif TRANSFORM == 2:
        tu, tv = u * 0.5 + 0.25, v * 0.5 + 0.25
    else:
        tu, tv = u, v
    px = tl.minimum((tu * IMG_W).to(tl.int32), IMG_W - 1)  # u >= 0: truncation is the floor
    py = tl.minimum((tv * IMG_H).to(tl.int32), IMG_H - 1)
    return u, v, py.to(tl.int64) * IMG_W + px


@triton.jit
def _draw_uv_kernel(uv_ptr, texel_ptr, draws_ptr, N, SEED, IMG_W, IMG_H, TRANSFORM: tl.constexpr, BM: tl.constexpr):
    """The batch :func:`_mlp_train_kernel` draws with ``SAMPLE`` at the draw counter's value: ``uv`` ``[N, 2]`` and the
    texel indices ``[N]`` (for checks and tests: training never needs them)."""
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    u, v, texel = _draw_uv(SEED, rows, tl.load(draws_ptr), TRANSFORM, IMG_W, IMG_H)
    mask = rows < N
    tl.store(uv_ptr + rows * 2, u, mask=mask)
    tl.store(uv_ptr + rows * 2 + 1, v, mask=mask)
    tl.store(texel_ptr + rows, texel, mask=mask)


@triton.jit
def _mlp_kernel(
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
    HALF_ACT: tl.constexpr,
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
    y = _network(x.to(dtype), w_in, b_in, w_hid, b_hid, w_out, b_out, KP, HP, OP, HIDDEN, HACT, OACT, LEAK, DOT, HALF_SUMS, HALF_ACT)
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
def _neural_material_kernel(
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
    (:class:`neuralbake.kernels.fused.FusedNeuralMaterial`). ``FP == KP``: one ``[BM, KP]`` tile,
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
def _ntc_kernel(
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


@triton.jit
def _loss_terms(y, target, LOSS: tl.constexpr, FLOOR: tl.constexpr):
    """Each output value's loss term and its slope d term / d y (``LOSS``: 0 MSE, 1 L1, 2 relative L1 with ``FLOOR``;
    3 upstream: no term, the slope is ``target``, the gradient given)."""
    diff = y - target
    sign = tl.where(diff > 0.0, 1.0, tl.where(diff < 0.0, -1.0, 0.0))
    if LOSS == 3:
        term = diff * 0.0
        slope = target
    elif LOSS == 0:
        term = diff * diff
        slope = 2.0 * diff
    elif LOSS == 1:
        term = tl.abs(diff)
        slope = sign
    else:
        reference = tl.exp(target) - 1.0
        weight = FLOOR * (1.0 + reference) / (reference + FLOOR)
        term = weight * tl.abs(diff)
        slope = weight * sign
    return term, slope


@triton.jit
def _accumulate(slot, offsets, partial, first):
    """``slot[offsets] += partial`` (``= partial`` on the program's ``first`` tile): its own running gradient (no other program touches it)."""
    tl.store(slot + offsets, tl.load(slot + offsets, mask=(offsets * 0 + first) == 0, other=0.0) + partial)


@triton.jit
def _replaced(values, index: tl.constexpr, value, COUNT: tl.constexpr):
    """The tuple ``values`` (``COUNT`` items) with item ``index`` replaced by ``value`` (Triton's tuples are immutable)."""
    out = ()
    for j in tl.static_range(COUNT):
        if j == index:
            out = out + (value,)
        else:
            out = out + (values[j],)
    return out


@triton.jit(do_not_specialize=["SEED"])  # one compiled kernel whatever the run's seed
def _mlp_train_kernel(
    in_ptr,
    target_ptr,
    N,
    scratch_ptr,
    grad_ptr,
    loss_ptr,
    scale_ptr,
    dx_ptr,
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
    LOSS: tl.constexpr,
    FLOOR: tl.constexpr,
    DOT: tl.constexpr,
    BM: tl.constexpr,
    DX: tl.constexpr,
    CARRY: tl.constexpr,
    HALF_ACT: tl.constexpr,
    HOIST: tl.constexpr,
    SEED=0,
    IMG_W=1,
    IMG_H=1,
    SAMPLE: tl.constexpr = False,
    TRANSFORM: tl.constexpr = 0,
):
    """Forward, loss and backward of ``N`` training rows; gradients of ``loss * scale`` (see the module docstring).

    ``LOSS == 3`` (upstream): ``target_ptr`` holds the gradient of some loss with respect to the
    outputs ``[N, O]`` (fp32, already scaled), so the kernel is the MLP's backward inside a larger
    autograd graph; no loss is summed and ``scale_ptr`` is not read. With ``DX`` the gradient with
    respect to the input rows goes to ``dx_ptr`` ``[N, K]`` fp32 (not with ``FREQ``).

    Program ``p`` takes tiles ``p, p + P, ...`` (``P`` programs, at most one per tile). Its gradient slot at
    ``grad_ptr + p * G`` (layout ``[w_in | b_in | w_hid | b_hid | w_out | b_out]``, weights ``[in, out]`` padded; written
    by the program itself, so nothing needs zeroing, see ``CARRY``) gets the weight gradients of its tiles; its loss
    sum goes to ``loss_ptr[p]``. Hidden activations pass from the forward to the backward through
    the program's own ``[HIDDEN, BM, HP]`` scratch block (the last stays in registers).

    - ``CARRY``: the running gradients stay in registers across the program's tiles (each weight
      gradient the accumulator of its ``tl.dot``; each bias gradient the product of a row of ones
      with the layer's ``dz``, which needs no reduction across warps per tile) and the slot is
      written once at the end (zeros by a program without tiles). Without, the program's first tile
      writes the slot and every later one adds its gradients to it in memory (networks whose
      gradients do not fit in registers, and fp32 ones: ``kernels.fused._carries``).
    - ``HOIST``: the weights are loaded once, before the tiles.
    - ``HALF_ACT`` (fp16, ReLU or leaky ReLU): each hidden layer's fp32 sum is rounded to fp16
      before the activation, and the activation and its slope run on fp16 values as PyTorch's fp16
      layers compute them (:func:`_activate_rounded`, :func:`_times_slope`).
    - ``SAMPLE``: the kernel draws its own batch (:func:`_draw_uv`): ``in_ptr`` is the int64 draw counter (read, not
      written: the step's last kernel advances it), ``target_ptr`` the ``[IMG_H, IMG_W, O]`` fp32 image whose
      nearest texels are the targets; the inputs are the two coordinates ``(u, v)`` (``K == 2``).
    """
    dtype = w_in.dtype.element_ty
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    k = tl.arange(0, KP)
    h = tl.arange(0, HP)
    o = tl.arange(0, OP)
    m = tl.arange(0, BM)
    g_b_in = KP * HP
    g_w_hid = g_b_in + HP
    g_b_hid = g_w_hid + HIDDEN * HP * HP
    g_w_out = g_b_hid + HIDDEN * HP
    g_b_out = g_w_out + HP * OP
    slot = grad_ptr + pid.to(tl.int64) * (g_b_out + OP)
    scratch = scratch_ptr + pid.to(tl.int64) * (HIDDEN * BM * HP)
    tile_offsets = m[:, None] * HP + h[None, :]
    if LOSS == 3:
        scale = 1.0
    else:
        scale = tl.load(scale_ptr).to(tl.float32) / (N * O)
    loss_sum = 0.0
    if SAMPLE:
        draw = tl.load(in_ptr)
    if CARRY:  # the running gradients
        g_in = tl.zeros((KP, HP), tl.float32)
        g_hid = (tl.zeros((HP, HP), tl.float32),) * HIDDEN
        g_out = tl.zeros((HP, OP), tl.float32)
        # bias gradients as products with a row of ones (the other 15 rows zero): [16, width] accumulators, no
        # reduction across warps per tile; row 0 holds the sum
        ones = tl.where(tl.arange(0, 16)[:, None] == 0, 1.0, 0.0).to(dtype) + tl.zeros((16, BM), dtype)
        gb_in = tl.zeros((16, HP), tl.float32)
        gb_hid = (tl.zeros((16, HP), tl.float32),) * HIDDEN
        gb_out = tl.zeros((16, OP), tl.float32)
    if HOIST:  # the weights loaded once, before the tiles
        w_first = tl.load(w_in + k[:, None] * HP + h[None, :])
        w_hids = ()
        for layer in tl.static_range(HIDDEN):
            w_hids = w_hids + (tl.load(w_hid + layer * HP * HP + h[:, None] * HP + h[None, :]),)
        w_last = tl.load(w_out + h[:, None] * OP + o[None, :])
    for tile in range(pid, tl.cdiv(N, BM), programs):
        first = (tile == pid).to(tl.int32)
        rows = m.to(tl.int64) + tile * BM  # int64: rows x width can pass 2^31
        rmask = rows < N
        if SAMPLE:
            tl.static_assert(K == 2 and not DX and LOSS != 3, "a drawn batch has two input coordinates and a loss")
            u, v, texel = _draw_uv(SEED, rows, draw, TRANSFORM, IMG_W, IMG_H)
            if FREQ > 0:
                value = tl.where((k < 2 * FREQ)[None, :], u[:, None], v[:, None])
                x = _encode_columns(value, K, FREQ, KP)
            else:
                x = tl.where((k == 0)[None, :], u[:, None], tl.where((k == 1)[None, :], v[:, None], 0.0))
            x = tl.where(rmask[:, None], x, 0.0).to(dtype)
        elif FREQ > 0:
            x = _frequency_tile(in_ptr, rows, rmask, K, FREQ, KP).to(dtype)
        else:
            x = tl.load(in_ptr + rows[:, None] * K + k[None, :], mask=rmask[:, None] & (k < K)[None, :], other=0.0).to(dtype)
        # forward; every hidden activation but the last (which stays in registers) goes to scratch for the backward
        if HOIST:
            w = w_first
        else:
            w = tl.load(w_in + k[:, None] * HP + h[None, :])
        a = _layer(x, w, tl.load(b_in + h), HACT, LEAK, DOT, False, HALF_ACT)
        for layer in tl.static_range(HIDDEN):
            tl.store(scratch + layer * BM * HP + tile_offsets, a)
            if HOIST:
                w = w_hids[layer]
            else:
                w = tl.load(w_hid + layer * HP * HP + h[:, None] * HP + h[None, :])
            a = _layer(a, w, tl.load(b_hid + layer * HP + h), HACT, LEAK, DOT, False, HALF_ACT)
        if HOIST:
            w = w_last
        else:
            w = tl.load(w_out + h[:, None] * OP + o[None, :])
        y = _activate(tl.dot(a, w, input_precision=DOT) + tl.load(b_out + o)[None, :], OACT, LEAK)
        # the loss and its gradient
        valid = rmask[:, None] & (o < O)[None, :]
        if SAMPLE:
            target = tl.load(target_ptr + texel[:, None] * O + o[None, :], mask=valid, other=0.0).to(tl.float32)
        else:
            target = tl.load(target_ptr + rows[:, None] * O + o[None, :], mask=valid, other=0.0).to(tl.float32)
        term, slope = _loss_terms(y, target, LOSS, FLOOR)
        loss_sum += tl.sum(tl.sum(tl.where(valid, term, 0.0), axis=1), axis=0)
        dz = (tl.where(valid, slope, 0.0) * scale * _activation_slope(y, OACT, LEAK)).to(dtype)
        tl.debug_barrier()  # the scratch stores above are read back by other threads below
        # backward: output layer, hidden layers last to first, input layer
        if CARRY:
            g_out = tl.dot(tl.trans(a), dz, g_out, input_precision=DOT)
            gb_out = tl.dot(ones, dz, gb_out, input_precision=DOT)
        else:
            _accumulate(slot + g_w_out, h[:, None] * OP + o[None, :], tl.dot(tl.trans(a), dz, input_precision=DOT), first)
            _accumulate(slot + g_b_out, o, tl.sum(dz.to(tl.float32), axis=0), first)
        da = tl.dot(dz, tl.trans(w), input_precision=DOT)
        for layer in tl.static_range(HIDDEN - 1, -1, -1):  # last to first; `a` is the layer's output activation
            dz = _times_slope(da, a, HACT, LEAK, HALF_ACT)
            a_prev = tl.load(scratch + layer * BM * HP + tile_offsets)
            if CARRY:
                g_hid = _replaced(g_hid, layer, tl.dot(tl.trans(a_prev), dz, g_hid[layer], input_precision=DOT), HIDDEN)
                gb_hid = _replaced(gb_hid, layer, tl.dot(ones, dz, gb_hid[layer], input_precision=DOT), HIDDEN)
            else:
                _accumulate(slot + g_w_hid + layer * HP * HP, h[:, None] * HP + h[None, :], tl.dot(tl.trans(a_prev), dz, input_precision=DOT), first)
                _accumulate(slot + g_b_hid + layer * HP, h, tl.sum(dz.to(tl.float32), axis=0), first)
            if HOIST:
                w = w_hids[layer]
            else:
                w = tl.load(w_hid + layer * HP * HP + h[:, None] * HP + h[None, :])
            da = tl.dot(dz, tl.trans(w), input_precision=DOT)
            a = a_prev
        dz = _times_slope(da, a, HACT, LEAK, HALF_ACT)
        if CARRY:
            g_in = tl.dot(tl.trans(x), dz, g_in, input_precision=DOT)
            gb_in = tl.dot(ones, dz, gb_in, input_precision=DOT)
        else:
            _accumulate(slot, k[:, None] * HP + h[None, :], tl.dot(tl.trans(x), dz, input_precision=DOT), first)
            _accumulate(slot + g_b_in, h, tl.sum(dz.to(tl.float32), axis=0), first)
        if DX:
            if HOIST:
                w = w_first
            else:
                w = tl.load(w_in + k[:, None] * HP + h[None, :])
            dx = tl.dot(dz, tl.trans(w), input_precision=DOT)
            tl.store(dx_ptr + rows[:, None] * K + k[None, :], dx, mask=rmask[:, None] & (k < K)[None, :])
        tl.debug_barrier()  # the next tile overwrites the scratch
    if CARRY:  # once, at the end (a program without tiles, for an empty batch, writes zeros)
        tl.store(slot + k[:, None] * HP + h[None, :], g_in)
        tl.store(slot + g_b_in + h, tl.sum(gb_in, axis=0))
        for layer in tl.static_range(HIDDEN):
            tl.store(slot + g_w_hid + layer * HP * HP + h[:, None] * HP + h[None, :], g_hid[layer])
            tl.store(slot + g_b_hid + layer * HP + h, tl.sum(gb_hid[layer], axis=0))
        tl.store(slot + g_w_out + h[:, None] * OP + o[None, :], g_out)
        tl.store(slot + g_b_out + o, tl.sum(gb_out, axis=0))
    if LOSS != 3:  # upstream mode sums no loss (and is given no loss buffer)
        tl.store(loss_ptr + pid, loss_sum)


@triton.jit
def _reduce_slots_kernel(
    slots_ptr,
    PROGRAMS,
    G,
    losses_ptr,
    LOSS_DIVISOR,
    scale_ptr,
    grad_ptr,
    flags_ptr,
    loss_ptr,
    ticket_ptr,
    BLOCK: tl.constexpr,
    PB: tl.constexpr,
    PP: tl.constexpr,
):
    """The optimizer step's gradient sum: ``grad[q] = sum_p slots[p, q] / scale`` over the training
    kernel's ``PROGRAMS`` gradient slots (``G`` values each), as :meth:`LossScaler.unscale_` does;
    ``flags[b]`` = 1.0 when block ``b`` holds an inf/NaN gradient (block 0 also when the loss,
    ``sum(losses) / LOSS_DIVISOR``, written to ``loss_ptr``, is not finite), else 0.0. Each
    program sums its ``BLOCK`` columns ``PB`` slots at a time (independent loads, not a chain). Program 0 also sets
    :func:`_adam_kernel`'s ticket counter to 0 for the launch that follows (whatever an interrupted step left there)."""
    b = tl.program_id(0)
    q = b * BLOCK + tl.arange(0, BLOCK)
    mask = q < G
    r = tl.arange(0, PB)
    acc = tl.zeros((PB, BLOCK), tl.float32)
    for p0 in range(0, PROGRAMS, PB):
        rows = p0 + r  # programs x G stays far below 2^31
        acc += tl.load(slots_ptr + rows[:, None] * G + q[None, :], mask=(rows < PROGRAMS)[:, None] & mask[None, :], other=0.0)
    g = tl.sum(acc, axis=0) * (1.0 / tl.load(scale_ptr))
    tl.store(grad_ptr + q, g, mask=mask)
    bad = tl.max(tl.where(mask & ~(tl.abs(g) < float("inf")), 1.0, 0.0), axis=0)
    if b == 0:
        pp = tl.arange(0, PP)
        loss = tl.sum(tl.load(losses_ptr + pp, mask=pp < PROGRAMS, other=0.0), axis=0) / LOSS_DIVISOR
        tl.store(loss_ptr, loss)
        bad = tl.maximum(bad, tl.where(tl.abs(loss) < float("inf"), 0.0, 1.0))
        tl.store(ticket_ptr, 0)
    tl.store(flags_ptr + b, bad)


@triton.jit
def _found(flags_ptr, NFLAGS, FP: tl.constexpr):
    """1.0 when any block of :func:`_reduce_slots_kernel` flagged an inf/NaN, else 0.0."""
    f = tl.arange(0, FP)
    return tl.max(tl.load(flags_ptr + f, mask=f < NFLAGS, other=0.0), axis=0)


@triton.jit
def _adam_kernel(
    grad_ptr,
    index_ptr,
    master_ptr,
    m_ptr,
    v_ptr,
    flags_ptr,
    NFLAGS,
    step_ptr,
    lr_ptr,
    BETA1,
    BETA2,
    EPS,
    G,
    ticket_ptr,
    loss_ptr,
    scale_ptr,
    clean_ptr,
    overflows_ptr,
    loss_sum_ptr,
    loss_count_ptr,
    skipped_ptr,
    nonfinite_run_ptr,
    found_ptr,
    draws_ptr,
    NSTEPS,
    GROWTH,
    BACKOFF,
    INTERVAL,
    DYNAMIC: tl.constexpr,
    BLOCK: tl.constexpr,
    FP: tl.constexpr,
    SP: tl.constexpr,
):
    """The optimizer step's Adam: on the fp32 masters (``torch.optim.Adam``'s fused arithmetic:
    ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2``, ``p -= lr / (1 - b1^t) m / (sqrt(v) /
    sqrt(1 - b2^t) + eps)``), skipped everywhere when any flag is set. Slot position ``q`` holds
    master value ``index[q]`` (-1: padding, never touched).

    The last program to finish (a ticket drawn from ``ticket_ptr``, an int32 that the closing program sets back to 0,
    and :func:`_reduce_slots_kernel` too before each launch, whatever an interrupted step left) then closes the step
    (:func:`_finish_step`): which program that is varies, what it writes does not. Every thread of a program has read
    the step count before the program draws its ticket (a barrier, then one atomic with acquire-release order at GPU
    scope), and only the closing program writes it."""
    b = tl.program_id(0)
    q = b * BLOCK + tl.arange(0, BLOCK)
    e = tl.load(index_ptr + q, mask=q < G, other=-1)
    live = e >= 0
    found = _found(flags_ptr, NFLAGS, FP)
    if found == 0.0:
        t = tl.load(step_ptr) + 1.0
        g = tl.load(grad_ptr + q, mask=live, other=0.0)
        m = BETA1 * tl.load(m_ptr + e, mask=live, other=0.0) + (1.0 - BETA1) * g
        v = BETA2 * tl.load(v_ptr + e, mask=live, other=0.0) + (1.0 - BETA2) * g * g
        step_size = tl.load(lr_ptr) / (1.0 - tl.exp2(t * tl.log2(BETA1)))
        denom = tl.sqrt(v) / tl.sqrt(1.0 - tl.exp2(t * tl.log2(BETA2))) + EPS
        w = tl.load(master_ptr + e, mask=live, other=0.0) - step_size * m / denom
        tl.store(m_ptr + e, m, mask=live)
        tl.store(v_ptr + e, v, mask=live)
        tl.store(master_ptr + e, w, mask=live)
    tl.debug_barrier()  # every thread of this program has read the step count before the ticket is drawn
    if tl.atomic_add(ticket_ptr, 1, sem="acq_rel", scope="gpu") == tl.num_programs(0) - 1:
        tl.store(ticket_ptr, 0)
        _finish_step(
            found, loss_ptr, step_ptr, scale_ptr, clean_ptr, overflows_ptr, loss_sum_ptr, loss_count_ptr, skipped_ptr,
            nonfinite_run_ptr, found_ptr, draws_ptr, NSTEPS, GROWTH, BACKOFF, INTERVAL, DYNAMIC, SP,
        )  # fmt: skip


@triton.jit
def _pack_kernel(index_ptr, master_ptr, packed_w_ptr, packed_b_ptr, G, BLOCK: tl.constexpr):
    """The optimizer step's first launch: the fp32 masters into the kernels' packed buffers (``packed_w``
    in the compute dtype, ``packed_b`` fp32 holding the compute dtype's rounding, as the trainer's
    compute copy has them). Every step, so whatever changed the masters since (Adam, a projection,
    a loaded checkpoint) is what the training kernel reads, in a CUDA graph too."""
    q = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    e = tl.load(index_ptr + q, mask=q < G, other=-1)
    live = e >= 0
    compute = tl.load(master_ptr + e, mask=live, other=0.0).to(packed_w_ptr.dtype.element_ty)
    tl.store(packed_w_ptr + q, compute, mask=live)
    tl.store(packed_b_ptr + q, compute.to(tl.float32), mask=live)


@triton.jit
def _finish_step(
    found,
    loss_ptr,
    step_ptr,
    scale_ptr,
    clean_ptr,
    overflows_ptr,
    loss_sum_ptr,
    loss_count_ptr,
    skipped_ptr,
    nonfinite_run_ptr,
    found_ptr,
    draws_ptr,
    NSTEPS,
    GROWTH,
    BACKOFF,
    INTERVAL,
    DYNAMIC: tl.constexpr,
    SP: tl.constexpr,
):
    """The end of an optimizer step (the last program of :func:`_adam_kernel`): Adam's step counts (``NSTEPS``, one per
    parameter, all equal), the loss scaler's update (``torch._amp_update_scale_``'s rule) and the trainer's running
    sums, as the PyTorch step does; and the draw counter of a training kernel that draws its own batches (int64,
    advanced every step, skipped or not). ``found``: 1.0 for a skipped step. Every value is read before any is
    written (one round trip to memory, not one per counter)."""
    each = tl.arange(0, SP)
    step = tl.load(step_ptr)
    overflows = tl.load(overflows_ptr)
    loss = tl.load(loss_ptr)
    loss_sum = tl.load(loss_sum_ptr)
    loss_count = tl.load(loss_count_ptr)
    skipped = tl.load(skipped_ptr)
    nonfinite_run = tl.load(nonfinite_run_ptr)
    draws = tl.load(draws_ptr)
    if DYNAMIC:
        scale = tl.load(scale_ptr)
        clean = tl.load(clean_ptr)
    tl.store(step_ptr + each, step + 1.0 - found + each * 0.0, mask=each < NSTEPS)  # every parameter's own count
    tl.store(overflows_ptr, overflows + found)
    if DYNAMIC:
        if found > 0.0:
            tl.store(scale_ptr, scale * BACKOFF)
            tl.store(clean_ptr, clean * 0)
        elif clean + 1 == INTERVAL:
            grown = scale * GROWTH
            tl.store(scale_ptr, tl.where(tl.abs(grown) < float("inf"), grown, scale))
            tl.store(clean_ptr, clean * 0)
        else:
            tl.store(clean_ptr, clean + 1)
    tl.store(loss_sum_ptr, loss_sum + tl.where(found > 0.0, 0.0, loss))
    tl.store(loss_count_ptr, loss_count + 1.0 - found)
    tl.store(skipped_ptr, skipped + found)
    tl.store(nonfinite_run_ptr, nonfinite_run * found + found)
    tl.store(found_ptr, found)
    tl.store(draws_ptr, draws + 1)

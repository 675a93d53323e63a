"""The device functions every fused kernel is built of: activations and their slopes, one layer, the whole
network (fp16/bf16/fp32 on the tensor cores, or in int8 arithmetic), and the frequency encoding.

The kernels keep a whole small MLP on chip: one pass over the inputs, every layer's matrix product on
the tensor cores (``tl.dot``), activations fused, nothing between layers written to device memory.
Weights come packed by :class:`neuralbake.kernels.packing.PackedMLP`: transposed (``[in, out]``),
zero-padded to powers of two (16 at least where a width is a product's depth, as ``tl.dot`` needs; a
decode's outputs to 4 at least), every hidden layer padded to the widest, so one loop body serves
every layer. Padded neurons see zero weights and bias and feed zero weights onward, so they never
change a result.

The decodes of fp16 networks sum their hidden layers in fp16 on the tensor cores (``HALF_SUMS``,
:func:`_layer`; :attr:`neuralbake.kernels.packing.PackedMLP.half_sums`), the output layer in fp32; the training
kernel sums in fp32 everywhere. The kernels themselves are in :mod:`neuralbake.kernels.triton_decode`
and :mod:`neuralbake.kernels.triton_train`; the Gluon kernels (:mod:`neuralbake.kernels.gluon_decode`,
:mod:`neuralbake.kernels.gluon_train`) call these functions too.

Written with Triton rather than found in a library: tiny-cuda-nn's fully fused MLPs are CUDA C++
with their own build and no latent-texture fetch or NTC feature gather, and nothing on PyPI fuses
these inputs with the network.
"""

from __future__ import annotations

import triton
import triton.language as tl


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
def _times_slope(da, a, ACT: tl.constexpr, LEAK: tl.constexpr):
    """``da * act'(z)`` in ``a``'s dtype, from the activation's output ``a``."""
    return (da * _activation_slope(a.to(tl.float32), ACT, LEAK)).to(a.dtype)


@triton.jit
def _layer(a, w, bias, ACT: tl.constexpr, LEAK: tl.constexpr, DOT: tl.constexpr, HALF_SUMS: tl.constexpr):
    """One hidden layer: ``act(a @ w + bias)`` in ``a``'s dtype.

    ``HALF_SUMS`` (fp16 only): the products summed in fp16 from the bias, on the tensor cores, and
    the activation in packed fp16, as tiny-cuda-nn's fully fused MLPs do; else fp32 sums, the activation in fp32 on
    the unrounded sum, rounded after (the training kernel's forward: for ReLU the values of PyTorch's fp16 layers,
    which round the sum first; for leaky ReLU some negative values differ in their last bit).
    """
    if HALF_SUMS:
        start = tl.zeros((a.shape[0], w.shape[1]), tl.float16) + bias.to(tl.float16)[None, :]
        return _activate_half(tl.dot(a, w, acc=start, out_dtype=tl.float16), ACT, LEAK)
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
):
    """``x`` ``[BM, KP]`` in the weights' dtype -> ``[BM, OP]`` fp32, output activation applied.

    ``HALF_SUMS``: the hidden layers sum in fp16 (see :func:`_layer`); the output layer always sums in fp32.
    """
    k = tl.arange(0, KP)
    h = tl.arange(0, HP)
    o = tl.arange(0, OP)
    a = _layer(x, tl.load(w_in + k[:, None] * HP + h[None, :]), tl.load(b_in + h), HACT, LEAK, DOT, HALF_SUMS)
    for layer in tl.static_range(HIDDEN):
        w = tl.load(w_hid + layer * HP * HP + h[:, None] * HP + h[None, :])
        a = _layer(a, w, tl.load(b_hid + layer * HP + h), HACT, LEAK, DOT, HALF_SUMS)
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

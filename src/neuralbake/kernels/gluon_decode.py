"""The neural-material decode in Gluon, Triton's lower-level dialect: the weights stay in shared memory.

:func:`neuralbake.kernels.triton_decode.neural_material_kernel` gives ``tl.dot`` its operands in
registers, so each 128-sample program loads the decoder's weights (18.5 KB at the copper tray's
shape) from global memory and stores them into shared memory again before its products can read
them. On an H100 (Nsight Compute, 2026-11-27) the L1 / shared-memory pipe was that decode's busiest
unit. ``tl.dot`` offers no way to keep an operand in shared memory across tiles. Gluon does
(explicit layouts, shared-memory buffers and ``mma_v2``): each program of this kernel stores the
weights in shared memory once, then decodes up to :data:`TILES_PER_PROGRAM` tiles of samples and
reads each layer's operand fragments from there.

The arithmetic is the Triton decode's with fp16 sums (:attr:`PackedMLP.half_sums`): the same
latent blend in fp32, hidden layers summed in fp16 from their bias, the output layer in fp32 from its
bias (where Triton's compiler moves the Triton decode's bias). On the GPU the two give the same
values within fp16 rounding: the same bits for bilinear decodes of 16 inputs, and rare or small
differences elsewhere (``tests/kernels/test_gpu_parity.py`` checks every supported shape against the Triton
decode and against PyTorch, and says how many values differ).

The latent fetch and the direction features are the Triton decode's own helpers
(``triton_decode._bilinear_repeat``, ``_direction_tile``), called from Gluon: they take their layouts from their
arguments. Only what needs an explicit layout (the activation's constants, the tiles, shared memory, the products) is
written here.

Triton's CPU interpreter does not run Gluon; the CPU tests run this kernel's Python body on it through
``tests/kernels/gluon_interpret.py`` (layouts dropped, shared memory and the products in numpy). The CPU tests (``tests/kernels/test_gluon_decode.py``) check its values that way at the parity shapes, against
PyTorch and the Triton decode; they also compile it for sm_90 and check its structure, and the arguments
:class:`~neuralbake.kernels.decoders.FusedNeuralMaterial` launches it with. Its layouts, barriers and the hardware's sums
are checked on a GPU (``tests/kernels/test_gpu_parity.py``, marked ``gpu``). :func:`gluon_reason` says which decodes it runs; the others take
the Triton kernel.
"""

from __future__ import annotations

import triton

from neuralbake.kernels.triton_decode import _bilinear_repeat, _direction_tile

TILES_PER_PROGRAM = 16
"""The most tiles a program decodes (it stores the weights once for all of them). Fewer where that leaves fewer than
:data:`SPREAD` programs per SM: the hardware then schedules the programs, so no launch depends on how many fit on an SM."""

SPREAD = 8
"""Programs per SM below which a launch gives each program fewer tiles (:func:`tiles_per_program`)."""

TILE = (128, 2)
"""``(rows per tile, warps per program)``."""

try:  # Gluon with mma_v2: Triton 3.6 or later (3.5 has Gluon, but not this API)
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import mma_v2

    _AVAILABLE = True
except ImportError:  # pragma: no cover - older Triton
    gluon = gl = mma_v2 = None
    _AVAILABLE = False


def gluon_reason(*, device_capability: tuple[int, int] | None, hidden_activation: str, leak: float, half_sums: bool, kp: int, hp: int, op: int, hidden: int, feature_columns: int, wide: bool) -> str | None:
    """Why this kernel cannot run a decode, or None. The Triton decode runs the others."""
    if not _AVAILABLE:
        return "this Triton has no Gluon with mma_v2 (Triton 3.6 or later)"
    if device_capability is None or device_capability < (8, 0):
        return "Gluon's mma_v2 needs an NVIDIA GPU of compute capability 8.0 or later"
    if not half_sums:
        return "only fp16 decoders with fp16 sums"
    if hidden_activation not in ("relu", "leaky_relu") or not 0.0 <= leak <= 1.0:
        return "only ReLU and leaky ReLU (leak in [0, 1]) hidden layers"
    if feature_columns * 2 != kp or kp not in (16, 32):
        return "only latents and directions in two half-width feature tiles, 16 or 32 inputs"
    if hp not in (16, 32, 64) or op > 8 or hidden > 3:
        return "only up to 3 hidden-to-hidden layers of 16, 32 or 64 and at most 8 outputs"
    if wide:
        return "only buffers under 2^31 elements"
    return None


def _swizzle(row_bytes: int) -> tuple[int, int]:
    """``(per_phase, max_phase)`` of a shared buffer with rows of ``row_bytes``: 16-byte vectors spread over the 128 bytes of a bank row."""
    return max(1, 128 // row_bytes), max(1, min(8, row_bytes // 16))


def launch_constants(kp: int, hp: int, op: int, hidden: int) -> dict[str, int]:
    """The shared-memory swizzles, the rows of the hidden layers' buffer (a power of two) and the output layer's
    product width for a network's padded sizes."""
    opm = max(op, 8)
    (px, mx), (pw, mw), (po, mo) = _swizzle(kp * 2), _swizzle(hp * 2), _swizzle(opm * 2)
    rows = 1 << (max(hidden, 1) - 1).bit_length()
    return {"OPM": opm, "HR": rows * hp, "PX": px, "MX": mx, "PW": pw, "MW": mw, "PO": po, "MO": mo}


if _AVAILABLE:

    @gluon.jit
    def _directions(wi_ptr, wo_ptr, rows, rmask, cols, BM: gl.constexpr, FP: gl.constexpr, FL: gl.constexpr, DIR0: gl.constexpr, DIR1: gl.constexpr, DIR2: gl.constexpr):
        """The direction features' tile ``[BM, FP]`` fp32, from column 0 (``triton_decode._direction_tile`` each)."""
        d = gl.zeros([BM, FP], gl.float32, FL)
        if DIR0 >= 0:
            d += _direction_tile(wi_ptr, wo_ptr, rows, rmask, cols, 0, DIR0)
        if DIR1 >= 0:
            d += _direction_tile(wi_ptr, wo_ptr, rows, rmask, cols, 3, DIR1)
        if DIR2 >= 0:
            d += _direction_tile(wi_ptr, wo_ptr, rows, rmask, cols, 6, DIR2)
        return d

    @gluon.jit
    def _activate(acc, HACT: gl.constexpr, LEAK: gl.constexpr):
        """ReLU or leaky ReLU in fp16, as ``triton_network._activate_half``."""
        if HACT == 1:
            acc = gl.maximum(acc, gl.zeros_like(acc))
        else:
            acc = gl.maximum(acc, acc * gl.full(acc.shape, LEAK, acc.dtype, acc.type.layout))
        return acc

    @gluon.jit
    def neural_material_gluon_kernel(
        uv_ptr, wi_ptr, wo_ptr, lod_ptr, lat_ptr, level_offset, level_width, level_height, LEVELS, out_ptr, N,
        w_in, b_in, w_hid, b_hid, w_out, b_out, EACH,
        C: gl.constexpr, FP: gl.constexpr, DIR0: gl.constexpr, DIR1: gl.constexpr, DIR2: gl.constexpr, TRILINEAR: gl.constexpr,
        KP: gl.constexpr, HP: gl.constexpr, OP: gl.constexpr, OPM: gl.constexpr, HIDDEN: gl.constexpr, HACT: gl.constexpr, LEAK: gl.constexpr,
        BM: gl.constexpr, W: gl.constexpr,
        HR: gl.constexpr, PX: gl.constexpr, MX: gl.constexpr, PW: gl.constexpr, MW: gl.constexpr, PO: gl.constexpr, MO: gl.constexpr,
    ):  # fmt: skip
        """``out[N, 3]`` as ``triton_decode.neural_material_kernel`` computes it with fp16 sums and split feature tiles."""
        FL: gl.constexpr = gl.BlockedLayout([1, FP], [32, 1], [W, 1], [1, 0])  # a feature row per thread
        RL: gl.constexpr = gl.SliceLayout(1, FL)
        WL: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [W, 1], [1, 0])
        OL: gl.constexpr = gl.BlockedLayout([1, OPM], [32, 1], [W, 1], [1, 0])
        MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[W, 1], instr_shape=[16, 8])
        DA: gl.constexpr = gl.DotOperandLayout(0, MMA, 2)
        DB: gl.constexpr = gl.DotOperandLayout(1, MMA, 2)
        dtype: gl.constexpr = w_in.dtype.element_ty

        # The weights, stored in shared memory once per program.
        h = gl.arange(0, HP, gl.SliceLayout(0, WL))
        k = gl.arange(0, KP, gl.SliceLayout(1, WL))
        kh = gl.arange(0, HP, gl.SliceLayout(1, WL))
        w_in_s = gl.allocate_shared_memory(dtype, [KP, HP], gl.SwizzledSharedLayout(8, PW, MW, [1, 0]), gl.load(w_in + gl.expand_dims(k * HP, 1) + gl.expand_dims(h, 0)))
        w_hid_s = gl.allocate_shared_memory(dtype, [HR, HP], gl.SwizzledSharedLayout(8, PW, MW, [1, 0]))
        for layer in gl.static_range(HIDDEN):
            w_hid_s.slice(layer * HP, HP, dim=0).store(gl.load(w_hid + layer * HP * HP + gl.expand_dims(kh * HP, 1) + gl.expand_dims(h, 0)))
        ko = gl.arange(0, HP, gl.SliceLayout(1, OL))
        oc = gl.arange(0, OPM, gl.SliceLayout(0, OL))
        w_out_tile = gl.load(w_out + gl.expand_dims(ko * OP, 1) + gl.expand_dims(oc, 0), mask=gl.expand_dims(oc < OP, 0), other=0.0)
        w_out_s = gl.allocate_shared_memory(dtype, [HP, OPM], gl.SwizzledSharedLayout(8, PO, MO, [1, 0]), w_out_tile)
        x_s = gl.allocate_shared_memory(dtype, [BM, KP], gl.SwizzledSharedLayout(8, PX, MX, [1, 0]))
        hb = gl.arange(0, HP, gl.SliceLayout(0, MMA))
        mo = gl.arange(0, OPM, gl.SliceLayout(0, MMA))
        bias_in = gl.load(b_in + hb).to(dtype)
        bias_out = gl.load(b_out + mo, mask=mo < OP, other=0.0)

        cols = gl.arange(0, FP, gl.SliceLayout(0, FL))
        ar = gl.arange(0, BM, RL)
        first = gl.program_id(0) * EACH
        last = gl.minimum(first + EACH, gl.cdiv(N, BM))
        # The bilinear decode loads each tile's uv one tile ahead, so that its latency leaves the chain uv -> taps ->
        # products (the trilinear decode, whose lod would ride along, was slower that way).
        rows = first * BM + ar
        u = gl.load(uv_ptr + rows * 2, mask=rows < N, other=0.0)
        v = gl.load(uv_ptr + rows * 2 + 1, mask=rows < N, other=0.0)
        for tile in range(first, last):
            rows = tile * BM + ar
            rmask = rows < N
            if TRILINEAR:
                u = gl.load(uv_ptr + rows * 2, mask=rmask, other=0.0)
                v = gl.load(uv_ptr + rows * 2 + 1, mask=rmask, other=0.0)
            else:
                ahead = rows + BM
                ahead_mask = (ahead < N) & (tile + 1 < last)
                next_u = gl.load(uv_ptr + ahead * 2, mask=ahead_mask, other=0.0)
                next_v = gl.load(uv_ptr + ahead * 2 + 1, mask=ahead_mask, other=0.0)
            cmask = gl.expand_dims(rmask, 1) & gl.expand_dims(cols < C, 0)
            if TRILINEAR:
                lod = gl.load(lod_ptr + rows, mask=rmask, other=0.0)
                lod = gl.minimum(gl.maximum(lod, 0.0), LEVELS - 1.0)
                lower = gl.minimum(gl.floor(lod).to(gl.int32), LEVELS - 1)
                upper = gl.minimum(lower + 1, LEVELS - 1)
                t = gl.expand_dims(lod - lower.to(gl.float32), 1)
                a = _bilinear_repeat(lat_ptr, gl.load(level_offset + lower), gl.load(level_width + lower), gl.load(level_height + lower), u, v, cols, cmask, C, False)
                b = _bilinear_repeat(lat_ptr, gl.load(level_offset + upper), gl.load(level_width + upper), gl.load(level_height + upper), u, v, cols, cmask, C, False)
                x = a * (1.0 - t) + b * t
            else:
                x = _bilinear_repeat(lat_ptr, 0, gl.load(level_width), gl.load(level_height), u, v, cols, cmask, C, False)
            x_s.slice(0, FP, dim=1).store(x.to(dtype))
            x_s.slice(FP, FP, dim=1).store(_directions(wi_ptr, wo_ptr, rows, rmask, cols, BM, FP, FL, DIR0, DIR1, DIR2).to(dtype))
            _network_tile(x_s, w_in_s, w_hid_s, w_out_s, bias_in, bias_out, b_hid, hb, mo, tile * BM, N, wi_ptr, wo_ptr, out_ptr, HP, OPM, HIDDEN, HACT, LEAK, BM, MMA, DA, DB)
            if not TRILINEAR:
                u = next_u
                v = next_v

    @gluon.jit
    def _network_tile(
        x_s, w_in_s, w_hid_s, w_out_s, bias_in, bias_out, b_hid, hb, mo, first, N, wi_ptr, wo_ptr, out_ptr,
        HP: gl.constexpr, OPM: gl.constexpr, HIDDEN: gl.constexpr, HACT: gl.constexpr, LEAK: gl.constexpr, BM: gl.constexpr,
        MMA: gl.constexpr, DA: gl.constexpr, DB: gl.constexpr,
    ):  # fmt: skip
        """The decoder on the feature tile in ``x_s`` (rows ``first`` on), its output written to ``out_ptr``."""
        dtype: gl.constexpr = x_s.dtype
        acc = gl.zeros([BM, HP], dtype, MMA) + gl.expand_dims(bias_in, 0)
        a = _activate(mma_v2(x_s.load(DA), w_in_s.load(DB), acc), HACT, LEAK)
        for layer in gl.static_range(HIDDEN):
            acc = gl.zeros([BM, HP], dtype, MMA) + gl.expand_dims(gl.load(b_hid + layer * HP + hb).to(dtype), 0)
            a = _activate(mma_v2(gl.convert_layout(a, DA), w_hid_s.slice(layer * HP, HP, dim=0).load(DB), acc), HACT, LEAK)
        # the bias starts the sum, as Triton's compiler folds the Triton decode's `tl.dot(a, w) + bias` (the same bits)
        y = mma_v2(gl.convert_layout(a, DA), w_out_s.load(DB), gl.zeros([BM, OPM], gl.float32, MMA) + gl.expand_dims(bias_out, 0))
        orow = first + gl.arange(0, BM, gl.SliceLayout(1, MMA))
        omask = orow < N
        wiz = gl.load(wi_ptr + orow * 3 + 2, mask=omask, other=0.0)
        woz = gl.load(wo_ptr + orow * 3 + 2, mask=omask, other=0.0)
        valid = gl.expand_dims((wiz > 0.0) & (woz > 0.0), 1)
        value = gl.where(valid, gl.exp(gl.maximum(y, 0.0)) - 1.0, 0.0)
        store_mask = gl.expand_dims(omask, 1) & gl.expand_dims(mo < 3, 0)
        gl.store(out_ptr + gl.expand_dims(orow * 3, 1) + gl.expand_dims(mo, 0), value.to(out_ptr.dtype.element_ty), mask=store_mask)

else:  # pragma: no cover
    neural_material_gluon_kernel = None


def tiles_per_program(tiles: int, sms: int) -> int:
    """Tiles per program for a decode of ``tiles`` tiles on ``sms`` SMs: :data:`TILES_PER_PROGRAM`, or fewer so that at
    least :data:`SPREAD` programs per SM run, and at least one."""
    return max(1, min(TILES_PER_PROGRAM, tiles // (sms * SPREAD)))


def launch(tiles: int, sms: int, args: tuple, constants: dict) -> None:
    """Launch the decode over ``tiles`` tiles of :data:`TILE` rows on a GPU of ``sms`` SMs."""
    rows, warps = TILE
    each = tiles_per_program(tiles, sms)
    neural_material_gluon_kernel[(triton.cdiv(tiles, each),)](*args, each, BM=rows, W=warps, num_warps=warps, **constants)


__all__ = ["SPREAD", "TILE", "TILES_PER_PROGRAM", "gluon_reason", "launch", "launch_constants", "tiles_per_program"]

"""The fused training step's kernel in Gluon with Hopper's warpgroup MMA: weights and activations in shared memory.

:func:`neuralbake.kernels.triton_train.mlp_train_kernel` gives ``tl.dot`` its operands in registers. On an H100
(Nsight Compute, docs/dev/benchmarks-diary.md) its shared-memory pipe was the busiest unit: every product's operands (the
weights, the transposed activations, ``dz``) are staged through shared memory by layout conversions, and the
weights hoisted in registers plus the carried gradients spill. This kernel runs the same step with the operands
where the tensor cores read them:

- the weights are stored in shared memory once per program; the forward reads ``W``, the backward ``W^T`` (a
  transposed view of the same buffer);
- each layer's activation is stored once, as the next product's left operand and for the backward (the Triton
  kernel keeps it in a global scratch block);
- the weight gradients are products of two shared-memory operands, ``dz^T @ a`` (Hopper's ``wgmma`` reads both
  there, transposed or not), carried in registers across the program's tiles and written to its slot once;
- a bias gradient is ``dz^T @ 1`` against a small block of ones in shared memory, so nothing is reduced across
  warps per tile.

The carried gradients take most of the registers. Two tiles share the work (:func:`tile_for`):

- :data:`SMALL_TILE`, 128 rows and two warpgroups: each warpgroup runs the forward and ``da`` of its own 64 rows, and
  the gradient products over all 128 rows for half of each gradient's columns, so that it carries half of the
  running gradients. At the RTXNS network's shape (12 -> 64 x 4 -> 3) it reloads about 15 spilled values a tile
  (``bench/kernels_sass.py --gluon-train``). One program an SM; its barriers hold both warpgroups to the same phase.
- :data:`LARGE_TILE`, 64 rows and one warpgroup carrying every gradient: about 64 spilled values a tile, but two
  programs an SM whose phases overlap. The two were as fast at 2^18 rows; the small tile was faster below.

The Triton kernel, for scale, has 214 spill instructions and twice the instructions per 64 rows. Keeping the biases in
shared memory instead of reloading them, loading the targets before the forward, and issuing a layer's three
backward products together (``is_async``, one wait, ``dz`` in two alternating buffers) were measured and changed
nothing.

The arithmetic is the Triton kernel's: each hidden sum in fp32 from its bias, the activation in fp32 rounded to fp16;
the output layer in fp32 and its activation; the
loss's gradient rounded to fp16; the backward's products summed in fp32, each ``dz`` rounded to fp16. Products sum
in their own order, so values agree within fp32 rounding of the sums: on an H100 the large tile gave the Triton kernel's
gradients bit for bit, the small tile (128-row sums) within 2e-6 of their scale (``tests/kernels/test_gpu_parity.py
--gluon-train-only`` checks the gradients and losses against the Triton kernel and PyTorch).

Triton's CPU interpreter does not run Gluon; the CPU tests run this kernel's Python body on it through
``tests/kernels/gluon_interpret.py``. They (``tests/kernels/test_gluon_train.py``)
check its gradients and losses that way, at both tiles, against the Triton kernel and the exact gradient; they also
compile it for sm_90 (``bench/kernels_sass.py --gluon-train``) and check its structure and the arguments
:func:`neuralbake.kernels.training.launch_training` launches it with. Its layouts, barriers and the tensor cores' sums are checked
on a GPU. :func:`gluon_train_reason` says which steps it runs (on the CPU none: it needs a Hopper GPU's capability);
the others take the Triton kernel.
"""

from __future__ import annotations

from neuralbake.kernels.triton_network import (
    _activate,
    _activation_slope,
    _encode_at,
    _frequency_columns,
    _times_slope,
)
from neuralbake.kernels.triton_train import _draw_uv, _loss_terms, _replaced

SMALL_TILE = (128, 8)
"""``(rows per tile, warps per program)`` of a small step: two warpgroups of 64 rows, each carrying half of every
running gradient's columns (about 70 registers a thread instead of 140, so nearly no spills), one program an SM."""

LARGE_TILE = (64, 4)
"""The tile of a large step: one warpgroup, two programs an SM, whose independent phases overlap (with two
warpgroups a program, the barriers between its products hold both to the same phase)."""

SMALL_STEP = 8
"""A step of at most this many :data:`SMALL_TILE` tiles an SM takes the small tile; larger steps the large one. On an
H100 (``bench/kernels.py --ab-gluon-train``, graphed steps) the small tile was faster from 2^14 to 2^17 rows (22.2 us
against 27.8 at 2^14, 71.2 against 76.1 at 2^17) and as fast at 2^18 (127.4 against 126.1), where each program
takes about 16 tiles."""

try:  # Gluon with the warpgroup MMA: Triton 3.6 or later
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma

    _barrier = getattr(gl, "thread_barrier", None) or gl.barrier  # Triton 3.6 / 3.9 spell the CTA barrier so
    _AVAILABLE = True
except ImportError:  # pragma: no cover - older Triton
    gluon = gl = fence_async_shared = warpgroup_mma = _barrier = None
    _AVAILABLE = False


def gluon_train_reason(*, device_capability: tuple[int, int] | None, dtype_name: str, kp: int, hp: int, op: int, hidden: int, loss: str, dx: bool, wide: bool) -> str | None:
    """Why this kernel cannot run a training step, or None. The Triton kernel runs the others."""
    if not _AVAILABLE:
        return "this Triton has no Gluon with the warpgroup MMA (Triton 3.6 or later)"
    if device_capability is None or device_capability[0] != 9:
        return "the warpgroup MMA needs an NVIDIA Hopper GPU (compute capability 9.x)"
    if dtype_name != "float16":
        return "only fp16 networks"
    if hp != 64 or kp not in (16, 32, 64) or op != 16 or not 1 <= hidden <= 3:
        return "only hidden layers of 64, up to 64 inputs, up to 16 outputs and 1 to 3 hidden-to-hidden layers"
    if loss == "upstream" or dx:
        return "only steps with their own loss (not the upstream-gradient backward)"
    if wide:
        return "only buffers under 2^31 elements"
    return None


if _AVAILABLE:

    @gluon.jit
    def _hidden(z, dtype: gl.constexpr, HACT: gl.constexpr, LEAK: gl.constexpr):
        """A hidden layer's activation of its fp32 sum ``z``, in ``dtype``, as ``triton_network._layer`` computes it for
        training: the activation in fp32, then rounded."""
        if HACT == 2 and LEAK >= 0.0 and LEAK <= 1.0:  # where(z > 0, z, LEAK z), the same values in two instructions
            a = gl.maximum(z, z * LEAK).to(dtype)
        else:
            a = _activate(z, HACT, LEAK).to(dtype)
        return a

    @gluon.jit
    def _slope_times(da, a, HACT: gl.constexpr, LEAK: gl.constexpr):
        """``triton_network._times_slope``: ``da * act'(z)`` in ``a``'s dtype from the activation's output ``a``; a ReLU's
        or leaky ReLU's slope as a select on the fp16 output itself (the same values as through fp32, fewer instructions)."""
        if HACT == 1:
            dz = gl.where(a > 0.0, da, da * 0.0).to(a.dtype)
        elif HACT == 2:
            dz = gl.where(a > 0.0, da, da * LEAK).to(a.dtype)
        else:
            dz = _times_slope(da, a, HACT, LEAK)
        return dz

    @gluon.jit
    def _layer_bias(ptr, cols, BM: gl.constexpr, LAYOUT: gl.constexpr):
        """A ``[BM, len(cols)]`` fp32 accumulator holding the bias at ``ptr`` in every row."""
        return gl.zeros([BM, cols.shape[0]], gl.float32, LAYOUT) + gl.expand_dims(gl.load(ptr + cols), 0)

    @gluon.jit(do_not_specialize=["SEED"])  # one compiled kernel whatever the run's seed
    def mlp_train_gluon_kernel(
        in_ptr, target_ptr, N, grad_ptr, loss_ptr, scale_ptr, w_in, b_in, w_hid, b_hid, w_out, b_out,
        K: gl.constexpr, O: gl.constexpr, FREQ: gl.constexpr, KP: gl.constexpr, HP: gl.constexpr, OP: gl.constexpr,
        HIDDEN: gl.constexpr, HACT: gl.constexpr, OACT: gl.constexpr, LEAK: gl.constexpr, LOSS: gl.constexpr, FLOOR: gl.constexpr,
        BM: gl.constexpr, W: gl.constexpr, SEED, IMG_W, IMG_H, SAMPLE: gl.constexpr, TRANSFORM: gl.constexpr,
    ):  # fmt: skip
        """Forward, loss and backward of ``N`` rows, as ``triton_train.mlp_train_kernel`` with ``CARRY`` computes them: program ``p`` takes tiles ``p, p + P, ...`` and writes its slot (``grad_ptr + p * G``, the
        packed layout) once at the end, and its loss sum to ``loss_ptr[p]``. ``SAMPLE``: the rows are drawn here
        (``in_ptr`` the draw counter, ``target_ptr`` the image), as the Triton kernel draws them."""
        dtype: gl.constexpr = w_in.dtype.element_ty
        # Row tiles [BM, N]: each warpgroup its 64 rows. Gradients [HP, N] (64 rows): each warpgroup its share of the
        # columns, so that W / 4 warpgroups carry the running gradients together.
        WG: gl.constexpr = W // 4
        NB: gl.constexpr = 8 * WG  # the ones block's columns: 8 a warpgroup
        HL: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[W, 1], instr_shape=[16, HP, 16])
        OL: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[W, 1], instr_shape=[16, OP, 16])
        GL: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WG], instr_shape=[16, HP // WG, 16])
        GOL: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WG], instr_shape=[16, OP // WG, 16])
        IL: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WG], instr_shape=[16, KP // WG, 16])
        BL: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WG], instr_shape=[16, 8, 16])
        XL: gl.constexpr = gl.BlockedLayout([1, KP // 2], [16, 2], [W, 1], [1, 0])  # the input tile, half a row per thread
        WL: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [W, 1], [1, 0])  # weight loads

        # The weights in shared memory, once per program ([in, out]; the backward reads transposed views).
        wk = gl.arange(0, KP, gl.SliceLayout(1, WL))
        wh = gl.arange(0, HP, gl.SliceLayout(1, WL))
        wc = gl.arange(0, HP, gl.SliceLayout(0, WL))
        wo = gl.arange(0, OP, gl.SliceLayout(0, WL))
        w_in_s = gl.allocate_shared_memory(dtype, [KP, HP], gl.NVMMASharedLayout.get_default_for([KP, HP], dtype),
                                           gl.load(w_in + gl.expand_dims(wk * HP, 1) + gl.expand_dims(wc, 0)))  # fmt: skip
        w_hid_s = gl.allocate_shared_memory(dtype, [HIDDEN, HP, HP], gl.NVMMASharedLayout.get_default_for([HP, HP], dtype))
        for layer in gl.static_range(HIDDEN):
            w_hid_s.index(layer).store(gl.load(w_hid + layer * HP * HP + gl.expand_dims(wh * HP, 1) + gl.expand_dims(wc, 0)))
        w_out_s = gl.allocate_shared_memory(dtype, [HP, OP], gl.NVMMASharedLayout.get_default_for([HP, OP], dtype),
                                            gl.load(w_out + gl.expand_dims(wh * OP, 1) + gl.expand_dims(wo, 0)))  # fmt: skip
        # Blocks of ones: dz^T @ ones8 gives a hidden layer's bias gradient in every column, ones64 @ dz the output
        # layer's in every row.
        ones8 = gl.allocate_shared_memory(dtype, [BM, NB], gl.NVMMASharedLayout.get_default_for([BM, NB], dtype),
                                          gl.full([BM, NB], 1.0, dtype, gl.BlockedLayout([1, NB], [32, 1], [W, 1], [1, 0])))  # fmt: skip
        ones64 = gl.allocate_shared_memory(dtype, [HP, BM], gl.NVMMASharedLayout.get_default_for([HP, BM], dtype),
                                           gl.full([HP, BM], 1.0, dtype, WL))  # fmt: skip
        # The tile's operands: inputs, every hidden activation, a hidden layer's dz, the output layer's dz.
        x_s = gl.allocate_shared_memory(dtype, [BM, KP], gl.NVMMASharedLayout.get_default_for([BM, KP], dtype))
        act_s = gl.allocate_shared_memory(dtype, [HIDDEN + 1, BM, HP], gl.NVMMASharedLayout.get_default_for([BM, HP], dtype))
        dz_s = gl.allocate_shared_memory(dtype, [BM, HP], gl.NVMMASharedLayout.get_default_for([BM, HP], dtype))
        dzo_s = gl.allocate_shared_memory(dtype, [BM, OP], gl.NVMMASharedLayout.get_default_for([BM, OP], dtype))
        fence_async_shared()

        # The running gradients, transposed where the product needs 64 rows: [out, in] for the input and hidden
        # layers, [in, out] for the output layer.
        g_in = gl.zeros([HP, KP], gl.float32, IL)
        gb_in = gl.zeros([HP, NB], gl.float32, BL)
        g_hid = ()
        gb_hid = ()
        for layer in gl.static_range(HIDDEN):
            g_hid = g_hid + (gl.zeros([HP, HP], gl.float32, GL),)
            gb_hid = gb_hid + (gl.zeros([HP, NB], gl.float32, BL),)
        g_out = gl.zeros([HP, OP], gl.float32, GOL)
        gb_out = gl.zeros([HP, OP], gl.float32, GOL)

        pid = gl.program_id(0)
        programs = gl.num_programs(0)
        scale = gl.load(scale_ptr).to(gl.float32) / (N * O)
        loss_sum = 0.0
        if SAMPLE:
            draw = gl.load(in_ptr)
        xr = gl.arange(0, BM, gl.SliceLayout(1, XL))
        xk = gl.arange(0, KP, gl.SliceLayout(0, XL))
        hb = gl.arange(0, HP, gl.SliceLayout(0, HL))
        ob = gl.arange(0, OP, gl.SliceLayout(0, OL))
        orow = gl.arange(0, BM, gl.SliceLayout(1, OL))
        for tile in range(pid, gl.cdiv(N, BM), programs):
            rows = tile * BM + xr
            rmask = rows < N
            if SAMPLE:
                u, v, texel = _draw_uv(SEED, rows, draw, TRANSFORM, IMG_W, IMG_H)
                if FREQ > 0:
                    value = gl.where(gl.expand_dims(xk < 2 * FREQ, 0), gl.expand_dims(u, 1), gl.expand_dims(v, 1))
                    x = _encode_at(value, xk, K, FREQ)
                else:
                    x = gl.where(gl.expand_dims(xk == 0, 0), gl.expand_dims(u, 1), gl.where(gl.expand_dims(xk == 1, 0), gl.expand_dims(v, 1), 0.0))
                x = gl.where(gl.expand_dims(rmask, 1), x, 0.0)
                texel = gl.convert_layout(texel, gl.SliceLayout(1, OL))
            elif FREQ > 0:
                x = _frequency_columns(in_ptr, rows, rmask, xk, K, FREQ)
            else:
                x = gl.load(in_ptr + gl.expand_dims(rows * K, 1) + gl.expand_dims(xk, 0), mask=gl.expand_dims(rmask, 1) & gl.expand_dims(xk < K, 0), other=0.0)
            x_s.store(x.to(dtype))
            fence_async_shared()

            # forward: every hidden activation to shared memory (the next product's operand and the backward's)
            z = warpgroup_mma(x_s, w_in_s, _layer_bias(b_in, hb, BM, HL))
            act_s.index(0).store(_hidden(z, dtype, HACT, LEAK))
            fence_async_shared()
            for layer in gl.static_range(HIDDEN):
                z = warpgroup_mma(act_s.index(layer), w_hid_s.index(layer), _layer_bias(b_hid + layer * HP, hb, BM, HL))
                act_s.index(layer + 1).store(_hidden(z, dtype, HACT, LEAK))
                fence_async_shared()
            y = _activate(warpgroup_mma(act_s.index(HIDDEN), w_out_s, _layer_bias(b_out, ob, BM, OL)), OACT, LEAK)

            # the loss and its gradient
            at = tile * BM + orow
            valid = gl.expand_dims(at < N, 1) & gl.expand_dims(ob < O, 0)
            if SAMPLE:
                target = gl.load(target_ptr + gl.expand_dims(texel * O, 1) + gl.expand_dims(ob, 0), mask=valid, other=0.0).to(gl.float32)
            else:
                target = gl.load(target_ptr + gl.expand_dims(at * O, 1) + gl.expand_dims(ob, 0), mask=valid, other=0.0).to(gl.float32)
            term, slope = _loss_terms(y, target, LOSS, FLOOR)
            loss_sum += gl.sum(gl.sum(gl.where(valid, term, 0.0), axis=1), axis=0)
            dzo_s.store((gl.where(valid, slope, 0.0) * scale * _activation_slope(y, OACT, LEAK)).to(dtype))
            fence_async_shared()

            # backward: the output layer, the hidden layers last to first, the input layer (issuing a layer's three
            # products together and waiting once, with dz in two alternating buffers, measured no faster on an H100)
            last = act_s.index(HIDDEN)
            zeros = gl.zeros([BM, HP], gl.float32, HL)
            g_out = warpgroup_mma(last.permute((1, 0)), dzo_s, g_out)
            gb_out = warpgroup_mma(ones64, dzo_s, gb_out)
            da = warpgroup_mma(dzo_s, w_out_s.permute((1, 0)), zeros, use_acc=False)
            for layer in gl.static_range(HIDDEN - 1, -1, -1):  # the product act_s[layer] @ w_hid[layer] -> act_s[layer + 1]
                dz_s.store(_slope_times(da, act_s.index(layer + 1).load(HL), HACT, LEAK))
                fence_async_shared()
                transposed = dz_s.permute((1, 0))
                g_hid = _replaced(g_hid, layer, warpgroup_mma(transposed, act_s.index(layer), g_hid[layer]), HIDDEN)
                gb_hid = _replaced(gb_hid, layer, warpgroup_mma(transposed, ones8, gb_hid[layer]), HIDDEN)
                da = warpgroup_mma(dz_s, w_hid_s.index(layer).permute((1, 0)), zeros, use_acc=False)
            dz_s.store(_slope_times(da, act_s.index(0).load(HL), HACT, LEAK))
            fence_async_shared()
            transposed = dz_s.permute((1, 0))
            g_in = warpgroup_mma(transposed, x_s, g_in)
            gb_in = warpgroup_mma(transposed, ones8, gb_in)
            _barrier()  # the next tile overwrites the operands

        # the program's slot, once: [w_in | b_in | w_hid | b_hid | w_out | b_out], weights [in, out]
        g_b_in: gl.constexpr = KP * HP
        g_w_hid: gl.constexpr = g_b_in + HP
        g_b_hid: gl.constexpr = g_w_hid + HIDDEN * HP * HP
        g_w_out: gl.constexpr = g_b_hid + HIDDEN * HP
        g_b_out: gl.constexpr = g_w_out + HP * OP
        slot = grad_ptr + pid.to(gl.int64) * (g_b_out + OP)
        io = gl.arange(0, HP, gl.SliceLayout(1, IL))
        ik = gl.arange(0, KP, gl.SliceLayout(0, IL))
        gl.store(slot + gl.expand_dims(ik * HP, 0) + gl.expand_dims(io, 1), g_in)
        bo = gl.arange(0, HP, gl.SliceLayout(1, BL))
        bc = gl.arange(0, NB, gl.SliceLayout(0, BL))
        first_column = gl.expand_dims(bc == 0, 0) & gl.expand_dims(bo >= 0, 1)
        column_offsets = gl.expand_dims(bo, 1) + gl.expand_dims(bc * 0, 0)
        gl.store(slot + g_b_in + column_offsets, gb_in, mask=first_column)
        go = gl.arange(0, HP, gl.SliceLayout(1, GL))
        gi = gl.arange(0, HP, gl.SliceLayout(0, GL))
        for j in gl.static_range(HIDDEN):
            gl.store(slot + g_w_hid + j * HP * HP + gl.expand_dims(gi * HP, 0) + gl.expand_dims(go, 1), g_hid[j])
            gl.store(slot + g_b_hid + j * HP + column_offsets, gb_hid[j], mask=first_column)
        oi = gl.arange(0, HP, gl.SliceLayout(1, GOL))
        oc = gl.arange(0, OP, gl.SliceLayout(0, GOL))
        gl.store(slot + g_w_out + gl.expand_dims(oi * OP, 1) + gl.expand_dims(oc, 0), g_out)
        first_row = gl.expand_dims(oi == 0, 1) & gl.expand_dims(oc >= 0, 0)
        gl.store(slot + g_b_out + gl.expand_dims(oi * 0, 1) + gl.expand_dims(oc, 0), gb_out, mask=first_row)
        gl.store(loss_ptr + pid, loss_sum)

else:  # pragma: no cover
    mlp_train_gluon_kernel = None


def tile_for(n: int, sms: int) -> tuple[int, int]:
    """The tile of a step of ``n`` rows on ``sms`` SMs: :data:`SMALL_TILE` up to :data:`SMALL_STEP` of its tiles an SM,
    else :data:`LARGE_TILE`."""
    return SMALL_TILE if -(-n // SMALL_TILE[0]) <= SMALL_STEP * sms else LARGE_TILE


def programs_for(tiles: int, programs: int, sms: int, warps: int) -> int:
    """Programs for a step of ``tiles`` tiles of ``warps`` warps, at most ``programs``: a tile each while there are no
    more tiles than SMs; beyond, one program an SM at least (which comes first: 133 tiles give 132 programs), else two
    tiles a program, and no more programs than the SMs hold (two of 4 warps, one of 8: 255 registers a thread). Every
    program writes a whole gradient slot that the step then sums, so a program of one tile costs about as much in slots
    as in products (with the 64-row tile at 2^14 rows on an H100, two tiles a program made the step faster than one in
    a development run; 2^14 rows now take the 128-row tile, one tile a program)."""
    if tiles <= sms:
        return max(1, min(programs, tiles))
    per_sm = max(1, 8 // warps)
    return max(1, min(programs, per_sm * sms, max(sms, -(-tiles // 2))))


def launch(grid: tuple[int], tile: tuple[int, int], args: tuple, constants: dict) -> None:
    """Launch the kernel on ``grid`` programs of ``tile``: ``args`` up to the weights (see :func:`mlp_train_gluon_kernel`),
    ``constants`` the network's, the loss's and, for a drawn batch, ``SEED``/``TRANSFORM``/``IMG_W``/``IMG_H``/``SAMPLE``."""
    rows, warps = tile
    draws = {name: constants.pop(name) for name in ("SEED", "IMG_W", "IMG_H") if name in constants}
    mlp_train_gluon_kernel[grid](
        *args, SEED=draws.get("SEED", 0), IMG_W=draws.get("IMG_W", 1), IMG_H=draws.get("IMG_H", 1), BM=rows, W=warps, num_warps=warps,
        **({"SAMPLE": False, "TRANSFORM": 0} | constants),
    )  # fmt: skip


__all__ = ["LARGE_TILE", "SMALL_STEP", "SMALL_TILE", "gluon_train_reason", "launch", "programs_for", "tile_for"]

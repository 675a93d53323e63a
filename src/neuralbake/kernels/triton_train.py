"""The fused training step's kernels (launched by :mod:`neuralbake.kernels.training`):

- :func:`mlp_train_kernel`: forward and backward of one training batch with the loss and its
  gradient fused; each program keeps a running weight gradient (in registers across its tiles
  where it fits, else in its slot in memory) and writes it to its own slot (no atomics, so the
  result is deterministic); one sum over the slots finishes the reduction. With ``SAMPLE`` it draws
  its batch itself (:func:`_draw_uv`; :func:`draw_uv_kernel` shows that batch, for checks);
- the rest of a training step around it in three launches (:func:`pack_kernel`: the masters into
  the packed compute weights; :func:`reduce_slots_kernel`: the slots' sum, unscaled and checked
  for inf/NaN; :func:`adam_kernel`: Adam on the fp32 masters, its last program closing the step with
  :func:`_finish_step`: step count, loss scale and the trainer's sums), where PyTorch takes about
  fifty small launches.

The network's device functions are :mod:`neuralbake.kernels.triton_network`'s; the training kernel
sums in fp32 everywhere.
"""

from __future__ import annotations

import triton
import triton.language as tl

from neuralbake.kernels.triton_network import (
    _activate,
    _activation_slope,
    _encode_columns,
    _frequency_tile,
    _layer,
    _times_slope,
)


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
def draw_uv_kernel(uv_ptr, texel_ptr, draws_ptr, N, SEED, IMG_W, IMG_H, TRANSFORM: tl.constexpr, BM: tl.constexpr):
    """The batch :func:`mlp_train_kernel` draws with ``SAMPLE`` at the draw counter's value: ``uv`` ``[N, 2]`` and the
    texel indices ``[N]`` (for checks and tests: training never needs them)."""
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    u, v, texel = _draw_uv(SEED, rows, tl.load(draws_ptr), TRANSFORM, IMG_W, IMG_H)
    mask = rows < N
    tl.store(uv_ptr + rows * 2, u, mask=mask)
    tl.store(uv_ptr + rows * 2 + 1, v, mask=mask)
    tl.store(texel_ptr + rows, texel, mask=mask)



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
def mlp_train_kernel(
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
      gradients do not fit in registers, and fp32 ones: ``kernels.training.carries_gradients``). With ``CARRY`` the
      weights are also loaded once, before the tiles.
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
    if CARRY:  # the weights loaded once, before the tiles
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
        if CARRY:
            w = w_first
        else:
            w = tl.load(w_in + k[:, None] * HP + h[None, :])
        a = _layer(x, w, tl.load(b_in + h), HACT, LEAK, DOT, False)
        for layer in tl.static_range(HIDDEN):
            tl.store(scratch + layer * BM * HP + tile_offsets, a)
            if CARRY:
                w = w_hids[layer]
            else:
                w = tl.load(w_hid + layer * HP * HP + h[:, None] * HP + h[None, :])
            a = _layer(a, w, tl.load(b_hid + layer * HP + h), HACT, LEAK, DOT, False)
        if CARRY:
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
            dz = _times_slope(da, a, HACT, LEAK)
            a_prev = tl.load(scratch + layer * BM * HP + tile_offsets)
            if CARRY:
                g_hid = _replaced(g_hid, layer, tl.dot(tl.trans(a_prev), dz, g_hid[layer], input_precision=DOT), HIDDEN)
                gb_hid = _replaced(gb_hid, layer, tl.dot(ones, dz, gb_hid[layer], input_precision=DOT), HIDDEN)
            else:
                _accumulate(slot + g_w_hid + layer * HP * HP, h[:, None] * HP + h[None, :], tl.dot(tl.trans(a_prev), dz, input_precision=DOT), first)
                _accumulate(slot + g_b_hid + layer * HP, h, tl.sum(dz.to(tl.float32), axis=0), first)
            if CARRY:
                w = w_hids[layer]
            else:
                w = tl.load(w_hid + layer * HP * HP + h[:, None] * HP + h[None, :])
            da = tl.dot(dz, tl.trans(w), input_precision=DOT)
            a = a_prev
        dz = _times_slope(da, a, HACT, LEAK)
        if CARRY:
            g_in = tl.dot(tl.trans(x), dz, g_in, input_precision=DOT)
            gb_in = tl.dot(ones, dz, gb_in, input_precision=DOT)
        else:
            _accumulate(slot, k[:, None] * HP + h[None, :], tl.dot(tl.trans(x), dz, input_precision=DOT), first)
            _accumulate(slot + g_b_in, h, tl.sum(dz.to(tl.float32), axis=0), first)
        if DX:
            if CARRY:
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
def reduce_slots_kernel(
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
    :func:`adam_kernel`'s ticket counter to 0 for the launch that follows (whatever an interrupted step left there)."""
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
    """1.0 when any block of :func:`reduce_slots_kernel` flagged an inf/NaN, else 0.0."""
    f = tl.arange(0, FP)
    return tl.max(tl.load(flags_ptr + f, mask=f < NFLAGS, other=0.0), axis=0)


@triton.jit
def adam_kernel(
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
    and :func:`reduce_slots_kernel` too before each launch, whatever an interrupted step left) then closes the step
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
def pack_kernel(index_ptr, master_ptr, packed_w_ptr, packed_b_ptr, G, BLOCK: tl.constexpr):
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
    """The end of an optimizer step (the last program of :func:`adam_kernel`): Adam's step counts (``NSTEPS``, one per
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

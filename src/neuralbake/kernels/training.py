"""The fused training step as PyTorch callables.

- :class:`FusedForwardBackward`: the trainer's :class:`~neuralbake.nn.trainer.ForwardBackward` for plain MLPs and
  coordinate networks (MSE, L1 or relative-L1 loss), capturable in a CUDA graph, which can also take the trainer's
  whole optimizer step (:meth:`FusedForwardBackward.update_step`: pack, training kernel, gradient sum, Adam).
- :class:`FusedMLP`: one MLP's forward and backward as a step inside autograd (``MLP.kernels = "triton"``), so
  models with MLP parts train through the kernels.

The kernels are :mod:`neuralbake.kernels.triton_train`'s and, on a Hopper GPU, :mod:`neuralbake.kernels.gluon_train`'s.
The PyTorch references are the trainer's autograd step and :class:`neuralbake.nn.mlp.MLP`; the tests compare them
value by value under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import triton
from torch import nn

from neuralbake.errors import ConfigError
from neuralbake.kernels import ACTIVATION_CODES, LOSS_CODES, gluon_train, tuning
from neuralbake.kernels.packing import PackedMLP, mlp_forward
from neuralbake.kernels.triton_train import adam_kernel, draw_uv_kernel, mlp_train_kernel, pack_kernel, reduce_slots_kernel
from neuralbake.kernels.tuning import (
    block_rows,
    gluon_failed,
    launch_options,
    mma_sync,
    nvidia_capability,
    sm_count,
    tile_key,
    wide_addresses,
)
from neuralbake.nn.mlp import MLP, CoordinateNetwork
from neuralbake.nn.precision import LossScaler
from neuralbake.nn.trainer import Batch, TexelDraws

__all__ = [
    "FusedAdamState",
    "FusedForwardBackward",
    "FusedMLP",
    "TrainingBuffers",
    "carries_gradients",
    "draw_arguments",
    "find_mlp",
    "launch_training",
    "master_index",
    "unpack_gradients",
]


def carries_gradients(packed: PackedMLP) -> bool:
    """Whether the training kernel keeps each program's running weight gradients in registers across its tiles, with
    the weights loaded once before them, instead of adding every tile's gradients to the program's slot in memory.

    fp16 and bf16 networks whose gradients fit (:data:`~neuralbake.kernels.tuning.CARRY_REGISTERS`). fp32 ones keep the slots: their products run at full precision and their weights take
    twice the registers; carried and hoisted they trained slower than with the slots (a reviewer's timing, H200,
    12-32x3). bf16 is checked on the GPU only (tests/kernels/test_gpu_parity.py; the CPU interpreter cannot run bf16 products).
    """
    threads = 32 * tuning.TILES[tile_key("train", packed.hp)][1]
    return packed.dtype in (torch.float16, torch.bfloat16) and packed.slot_size <= tuning.CARRY_REGISTERS * threads



def find_mlp(model: nn.Module) -> tuple[MLP, str, int]:
    """The MLP inside ``model``, its parameter-name prefix and its frequency-encoding octaves (0: none)."""
    if isinstance(model, CoordinateNetwork):
        return model.mlp, "mlp.", model.config.frequencies
    if isinstance(model, MLP):
        return model, "", 0
    raise ConfigError(f"the fused training step runs an MLP or a coordinate network, not {type(model).__name__}.", field="kernels", fix="use --kernels torch.")


class TrainingBuffers:
    """Gradient slots, activation scratch and loss sums of the training kernel for one packed network (``programs``: 2 per SM by default)."""

    def __init__(self, packed: PackedMLP, programs: int | None) -> None:
        p = packed
        device = p.w_in.device
        self.sms = sm_count(device)
        if programs is not None and programs < 1:
            raise ConfigError(f"the fused training step needs at least one program, not {programs}.", field="programs", fix="leave programs unset (two an SM).")
        programs = self.programs = 2 * self.sms if programs is None else programs  # two an SM (two on a CPU)
        self.block_rows = block_rows("train", p.hp)
        self.carry = carries_gradients(p)
        self.grads = torch.zeros(programs, p.slot_size, dtype=torch.float32, device=device)  # each program's slot, written by the program
        self.scratch = torch.empty(programs * max(1, p.hidden) * self.block_rows * p.hp, dtype=p.dtype, device=device)
        self.losses = torch.zeros(programs, dtype=torch.float32, device=device)  # each program's loss sum (not written in upstream mode)
        self.capability = nvidia_capability(device)
        self.gluon_failure: str | None = None
        """Why the Gluon training kernel stopped being used (it failed to compile or launch here), or None."""
        self.kernel = "triton"
        """The kernel the last step ran: ``gluon`` (:mod:`neuralbake.kernels.gluon_train`) or ``triton``."""

    def gluon_reason(self, packed: PackedMLP, loss: str, dx: bool, n: int, columns: int) -> str | None:
        """Why a step of ``n`` rows of ``columns`` inputs cannot run the Gluon kernel, or None."""
        if self.gluon_failure is not None:
            return self.gluon_failure
        return gluon_train.gluon_train_reason(
            device_capability=self.capability, dtype_name=str(packed.dtype).removeprefix("torch."),
            kp=packed.kp, hp=packed.hp, op=packed.op, hidden=packed.hidden, loss=loss, dx=dx, wide=wide_addresses(n * max(columns, packed.outputs, packed.kp)),
        )  # fmt: skip


def launch_training(
    packed: PackedMLP,
    buffers: TrainingBuffers,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    n: int,
    *,
    loss: str,
    scale: torch.Tensor | None = None,
    floor: float = 0.0,
    frequencies: int = 0,
    dx: torch.Tensor | None = None,
    draw: tuple[int, int, int, int] | None = None,
) -> int:
    """Launch the training kernel on ``n`` rows: :mod:`~neuralbake.kernels.gluon_train`'s where
    :meth:`TrainingBuffers.gluon_reason` allows, else :func:`mlp_train_kernel`; returns the number of programs (the
    gradient slots written).

    ``loss`` ``"upstream"``: ``targets`` is the outputs' gradient and ``scale`` is not read; ``dx``: where the input
    rows' gradient goes (upstream mode only). An empty batch has one slot of zeros (and, with a loss, a loss sum of 0).
    ``draw``: ``(seed, transform code, image width, image height)``: the kernel draws its ``n`` rows itself,
    ``inputs`` being the draw counter and ``targets`` the image (see ``SAMPLE`` in :func:`mlp_train_kernel`).
    """
    if n == 0:
        buffers.grads[:1].zero_()  # with the slots, no tile writes it
        if loss == "upstream":
            return 1
    columns = 2 if draw else inputs.shape[1]
    if buffers.gluon_reason(packed, loss, dx is not None, n, columns) is None:
        tile = gluon_train.tile_for(n, buffers.sms)
        grid = (gluon_train.programs_for(triton.cdiv(n, tile[0]), buffers.programs, buffers.sms, tile[1]),)
        try:
            gluon_train.launch(
                grid, tile,
                (inputs, targets, n, buffers.grads, buffers.losses, scale, *packed.buffers()),
                {
                    "K": columns, "O": packed.outputs, "FREQ": frequencies, "OACT": ACTIVATION_CODES[packed.output_activation], "LOSS": LOSS_CODES[loss],
                    "FLOOR": floor, **{k: v for k, v in packed.constants().items() if k != "DOT"},
                    **({} if draw is None else {"SEED": draw[0], "TRANSFORM": draw[1], "IMG_W": draw[2], "IMG_H": draw[3], "SAMPLE": True}),
                },
            )  # fmt: skip
            buffers.kernel = "gluon"
            return grid[0]
        except Exception as exc:  # noqa: BLE001  (a Triton that cannot compile or launch it here: the Triton kernel computes the same step)
            buffers.gluon_failure = gluon_failed(exc, "fused training step", "the Triton kernel")
    buffers.kernel = "triton"
    grid = (min(buffers.programs, max(1, triton.cdiv(n, buffers.block_rows))),)
    with mma_sync():
        mlp_train_kernel[grid](
            inputs, targets, n, buffers.scratch, buffers.grads, buffers.losses, buffers.losses if scale is None else scale,
            buffers.losses if dx is None else dx, *packed.buffers(), K=2 if draw else inputs.shape[1], O=packed.outputs, FREQ=frequencies,
            OACT=ACTIVATION_CODES[packed.output_activation], LOSS=LOSS_CODES[loss], FLOOR=floor, BM=buffers.block_rows, DX=dx is not None,
            CARRY=buffers.carry, **launch_options("train", packed.hp),
            **packed.constants(), **({} if draw is None else {"SEED": draw[0], "TRANSFORM": draw[1], "IMG_W": draw[2], "IMG_H": draw[3], "SAMPLE": True}),
        )  # fmt: skip
    return grid[0]


class FusedForwardBackward:
    """The fused training step (:class:`~neuralbake.nn.trainer.ForwardBackward`) of an MLP or coordinate network.

    ``loss`` is ``mse``, ``l1`` or ``relative_l1`` (means over every output value, as
    ``F.mse_loss``, ``F.l1_loss`` and :func:`neuralbake.bakes.neural_material.model.relative_l1`).
    Gradients come back fp32 (summed over the programs' slots), scaled by the loss scale; the loss
    scale is read on the device, so the whole step can be captured in a CUDA graph
    (``capturable``).
    """

    capturable = True

    def __init__(self, model: nn.Module, loss: str, *, dtype: torch.dtype, floor: float = 0.01, programs: int | None = None) -> None:
        if loss not in LOSS_CODES or loss == "upstream":
            losses = ", ".join(name for name in LOSS_CODES if name != "upstream")
            raise ConfigError(f"unknown fused loss {loss!r}.", field="kernels", fix=f"use one of {losses}.")
        mlp, prefix, self.frequencies = find_mlp(model)
        self.names = [f"{prefix}layers.{i}.{kind}" for i in range(len(mlp.layers)) for kind in ("weight", "bias")]
        own = dict(model.named_parameters())
        missing = [name for name in self.names if name not in own]
        if missing or len(own) != len(self.names):
            raise ConfigError("the fused training step trains every layer of one MLP; this model has other or frozen parameters.", field="kernels", fix="use --kernels torch.")
        self._model = model
        self.packed = PackedMLP.from_mlp(mlp, dtype, training=True)
        self.loss, self.floor = loss, float(floor)
        self.device = mlp.layers[0].weight.device
        self.buffers = TrainingBuffers(self.packed, programs)
        self.draw_counter = torch.zeros((), dtype=torch.int64, device=self.device)
        """Steps taken (int64, on the device; advanced by every :meth:`update_step`): the batch a kernel that draws its own draws next."""

    def __call__(
        self, params: dict[str, torch.Tensor], batch: Batch | None, loss_scale: float | torch.Tensor, *, draws: TexelDraws | None = None, seed: int = 0
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Loss and gradients on ``batch``, or with ``draws`` on the batch the kernel draws itself at the draw counter
        (:meth:`drawn_batch`'s; the counter is not advanced: only :meth:`update_step` does)."""
        p = self.packed
        weights = [params[name] for name in self.names[0::2]]
        p.refresh(weights, [params[name] for name in self.names[1::2]])
        scale = loss_scale if isinstance(loss_scale, torch.Tensor) else torch.tensor(float(loss_scale), device=self.device)
        programs, n = self._launch(batch, scale, draws, seed)
        buffers = self.buffers
        total = buffers.grads[:programs].sum(0)
        loss = buffers.losses[:programs].sum() / (n * p.outputs)
        by_name = dict(zip(self.names, unpack_gradients(p, total)))
        return loss, [by_name[name] for name in params]

    def _launch(self, batch: Batch | None, scale: torch.Tensor, draws: TexelDraws | None = None, seed: int = 0) -> tuple[int, int]:
        """The training kernel on ``batch`` (or, with ``draws``, on a batch it draws itself: :meth:`drawn_batch`'s) with
        the packed weights as they are; returns (programs, rows)."""
        p = self.packed
        if draws is not None:
            n = draws.batch_size
            programs = launch_training(
                p, self.buffers, self.draw_counter, draws.image, n, loss=self.loss, scale=scale.float().reshape(1), floor=self.floor,
                frequencies=self.frequencies, draw=draw_arguments(draws, seed),
            )  # fmt: skip
            return programs, n
        assert batch is not None
        inputs, targets = batch.inputs, batch.targets
        columns = self._columns(inputs.shape[1])
        if inputs.dim() != 2 or targets.dim() != 2 or columns != p.inputs or targets.shape != (inputs.shape[0], p.outputs):
            raise ValueError(
                f"the fused step of a {p.inputs}-input, {p.outputs}-output network got inputs {tuple(inputs.shape)} and targets {tuple(targets.shape)}"
            )
        if self.frequencies or inputs.dtype != p.dtype:
            inputs = inputs.float()
        inputs, targets = inputs.contiguous(), targets.float().contiguous()
        n = inputs.shape[0]
        programs = launch_training(p, self.buffers, inputs, targets, n, loss=self.loss, scale=scale.float().reshape(1), floor=self.floor, frequencies=self.frequencies)
        return programs, n

    def _columns(self, coordinates: int) -> int:
        """The network's input columns for rows of ``coordinates`` values (frequency-encoded or not)."""
        return coordinates * 2 * self.frequencies if self.frequencies else coordinates

    # -- batches drawn in the kernel -------------------------------------------------------------
    def draws_from(self, sampler: Any) -> TexelDraws | None:
        """What ``sampler`` draws, where this step can draw it in its kernel instead (None: the trainer calls the sampler).

        The sampler must say (``texel_draws()``, :class:`~neuralbake.nn.trainer.TexelDraws`), the network must take the
        two coordinates (frequency-encoded or not) and give the image's channels. Drawn in the kernel, a batch saves
        the sampler's ten or so small launches a step.
        """
        describe = getattr(sampler, "texel_draws", None)
        draws = describe() if describe is not None else None
        if draws is None:
            return None
        p = self.packed
        columns = self._columns(2)
        image = draws.image
        if (
            draws.transform not in draws.TRANSFORMS or image.dim() != 3 or image.shape[2] != p.outputs or columns != p.inputs
            or image.device != self.device or draws.batch_size < 1
        ):  # fmt: skip
            return None
        return type(draws)(image=image.float().contiguous(), transform=draws.transform, batch_size=draws.batch_size)

    def seek_draws(self, step: int) -> None:
        """Set the draw counter: the next step draws the batch of step ``step`` (the trainer's step count)."""
        self.draw_counter.fill_(int(step))

    def drawn_batch(self, draws: TexelDraws, seed: int) -> Batch:
        """The batch the next step will draw (the counter as it stands): the uv and the targets, for checks."""
        n, (seed, code, width, height) = draws.batch_size, draw_arguments(draws, seed)
        uv = torch.empty(n, 2, device=self.device)
        texels = torch.empty(n, dtype=torch.int64, device=self.device)
        draw_uv_kernel[(triton.cdiv(n, 128),)](uv, texels, self.draw_counter, n, seed, width, height, TRANSFORM=code, BM=128)
        return Batch(inputs=uv, targets=draws.image.reshape(-1, draws.image.shape[2])[texels])

    # -- the whole optimizer step on the GPU -------------------------------------------------------
    fuses_update = True
    """The trainer may hand this object its whole step (:meth:`update_step`) instead of running Adam itself."""

    reduce_block, reduce_rows, adam_block = 128, 64, 128
    """Slot columns per program of the gradient sum (and slots summed at once), master values per program of Adam (and
    of the pack). Small Adam programs and wide sums: in a graphed RTXNS step at 2^14 rows on an H100 Adam took 3.0 µs at
    128 values a program against 8.4 at 1024, and the sum of 256 slots 4.9 µs at 64 at once against 8.9 at 16
    (``bench/kernels.py --profile-step``, and ``--profile-step 1024 16`` for the earlier setting)."""

    @staticmethod
    def can_update(optimizer: torch.optim.Optimizer) -> str | None:
        """Why :meth:`update_step` cannot stand in for ``optimizer`` (None: it can)."""
        if not isinstance(optimizer, torch.optim.Adam) or len(optimizer.param_groups) != 1:
            return "it runs one Adam parameter group"
        group = optimizer.param_groups[0]
        if group["weight_decay"] or group["amsgrad"] or group["maximize"] or not isinstance(group["lr"], torch.Tensor):
            return "it runs plain Adam (no weight decay, amsgrad or maximize) with the learning rate as a device tensor"
        return None

    updated = False
    """Whether :meth:`update_step` has run (the trainer took the fused optimizer step)."""

    adam_state: FusedAdamState | None = None
    """The fused optimizer step's buffers (masters, Adam's moments, the summed gradient, the flags), made by the first
    :meth:`update_step`; None before it. Benchmarks and tests read the gradient sum and the ticket here."""

    def rehearse(self, batch: Batch | None, loss_scale: str = "dynamic", draws: TexelDraws | None = None, seed: int = 0) -> None:
        """Run :meth:`update_step` once on copies of the weights with a scratch optimizer and a ``loss_scale`` scaler.

        Compiles and runs every kernel of the fused step as the run will (``loss_scale``: the run's
        mode, whose update kernel differs), so a bake can try them before training
        (``kernels.try_kernels``) and fall back to PyTorch when this machine cannot run them. It
        works on buffers of its own: the model and a trainer's masters and moments are untouched,
        and every step packs its own weights. With ``draws`` (:meth:`draws_from`'s) and the run's ``seed``, the kernel
        draws the batch, as the run will; the draw counter is left as it was.
        """
        own = dict(self._model.named_parameters())
        copies = {name: nn.Parameter(own[name].detach().float().clone()) for name in self.names}
        optimizer = torch.optim.Adam(list(copies.values()), lr=torch.tensor(1e-3, device=self.device))
        counters = [torch.zeros((), device=self.device) for _ in range(5)]
        saved, updated, drawn = self.adam_state, self.updated, self.draw_counter.clone()
        self.adam_state = None
        try:
            self.update_step(batch, copies, optimizer, LossScaler(loss_scale, device=self.device), counters[0], counters[1:], draws=draws, seed=seed)
        finally:
            self.adam_state, self.updated = saved, updated
            self.draw_counter.copy_(drawn)

    def _attach(self, master: dict[str, torch.Tensor], optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
        """Make the masters and Adam's moments views of this object's flat buffers (copying their values in); returns the masters.

        The parameters and ``optimizer.state`` stay what PyTorch expects (checkpoints, evaluation and a
        PyTorch step see ordinary tensors, always current; every parameter keeps its own step count);
        a no-op while they already are these views. A resumed checkpoint (new state tensors) or
        parameters replaced from outside are taken in again.
        """
        params = [master[name] for name in self.names]
        flat = self.adam_state
        if flat is not None and flat.holds(params, optimizer):
            return params
        if self.can_update(optimizer) is not None:
            raise ConfigError(f"the fused optimizer step cannot stand in for this optimizer: {self.can_update(optimizer)}.", field="kernels", fix="use --kernels torch.")
        sizes = [param.numel() for param in params]
        if flat is None or flat.sizes != sizes:
            flat = self.adam_state = FusedAdamState(self.packed, sizes, self.device, self.reduce_block)
        flat.take(params, optimizer)
        return params

    def update_step(
        self,
        batch: Batch | None,
        master: dict[str, torch.Tensor],
        optimizer: torch.optim.Optimizer,
        scaler: LossScaler,
        found_inf: torch.Tensor,
        counters: Sequence[torch.Tensor],
        *,
        draws: TexelDraws | None = None,
        seed: int = 0,
    ) -> None:
        """One whole training step on the GPU, the trainer's :meth:`~neuralbake.nn.trainer.Trainer._device_step` in four launches.

        The fp32 masters packed into the compute weights (every step, so whatever changed them
        between steps, a projection in an ``on_step`` hook or a loaded checkpoint, is what trains;
        in a CUDA graph, edits in place: a parameter whose storage is replaced is not seen by a
        replay, as on the PyTorch graph path); the training kernel (forward, loss, backward); the gradients summed,
        unscaled and checked for inf/NaN; Adam on the masters (skipped on inf/NaN, as for an empty
        batch, whose loss is 0/0) and, in the same launch, the step counts, the loss scale and the trainer's ``counters``
        (loss sum, clean-step count, skipped steps, the run of non-finite steps); ``found_inf`` is
        set to 1.0 for a skipped step. After the first call nothing syncs with the host, so the
        step can be captured in a graph. With ``draws`` (:meth:`draws_from`'s; ``batch`` is then not read) the training
        kernel draws the step's batch itself, from Philox keyed by ``seed`` at the draw counter, which the step
        advances (:meth:`seek_draws`, :meth:`drawn_batch`).
        """
        params = self._attach(master, optimizer)
        flat = self.adam_state
        assert flat is not None
        p = self.packed
        self.updated = True
        adam_grid = (triton.cdiv(p.slot_size, self.adam_block),)
        pack_kernel[adam_grid](flat.index, flat.master, p.flat_w, p.flat_b, p.slot_size, BLOCK=self.adam_block)
        programs, n = self._launch(batch, scaler.scale_tensor, draws, seed)
        group = optimizer.param_groups[0]
        beta1, beta2 = group["betas"]
        flags_p = triton.next_power_of_2(flat.blocks)
        loss_sum, loss_count, skipped, nonfinite_run = counters
        reduce_slots_kernel[(flat.blocks,)](
            self.buffers.grads, programs, p.slot_size, self.buffers.losses, float(n * p.outputs), scaler.scale_tensor, flat.grad,
            flat.flags, flat.loss, flat.ticket, BLOCK=self.reduce_block, PB=self.reduce_rows, PP=triton.next_power_of_2(programs),
        )  # fmt: skip
        adam_kernel[adam_grid](
            flat.grad, flat.index, flat.master, flat.m, flat.v, flat.flags, flat.blocks, flat.steps, group["lr"],
            float(beta1), float(beta2), float(group["eps"]), p.slot_size, flat.ticket, flat.loss, scaler.scale_tensor, scaler.clean_steps_tensor,
            scaler.overflows_tensor, loss_sum, loss_count, skipped, nonfinite_run, found_inf, self.draw_counter, len(params), float(scaler.growth_factor),
            float(scaler.backoff_factor), int(scaler.growth_interval), DYNAMIC=scaler.mode == "dynamic", BLOCK=self.adam_block, FP=flags_p,
            SP=triton.next_power_of_2(len(params)),
        )  # fmt: skip


class FusedAdamState:
    """The fused optimizer step's buffers for one network: the fp32 masters, Adam's moments and step
    counts (flat, in ``FusedForwardBackward.names`` order), the summed gradient and the inf/NaN
    flags (slot layout), the loss, and the slot -> master index."""

    def __init__(self, packed: PackedMLP, sizes: list[int], device: torch.device, block: int) -> None:
        total = sum(sizes)
        self.sizes = sizes
        self.master, self.m, self.v = (torch.zeros(total, device=device) for _ in range(3))
        self.steps = torch.zeros(len(sizes), device=device)
        self.grad = torch.zeros(packed.slot_size, device=device)
        self.blocks = triton.cdiv(packed.slot_size, block)  # one inf/NaN flag per block of the gradient sum
        self.flags = torch.zeros(self.blocks, device=device)
        self.loss = torch.zeros((), device=device)
        self.ticket = torch.zeros((), dtype=torch.int32, device=device)  # Adam's programs count themselves out (zeroed by the gradient sum)
        self.index = master_index(packed, sizes).to(device)
        self.views: list[tuple[torch.Tensor, torch.Tensor]] = []

    def holds(self, params: list[torch.Tensor], optimizer: torch.optim.Optimizer) -> bool:
        """Whether ``params`` and their optimizer state are (still) views of these buffers."""
        return len(self.views) == len(params) and all(
            param.data_ptr() == view.data_ptr() and optimizer.state.get(param, {}).get("exp_avg", param).data_ptr() == moment.data_ptr()
            for param, (view, moment) in zip(params, self.views)
        )

    def take(self, params: list[torch.Tensor], optimizer: torch.optim.Optimizer) -> None:
        """Copy the parameters and their Adam state in and make them views of these buffers."""
        starts = [sum(self.sizes[:i]) for i in range(len(self.sizes))]
        cut = lambda flat, at, param: flat[at : at + param.numel()].view_as(param)
        # copies first: the state may be views of these very buffers (one parameter replaced from outside)
        states = [{key: value.detach().clone() for key, value in optimizer.state.get(param, {}).items()} for param in params]
        counts = {float(state["step"]) for state in states if "step" in state}
        if len(counts) > 1 or (counts and any("step" not in state for state in states)):
            raise ConfigError(
                "the fused optimizer step keeps one Adam step count for the whole network; this optimizer state has several.",
                field="kernels",
                fix="use --kernels torch to go on from this state.",
            )
        self.views = []
        with torch.no_grad():
            for i, (param, at, state) in enumerate(zip(params, starts, states)):
                view, m, v = cut(self.master, at, param), cut(self.m, at, param), cut(self.v, at, param)
                view.copy_(param)
                param.data = view
                m.zero_()
                v.zero_()
                if "exp_avg" in state:  # a step was taken (or a checkpoint loaded) before
                    m.copy_(state["exp_avg"])
                    v.copy_(state["exp_avg_sq"])
                self.steps[i] = float(state["step"]) if "step" in state else 0.0
                optimizer.state[param] = {"step": self.steps[i], "exp_avg": m, "exp_avg_sq": v}
                self.views.append((view, m))


def draw_arguments(draws: TexelDraws, seed: int) -> tuple[int, int, int, int]:
    """``(seed, transform code, image width, image height)`` of a batch drawn in a kernel (:func:`launch_training`'s ``draw``)."""
    height, width, _ = draws.image.shape
    return int(seed), draws.TRANSFORMS.index(draws.transform), width, height


def master_index(p: PackedMLP, sizes: Sequence[int]) -> torch.Tensor:
    """int32 ``[slot_size]``: for each position of the packed/slot layout, the flat master index it holds (-1: padding).

    Masters are ``[weight0, bias0, weight1, ...]`` flattened in order (``sizes``), weights ``[out, in]``:
    their indices go into the slot exactly as :meth:`PackedMLP.refresh` copies values.
    """
    index = torch.full((p.slot_size,), -1, dtype=torch.int32)
    weights, biases = p.layer_views(index, index)
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    for layer, (weight, bias) in enumerate(zip(weights, biases, strict=True)):
        fan_in, fan_out = weight.shape
        weight.copy_(torch.arange(starts[2 * layer], starts[2 * layer] + fan_in * fan_out, dtype=torch.int32).view(fan_out, fan_in).t())
        bias.copy_(torch.arange(starts[2 * layer + 1], starts[2 * layer + 1] + fan_out, dtype=torch.int32))
    return index


def unpack_gradients(p: PackedMLP, flat: torch.Tensor) -> list[torch.Tensor]:
    """A gradient slot as ``[weight0, bias0, weight1, ...]`` in ``nn.Linear`` shapes (views of ``flat``)."""
    weights, biases = p.layer_views(flat, flat)
    return [g for weight, bias in zip(weights, biases, strict=True) for g in (weight.t(), bias)]


class FusedMLP:
    """One MLP's forward and backward on the fused kernels, as a step inside autograd.

    ``__call__(x)`` is ``mlp(x)`` with the MLP's current weights (those ``torch.func.functional_call``
    swaps in, in whatever dtype they come: one packed copy per dtype); its backward is the training
    kernel in upstream mode, which returns the gradients of the weights and biases (summed over the
    programs' slots, in fp32, cast to each tensor's dtype) and of the input rows. So any model with
    MLP parts (the neural material's encoder and decoder) trains through the kernels while autograd
    does the rest: the loss, the glue between the parts, frozen layers (buffers get no gradient).
    """

    def __init__(self, mlp: MLP, *, programs: int | None = None) -> None:
        self.mlp = mlp
        self.programs = programs
        self._packed: dict[tuple[torch.dtype, torch.device], tuple[PackedMLP, TrainingBuffers]] = {}

    def _network(self, tensors: Sequence[torch.Tensor]) -> tuple[PackedMLP, TrainingBuffers]:
        key = (tensors[0].dtype, tensors[0].device)
        if key not in self._packed:
            packed = PackedMLP.from_mlp(self.mlp, tensors[0].dtype, training=True)
            self._packed[key] = packed, TrainingBuffers(packed, self.programs)
        return self._packed[key]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        layers = self.mlp.layers
        tensors = [layer.weight for layer in layers] + [layer.bias for layer in layers]
        shape = x.shape
        y = _FusedMLPFunction.apply(self, x.reshape(-1, shape[-1]), *tensors)
        return y.reshape(*shape[:-1], y.shape[-1])

    def forward(self, x: torch.Tensor, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        packed, _ = self._network(tensors)
        half = len(tensors) // 2
        packed.refresh(tensors[:half], tensors[half:])
        return mlp_forward(packed, x, out_dtype=packed.dtype)

    def backward(
        self, x: torch.Tensor, dy: torch.Tensor, tensors: Sequence[torch.Tensor], *, input_gradient: bool = True
    ) -> tuple[torch.Tensor | None, list[torch.Tensor]]:
        """Gradients of the input rows (when ``input_gradient``) and of ``tensors`` (weights, then biases) for the upstream gradient ``dy``."""
        packed, buffers = self._network(tensors)
        half = len(tensors) // 2
        packed.refresh(tensors[:half], tensors[half:])  # another forward may have run since ours
        n = x.shape[0]
        x = x.contiguous() if x.dtype == packed.dtype else x.float().contiguous()
        dy = dy.float().contiguous()
        dx = torch.empty(n, packed.inputs, dtype=torch.float32, device=x.device) if input_gradient else None
        programs = launch_training(packed, buffers, x, dy, n, loss="upstream", dx=dx)
        interleaved = unpack_gradients(packed, buffers.grads[:programs].sum(0))
        grads = interleaved[0::2] + interleaved[1::2]
        return dx, [g.to(t.dtype) for g, t in zip(grads, tensors, strict=True)]


class _FusedMLPFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, runner: FusedMLP, x: torch.Tensor, *tensors: torch.Tensor) -> torch.Tensor:
        ctx.runner = runner
        ctx.save_for_backward(x, *tensors)
        return runner.forward(x, tensors)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
        x, *tensors = ctx.saved_tensors
        dx, grads = ctx.runner.backward(x, dy, tensors, input_gradient=ctx.needs_input_grad[1])
        return (None, None if dx is None else dx.to(x.dtype), *grads)

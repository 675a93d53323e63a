"""The fused kernels as PyTorch callables: packed weights, decoders and the training step.

- :class:`PackedMLP`: a network's weights in the kernels' layout (transposed, padded, one block per
  layer kind), refreshed in place so a CUDA graph can capture the kernels that read them.
- :func:`mlp_forward`: any supported MLP (or frequency-encoded coordinate network) on rows.
- :class:`FusedNeuralMaterial`: a baked neural material's decode, latent fetch included.
- :class:`FusedNTC`: NTC decode of random texels or of a whole mip level.
- :class:`FusedForwardBackward`: the trainer's :class:`~neuralbake.nn.trainer.ForwardBackward`
  for plain MLPs and coordinate networks (MSE, L1 or relative-L1 loss), capturable in a CUDA graph.

Every one has its PyTorch reference elsewhere in the project (the modules it names), and the tests
compare them value by value under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import warnings
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
import triton
from torch import nn

from neuralbake.errors import ConfigError
from neuralbake.kernels import ACTIVATION_CODES, DIRECTION_CODES, LOSS_CODES, gluon_decode, gluon_train, unsupported_reason
from neuralbake.kernels.triton_mlp import (
    _adam_kernel,
    _draw_uv_kernel,
    _mlp_kernel,
    _mlp_train_kernel,
    _neural_material_kernel,
    _ntc_kernel,
    _pack_kernel,
    _reduce_slots_kernel,
)
from neuralbake.nn.mlp import MLP, CoordinateNetwork

if TYPE_CHECKING:
    from neuralbake.bakes.neural_material.model import NeuralMaterial
    from neuralbake.bakes.ntc.container import NTCContainer
    from neuralbake.bakes.ntc.int8 import Int8Calibration
    from neuralbake.nn.precision import LossScaler
    from neuralbake.nn.trainer import Batch, TexelDraws

__all__ = ["FusedForwardBackward", "FusedMLP", "FusedNTC", "FusedNeuralMaterial", "PackedMLP", "mlp_forward"]


def _pad(n: int, dtype: torch.dtype, minimum: int | None = None) -> int:
    """The kernels' width for ``n``: a power of two, at least ``minimum``; by default 16 (``tl.dot``'s smallest depth),
    32 for int8 (the int8 MMA's depth)."""
    if minimum is None:
        minimum = 32 if dtype == torch.int8 else 16
    return max(minimum, 1 << (int(n) - 1).bit_length())


TILES: dict[str, tuple[int, int]] = {
    "forward": (128, 2),
    "forward_wide": (64, 2),
    "trilinear": (128, 4),
    "trilinear_wide": (64, 2),
    "ntc": (128, 4),
    "ntc_wide": (32, 1),
    "train": (64, 4),
    "train_wide": (32, 2),
}
"""``(rows per program, warps per program)`` by kernel kind; ``_wide`` for hidden layers over 64.

Every launch compiles with Hopper's warpgroup MMA turned off (:func:`mma_sync`), so ``tl.dot``
is ``mma.sync`` whatever the warp count: Triton 3.6's warpgroup code for these kernels crashed
(compute-sanitizer: invalid shared-memory reads, out-of-range local addresses) or gave wrong values
in about half of the tile shapes tried with 4 or more warps (a fused MLP, the neural-material and
NTC decodes). The sizes are the fastest of sweeps on an H100 and H200s (bench/kernels.py --sweep;
bench/kernels_parity.py checks them); with ``mma.sync`` at any warp count the NTC decode and the
training step gained from 4 warps (2026-11-26, H200: 3.2 against 2.9 G texels/s, 485 against 321 M
training samples/s at 2^18 rows). ``trilinear`` is the neural-material decode with a level per sample
(two sets of bilinear taps): on an H100 (2026-11-26, ``--sweep trilinear``, 2^22 samples) it ran 10.2 G samples/s
at 128 x 4 against 8.5 at the bilinear decode's 128 x 2. ``trilinear_wide`` is
``forward_wide``'s tile, not swept (``--sweep trilinear`` sets the narrow key).
"""


REGISTERS: dict[str, int | None] = {kind: None for kind in TILES}
"""A register cap per thread by kernel kind, keyed as :data:`TILES` (Triton's ``maxnreg``; None: the compiler's choice).

The decodes are latency-bound at 12-19 % occupancy, limited by registers (Nsight Compute on an H200,
2026-11-26: the neural-material decode at 255 registers a thread and 12.5 % occupancy, the NTC decode
at 158 and 18.8 %, issue slots 39-45 % busy). Caps of 80-168 registers swept on H200s
(``bench/kernels.py --sweep KIND ROWS WARPS REGISTERS``) moved the rates by no more than the
machine-to-machine spread (about 10 %), so none is set.
"""


HALF_SUMS = True
"""Whether the decodes of fp16 networks sum their hidden layers in fp16 (:attr:`PackedMLP.half_sums`).

The products of each hidden layer are summed on the tensor cores in fp16, starting from the bias,
and the activation runs on packed fp16 pairs, as tiny-cuda-nn's fully fused MLPs accumulate; the
output layer still sums in fp32. Half the accumulator registers and fewer instructions between
the matrix products. ``bench/kernels.py --ab`` on an H100 (2026-11-26, fp32 sums -> fp16 sums):
the neural-material decode 12.4 -> 13.5 G samples/s, the plain MLP 12.6 -> 14.6, the NTC 4K frame
1.77 -> 1.58 ms; the error against the fp32 network, relative to max(|v|, 1), 7.5e-5 -> 1.2e-4
(decode), 1.3e-4 -> 2.2e-4 (MLP), 6.3e-5 -> 1.0e-4 (NTC). Training kernels, and the forward of
:class:`FusedMLP` (which the training kernel differentiates), always sum in fp32. A partial sum past
fp16's range (65,504) becomes inf, where an fp32 sum would not, and ReLU's ``max`` then turns a NaN
(inf - inf) into 0: networks with such activations decode in fp32 (set this False). False: every
decode sums in fp32.
"""


NARROW_OUTPUTS = True
"""Whether a decode's output layer pads to a power of two of at least 4 instead of 16 (:class:`PackedMLP`).

Triton 3.6 pads a narrow product on the tensor cores itself; the decode's epilogue (``expm1``, the
hemisphere test, the store) then runs over 4 columns instead of 16. Static SASS of the neural-material
decode (bench/kernels_sass.py, Triton 3.6): 1,848 -> 1,576 instructions per program; ``bench/kernels.py --ab`` on an H100 (2026-11-26):
12.3 -> 13.5 G samples/s bilinear. Training keeps 16: the backward's products take the
outputs as their depth, which ``tl.dot`` wants at least 16. False: 16 everywhere. Read when a
:class:`PackedMLP` is built (as :data:`SPLIT_FEATURES` is when a :class:`FusedNeuralMaterial` is;
:data:`HALF_SUMS` at every launch).
"""


SPLIT_FEATURES = True
"""Whether the neural-material decode builds its latents and direction features as two half-width
tiles joined side by side, where both fit in half the input width (:attr:`FusedNeuralMaterial.feature_columns`).

The bilinear taps then load and blend only half the columns. The copper tray's shape (8 latents,
wi and wo: 14 inputs in 16 columns), ``bench/kernels.py --ab`` on an H100 (2026-11-26, one tile
-> split): 9.9 -> 13.5 G samples/s bilinear, 6.4 -> 10.1 trilinear; the same values. False: one
tile of the full input width.
"""


HALF_ACTIVATIONS = False
"""Whether the training kernel of an fp16 network with ReLU or leaky ReLU hidden layers (:attr:`PackedMLP.half_activations`),
and :class:`FusedMLP`'s forward that it differentiates, round each hidden layer's fp32 sum to fp16 before the activation
and compute the activation and its slope on fp16 values, bit for bit as PyTorch's fp16 layers do (the linear output is
rounded, then activated). Off by default: it cost 15 % of the RTXNS network's training rate at 2^18 rows on an H100
(``bench/kernels.py --ab-train``, 2026-11-26: 811 against 956 M rows/s; the leaky ReLU's product in fp32 and its
conversions). Off, the activation runs in fp32 on the unrounded sum, rounded after: the same values for ReLU; for leaky
ReLU some of the negative activations differ from PyTorch's in their last bit. Read at every launch.
"""

HOIST_WEIGHTS = True
"""Whether the training kernel loads the weights once, before its tiles, where it carries the gradients in registers
(:data:`CARRY_GRADIENTS`), instead of at every tile. Read at every launch."""

CARRY_GRADIENTS = True
"""Whether the training kernel keeps each program's running weight gradients in registers across its tiles
(fp16 and bf16 networks whose gradients fit: :func:`_carries`) instead of adding every tile's gradients to the
program's slot in memory. Read when a network's training buffers are built (:class:`FusedForwardBackward`, the first
backward of a :class:`FusedMLP` in a dtype)."""

DRAW_BATCHES = True
"""Whether :class:`FusedForwardBackward` draws a sampler's batches in the training kernel where the sampler says what
they are (:class:`~neuralbake.nn.trainer.TexelDraws`: uniform uv, nearest texels), instead of the trainer calling the
sampler (about ten small launches a step). Read when a trainer is built."""

CARRY_REGISTERS = 128
"""The most registers a thread the weight and bias gradients may take by :func:`_carries`'s estimate (their fp32 values
over the program's threads). The estimate leaves out the working registers, the hoisted weights and the bias
accumulators' padding to 16 rows, so every carried kernel measured sits at the 255-register cap with some spills,
and was still as fast as the slots or faster (see docs/benchmarks.md)."""


def _carries(packed: PackedMLP) -> bool:
    """Whether the training kernel carries ``packed``'s gradients in registers (:data:`CARRY_GRADIENTS`).

    fp16 and bf16 networks. fp32 ones keep the slots: their products run at full precision and their weights take
    twice the registers; carried and hoisted they trained slower than with the slots (a reviewer's timing, H200,
    12-32x3). bf16 is checked on the GPU only (bench/kernels_parity.py; the CPU interpreter cannot run bf16 products).
    """
    threads = 32 * TILES[_tile_key("train", packed.hp)][1]
    return CARRY_GRADIENTS and packed.dtype in (torch.float16, torch.bfloat16) and packed.slot_size <= CARRY_REGISTERS * threads


def _tile_key(kind: str, hidden: int) -> str:
    """The key of :data:`TILES` and :data:`REGISTERS` for a kernel kind and hidden width."""
    return f"{kind}_wide" if hidden > 64 else kind


def _launch_options(kind: str, hidden: int) -> dict[str, int]:
    key = _tile_key(kind, hidden)
    options = {"num_warps": TILES[key][1]}
    if REGISTERS[key] is not None:
        options["maxnreg"] = int(REGISTERS[key])
    return options


_MMA_LOCK = threading.Lock()


@contextlib.contextmanager
def mma_sync() -> Iterator[None]:
    """Compile the kernels launched inside with ``mma.sync`` only (Triton's ``DISABLE_MMA_V3``).

    Triton reads the variable when it compiles a kernel, and its on-disk cache is keyed on it; its
    in-memory cache of a process is not, so every launch of a ``tl.dot`` kernel in this module goes
    through here (a kernel first compiled outside would be reused inside). The variable is set only
    around these launches, and a lock keeps two of them from interleaving their set and restore.
    Other Triton code, such as ``torch.compile``'s GEMMs, keeps the warpgroup MMA, except a compile
    that happens on another thread during one of these launches: it sees the variable too (only a
    speed difference, never a wrong result).
    """
    with _MMA_LOCK:
        previous = os.environ.get("DISABLE_MMA_V3")
        os.environ["DISABLE_MMA_V3"] = "1"
        try:
            yield
        finally:
            if previous is None:
                del os.environ["DISABLE_MMA_V3"]
            else:
                os.environ["DISABLE_MMA_V3"] = previous


def _wide(*element_counts: int) -> bool:
    """Whether a kernel must compute addresses in int64 (some buffer reaches 2^31 elements); int32 is faster."""
    return max(element_counts) >= 1 << 31


def _nvidia_capability(device: torch.device) -> tuple[int, int] | None:
    """The compute capability of an NVIDIA GPU (None on a CPU or a ROCm GPU: the Gluon kernels' gates read it)."""
    return torch.cuda.get_device_capability(device) if device.type == "cuda" and torch.version.hip is None else None


def _sm_count(device: torch.device) -> int:
    """The SMs of a CUDA GPU (1 elsewhere: a Gluon kernel on Triton's CPU interpreter runs one program at a time)."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1


def _gluon_failed(exc: Exception, work: str, fallback: str) -> str:
    """Why a Gluon kernel cannot run here after ``exc`` (a Triton that cannot compile or launch it), warned once for
    ``work``, which takes ``fallback`` from then on."""
    first_line = str(exc).splitlines()[0][:200] if str(exc) else ""
    reason = f"the Gluon kernel failed here ({type(exc).__name__}: {first_line})"
    warnings.warn(f"{work}: {reason}; using {fallback}", RuntimeWarning, stacklevel=3)
    return reason


def _block_rows(kind: str, hidden: int) -> int:
    """Rows per program of a kernel kind (:data:`TILES`)."""
    return TILES[_tile_key(kind, hidden)][0]


class PackedMLP:
    """An MLP's weights in the kernels' layout.

    ``weights`` are ``[out, in]`` (``nn.Linear``'s), ``len(weights) >= 2``: the input layer, the
    hidden-to-hidden layers, the output layer. Every hidden width pads to the widest (``HP``), the
    inputs to ``KP`` and the outputs to ``OP`` (a power of two, at least 16 with ``training``, at
    least 4 for the decodes); weights are stored ``[in, out]`` in ``dtype``, biases in fp32.
    """

    def __init__(
        self,
        weights: Sequence[torch.Tensor],
        biases: Sequence[torch.Tensor],
        *,
        hidden_activation: str,
        output_activation: str,
        leak: float,
        dtype: torch.dtype,
        training: bool = False,
    ) -> None:
        widths = [int(weights[0].shape[1])] + [int(w.shape[0]) for w in weights]
        reason = unsupported_reason(widths, [hidden_activation, output_activation], training=training)
        if reason is not None:
            raise ConfigError(f"the fused kernels cannot run this network: {reason}.", field="kernels", fix="use --kernels torch.")
        if dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.int8):
            raise ConfigError(f"the fused kernels run fp16, bf16, fp32 or int8 weights, not {dtype}.", field="kernels", fix="use --kernels torch.")
        if dtype == torch.int8 and training:
            raise ConfigError("int8 weights are for decoding only.", field="kernels", fix="train in fp16, bf16 or fp32.")
        device = weights[0].device
        self.widths, self.dtype = widths, dtype
        self.inputs, self.outputs = widths[0], widths[-1]
        self.kp, self.hp = _pad(widths[0], dtype), _pad(max(widths[1:-1]), dtype)
        # The outputs pad to 16 for training (the backward's products take them as their depth, which tl.dot wants
        # >= 16); a decode's output layer only needs a power of two: 4 columns for an RGB decode instead of 16 cut the
        # neural-material decode's instructions by 15 % (its expm1 and store ran over all 16).
        self.op = _pad(widths[-1], dtype) if training or not NARROW_OUTPUTS else _pad(widths[-1], dtype, minimum=4)
        self.hidden = len(weights) - 2
        self.hidden_activation, self.output_activation, self.leak = hidden_activation, output_activation, float(leak)
        self.training = training
        kp, hp, op, hidden = self.kp, self.hp, self.op, self.hidden
        # Every buffer is a view of two flat ones in the training kernel's gradient-slot layout
        # ([w_in | b_in | w_hid | b_hid | w_out | b_out]; weights in `flat_w`, biases in `flat_b`),
        # so the fused optimizer step writes a whole network with one index.
        self.offsets = {"w_in": 0, "b_in": kp * hp, "w_hid": kp * hp + hp}
        self.offsets["b_hid"] = self.offsets["w_hid"] + hidden * hp * hp
        self.offsets["w_out"] = self.offsets["b_hid"] + hidden * hp
        self.offsets["b_out"] = self.offsets["w_out"] + hp * op
        self.slot_size = self.offsets["b_out"] + op
        self.flat_w = torch.zeros(self.slot_size, dtype=dtype, device=device)
        self.flat_b = torch.zeros(self.slot_size, dtype=torch.float32, device=device)
        part = lambda flat, name, *shape: flat[self.offsets[name] : self.offsets[name] + math.prod(shape)].view(*shape)
        self.w_in, self.b_in = part(self.flat_w, "w_in", kp, hp), part(self.flat_b, "b_in", hp)
        if hidden:
            self.w_hid, self.b_hid = part(self.flat_w, "w_hid", hidden, hp, hp), part(self.flat_b, "b_hid", hidden, hp)
        else:  # the kernels take a (never read) hidden block either way
            self.w_hid, self.b_hid = torch.zeros(1, hp, hp, dtype=dtype, device=device), torch.zeros(1, hp, device=device)
        self.w_out, self.b_out = part(self.flat_w, "w_out", hp, op), part(self.flat_b, "b_out", op)
        self._weight_views, self._bias_views = self.layer_views(self.flat_w, self.flat_b)
        self.refresh(weights, biases)

    def layer_views(self, weights: torch.Tensor, biases: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Each layer's weight (``[in, out]``) and bias as views of two flat tensors in the slot layout.

        The one place that knows where a layer sits: the packed buffers, a gradient slot
        (:func:`_unpack_gradients`) and the optimizer step's master index (:func:`_master_index`) all
        read it through here.
        """
        widths, hp = self.widths, self.hp
        at = self.offsets
        block = lambda flat, start, rows, columns: flat[start : start + rows * columns].view(rows, columns)
        weight_views = [block(weights, at["w_in"], self.kp, hp)[: widths[0], : widths[1]]]
        weight_views += [block(weights, at["w_hid"] + i * hp * hp, hp, hp)[: widths[i + 1], : widths[i + 2]] for i in range(self.hidden)]
        weight_views.append(block(weights, at["w_out"], hp, self.op)[: widths[-2], : widths[-1]])
        bias_views = [biases[at["b_in"] : at["b_in"] + widths[1]]]
        bias_views += [biases[at["b_hid"] + i * hp : at["b_hid"] + i * hp + widths[i + 2]] for i in range(self.hidden)]
        bias_views.append(biases[at["b_out"] : at["b_out"] + widths[-1]])
        return weight_views, bias_views

    @classmethod
    def from_mlp(cls, mlp: MLP, dtype: torch.dtype | None = None, *, training: bool = False) -> PackedMLP:
        config = mlp.config
        return cls(
            [layer.weight for layer in mlp.layers],
            [layer.bias for layer in mlp.layers],
            hidden_activation=config.hidden_activation,
            output_activation=config.output_activation,
            leak=config.leak,
            dtype=dtype or mlp.layers[0].weight.dtype,
            training=training,
        )

    def refresh(self, weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor]) -> None:
        """Copy new weight values in (same shapes); the buffers keep their addresses."""
        with torch.no_grad():
            for view, weight in zip(self._weight_views, weights):
                view.copy_(weight.t())
            for view, bias in zip(self._bias_views, biases):
                view.copy_(bias)

    def buffers(self) -> tuple[torch.Tensor, ...]:
        return self.w_in, self.b_in, self.w_hid, self.b_hid, self.w_out, self.b_out

    def constants(self) -> dict[str, Any]:
        """The network's compile-time constants shared by every kernel."""
        return {
            "KP": self.kp,
            "HP": self.hp,
            "OP": self.op,
            "HIDDEN": self.hidden,
            "HACT": ACTIVATION_CODES[self.hidden_activation],
            "LEAK": self.leak,
            "DOT": "ieee" if self.dtype == torch.float32 else "tf32",
        }

    @property
    def half_sums(self) -> bool:
        """Whether the decodes sum the hidden layers in fp16: :data:`HALF_SUMS`, fp16 weights, a leak in [0, 1]
        (the fp16 leaky ReLU is ``max(x, leak x)``), and not packed for training (:class:`FusedMLP`'s forward
        must compute the function its fp32-sum backward differentiates)."""
        return HALF_SUMS and not self.training and self.dtype == torch.float16 and 0.0 <= self.leak <= 1.0

    @property
    def half_activations(self) -> bool:
        """Whether the training kernel, and :class:`FusedMLP`'s forward that it differentiates, round each hidden sum to fp16
        before the activation, bit for bit PyTorch's fp16 layers (:data:`HALF_ACTIVATIONS`): packed for training, fp16
        weights, ReLU, or leaky ReLU with a leak >= 0 (the slope is read from the output's sign)."""
        return HALF_ACTIVATIONS and self.training and self.dtype == torch.float16 and self.hidden_activation in ("relu", "leaky_relu") and self.leak >= 0.0

    @property
    def block_rows(self) -> int:
        return _block_rows("forward", self.hp)


def mlp_forward(packed: PackedMLP, inputs: torch.Tensor, *, frequencies: int = 0, out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``[N, outputs]`` for input rows ``[N, inputs]``; with ``frequencies``, rows of coordinates encoded in the kernel."""
    if packed.dtype == torch.int8:
        raise ConfigError("int8 weights run only in the NTC decode (FusedNTC with a calibration).", field="kernels", fix="pack the MLP in a float dtype.")
    n = inputs.shape[0]
    k = inputs.shape[1]
    expected = k * 2 * frequencies if frequencies else k
    if expected != packed.inputs:
        raise ValueError(f"the network takes {packed.inputs} inputs; {k} columns{' encoded' if frequencies else ''} give {expected}")
    inputs = inputs.contiguous() if frequencies == 0 and inputs.dtype == packed.dtype else inputs.float().contiguous()
    out = torch.empty(n, packed.outputs, dtype=out_dtype, device=inputs.device)
    if n == 0:
        return out
    bm = packed.block_rows
    with mma_sync():
        _mlp_kernel[(triton.cdiv(n, bm),)](
            inputs, out, n, *packed.buffers(), K=k, O=packed.outputs, FREQ=frequencies,
            OACT=ACTIVATION_CODES[packed.output_activation], BM=bm, WIDE=_wide(n * max(k, packed.outputs)), HALF_SUMS=packed.half_sums, HALF_ACT=packed.half_activations, **_launch_options("forward", packed.hp), **packed.constants(),
        )  # fmt: skip
    return out


class FusedNeuralMaterial:
    """The fused decode of a :class:`~neuralbake.bakes.neural_material.model.NeuralMaterial`.

    The latent pyramid is stored once, flat, in the decoder's dtype (fp16 for an fp16 decoder: the
    precision :meth:`NeuralMaterial.to` gives its latents too). ``__call__(uv, wi, wo, lod=None)``
    returns ``f(wi, wo) cos`` ``[N, 3]`` fp32: bilinear from level 0 without ``lod``, trilinear
    between the two levels around ``lod`` ``[N]`` (clamped to the pyramid) with it.

    ``feature_columns``: the width of the tiles the kernel builds its features in, half the input
    width where the latents and the direction features each fit in half (:data:`SPLIT_FEATURES`;
    the input layer's weight rows are then laid out to match, in ``w_in``), else the whole width.
    Like the latents, the weights are a snapshot taken here.

    On a CUDA GPU the decode runs the Gluon kernel of :mod:`neuralbake.kernels.gluon_decode` where it supports the
    shape (:attr:`kernel`, :attr:`gluon_reason`), else the Triton kernel; the two give the same values within fp16
    rounding. If the Gluon kernel fails to compile or launch here, the decode warns and takes the Triton kernel from then on.
    """

    def __init__(self, material: NeuralMaterial) -> None:
        decoder = material.decoder
        self.packed = PackedMLP.from_mlp(decoder)
        if decoder.config.output_activation != "none":
            raise ConfigError("the fused neural-material decode expects a linear decoder output.", field="kernels", fix="use --kernels torch.")
        if len(material.direction_inputs) > 3:
            raise ConfigError("the fused decode reads at most 3 direction features.", field="kernels", fix="use --kernels torch.")
        latents = material.latents
        self.channels = int(latents[0].shape[2])
        store = torch.float32 if self.packed.dtype == torch.float32 else self.packed.dtype
        device = latents[0].device
        self.latents = torch.cat([level.reshape(-1) for level in latents]).to(device=device, dtype=store).contiguous()
        sizes = [(int(level.shape[1]), int(level.shape[0])) for level in latents]
        counts = [w * h * self.channels for w, h in sizes]
        offsets = [sum(counts[:i]) // self.channels for i in range(len(sizes))]
        as_int = lambda values: torch.tensor(values, dtype=torch.int32, device=device)
        self.level_offset, self.level_width, self.level_height = as_int(offsets), as_int([w for w, _ in sizes]), as_int([h for _, h in sizes])
        self.levels = len(sizes)
        codes = [DIRECTION_CODES[name] for name in material.direction_inputs] + [-1, -1, -1]
        self.directions = codes[:3]
        if self.channels + 3 * len(material.direction_inputs) != self.packed.inputs:
            raise ConfigError(
                f"{self.channels} latent channels and {len(material.direction_inputs)} direction features do not make the decoder's {self.packed.inputs} inputs.",
                field="direction_inputs",
                fix="bake the material again (its bundle is inconsistent), or use --kernels torch.",
            )
        # The latents and the directions in two half-width tiles where both fit (see _neural_material_kernel):
        # the input layer's rows move to match, directions from row kp / 2.
        kp, directions = self.packed.kp, 3 * len(material.direction_inputs)
        self.feature_columns = kp // 2 if SPLIT_FEATURES and max(self.channels, directions) <= kp // 2 else kp
        self.w_in = self.packed.w_in
        if self.feature_columns < kp:
            self.w_in = torch.zeros_like(self.packed.w_in)
            self.w_in[: self.channels] = self.packed.w_in[: self.channels]
            self.w_in[self.feature_columns : self.feature_columns + directions] = self.packed.w_in[self.channels : self.channels + directions]
        p = self.packed
        self.gluon_reason = gluon_decode.gluon_reason(
            device_capability=_nvidia_capability(device),
            hidden_activation=p.hidden_activation, leak=p.leak, half_sums=p.half_sums, kp=p.kp, hp=p.hp, op=p.op, hidden=p.hidden,
            feature_columns=self.feature_columns, wide=_wide(self.latents.numel()),
        )  # fmt: skip
        self.kernel = "gluon" if self.gluon_reason is None else "triton"
        """Which kernel decodes: ``gluon`` (:mod:`neuralbake.kernels.gluon_decode`, the weights resident in shared
        memory) where :attr:`gluon_reason` is None, else ``triton`` (``triton_mlp._neural_material_kernel``). A call
        of 2^31 / 3 samples or more takes the Triton kernel either way (int64 addresses)."""
        self._sms = _sm_count(device) if self.kernel == "gluon" else 0
        self._gluon_constants = {
            "C": self.channels, "FP": self.feature_columns, "DIR0": self.directions[0], "DIR1": self.directions[1], "DIR2": self.directions[2],
            "KP": p.kp, "HP": p.hp, "OP": p.op, "HIDDEN": p.hidden, "HACT": ACTIVATION_CODES[p.hidden_activation], "LEAK": p.leak,
            **gluon_decode.launch_constants(p.kp, p.hp, p.op, p.hidden),
        }  # fmt: skip

    def __call__(self, uv: torch.Tensor, wi: torch.Tensor, wo: torch.Tensor, lod: torch.Tensor | None = None) -> torch.Tensor:
        n = uv.shape[0]
        out = torch.empty(n, 3, dtype=torch.float32, device=uv.device)
        if n == 0:
            return out
        uv, wi, wo = (t.float().contiguous() for t in (uv, wi, wo))
        lod_arg = uv if lod is None else lod.float().contiguous()
        if self.kernel == "gluon" and not _wide(n * 3):
            rows = gluon_decode.TILE[0]
            try:
                gluon_decode.launch(
                    triton.cdiv(n, rows), self._sms,
                    (uv, wi, wo, lod_arg, self.latents, self.level_offset, self.level_width, self.level_height, self.levels, out, n, self.w_in, *self.packed.buffers()[1:]),
                    {**self._gluon_constants, "TRILINEAR": lod is not None},
                )  # fmt: skip
                return out
            except Exception as exc:  # noqa: BLE001  (a Triton that cannot compile or launch it here: the Triton decode computes the same)
                self.kernel, self.gluon_reason = "triton", _gluon_failed(exc, "neural-material decode", "the Triton decode")
        kind = "forward" if lod is None else "trilinear"
        bm = _block_rows(kind, self.packed.hp)
        with mma_sync():
            _neural_material_kernel[(triton.cdiv(n, bm),)](
                uv, wi, wo, lod_arg, self.latents, self.level_offset, self.level_width, self.level_height, self.levels, out, n,
                self.w_in, *self.packed.buffers()[1:], C=self.channels, FP=self.feature_columns, DIR0=self.directions[0], DIR1=self.directions[1], DIR2=self.directions[2],
                TRILINEAR=lod is not None, BM=bm, WIDE=_wide(n * 3, self.latents.numel()), HALF_SUMS=self.packed.half_sums, **_launch_options(kind, self.packed.hp), **self.packed.constants(),
            )  # fmt: skip
        return out


class FusedNTC:
    """NTC decode of a container: ``texels(level, x, y)`` (random access) and ``level(index)`` (a whole mip).

    ``dtype`` is the decoder's arithmetic: fp16, bf16 or fp32 on the dequantised weights, or
    ``torch.int8`` with a ``calibration`` (:func:`neuralbake.bakes.ntc.int8.calibrate_int8`): the
    container's int8 codes times int8 activations, int32 sums (:mod:`neuralbake.bakes.ntc.int8`); the
    latent grids are then fetched in fp16.
    """

    def __init__(self, container: NTCContainer, dtype: torch.dtype = torch.float16, calibration: Int8Calibration | None = None) -> None:
        layout = container.layout
        self.layout = layout
        device = container.latents_high.device
        self.int8 = dtype == torch.int8
        if calibration is not None and not self.int8:
            raise ConfigError("an int8 calibration is for the int8 decode.", field="calibration", fix="pass dtype=torch.int8, or no calibration.")
        if self.int8:
            if calibration is None:
                raise ConfigError("int8 arithmetic needs the activation steps.", field="calibration", fix="pass calibrate_int8(container).")
            from neuralbake.bakes.ntc.int8 import int8_factors

            weights = [codes.to(device) for codes in container.weights_int8]
            self.inverse, self.factor = (t.contiguous() for t in int8_factors(container, calibration))
        else:
            weights = container.weights()
            self.inverse = self.factor = torch.zeros(1, dtype=torch.float32, device=device)
        self.packed = PackedMLP(weights, container.biases, hidden_activation=layout.activation, output_activation="none", leak=layout.leak, dtype=dtype)
        latent_dtype = torch.float16 if self.int8 else dtype
        self.high = container.latents_high.to(latent_dtype).contiguous()
        self.low = container.latents_low.to(latent_dtype).contiguous()
        levels = layout.levels
        rows = [[w for w, _ in layout.level_sizes], [h for _, h in layout.level_sizes]]

        def pair_rows(dims: list[tuple[int, int]]) -> list[list[int]]:
            offsets = [0]
            for w, h in dims[:-1]:
                offsets.append(offsets[-1] + w * h)
            return [[w for w, _ in dims], [h for _, h in dims], offsets]

        rows += pair_rows(layout.high_dims) + pair_rows(layout.low_dims)
        self.tables = torch.tensor([row + [0] * (levels - len(row)) for row in rows], dtype=torch.int32, device=device).contiguous()
        self.features, self.pe = layout.shape.features, layout.pe_frequencies

    def _launch(self, n: int, level: torch.Tensor, x: torch.Tensor, y: torch.Tensor, frame_level: int, frame_width: int, frame: bool, out_dtype: torch.dtype) -> torch.Tensor:
        out = torch.empty(n, self.layout.channels, dtype=out_dtype, device=self.high.device)
        if n == 0:
            return out
        bm = _block_rows("ntc", self.packed.hp)
        with mma_sync():
            _ntc_kernel[(triton.cdiv(n, bm),)](
                level, x, y, frame_level, frame_width, self.high, self.low, self.tables, self.layout.levels, out, n, *self.packed.buffers(),
                self.inverse, self.factor, F=self.features, PE=self.pe, CH=self.layout.channels, FRAME=frame, INT8=self.int8, BM=bm, HALF_SUMS=self.packed.half_sums,
                WIDE=_wide(n * self.layout.channels, self.high.numel(), self.low.numel()), **_launch_options("ntc", self.packed.hp), **self.packed.constants(),
            )  # fmt: skip
        return out

    def texels(self, level: torch.Tensor, x: torch.Tensor, y: torch.Tensor, *, out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Decode texels ``(level, x, y)`` (integer ``[N]``) -> ``[N, channels]`` in [0, 1].

        The caller keeps every texel inside its level (as ``decode_texels`` callers do); nothing is
        checked here, so a batch costs no device-to-host sync.
        """
        as32 = lambda t: t.to(torch.int32).contiguous()
        return self._launch(level.numel(), as32(level), as32(x), as32(y), 0, 1, False, out_dtype)

    def level(self, index: int, *, out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Every texel of mip ``index`` -> ``[H, W, channels]`` in [0, 1]."""
        width, height = self.layout.level_sizes[index]
        dummy = self.tables
        return self._launch(width * height, dummy, dummy, dummy, index, width, True, out_dtype).reshape(height, width, -1)


def _find_mlp(model: nn.Module) -> tuple[MLP, str, int]:
    """The MLP inside ``model``, its parameter-name prefix and its frequency-encoding octaves (0: none)."""
    if isinstance(model, CoordinateNetwork):
        return model.mlp, "mlp.", model.config.frequencies
    if isinstance(model, MLP):
        return model, "", 0
    raise ConfigError(f"the fused training step runs an MLP or a coordinate network, not {type(model).__name__}.", field="kernels", fix="use --kernels torch.")


class _TrainingBuffers:
    """Gradient slots, activation scratch and loss sums of the training kernel for one packed network (``programs``: 2 per SM by default)."""

    def __init__(self, packed: PackedMLP, programs: int | None) -> None:
        p = packed
        device = p.w_in.device
        self.sms = _sm_count(device)
        if programs is not None and programs < 1:
            raise ConfigError(f"the fused training step needs at least one program, not {programs}.", field="programs", fix="leave programs unset (two an SM).")
        programs = self.programs = 2 * self.sms if programs is None else programs  # two an SM (two on a CPU)
        self.block_rows = _block_rows("train", p.hp)
        self.carry = _carries(p)
        self.grads = torch.zeros(programs, p.slot_size, dtype=torch.float32, device=device)  # each program's slot, written by the program
        self.scratch = torch.empty(programs * max(1, p.hidden) * self.block_rows * p.hp, dtype=p.dtype, device=device)
        self.losses = torch.zeros(programs, dtype=torch.float32, device=device)  # each program's loss sum (not written in upstream mode)
        self.capability = _nvidia_capability(device)
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
            kp=packed.kp, hp=packed.hp, op=packed.op, hidden=packed.hidden, loss=loss, dx=dx, wide=_wide(n * max(columns, packed.outputs, packed.kp)),
        )  # fmt: skip


def _train(
    packed: PackedMLP,
    buffers: _TrainingBuffers,
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
    :meth:`_TrainingBuffers.gluon_reason` allows, else :func:`_mlp_train_kernel`; returns the number of programs (the
    gradient slots written).

    ``loss`` ``"upstream"``: ``targets`` is the outputs' gradient and ``scale`` is not read; ``dx``: where the input
    rows' gradient goes (upstream mode only). An empty batch has one slot of zeros (and, with a loss, a loss sum of 0).
    ``draw``: ``(seed, transform code, image width, image height)``: the kernel draws its ``n`` rows itself,
    ``inputs`` being the draw counter and ``targets`` the image (see ``SAMPLE`` in :func:`_mlp_train_kernel`).
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
                    "FLOOR": floor, "HALF_ACT": packed.half_activations, **{k: v for k, v in packed.constants().items() if k != "DOT"},
                    **({} if draw is None else {"SEED": draw[0], "TRANSFORM": draw[1], "IMG_W": draw[2], "IMG_H": draw[3], "SAMPLE": True}),
                },
            )  # fmt: skip
            buffers.kernel = "gluon"
            return grid[0]
        except Exception as exc:  # noqa: BLE001  (a Triton that cannot compile or launch it here: the Triton kernel computes the same step)
            buffers.gluon_failure = _gluon_failed(exc, "fused training step", "the Triton kernel")
    buffers.kernel = "triton"
    grid = (min(buffers.programs, max(1, triton.cdiv(n, buffers.block_rows))),)
    with mma_sync():
        _mlp_train_kernel[grid](
            inputs, targets, n, buffers.scratch, buffers.grads, buffers.losses, buffers.losses if scale is None else scale,
            buffers.losses if dx is None else dx, *packed.buffers(), K=2 if draw else inputs.shape[1], O=packed.outputs, FREQ=frequencies,
            OACT=ACTIVATION_CODES[packed.output_activation], LOSS=LOSS_CODES[loss], FLOOR=floor, BM=buffers.block_rows, DX=dx is not None,
            CARRY=buffers.carry, HALF_ACT=packed.half_activations, HOIST=buffers.carry and HOIST_WEIGHTS, **_launch_options("train", packed.hp),
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
        mlp, prefix, self.frequencies = _find_mlp(model)
        self.names = [f"{prefix}layers.{i}.{kind}" for i in range(len(mlp.layers)) for kind in ("weight", "bias")]
        own = dict(model.named_parameters())
        missing = [name for name in self.names if name not in own]
        if missing or len(own) != len(self.names):
            raise ConfigError("the fused training step trains every layer of one MLP; this model has other or frozen parameters.", field="kernels", fix="use --kernels torch.")
        self._model = model
        self.packed = PackedMLP.from_mlp(mlp, dtype, training=True)
        self.loss, self.floor = loss, float(floor)
        self.device = mlp.layers[0].weight.device
        self.buffers = _TrainingBuffers(self.packed, programs)
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
        by_name = dict(zip(self.names, _unpack_gradients(p, total)))
        return loss, [by_name[name] for name in params]

    def _launch(self, batch: Batch | None, scale: torch.Tensor, draws: TexelDraws | None = None, seed: int = 0) -> tuple[int, int]:
        """The training kernel on ``batch`` (or, with ``draws``, on a batch it draws itself: :meth:`drawn_batch`'s) with
        the packed weights as they are; returns (programs, rows)."""
        p = self.packed
        if draws is not None:
            n = draws.batch_size
            programs = _train(
                p, self.buffers, self.draw_counter, draws.image, n, loss=self.loss, scale=scale.float().reshape(1), floor=self.floor,
                frequencies=self.frequencies, draw=_draw_arguments(draws, seed),
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
        programs = _train(p, self.buffers, inputs, targets, n, loss=self.loss, scale=scale.float().reshape(1), floor=self.floor, frequencies=self.frequencies)
        return programs, n

    def _columns(self, coordinates: int) -> int:
        """The network's input columns for rows of ``coordinates`` values (frequency-encoded or not)."""
        return coordinates * 2 * self.frequencies if self.frequencies else coordinates

    # -- batches drawn in the kernel -------------------------------------------------------------
    def draws_from(self, sampler: Any) -> TexelDraws | None:
        """What ``sampler`` draws, where this step can draw it in its kernel instead (None: the trainer calls the sampler).

        The sampler must say (``texel_draws()``, :class:`~neuralbake.nn.trainer.TexelDraws`), the network must take the
        two coordinates (frequency-encoded or not) and give the image's channels, and :data:`DRAW_BATCHES` be on.
        """
        describe = getattr(sampler, "texel_draws", None)
        draws = describe() if DRAW_BATCHES and describe is not None else None
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
        from neuralbake.nn.trainer import Batch

        n, (seed, code, width, height) = draws.batch_size, _draw_arguments(draws, seed)
        uv = torch.empty(n, 2, device=self.device)
        texels = torch.empty(n, dtype=torch.int64, device=self.device)
        _draw_uv_kernel[(triton.cdiv(n, 128),)](uv, texels, self.draw_counter, n, seed, width, height, TRANSFORM=code, BM=128)
        return Batch(inputs=uv, targets=draws.image.reshape(-1, draws.image.shape[2])[texels])

    # -- the whole optimizer step on the GPU -------------------------------------------------------
    fuses_update = True
    """The trainer may hand this object its whole step (:meth:`update_step`) instead of running Adam itself."""

    _reduce_block, _reduce_rows, _adam_block = 128, 64, 128
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


    _flat: _FlatState | None = None

    def rehearse(self, batch: Batch | None, loss_scale: str = "dynamic", draws: TexelDraws | None = None, seed: int = 0) -> None:
        """Run :meth:`update_step` once on copies of the weights with a scratch optimizer and a ``loss_scale`` scaler.

        Compiles and runs every kernel of the fused step as the run will (``loss_scale``: the run's
        mode, whose update kernel differs), so a bake can try them before training
        (``kernels.try_kernels``) and fall back to PyTorch when this machine cannot run them. It
        works on buffers of its own: the model and a trainer's masters and moments are untouched,
        and every step packs its own weights. With ``draws`` (:meth:`draws_from`'s) and the run's ``seed``, the kernel
        draws the batch, as the run will; the draw counter is left as it was.
        """
        from neuralbake.nn.precision import LossScaler

        own = dict(self._model.named_parameters())
        copies = {name: nn.Parameter(own[name].detach().float().clone()) for name in self.names}
        optimizer = torch.optim.Adam(list(copies.values()), lr=torch.tensor(1e-3, device=self.device))
        counters = [torch.zeros((), device=self.device) for _ in range(5)]
        saved, updated, drawn = self._flat, self.updated, self.draw_counter.clone()
        self._flat = None
        try:
            self.update_step(batch, copies, optimizer, LossScaler(loss_scale, device=self.device), counters[0], counters[1:], draws=draws, seed=seed)
        finally:
            self._flat, self.updated = saved, updated
            self.draw_counter.copy_(drawn)

    def _attach(self, master: dict[str, torch.Tensor], optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
        """Make the masters and Adam's moments views of this object's flat buffers (copying their values in); returns the masters.

        The parameters and ``optimizer.state`` stay what PyTorch expects (checkpoints, evaluation and a
        PyTorch step see ordinary tensors, always current; every parameter keeps its own step count);
        a no-op while they already are these views. A resumed checkpoint (new state tensors) or
        parameters replaced from outside are taken in again.
        """
        params = [master[name] for name in self.names]
        flat = self._flat
        if flat is not None and flat.holds(params, optimizer):
            return params
        if self.can_update(optimizer) is not None:
            raise ConfigError(f"the fused optimizer step cannot stand in for this optimizer: {self.can_update(optimizer)}.", field="kernels", fix="use --kernels torch.")
        sizes = [param.numel() for param in params]
        if flat is None or flat.sizes != sizes:
            flat = self._flat = _FlatState(self.packed, sizes, self.device, self._reduce_block)
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
        flat = self._flat
        assert flat is not None
        p = self.packed
        self.updated = True
        adam_grid = (triton.cdiv(p.slot_size, self._adam_block),)
        _pack_kernel[adam_grid](flat.index, flat.master, p.flat_w, p.flat_b, p.slot_size, BLOCK=self._adam_block)
        programs, n = self._launch(batch, scaler.scale_tensor, draws, seed)
        group = optimizer.param_groups[0]
        beta1, beta2 = group["betas"]
        flags_p = triton.next_power_of_2(flat.blocks)
        loss_sum, loss_count, skipped, nonfinite_run = counters
        _reduce_slots_kernel[(flat.blocks,)](
            self.buffers.grads, programs, p.slot_size, self.buffers.losses, float(n * p.outputs), scaler.scale_tensor, flat.grad,
            flat.flags, flat.loss, flat.ticket, BLOCK=self._reduce_block, PB=self._reduce_rows, PP=triton.next_power_of_2(programs),
        )  # fmt: skip
        _adam_kernel[adam_grid](
            flat.grad, flat.index, flat.master, flat.m, flat.v, flat.flags, flat.blocks, flat.steps, group["lr"],
            float(beta1), float(beta2), float(group["eps"]), p.slot_size, flat.ticket, flat.loss, scaler.scale_tensor, scaler.clean_steps_tensor,
            scaler.overflows_tensor, loss_sum, loss_count, skipped, nonfinite_run, found_inf, self.draw_counter, len(params), float(scaler.growth_factor),
            float(scaler.backoff_factor), int(scaler.growth_interval), DYNAMIC=scaler.mode == "dynamic", BLOCK=self._adam_block, FP=flags_p,
            SP=triton.next_power_of_2(len(params)),
        )  # fmt: skip


class _FlatState:
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
        self.index = _master_index(packed, sizes).to(device)
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


def _draw_arguments(draws: TexelDraws, seed: int) -> tuple[int, int, int, int]:
    """``(seed, transform code, image width, image height)`` of a batch drawn in a kernel (:func:`_train`'s ``draw``)."""
    height, width, _ = draws.image.shape
    return int(seed), draws.TRANSFORMS.index(draws.transform), width, height


def _master_index(p: PackedMLP, sizes: Sequence[int]) -> torch.Tensor:
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


def _unpack_gradients(p: PackedMLP, flat: torch.Tensor) -> list[torch.Tensor]:
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
        self._packed: dict[tuple[torch.dtype, torch.device], tuple[PackedMLP, _TrainingBuffers]] = {}

    def _network(self, tensors: Sequence[torch.Tensor]) -> tuple[PackedMLP, _TrainingBuffers]:
        key = (tensors[0].dtype, tensors[0].device)
        if key not in self._packed:
            packed = PackedMLP.from_mlp(self.mlp, tensors[0].dtype, training=True)
            self._packed[key] = packed, _TrainingBuffers(packed, self.programs)
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
        programs = _train(packed, buffers, x, dy, n, loss="upstream", dx=dx)
        interleaved = _unpack_gradients(packed, buffers.grads[:programs].sum(0))
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

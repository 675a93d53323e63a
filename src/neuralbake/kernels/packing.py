"""A network's weights in the fused kernels' layout (:class:`PackedMLP`) and the plain MLP forward on them
(:func:`mlp_forward`); the decodes (:mod:`~neuralbake.kernels.decoders`) and the training step
(:mod:`~neuralbake.kernels.training`) launch their kernels on the same packed buffers.

The packed buffers are refreshed in place, so a CUDA graph can capture the kernels that read them. The
PyTorch reference is :class:`neuralbake.nn.mlp.MLP`; the tests compare the two value by value under
``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import triton

from neuralbake.errors import ConfigError
from neuralbake.kernels import ACTIVATION_CODES, unsupported_reason
from neuralbake.kernels.triton_decode import mlp_kernel
from neuralbake.kernels.tuning import block_rows, launch_options, mma_sync, pad_width, wide_addresses
from neuralbake.nn.mlp import MLP

__all__ = ["PackedMLP", "mlp_forward"]


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
        self.kp, self.hp = pad_width(widths[0], dtype), pad_width(max(widths[1:-1]), dtype)
        # The outputs pad to 16 for training (the backward's products take them as their depth, which tl.dot wants
        # >= 16); a decode's output layer only needs a power of two: 4 columns for an RGB decode instead of 16 cut the
        # neural-material decode's instructions by 15 % (its expm1 and store ran over all 16; H100, 2026-11-26:
        # 12.3 -> 13.5 G samples/s).
        self.op = pad_width(widths[-1], dtype) if training else pad_width(widths[-1], dtype, minimum=4)
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
        (:func:`unpack_gradients`) and the optimizer step's master index (:func:`master_index`) all
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
        """Whether the decodes sum the hidden layers in fp16, on the tensor cores from the bias, as tiny-cuda-nn's fully
        fused MLPs do (the output layer still sums in fp32): fp16 weights, a leak in [0, 1] (the fp16 leaky ReLU is
        ``max(x, leak x)``), and not packed for training (:class:`FusedMLP`'s forward must compute the function its
        fp32-sum backward differentiates). On an H100 (2026-11-26) the neural-material decode went from 12.4 to 13.5 G
        samples/s and the NTC 4K frame from 1.77 to 1.58 ms, the error against the fp32 network from 7.5e-5 to 1.2e-4
        of max(|v|, 1)."""
        return not self.training and self.dtype == torch.float16 and 0.0 <= self.leak <= 1.0

    @property
    def block_rows(self) -> int:
        return block_rows("forward", self.hp)


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
        mlp_kernel[(triton.cdiv(n, bm),)](
            inputs, out, n, *packed.buffers(), K=k, O=packed.outputs, FREQ=frequencies,
            OACT=ACTIVATION_CODES[packed.output_activation], BM=bm, WIDE=wide_addresses(n * max(k, packed.outputs)), HALF_SUMS=packed.half_sums, **launch_options("forward", packed.hp), **packed.constants(),
        )  # fmt: skip
    return out


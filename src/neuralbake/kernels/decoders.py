"""The fused decodes of baked assets as PyTorch callables: :class:`FusedNeuralMaterial` (a neural material's
decode, latent fetch included) and :class:`FusedNTC` (NTC decode of random texels or of a whole mip level).

They take the baked objects as their bakes build them (:class:`neuralbake.bakes.neural_material.model.NeuralMaterial`,
:class:`neuralbake.bakes.ntc.container.NTCContainer`) but name them only through the parts they read
(:class:`NeuralMaterialParts`, :class:`NTCParts`): the kernels sit below the bakes and import none of them. The
PyTorch references are the bakes' own decodes; the tests compare them value by value under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch
import triton

from neuralbake.errors import ConfigError
from neuralbake.kernels import ACTIVATION_CODES, DIRECTION_CODES, gluon_decode
from neuralbake.kernels.packing import PackedMLP
from neuralbake.kernels.triton_decode import neural_material_kernel, ntc_kernel
from neuralbake.kernels.tuning import block_rows, gluon_failed, launch_options, mma_sync, nvidia_capability, sm_count, wide_addresses
from neuralbake.nn.mlp import MLP

__all__ = ["FusedNTC", "FusedNeuralMaterial", "NTCParts", "NeuralMaterialParts"]


class NeuralMaterialParts(Protocol):
    """What :class:`FusedNeuralMaterial` reads of a neural material (a ``NeuralMaterial`` has these)."""

    @property
    def decoder(self) -> MLP: ...

    @property
    def latents(self) -> Sequence[torch.Tensor]: ...

    @property
    def direction_inputs(self) -> Sequence[str]: ...


class NTCParts(Protocol):
    """What :class:`FusedNTC` reads of an NTC container (an ``NTCContainer`` has these): its layout (sizes, latent
    shape, activation), the two latent grids, and the decoder's weights (dequantised by ``weights()``, or the int8
    codes) and biases."""

    @property
    def layout(self) -> Any: ...

    @property
    def latents_high(self) -> torch.Tensor: ...

    @property
    def latents_low(self) -> torch.Tensor: ...

    @property
    def weights_int8(self) -> Sequence[torch.Tensor]: ...

    @property
    def biases(self) -> Sequence[torch.Tensor]: ...

    def weights(self) -> list[torch.Tensor]: ...


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

    def __init__(self, material: NeuralMaterialParts) -> None:
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
        # The latents and the directions in two half-width tiles where both fit (see neural_material_kernel):
        # the input layer's rows move to match, directions from row kp / 2. The bilinear taps then blend half the
        # columns (the copper tray's shape on an H100, 2026-11-26: 9.9 -> 13.5 G samples/s bilinear, 6.4 -> 10.1 trilinear).
        kp, directions = self.packed.kp, 3 * len(material.direction_inputs)
        self.feature_columns = kp // 2 if max(self.channels, directions) <= kp // 2 else kp
        self.w_in = self.packed.w_in
        if self.feature_columns < kp:
            self.w_in = torch.zeros_like(self.packed.w_in)
            self.w_in[: self.channels] = self.packed.w_in[: self.channels]
            self.w_in[self.feature_columns : self.feature_columns + directions] = self.packed.w_in[self.channels : self.channels + directions]
        p = self.packed
        self.gluon_reason = gluon_decode.gluon_reason(
            device_capability=nvidia_capability(device),
            hidden_activation=p.hidden_activation, leak=p.leak, half_sums=p.half_sums, kp=p.kp, hp=p.hp, op=p.op, hidden=p.hidden,
            feature_columns=self.feature_columns, wide=wide_addresses(self.latents.numel()),
        )  # fmt: skip
        self.kernel = "gluon" if self.gluon_reason is None else "triton"
        """Which kernel decodes: ``gluon`` (:mod:`neuralbake.kernels.gluon_decode`, the weights resident in shared
        memory) where :attr:`gluon_reason` is None, else ``triton`` (``triton_decode.neural_material_kernel``). A call
        of 2^31 / 3 samples or more takes the Triton kernel either way (int64 addresses)."""
        self._sms = sm_count(device) if self.kernel == "gluon" else 0
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
        if self.kernel == "gluon" and not wide_addresses(n * 3):
            rows = gluon_decode.TILE[0]
            try:
                gluon_decode.launch(
                    triton.cdiv(n, rows), self._sms,
                    (uv, wi, wo, lod_arg, self.latents, self.level_offset, self.level_width, self.level_height, self.levels, out, n, self.w_in, *self.packed.buffers()[1:]),
                    {**self._gluon_constants, "TRILINEAR": lod is not None},
                )  # fmt: skip
                return out
            except Exception as exc:  # noqa: BLE001  (a Triton that cannot compile or launch it here: the Triton decode computes the same)
                self.kernel, self.gluon_reason = "triton", gluon_failed(exc, "neural-material decode", "the Triton decode")
        kind = "forward" if lod is None else "trilinear"
        bm = block_rows(kind, self.packed.hp)
        with mma_sync():
            neural_material_kernel[(triton.cdiv(n, bm),)](
                uv, wi, wo, lod_arg, self.latents, self.level_offset, self.level_width, self.level_height, self.levels, out, n,
                self.w_in, *self.packed.buffers()[1:], C=self.channels, FP=self.feature_columns, DIR0=self.directions[0], DIR1=self.directions[1], DIR2=self.directions[2],
                TRILINEAR=lod is not None, BM=bm, WIDE=wide_addresses(n * 3, self.latents.numel()), HALF_SUMS=self.packed.half_sums, **launch_options(kind, self.packed.hp), **self.packed.constants(),
            )  # fmt: skip
        return out


class FusedNTC:
    """NTC decode of a container: ``texels(level, x, y)`` (random access) and ``level(index)`` (a whole mip).

    ``dtype`` is the decoder's arithmetic: fp16, bf16 or fp32 on the dequantised weights, or
    ``torch.int8`` with ``int8_factors``: the ``(1 / step, step x weight scale)`` fp32 ``[layers]`` pair of
    :func:`neuralbake.bakes.ntc.int8.int8_factors` for a calibration (:func:`~neuralbake.bakes.ntc.int8.calibrate_int8`);
    the container's int8 codes then times int8 activations, int32 sums (:mod:`neuralbake.bakes.ntc.int8`), and the
    latent grids are fetched in fp16. The caller computes the factors, so the kernels need nothing of the bakes.
    """

    def __init__(self, container: NTCParts, dtype: torch.dtype = torch.float16, int8_factors: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
        layout = container.layout
        self.layout = layout
        device = container.latents_high.device
        self.int8 = dtype == torch.int8
        if int8_factors is not None and not self.int8:
            raise ConfigError("int8 factors are for the int8 decode.", field="int8_factors", fix="pass dtype=torch.int8, or no factors.")
        if self.int8:
            if int8_factors is None:
                raise ConfigError("int8 arithmetic needs the activation steps.", field="int8_factors", fix="pass int8_factors(container, calibrate_int8(container)).")
            weights = [codes.to(device) for codes in container.weights_int8]
            self.inverse, self.factor = (t.to(device=device, dtype=torch.float32).contiguous() for t in int8_factors)
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
        bm = block_rows("ntc", self.packed.hp)
        with mma_sync():
            ntc_kernel[(triton.cdiv(n, bm),)](
                level, x, y, frame_level, frame_width, self.high, self.low, self.tables, self.layout.levels, out, n, *self.packed.buffers(),
                self.inverse, self.factor, F=self.features, PE=self.pe, CH=self.layout.channels, FRAME=frame, INT8=self.int8, BM=bm, HALF_SUMS=self.packed.half_sums,
                WIDE=wide_addresses(n * self.layout.channels, self.high.numel(), self.low.numel()), **launch_options("ntc", self.packed.hp), **self.packed.constants(),
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


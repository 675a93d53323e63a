"""The differentiable NTC parts: latent grid sampling, the decoder MLP, the trainable model and its texel sampler.

:func:`sample_features` is shared by training and decoding, so a one-texel decode and a full
decode agree with what was trained. The grid sampling is a few gathers (``grid_sample`` cannot
concatenate the four corner cells).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from neuralbake.bakes.ntc.layout import NTCLayout
from neuralbake.nn.activations import activation_fn
from neuralbake.nn.encoding import frequency_encode
from neuralbake.nn.quantize import fake_quantize_int8, fake_quantize_latents
from neuralbake.nn.trainer import Batch

__all__ = ["GridTables", "NTCModel", "TexelSampler", "decoder_forward", "sample_features"]

@dataclass
class GridTables:
    """Per-level and per-grid lookup tables for :func:`sample_features` (small integer tensors)."""

    level_w: torch.Tensor
    level_h: torch.Tensor
    high_w: torch.Tensor
    high_h: torch.Tensor
    high_offset: torch.Tensor
    low_w: torch.Tensor
    low_h: torch.Tensor
    low_offset: torch.Tensor

    @classmethod
    def from_layout(cls, layout: NTCLayout, device: torch.device | str = "cpu") -> GridTables:
        def offsets(dims: list[tuple[int, int]]) -> list[int]:
            return [0, *np.cumsum([w * h for w, h in dims])[:-1].tolist()]

        long = lambda values: torch.tensor(values, dtype=torch.int64, device=device)
        sizes, high, low = layout.level_sizes, layout.high_dims, layout.low_dims
        return cls(
            level_w=long([w for w, _ in sizes]),
            level_h=long([h for _, h in sizes]),
            high_w=long([w for w, _ in high]),
            high_h=long([h for _, h in high]),
            high_offset=long(offsets(high)),
            low_w=long([w for w, _ in low]),
            low_h=long([h for _, h in low]),
            low_offset=long(offsets(low)),
        )


def _cell_coords(u: torch.Tensor, v: torch.Tensor, width: torch.Tensor, height: torch.Tensor):
    """Lower-left cell, clamped neighbours and fractions for bilinear-style lookups on a cell-centred grid."""
    px = u * width.to(u.dtype) - 0.5
    py = v * height.to(v.dtype) - 0.5
    x0, y0 = torch.floor(px), torch.floor(py)
    fx, fy = px - x0, py - y0
    x0, y0 = x0.to(torch.int64), y0.to(torch.int64)
    zero = torch.zeros_like(x0)
    xa, xb = torch.clamp(x0, zero, width - 1), torch.clamp(x0 + 1, zero, width - 1)
    ya, yb = torch.clamp(y0, zero, height - 1), torch.clamp(y0 + 1, zero, height - 1)
    return xa, xb, ya, yb, fx, fy


def _gather_corners(
    grid: torch.Tensor, offset: torch.Tensor, width: torch.Tensor, xa: torch.Tensor, xb: torch.Tensor, ya: torch.Tensor, yb: torch.Tensor
) -> torch.Tensor:
    """Rows of ``grid`` at the four cells (ya, xa), (ya, xb), (yb, xa), (yb, xb): ``[4, N, F]``.

    One ``index_select`` for all four: its backward is an ``index_add`` (atomic adds on a GPU),
    several times faster than the sort-based backward of advanced indexing, which took most of a
    training step on the H100.
    """
    rows = torch.stack((ya, ya, yb, yb)) * width + torch.stack((xa, xb, xa, xb)) + offset
    return torch.index_select(grid, 0, rows.reshape(-1)).reshape(4, xa.shape[0], grid.shape[1])


def sample_features(
    high: torch.Tensor,
    low: torch.Tensor,
    tables: GridTables,
    level: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    pe_frequencies: int,
    quantize: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """Decoder inputs for texels ``(level, x, y)`` (int64 ``[N]`` each).

    ``high`` ``[high cells, F]`` and ``low`` ``[low cells, F]`` hold every mip pair's grids, row-major,
    one after another. Returns ``[N, 5F + 4 * pe_frequencies + 1]``: the four high-resolution cells
    around the texel (concatenated), the low-resolution grid sampled bilinearly, the encoded
    position inside the high-resolution cell and the level within the pair. ``quantize`` is applied
    to fetched latents (training); decoding passes already-dequantised latents.
    """
    dtype = high.dtype
    u = (x.to(dtype) + 0.5) / tables.level_w[level].to(dtype)
    v = (y.to(dtype) + 0.5) / tables.level_h[level].to(dtype)
    pair = torch.div(level, 2, rounding_mode="floor")
    in_pair = (level - 2 * pair).to(dtype)[:, None]
    q = quantize if quantize is not None else (lambda t: t)

    count, features = x.shape[0], high.shape[1]
    hw, hh, ho = tables.high_w[pair], tables.high_h[pair], tables.high_offset[pair]
    xa, xb, ya, yb, fx, fy = _cell_coords(u, v, hw, hh)
    corners = _gather_corners(high, ho, hw, xa, xb, ya, yb)  # [4, N, F]
    high_features = q(corners.permute(1, 0, 2).reshape(count, 4 * features))

    lw, lh, lo_off = tables.low_w[pair], tables.low_h[pair], tables.low_offset[pair]
    lxa, lxb, lya, lyb, lfx, lfy = _cell_coords(u, v, lw, lh)
    lfx, lfy = lfx[:, None], lfy[:, None]
    l00, l10, l01, l11 = q(_gather_corners(low, lo_off, lw, lxa, lxb, lya, lyb)).unbind(0)
    low_features = (l00 * (1 - lfx) + l10 * lfx) * (1 - lfy) + (l01 * (1 - lfx) + l11 * lfx) * lfy

    position = frequency_encode(torch.stack((fx, fy), dim=-1), pe_frequencies)
    return torch.cat((high_features, low_features, position, in_pair), dim=1)


def decoder_forward(features: torch.Tensor, weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor], act: Callable) -> torch.Tensor:
    """The decoder MLP: ``act`` after every hidden layer, linear output."""
    out = features
    for index, (weight, bias) in enumerate(zip(weights, biases)):
        out = F.linear(out, weight, bias)
        if index < len(weights) - 1:
            out = act(out)
    return out


# -- the trainable model ------------------------------------------------------------------------


class NTCModel(nn.Module):
    """Latent grids of every mip pair + the decoder, for training.

    ``forward(inputs)``: ``inputs`` ``[N, 3]`` float (level, x, y as whole numbers) -> ``[N, channels]``.
    ``quant_mode`` (``noise``, ``round`` or ``none``) selects how latents are quantised in the
    forward pass; weights are always int8 fake-quantised unless ``quantize_weights`` is False.
    """

    def __init__(self, layout: NTCLayout, *, generator: torch.Generator | None = None, weight_clip: float | None = None) -> None:
        super().__init__()
        self.layout = layout
        self.weight_clip = weight_clip
        high_cells, low_cells = layout.latent_cells()
        features = layout.shape.features
        init = lambda n: (torch.rand(n, features, generator=generator) - 0.5) * 0.5
        self.latents_high = nn.Parameter(init(high_cells))
        self.latents_low = nn.Parameter(init(low_cells))
        widths = layout.layer_widths
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(widths))
        self.quant_mode = "noise"
        self.quantize_weights = True
        self._act = activation_fn(layout.activation, layout.leak)
        for name, value in asdict(GridTables.from_layout(layout)).items():
            self.register_buffer(f"table_{name}", value, persistent=False)

    @property
    def tables(self) -> GridTables:
        return GridTables(**{name: getattr(self, f"table_{name}") for name in GridTables.__dataclass_fields__})

    def weights(self) -> list[torch.Tensor]:
        return [fake_quantize_int8(layer.weight) if self.quantize_weights else layer.weight for layer in self.layers]

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        coords = inputs.to(torch.int64)
        bits = self.layout.shape.bits
        features = sample_features(
            self.latents_high,
            self.latents_low,
            self.tables,
            coords[:, 0],
            coords[:, 1],
            coords[:, 2],
            self.layout.pe_frequencies,
            quantize=lambda t: fake_quantize_latents(t, bits, self.quant_mode),
        )
        return decoder_forward(features, self.weights(), [layer.bias for layer in self.layers], self._act)

    def constrain_(self) -> None:
        """Clamp the latents into [-1, 1] after each update (the trainer calls it).

        The forward pass clamps them too, and passes no gradient beyond the bound: without this,
        latents that training pushes past ±1 (the noise phase drives them outwards, to stand out
        from the noise) stay there for good. On DamagedHelmet at 2.7 bpp 26 % of them were stuck
        after 30,000 steps and 58 % after 100,000, and the longer run ended 0.7 dB lower
        (docs/benchmarks.md). Projected back, a latent at the bound still gets its gradient.

        With ``weight_clip`` K, each decoder layer's weights are also clamped to K times their
        RMS: the stored int8 scale is ``max|w| / 127``, so a few weights that grow during a long
        run would otherwise coarsen every other weight of their layer.
        """
        self.latents_high.clamp_(-1.0, 1.0)
        self.latents_low.clamp_(-1.0, 1.0)
        if self.weight_clip is not None:
            for layer in self.layers:
                bound = self.weight_clip * layer.weight.pow(2).mean().sqrt()
                layer.weight.copy_(torch.minimum(torch.maximum(layer.weight, -bound), bound))

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())


class TexelSampler:
    """Random texels over every mip level: half drawn by area, half level-uniform, so small mips are learned too."""

    capturable = True
    """Pure device work (searchsorted, rand, gathers): the trainer may capture it in a CUDA graph."""

    def __init__(self, layout: NTCLayout, reference_levels: Sequence[np.ndarray], batch_size: int, device: torch.device) -> None:
        self.batch_size = batch_size
        sizes = layout.level_sizes
        areas = np.array([w * h for w, h in sizes], dtype=np.float64)
        probability = 0.5 * areas / areas.sum() + 0.5 / len(sizes)
        self.cdf = torch.tensor(np.cumsum(probability)[:-1], dtype=torch.float32, device=device)
        self.level_w = torch.tensor([w for w, _ in sizes], dtype=torch.int64, device=device)
        self.level_h = torch.tensor([h for _, h in sizes], dtype=torch.int64, device=device)
        self.offset = torch.tensor([0, *np.cumsum(areas)[:-1].astype(np.int64).tolist()], dtype=torch.int64, device=device)
        self.texels = torch.cat([torch.from_numpy(level.reshape(-1, level.shape[2])) for level in reference_levels]).to(device)

    def sample(self, generator: torch.Generator) -> Batch:
        device = self.texels.device
        draws = torch.rand(self.batch_size, 3, generator=generator, device=device)
        level = torch.searchsorted(self.cdf, draws[:, 0].contiguous())
        width, height = self.level_w[level], self.level_h[level]
        x = torch.minimum((draws[:, 1] * width).to(torch.int64), width - 1)
        y = torch.minimum((draws[:, 2] * height).to(torch.int64), height - 1)
        targets = self.texels[self.offset[level] + y * width + x]
        return Batch(inputs=torch.stack((level, x, y), dim=1).to(torch.float32), targets=targets)


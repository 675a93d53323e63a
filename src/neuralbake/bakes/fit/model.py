"""What the fit learns: :class:`LodAppearance`, the stored values of a LOD (texels in uv1, vertex
colours, or luminance in uv0 times chrominance in uv1; optionally LDR codes behind a fitted inverse
tone map) and how a glTF viewer reads them in a view; their splatted starting point; the loss and
the held-out evaluation.

A see-through asset's unlit LOD also ships an alpha channel: the source's alpha carried into uv1
(:func:`~.outputs.transfer_alpha`), fixed during the fit. In a view with layers
(:class:`~.views.Composite`) the LOD composites its colours front to back with that alpha, as a glTF
viewer blends them (in linear colour, then displayed), so the colours learn what the reference
shows through the cut-outs and under the blended layers."""

from __future__ import annotations

import numpy as np
import torch

from neuralbake.bakes.fit.config import FitConfig
from neuralbake.bakes.fit.views import View
from neuralbake.core.metrics import psnr, psnr_from_mse, ssim
from neuralbake.material.texture import linear_to_srgb, srgb_to_linear
from neuralbake.nn.quantize import quantize_hard, quantize_soft, quantize_ste
from neuralbake.render.gbuffer import interpolate
from neuralbake.render.mip import PackedPyramid, build_mip_pyramid, pack_pyramid, sample_trilinear
from neuralbake.render.tonemap import InverseToneMap, tone_map
from neuralbake.render.transparency import ALPHA_MODES, coverage

__all__ = ["LodAppearance", "evaluate_views", "initialise", "lod_image", "view_loss"]


class LodAppearance(torch.nn.Module):
    """The stored values of a LOD (texels or vertex colours, in [0, 1]) and how a view reads them."""

    def __init__(self, config: FitConfig, faces: torch.Tensor, num_vertices: int, device: torch.device) -> None:
        super().__init__()
        self.config = config
        self.register_buffer("faces", faces)
        n = config.texture_size
        if config.target == "unlit":
            self.texture = torch.nn.Parameter(torch.full((n, n, 3), 0.5, device=device))
        elif config.target == "vertex-color":
            self.vertex = torch.nn.Parameter(torch.full((num_vertices, 3), 0.5, device=device))
        else:
            m = config.chroma_side
            self.luma = torch.nn.Parameter(torch.full((n, n, 1), 0.5, device=device))
            self.chroma = torch.nn.Parameter(torch.full((m, m, 3), 1.0, device=device))
        # fp32 like every master weight the Trainer steps (the curve is evaluated in fp32 anyway)
        self.tonemap = InverseToneMap(config.tonemap_order).to(device=device, dtype=torch.float32) if config.tonemap == "fit" else None
        self.temperature = float(config.soft_temperature[0])
        self.alpha_mode = "OPAQUE"
        self._alpha_pyramid: PackedPyramid | None = None

    def cut_out(self, alpha: torch.Tensor, mode: str) -> None:
        """Ship the uv1 alpha texels ``[n, n, 1]`` (fixed) with glTF ``alphaMode`` ``mode`` (``MASK``: cutoff 0.5, or
        ``BLEND``); views with layers composite through them."""
        self.register_buffer("alpha", alpha.detach().to(self.faces.device, torch.float32).contiguous())
        self.alpha_mode = mode
        self._alpha_pyramid = pack_pyramid(build_mip_pyramid(self.alpha))  # packed once: it never changes

    def coverage(self, view: View) -> torch.Tensor:
        """``[F]`` how much of what lies behind each of the view's rows the LOD covers (1 without alpha)."""
        if self._alpha_pyramid is None:
            return torch.ones(view.triangle.shape[0], device=self.faces.device)
        alpha = sample_trilinear(self._alpha_pyramid, view.uv[1], view.uv_dx[1], view.uv_dy[1], wrap_s="clamp", wrap_t="clamp")[:, 0]
        mode = torch.full_like(alpha, ALPHA_MODES[self.alpha_mode])
        return coverage(alpha, mode, torch.full_like(alpha, 0.5))

    def composite(self, colours: torch.Tensor, view: View) -> torch.Tensor:
        """Linear ``colours`` ``[F, 3]`` at a see-through view's rows composited front to back over what lies behind
        them: ``[P, 3]`` at its pixels (the rows themselves without layers)."""
        c = view.composite
        if c is None:
            return colours
        cover = self.coverage(view).to(colours.dtype)
        pixels = c.pixel.shape[0]
        through = torch.ones(pixels, dtype=colours.dtype, device=colours.device)
        out = torch.zeros(pixels, 3, dtype=colours.dtype, device=colours.device)
        start = 0
        for end in c.layer_ends:
            slot, layer = c.slot[start:end], cover[start:end]
            passed = through[slot]
            out = out.index_add(0, slot, (passed * layer)[:, None] * colours[start:end])
            through = through.index_put((slot,), passed * (1.0 - layer))
            start = end
        return out + through[:, None] * self.decode(c.behind.to(colours.dtype))

    def front_rows(self, view: View) -> torch.Tensor:
        """int64 ``[P]``: for each of a view's pixels, its front-most row that covers at least half of what lies behind
        (-1 where none does); the rows themselves without layers."""
        c = view.composite
        if c is None:
            return torch.arange(view.triangle.shape[0], device=view.triangle.device)
        solid = self.coverage(view) >= 0.5
        chosen = torch.full((c.pixel.shape[0],), -1, dtype=torch.int64, device=c.pixel.device)
        starts = (0, *c.layer_ends[:-1])
        for start, end in reversed(list(zip(starts, c.layer_ends, strict=True))):  # back to front: the front-most wins
            rows = torch.arange(start, end, device=c.pixel.device)[solid[start:end]]
            chosen[c.slot[rows]] = rows
        return chosen

    def stored_parameters(self) -> list[torch.nn.Parameter]:
        """The [0, 1] stored values (projected after every step)."""
        return [p for name, p in self.named_parameters() if not name.startswith("tonemap")]

    def store(self, x: torch.Tensor, *, hard: bool = False) -> torch.Tensor:
        """What the file holds for raw values ``x``: quantised (hard, STE or soft) when asked."""
        bits = self.config.quantize
        if not bits:
            return torch.clamp(x, 0.0, 1.0)
        if hard:
            return quantize_hard(x, bits)
        if self.config.quantizer == "ste":
            return quantize_ste(x, bits)
        return quantize_soft(x, bits, self.temperature)

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        """Stored value -> value the GPU filters: sRGB decode for display-colour textures."""
        return x if self.tonemap is not None else srgb_to_linear(x)

    def display(self, filtered: torch.Tensor) -> torch.Tensor:
        """Filtered value -> display colour compared with the reference."""
        if self.tonemap is None:
            return torch.clamp(linear_to_srgb(torch.clamp(filtered, 0.0, 1.0)), 0.0, 1.0)
        return tone_map(self.tonemap(filtered), operator=self.config.display_tone_map, exposure=self.config.exposure)

    def forward(self, view: View, *, hard: bool = False) -> torch.Tensor:
        """Display colours ``[N, 3]`` at the view's hits."""
        target = self.config.target
        if target == "vertex-color":
            stored = self.store(self.vertex, hard=hard)
            lin = interpolate(stored, self.faces, view.triangle, view.barycentrics.to(stored.dtype))
            if self.tonemap is None:
                return torch.clamp(linear_to_srgb(torch.clamp(lin, 0.0, 1.0)), 0.0, 1.0)
            return self.display(lin)
        sample = lambda tex, k: sample_trilinear(
            build_mip_pyramid(tex), view.uv[k], view.uv_dx[k], view.uv_dy[k], wrap_s="clamp", wrap_t="clamp"
        )
        if target == "unlit":
            return self.display(self.composite(sample(self.decode(self.store(self.texture, hard=hard)), 1), view))
        luma = sample(self.decode(self.store(self.luma, hard=hard)), 0)
        chroma = sample(self.decode(self.store(self.chroma, hard=hard)), 1)
        return self.display(luma * chroma)

    @torch.no_grad()
    def project(self) -> None:
        """Keep the stored values in [0, 1] (the range the file can hold)."""
        for p in self.stored_parameters():
            p.clamp_(0.0, 1.0)


def _splat(values: torch.Tensor, uv: torch.Tensor, size: int, out: torch.Tensor, count: torch.Tensor) -> None:
    """Accumulate per-pixel ``values`` onto their nearest texel of a ``size``-square texture."""
    xy = torch.clamp((uv * size).long(), 0, size - 1)
    index = xy[:, 1] * size + xy[:, 0]
    out.index_add_(0, index, values)
    count.index_add_(0, index, torch.ones_like(values[:, :1]))


def _average(total: torch.Tensor, count: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    seen = count[:, 0] > 0
    out = fallback.expand_as(total).clone()
    out[seen] = total[seen] / count[seen]
    return out


@torch.no_grad()
def initialise(model: LodAppearance, views: list[View], num_vertices: int) -> None:
    """Brute-force bake as the starting point: each reference pixel's stored-space value
    averaged onto its nearest texel (uv) or the nearest vertex of its triangle."""
    cfg = model.config
    tm = model.tonemap
    if tm is not None and tm.order == 1:
        hdr_all = torch.cat([v.hdr for v in views]).flatten()
        hdr_max = float(torch.quantile(hdr_all[:: max(1, hdr_all.numel() // 100000)], 0.999).clamp(min=1.0))
        tm.set_hdr_max(hdr_max)

    def stored_of(v: View) -> torch.Tensor:
        if tm is not None:
            return tm.encode(v.hdr * (2.0**cfg.exposure))
        lin = srgb_to_linear(v.reference)
        return lin if cfg.target == "vertex-color" else v.reference

    def lin_of(v: View) -> torch.Tensor:
        return tm.encode(v.hdr * (2.0**cfg.exposure)) if tm is not None else srgb_to_linear(v.reference)

    dev, dt = model.faces.device, torch.float32
    if cfg.target == "vertex-color":
        total = torch.zeros(num_vertices, 3, device=dev, dtype=dt)
        count = torch.zeros(num_vertices, 1, device=dev, dtype=dt)
        for v in views:
            b = v.barycentrics
            corner = torch.argmax(torch.stack((1 - b[:, 0] - b[:, 1], b[:, 0], b[:, 1]), 1), 1)
            vert = model.faces[v.triangle, corner]
            total.index_add_(0, vert, stored_of(v).to(dt))
            count.index_add_(0, vert, torch.ones_like(total[vert, :1]))
        model.vertex.copy_(_average(total, count, total.sum(0) / count.sum().clamp(min=1)))
        return
    if cfg.target == "unlit":
        n = cfg.texture_size
        total = torch.zeros(n * n, 3, device=dev, dtype=dt)
        count = torch.zeros(n * n, 1, device=dev, dtype=dt)
        for v in views:
            rows = model.front_rows(v)
            seen = rows >= 0
            _splat(stored_of(v).to(dt)[seen], v.uv[1][rows[seen]], n, total, count)
        model.texture.copy_(_average(total, count, total.sum(0) / count.sum().clamp(min=1)).reshape(n, n, 3))
        return
    n, m = cfg.texture_size, cfg.chroma_side
    lt, lc = torch.zeros(n * n, 1, device=dev, dtype=dt), torch.zeros(n * n, 1, device=dev, dtype=dt)
    ct, cc = torch.zeros(m * m, 3, device=dev, dtype=dt), torch.zeros(m * m, 1, device=dev, dtype=dt)
    for v in views:
        lin = lin_of(v).to(dt)
        y = torch.clamp(lin.amax(1, keepdim=True), min=1e-4)
        _splat(y, v.uv[0], n, lt, lc)
        _splat(lin / y, v.uv[1], m, ct, cc)
    luma = _average(lt, lc, lt.sum(0) / lc.sum().clamp(min=1))
    chroma = _average(ct, cc, ct.sum(0) / cc.sum().clamp(min=1))
    enc = (lambda t: t) if tm is not None else (lambda t: linear_to_srgb(torch.clamp(t, 0.0, 1.0)))
    model.luma.copy_(enc(luma).reshape(n, n, 1))
    model.chroma.copy_(enc(chroma).reshape(m, m, 3))


def view_loss(model: LodAppearance, view: View) -> torch.Tensor:
    """Mean squared display-space error over the view's hits (weighted by the artist's mask, if any)."""
    diff = model(view) - view.reference
    se = (diff * diff).mean(1)
    if view.weight is None:
        return se.mean()
    return (se * view.weight).sum() / view.weight.sum()


@torch.no_grad()
def evaluate_views(model: LodAppearance, views: list[View], *, with_ssim: bool) -> dict[str, float]:
    """Held-out quality of the stored (hard-quantised) values.

    ``psnr_db`` over the LOD's hit pixels; with whole frames (held-out views): ``psnr_frame_db`` over
    the frames, background included, and ``psnr_union_db`` over the pixels that the reference or the
    LOD covers (where a simplified or reshaped LOD misses its reference, the frame shows the
    background and counts the error); SSIM over windows centred on those pixels."""
    preds, refs, ssims = [], [], []
    frame_squared, frame_values, union_squared, union_values = 0.0, 0, 0.0, 0
    whole = all(v.image is not None for v in views)
    for v in views:
        pred = model(v, hard=True)
        preds.append(pred)
        refs.append(v.reference)
        if v.image is None:
            continue
        image = lod_image(model, v, pred)
        squared = ((image.double() - v.image.double()) ** 2).sum(-1)
        covered = (v.alpha > 0).reshape(-1).clone()
        covered[v.targets] = True
        covered = covered.reshape(v.alpha.shape)
        frame_squared += float(squared.sum())
        frame_values += v.image.numel()
        union_squared += float(squared[covered].sum())
        union_values += int(covered.sum()) * 3
        if with_ssim:
            ssims.append(float(ssim(image, v.image, covered)))
    out = {"psnr_db": psnr(torch.cat(preds), torch.cat(refs))}
    if ssims:
        out["ssim"] = float(np.mean(ssims))
    if whole:
        db = lambda values, squared: psnr_from_mse(squared / max(values, 1), values)
        out["psnr_frame_db"] = db(frame_values, frame_squared)
        out["psnr_union_db"] = db(union_values, union_squared)
    return out


def lod_image(model: LodAppearance, v: View, pred: torch.Tensor | None = None) -> torch.Tensor:
    """The LOD's whole display image of a held-out view: its colours at its hits, the background
    elsewhere (the reference image's own pixels when the view keeps no background colour)."""
    if v.background is None:
        image = v.image.clone().reshape(-1, 3)
    else:
        image = v.background.to(v.image).expand(v.image.numel() // 3, 3).clone()
    image[v.targets] = model(v, hard=True) if pred is None else pred
    return image.reshape(v.image.shape)

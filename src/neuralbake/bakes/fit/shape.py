"""Joint shape + appearance fitting (``neuralbake fit --shape``): the LOD's vertex positions are
optimised together with its texture or vertex colours, as the seed's best LODs are made.

Every step re-renders the LOD's G-buffer from the current positions (the hit pixels, barycentrics
and uv derivatives change as vertices move), reads the stored values through it, composes the
whole frame over the background and blends it across silhouettes
(:func:`~neuralbake.render.antialias.antialias`), so the loss reaches the positions through the
barycentrics (where the texture lands) and through the silhouettes (where the surface ends). The
loss is the mean squared display error over the pixels that the original or the LOD covers
(weighted by the artist's mask where the LOD is hit) plus the squared coverage difference there.

The positions use the large-steps parametrisation of :mod:`neuralbake.bakes.simplify.shape`
(``u = (I + lambda L) x`` on the mesh welded by position, so uv seams and xatlas chart seams never
open) and the uniform Adam of ``largesteps``. Unlike the appearance, ``u`` is not one of the
Trainer's parameters (the Trainer's per-coordinate Adam would undo the uniform scaling that keeps
steps smooth): it is a buffer of :class:`ShapeParameters`, stepped after every Trainer step with
the Trainer's learning-rate schedule. Its optimiser moments are buffers too, so a checkpoint holds
them and a resumed fit continues exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from neuralbake.bakes.fit.model import LodAppearance
from neuralbake.bakes.fit.views import View
from neuralbake.bakes.simplify.shape import smoothing_matrix
from neuralbake.nn.trainer import Batch
from neuralbake.render.antialias import antialias, weld_vertices
from neuralbake.render.camera import Camera
from neuralbake.render.gbuffer import render_gbuffer
from neuralbake.render.mip import sample_bilinear

__all__ = ["ShapeForwardBackward", "ShapeParameters", "ShapeTarget", "render_lod_frame", "shape_view"]


class ShapeParameters(torch.nn.Module):
    """The LOD's positions as large-steps coordinates ``u`` of the welded mesh, and their uniform Adam.

    Buffers (all in the checkpoint): ``u`` ``[W, 3]``, the optimiser's moments ``g1`` / ``g2`` and
    its step count. Split vertex ``i`` sits at welded vertex ``group[i]``.
    """

    def __init__(self, positions: torch.Tensor, faces: torch.Tensor, lam: float, betas: tuple[float, float] = (0.9, 0.999)) -> None:
        super().__init__()
        from largesteps.optimize import AdamUniform
        from largesteps.parameterize import to_differential
        from largesteps.solvers import CholeskySolver

        group = weld_vertices(positions)
        welded = torch.zeros((int(group.max()) + 1, 3), dtype=torch.float32, device=positions.device)
        welded[group] = positions.detach().float()
        self.register_buffer("group", group)
        matrix = smoothing_matrix(group[faces], welded.shape[0], lam)
        self._solver = CholeskySolver(matrix)
        self.register_buffer("u", to_differential(matrix, welded).detach().clone())
        self.register_buffer("g1", torch.zeros_like(self.u))
        self.register_buffer("g2", torch.zeros_like(self.u))
        self.register_buffer("t", torch.zeros((), dtype=torch.int64))
        self.u.requires_grad_(True)
        self._optimiser = AdamUniform([self.u], lr=1.0, betas=betas)
        self.grad: torch.Tensor | None = None
        """The gradient of ``u`` from the last forward/backward (set by :class:`ShapeForwardBackward`)."""

    @property
    def welded_vertices(self) -> int:
        return int(self.u.shape[0])

    def positions(self) -> torch.Tensor:
        """Split positions ``[V, 3]`` (differentiable in :attr:`u`)."""
        from largesteps.solvers import solve

        return solve(self._solver, self.u)[self.group]

    @torch.no_grad()
    def step(self, learning_rate: float) -> bool:
        """One uniform-Adam step of ``u`` with the stored gradient; False (nothing done) when it is
        missing or not finite (the Trainer skips such a step for the appearance too)."""
        grad, self.grad = self.grad, None
        if grad is None or not bool(torch.isfinite(grad).all()):
            return False
        state = self._optimiser.state[self.u]
        state["g1"], state["g2"], state["step"] = self.g1, self.g2, int(self.t)
        self._optimiser.param_groups[0]["lr"] = learning_rate
        self.u.grad = grad
        self._optimiser.step()
        self.u.grad = None
        self.t.fill_(int(state["step"]))
        return True


@dataclass(eq=False)
class ShapeTarget:
    """One view of the original for a shape fit: its camera and whole display frame."""

    camera: Camera
    image: torch.Tensor
    """``[H, W, 3]`` display values of the reference render."""
    alpha: torch.Tensor
    """``[H, W]`` coverage of the reference render."""


def shape_view(rs: Any, target: ShapeTarget, mask: torch.Tensor | None, weight_max: float) -> tuple[View, Any]:
    """The LOD's G-buffer rows for ``target``'s camera at the current positions, as a fit :class:`View`
    (reference = the target's frame at the hits), and the G-buffer itself."""
    height, width = target.alpha.shape
    g = render_gbuffer(rs, target.camera, width, height)
    weight = None
    if mask is not None:
        m = sample_bilinear(mask, g.uv[0].detach(), wrap_s="repeat", wrap_t="repeat")[:, 0]
        weight = 1.0 + (weight_max - 1.0) * m
    reference = target.image.reshape(-1, 3)[g.pixel]
    view = View(
        **g.rows(), reference=reference, weight=weight, hdr=reference, image=target.image, alpha=target.alpha,
    )
    return view, g


def render_lod_frame(
    model: LodAppearance, rs: Any, target: ShapeTarget, background: torch.Tensor, mask: torch.Tensor | None = None, *, hard: bool = False,
    weight_max: float = 1.0, smooth: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The LOD's whole display frame ``[H, W, 3]``, its coverage ``[H, W]`` and the loss weight per
    pixel ``[H, W]`` for ``target``'s camera; ``smooth``: blended across silhouettes (differentiable
    in the positions), else the plain point-sampled frame the held-out scores use."""
    view, g = shape_view(rs, target, mask, weight_max)
    colour = model(view, hard=hard)
    ones = torch.ones_like(colour[:, :1])
    weight = ones if view.weight is None else view.weight[:, None].to(colour.dtype)
    values = torch.cat((colour, ones, weight), 1)
    fill = torch.cat((background.to(colour), torch.zeros(1, dtype=colour.dtype, device=colour.device), ones[:1, 0]))
    frame = g.image(values, background=fill)
    if smooth:
        vis = g.visibility
        frame = antialias(frame, vis.triangle_id, vis.depth, rs.positions, rs.faces, target.camera, neighbours=rs.edge_neighbours())
    return frame[..., :3], frame[..., 3], frame[..., 4].detach()


def frame_loss(frame: torch.Tensor, alpha: torch.Tensor, weight: torch.Tensor, target: ShapeTarget) -> torch.Tensor:
    """Weighted mean squared display error plus squared coverage difference over the pixels the
    original or the LOD covers."""
    union = ((target.alpha > 0) | (alpha.detach() > 0)).to(frame.dtype)
    w = weight * union
    se = ((frame - target.image) ** 2).mean(-1)
    cover = (alpha - target.alpha) ** 2
    return ((se * w).sum() + (cover * union).sum()) / w.sum().clamp(min=1.0)


class ShapeForwardBackward:
    """The fit's forward/backward with the shape free: positions from :class:`ShapeParameters`, each
    batch view re-rendered, gradients for the appearance (returned to the Trainer) and for ``u``
    (left in ``shape.grad`` for :meth:`ShapeParameters.step`)."""

    def __init__(
        self, model: LodAppearance, shape: ShapeParameters, rs: Any, targets: list[ShapeTarget], background: torch.Tensor,
        mask: torch.Tensor | None, weight_max: float, temperature: Any,
    ) -> None:
        self.model, self.shape, self.rs, self.targets = model, shape, rs, targets
        self.background, self.mask, self.weight_max, self.temperature = background, mask, weight_max, temperature

    def __call__(self, params: dict[str, torch.Tensor], batch: Batch, loss_scale: Any) -> tuple[torch.Tensor, list[torch.Tensor]]:
        self.model.temperature = self.temperature(batch.step)  # type: ignore[attr-defined]
        positions = self.shape.positions().to(self.rs.dtype)
        self.rs.set_positions(positions)
        chunk = batch.inputs.tolist()
        loss = 0.0
        for i in chunk:
            frame, alpha, weight = render_lod_frame(self.model, self.rs, self.targets[i], self.background, self.mask, weight_max=self.weight_max)
            loss = loss + frame_loss(frame, alpha, weight, self.targets[i])
        loss = loss / len(chunk)
        wrt = [*params.values(), self.shape.u]
        grads = torch.autograd.grad(loss * loss_scale, wrt, allow_unused=True)
        self.shape.grad = None if grads[-1] is None else grads[-1] / loss_scale
        self.rs.positions = positions.detach()  # the BVH already fits them: drop the graph without a second refit
        return loss.detach(), [torch.zeros_like(p) if g is None else g for p, g in zip(params.values(), grads[:-1])]

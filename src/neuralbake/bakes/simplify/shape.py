"""Shape optimisation of a simplified mesh against renders of the original, with large steps.

The simplified mesh's vertices are moved so that its renders match the original's over a set of
views: the loss is the mean absolute difference of the display images and of the coverage, and
its gradient reaches the vertices through the renderer's barycentrics (texture and colour
alignment) and its silhouette antialiasing pass (:mod:`neuralbake.render.antialias`), where most
of a coarse mesh's error is. Shading normals stay those the decimation carried over (they hold the
original's detail; recomputing them from the coarse faces would flatten it).

Plain gradient steps on vertex positions tangle a mesh within a few iterations. The vertices are
therefore parametrised as Nicolet et al. (2021, "Large Steps in Inverse Rendering of Geometry")
propose: ``u = (I + lambda L) x`` with ``L`` the mesh's uniform Laplacian, and optimised with
their uniform Adam, so every step is a smooth, low-frequency deformation. The solve ``x = (I +
lambda L)^-1 u`` and its gradient run through the ``largesteps`` package's Cholesky solver
(``cholespy``, on the CPU or CUDA); the matrix is built here because ``largesteps``' builder
creates its tensors on CUDA only. The positions are optimised on the mesh **welded by position**,
so vertices split at uv seams move together and seams never open.

Steps are taken one view at a time; after every pass over the views (an epoch) the loss over all
of them is measured, and a pass that made it worse is undone (backtracking: the best positions are
restored and the learning rate halved).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from neuralbake.render.camera import Camera
from neuralbake.render.deferred import Lighting, render
from neuralbake.render.scene import RenderScene

__all__ = ["LargeSteps", "ShapeFit", "ShapeView", "fit_shape", "smoothing_matrix"]


def smoothing_matrix(faces: torch.Tensor, vertices: int, lam: float) -> torch.Tensor:
    """Sparse ``I + lam * L`` (uniform Laplacian of ``faces``), float32, coalesced, on ``faces``' device."""
    device = faces.device
    i, j = faces[:, [1, 2, 0]].reshape(-1), faces[:, [2, 0, 1]].reshape(-1)
    pairs = torch.stack((torch.cat((i, j)), torch.cat((j, i)))).unique(dim=1)
    eye = torch.arange(vertices, device=device)
    index = torch.cat((pairs, torch.stack((pairs[0], pairs[0])), torch.stack((eye, eye))), 1)
    ones = torch.ones(pairs.shape[1], device=device)
    values = torch.cat((-lam * ones, lam * ones, torch.ones(vertices, device=device)))
    return torch.sparse_coo_tensor(index, values, (vertices, vertices), check_invariants=False).coalesce()


class LargeSteps:
    """Vertex positions ``[W, 3]`` held as differential coordinates ``u = (I + lam L) x``."""

    def __init__(self, positions: torch.Tensor, faces: torch.Tensor, lam: float) -> None:
        from largesteps.parameterize import to_differential
        from largesteps.solvers import CholeskySolver

        self.matrix = smoothing_matrix(faces, positions.shape[0], lam)
        self._solver = CholeskySolver(self.matrix)
        self.u = to_differential(self.matrix, positions.detach().float()).detach().clone().requires_grad_(True)

    def positions(self) -> torch.Tensor:
        """``x = (I + lam L)^-1 u`` (differentiable in :attr:`u`)."""
        from largesteps.solvers import solve

        return solve(self._solver, self.u)

    def close(self) -> None:
        """Free the factorisation."""
        self._solver = None


@dataclass(eq=False)
class ShapeView:
    """A view of the original: camera and its display image and coverage."""

    camera: Camera
    image: torch.Tensor
    """``[H, W, 3]`` display values."""
    alpha: torch.Tensor
    """``[H, W]`` coverage."""


@dataclass
class ShapeFit:
    """What a shape fit did."""

    losses: list[float] = field(default_factory=list)
    """Loss over all views after each epoch (the first entry: before any step)."""
    backtracks: int = 0
    """Epochs undone because they raised the loss."""
    steps: int = 0
    best_loss: float = float("inf")


def view_loss(rs: RenderScene, view: ShapeView, lighting: Lighting, *, tone_map: str = "aces") -> torch.Tensor:
    """Mean absolute display and coverage difference of ``rs`` against one view of the original."""
    height, width = view.alpha.shape
    out = render(rs, view.camera, width, height, lighting, tone_map=tone_map, antialias=True)
    return (out.ldr - view.image).abs().mean() + (out.alpha - view.alpha).abs().mean()


def fit_shape(
    rs: RenderScene,
    group: torch.Tensor,
    welded_faces: torch.Tensor,
    views: list[ShapeView],
    lighting: Lighting,
    *,
    epochs: int,
    learning_rate: float,
    lam: float,
    seed: int = 0,
    tone_map: str = "aces",
    advance: Callable[[int], None] | None = None,
) -> ShapeFit:
    """Move ``rs``'s vertices (split vertex ``i`` follows welded vertex ``group[i]``) to match ``views``.

    Leaves ``rs`` at the best positions found; returns the loss history.
    """
    from largesteps.optimize import AdamUniform

    welded = torch.zeros((int(group.max()) + 1, 3), dtype=rs.positions.dtype, device=rs.device)
    welded[group] = rs.positions.detach()
    steps = LargeSteps(welded, welded_faces, lam)
    optimiser = AdamUniform([steps.u], lr=learning_rate)
    generator = torch.Generator().manual_seed(seed)
    result = ShapeFit()

    def place() -> torch.Tensor:
        return steps.positions().to(rs.dtype)[group]

    def total() -> float:
        with torch.no_grad():
            rs.set_positions(place())
            return sum(float(view_loss(rs, v, lighting, tone_map=tone_map)) for v in views) / len(views)

    best_u, rate = steps.u.detach().clone(), learning_rate
    result.best_loss = total()
    result.losses.append(result.best_loss)
    try:
        for _ in range(epochs):
            for index in torch.randperm(len(views), generator=generator).tolist():
                optimiser.zero_grad()
                rs.set_positions(place())
                loss = view_loss(rs, views[index], lighting, tone_map=tone_map)
                loss.backward()
                optimiser.step()
                result.steps += 1
                if advance is not None:
                    advance(1)
            current = total()
            result.losses.append(current)
            if current <= result.best_loss:
                result.best_loss, best_u = current, steps.u.detach().clone()
            else:  # the pass made things worse: undo it and take smaller steps from the best state
                result.backtracks += 1
                rate *= 0.5
                with torch.no_grad():
                    steps.u.copy_(best_u)
                optimiser = AdamUniform([steps.u], lr=rate)
        with torch.no_grad():
            steps.u.copy_(best_u)
            rs.set_positions(place().detach())
    finally:
        steps.close()
    return result

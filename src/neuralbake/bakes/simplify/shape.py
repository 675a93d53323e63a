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

A skinned mesh is optimised in its bind pose and skinned for every view at the view's animation
time (linear blend skinning is differentiable in the bind positions), so the fitted LOD matches the
original over its animation, not only at rest.

Steps are taken one view at a time; after every pass over the views (an epoch) the loss over all
of them is measured, and a pass that made it worse is undone (backtracking: the best positions are
restored and the learning rate halved). After ``patience`` undone passes in a row the fit stops: on
the crate (a box, which QEM already keeps exact) every one of 12 passes was undone, and the 12 cost
31 of the bake's 36 s on a CPU.
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
    """A view of the original: camera, animation time and its display image and coverage."""

    camera: Camera
    image: torch.Tensor
    """``[H, W, 3]`` display values."""
    alpha: torch.Tensor
    """``[H, W]`` coverage."""
    time: float | None = None
    """Time in the animation clip the original was posed at (``None``: a static asset)."""


Deform = Callable[[torch.Tensor, ShapeView], tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]]
"""``(positions [V, 3], view) -> (positions, normals or None, tangents or None)`` as the view sees the
mesh: the identity for a static mesh, skinning at the view's time for a skinned one."""


@dataclass
class ShapeFit:
    """What a shape fit did."""

    losses: list[float] = field(default_factory=list)
    """Loss over all views after each epoch (the first entry: before any step)."""
    backtracks: int = 0
    """Epochs undone because they raised the loss."""
    stopped_by: str = "epochs"
    """``epochs`` (all of them ran) or ``patience`` (that many epochs in a row were undone)."""
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
    start: torch.Tensor | None = None,
    deform: Deform | None = None,
    patience: int = 0,
) -> tuple[ShapeFit, torch.Tensor]:
    """Move the mesh's vertices (split vertex ``i`` follows welded vertex ``group[i]``) to match ``views``.

    ``patience`` > 0 stops after that many epochs in a row were undone (0: every epoch runs).

    ``start``: the split positions to optimise (default ``rs.positions``; a skinned mesh passes its
    bind pose and a ``deform`` that skins it for each view). Returns the loss history and the best
    split positions found (undeformed); ``rs`` is left showing them as the last view saw them.
    """
    from largesteps.optimize import AdamUniform

    start = rs.positions.detach() if start is None else start.detach()
    welded = torch.zeros((int(group.max()) + 1, 3), dtype=rs.positions.dtype, device=rs.device)
    welded[group] = start.to(rs.dtype)
    steps = LargeSteps(welded, welded_faces, lam)
    optimiser = AdamUniform([steps.u], lr=learning_rate)
    generator = torch.Generator().manual_seed(seed)
    result = ShapeFit()

    def place() -> torch.Tensor:
        return steps.positions().to(rs.dtype)[group]

    def show(positions: torch.Tensor, view: ShapeView) -> None:
        if deform is None:
            rs.set_positions(positions)
            return
        posed, normals, tangents = deform(positions, view)
        rs.set_positions(posed)
        if normals is not None:
            rs.normals = normals.detach()
        if tangents is not None:
            rs.tangents = tangents.detach()

    def total() -> float:
        with torch.no_grad():
            positions = place()
            out = 0.0
            for v in views:
                show(positions, v)
                out += float(view_loss(rs, v, lighting, tone_map=tone_map))
            return out / len(views)

    best_u, rate, undone = steps.u.detach().clone(), learning_rate, 0
    result.best_loss = total()
    result.losses.append(result.best_loss)
    try:
        for epoch in range(epochs):
            for index in torch.randperm(len(views), generator=generator).tolist():
                optimiser.zero_grad()
                show(place(), views[index])
                loss = view_loss(rs, views[index], lighting, tone_map=tone_map)
                loss.backward()
                optimiser.step()
                result.steps += 1
                if advance is not None:
                    advance(1)
            current = total()
            result.losses.append(current)
            if current <= result.best_loss:
                result.best_loss, best_u, undone = current, steps.u.detach().clone(), 0
            else:  # the pass made things worse: undo it and take smaller steps from the best state
                result.backtracks += 1
                undone += 1
                rate *= 0.5
                with torch.no_grad():
                    steps.u.copy_(best_u)
                optimiser = AdamUniform([steps.u], lr=rate)
                if patience and undone >= patience and epoch + 1 < epochs:
                    result.stopped_by = "patience"
                    if advance is not None:  # the progress bar ends where the fit did
                        advance((epochs - epoch - 1) * len(views))
                    break
        with torch.no_grad():
            steps.u.copy_(best_u)
            best = place().detach()
            show(best, views[-1])
    finally:
        steps.close()
    return result, best

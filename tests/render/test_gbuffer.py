"""The G-buffer: barycentric interpolation of vertex attributes (values and gradcheck). Rendered
G-buffers and per-pixel materials are exercised through shading in ``test_deferred.py``."""

from __future__ import annotations

import torch

from neuralbake.render.gbuffer import interpolate

F64 = torch.float64


def test_interpolate_values_and_gradients() -> None:
    gen = torch.Generator().manual_seed(0)
    attrs = torch.randn(5, 3, generator=gen, dtype=F64, requires_grad=True)
    faces = torch.tensor([[0, 1, 2], [2, 3, 4]])
    tri = torch.tensor([0, 1, 1])
    bary = torch.tensor([[0.2, 0.3], [0.0, 0.0], [0.5, 0.5]], dtype=F64, requires_grad=True)
    out = interpolate(attrs, faces, tri, bary)
    torch.testing.assert_close(out[0], 0.5 * attrs[0] + 0.2 * attrs[1] + 0.3 * attrs[2])
    torch.testing.assert_close(out[1], attrs[2])
    assert torch.autograd.gradcheck(lambda a, b: interpolate(a, faces, tri, b), (attrs, bary))

"""Alpha in the renderer (issue 41): MASK cut-outs and BLEND layers composited over what lies behind them, with
gradients through the blend weights and colours (gradcheck) and through the alpha texels at a cut-out's edge."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from neuralbake.io.gltf import Material, Mesh, Scene, TextureRef
from neuralbake.render.camera import look_at
from neuralbake.render.deferred import Lighting, render
from neuralbake.render.scene import prepare_scene
from neuralbake.render.transparency import MASK_EDGE, composite_layers, coverage

F64 = torch.float64
RED, BLUE = (0.8, 0.1, 0.1), (0.1, 0.2, 0.9)
CAMERA = look_at((0.0, 0.0, 3.0), (0.0, 0.0, 0.0), fov_y_deg=40.0)
W, H = 24, 16


def _quad(z: float, half: float, material: int, name: str) -> Mesh:
    pos = np.array([[-half, -half, z], [half, -half, z], [half, half, z], [-half, half, z]], np.float32)
    uv = np.stack([(pos[:, 0] / half + 1) / 2, (1 - pos[:, 1] / half) / 2], 1).astype(np.float32)
    tangents = np.tile(np.array([1, 0, 0, 1], np.float32), (4, 1))
    return Mesh(pos, np.array([[0, 1, 2], [0, 2, 3]]), np.tile(np.float32([0, 0, 1]), (4, 1)), tangents, uv, uv, None, material, name)


def card_over_wall(mode: str, alpha: np.ndarray, cutoff: float = 0.5) -> Scene:
    """An unlit red card (alpha from ``alpha``, ``[h, w]``) at z = 0.5 in front of a larger unlit blue wall at z = 0."""
    texture = np.concatenate((np.ones((*alpha.shape, 3), np.float32), alpha[..., None].astype(np.float32)), axis=-1)
    card = Material("card", (*RED, 1.0), TextureRef(texture, 0), alpha_mode=mode, alpha_cutoff=cutoff, unlit=True)
    wall = Material("wall", (*BLUE, 1.0), unlit=True)
    return Scene([_quad(0.5, 0.6, 0, "card"), _quad(0.0, 2.0, 1, "wall")], [card, wall])


def _render(scene: Scene, dtype: torch.dtype = torch.float32):
    rs = prepare_scene(scene, dtype=dtype)
    return rs, render(rs, CAMERA, W, H, Lighting(directional=[], shadows=False, background=(0.0, 0.0, 0.0)), tone_map="reinhard")


def _card_pixels(result) -> torch.Tensor:
    """bool ``[H, W]``: pixels whose first hit is the card."""
    return result.gbuffer.visibility.material_id == 0


def test_a_mask_card_shows_the_wall_where_its_alpha_is_cut_out_and_is_solid_elsewhere() -> None:
    alpha = np.zeros((8, 8), np.float32)
    alpha[:, 4:] = 1.0  # the card's left half cut out, its right half solid
    _, result = _render(card_over_wall("MASK", alpha))
    card = _card_pixels(result)
    columns = torch.arange(W)[None, :].expand(H, W)
    centre = W // 2
    left, right = card & (columns < centre - 1), card & (columns > centre)
    assert int(left.sum()) > 10 and int(right.sum()) > 10
    hdr = result.hdr.double()
    torch.testing.assert_close(hdr[left], torch.tensor(BLUE, dtype=F64).expand(int(left.sum()), 3), atol=1e-5, rtol=0)
    torch.testing.assert_close(hdr[right], torch.tensor(RED, dtype=F64).expand(int(right.sum()), 3), atol=1e-5, rtol=0)
    assert float(result.alpha.min()) == 1.0  # the wall fills the frame behind the card
    # the same card OPAQUE: red over its whole area, as every material rendered before
    _, opaque = _render(card_over_wall("OPAQUE", alpha))
    torch.testing.assert_close(opaque.hdr.double()[left], torch.tensor(RED, dtype=F64).expand(int(left.sum()), 3), atol=1e-5, rtol=0)


def test_a_blend_card_lets_through_one_minus_its_alpha_and_an_empty_background_shows_in_alpha() -> None:
    _, result = _render(card_over_wall("BLEND", np.full((4, 4), 0.25, np.float32)))
    card = _card_pixels(result)
    expected = 0.25 * torch.tensor(RED, dtype=F64) + 0.75 * torch.tensor(BLUE, dtype=F64)
    torch.testing.assert_close(result.hdr.double()[card], expected.expand(int(card.sum()), 3), atol=1e-5, rtol=0)
    # without the wall the card covers a quarter of the black background: alpha 0.25 there
    scene = card_over_wall("BLEND", np.full((4, 4), 0.25, np.float32))
    scene.meshes = scene.meshes[:1]
    _, alone = _render(scene)
    card = _card_pixels(alone)
    torch.testing.assert_close(alone.alpha.double()[card], torch.full((int(card.sum()),), 0.25, dtype=F64), atol=1e-6, rtol=0)
    torch.testing.assert_close(alone.hdr.double()[card], (0.25 * torch.tensor(RED, dtype=F64)).expand(int(card.sum()), 3), atol=1e-5, rtol=0)


def test_coverage_and_compositing_pass_gradcheck() -> None:
    g = torch.Generator().manual_seed(3)
    # alphas on the MASK ramp (cutoff 0.5 +- MASK_EDGE / 2, kept off its kinks) and anywhere for BLEND
    ramp = 0.5 + (torch.rand(6, generator=g, dtype=F64) - 0.5) * 0.8 * MASK_EDGE
    alpha = torch.cat((ramp, torch.rand(6, generator=g, dtype=F64) * 0.9 + 0.05)).requires_grad_()
    mode = torch.tensor([1] * 6 + [2] * 6)
    cutoff = torch.full((12,), 0.5, dtype=F64)
    assert torch.autograd.gradcheck(lambda a: coverage(a, mode, cutoff), (alpha,))
    assert coverage(torch.tensor([0.3, 0.7, 0.2], dtype=F64), torch.tensor([1, 1, 0]), torch.full((3,), 0.5, dtype=F64)).tolist() == [0.0, 1.0, 1.0]
    colours = [torch.rand(2, 3, 3, generator=g, dtype=F64).requires_grad_() for _ in range(3)]
    covers = [(torch.rand(2, 3, generator=g, dtype=F64) * 0.8 + 0.1).requires_grad_() for _ in range(3)]
    background = torch.rand(2, 3, 3, generator=g, dtype=F64).requires_grad_()

    def image(*tensors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return composite_layers(list(tensors[:3]), list(tensors[3:6]), tensors[6])

    assert torch.autograd.gradcheck(image, (*colours, *covers, background))
    out, alpha_out = image(*colours, *covers, background)
    c, a = colours, covers
    first = a[0][..., None] * c[0] + (1 - a[0])[..., None] * (a[1][..., None] * c[1] + (1 - a[1])[..., None] * (a[2][..., None] * c[2] + (1 - a[2])[..., None] * background))
    torch.testing.assert_close(out, first)
    torch.testing.assert_close(alpha_out, 1 - (1 - a[0]) * (1 - a[1]) * (1 - a[2]))


@pytest.mark.parametrize("mode", ["MASK", "BLEND"])
def test_the_render_is_differentiable_in_the_alpha_texels_as_finite_differences_say(mode: str) -> None:
    """On the cut-out's edge (alpha 0.52 against a cutoff of 0.5) and for BLEND: d(image)/d(alpha texels) by autograd
    equals a central difference of the whole render."""
    rs, _ = _render(card_over_wall(mode, np.full((4, 4), 0.52, np.float32)), dtype=F64)
    texels = rs.materials[0].textures["base_color"].texels
    lighting = Lighting(directional=[], shadows=False, background=(0.0, 0.0, 0.0))
    weights = torch.rand(H, W, 3, generator=torch.Generator().manual_seed(5), dtype=F64)

    def loss() -> torch.Tensor:
        return (render(rs, CAMERA, W, H, lighting).hdr * weights).sum()

    texels.requires_grad_(True)
    (grad,) = torch.autograd.grad(loss(), texels)
    texels.requires_grad_(False)
    step = 1e-4
    with torch.no_grad():
        texels[..., 3] += step
        up = float(loss())
        texels[..., 3] -= 2 * step
        down = float(loss())
        texels[..., 3] += step
    numeric = (up - down) / (2 * step)
    analytic = float(grad[..., 3].sum())
    assert abs(analytic) > 1e-3, "the alpha texels must move the image"
    assert analytic == pytest.approx(numeric, rel=1e-4)


# -- the shipped see-through examples ------------------------------------------------------------

EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[2] / "examples" / "cards"


def test_the_example_foliage_card_and_decal_are_see_through_and_render_so() -> None:
    """examples/cards: the foliage card cuts out (MASK) and the decal blends (BLEND); rendered, the card shows the
    background between its leaves and the decal lets the wall show through its worn paint."""
    from neuralbake.io.gltf import load_gltf
    from neuralbake.io.gltf.model import see_through
    from neuralbake.render.camera import look_at

    foliage, decal = load_gltf(EXAMPLES / "foliage.gltf"), load_gltf(EXAMPLES / "decal.gltf")
    assert [m.alpha_mode for m in foliage.materials] == ["MASK"] and foliage.materials[0].double_sided
    assert [m.alpha_mode for m in decal.materials] == ["OPAQUE", "BLEND"]
    assert see_through(foliage.materials[0], foliage.meshes) == 0.0 and see_through(decal.materials[1], decal.meshes) == 0.0
    background = (0.55, 0.6, 0.68)
    lighting = Lighting(directional=[], shadows=False, background=background)
    camera = look_at((0.0, 0.5, 2.5), (0.0, 0.5, 0.0), fov_y_deg=30.0)
    result = render(prepare_scene(foliage), camera, 48, 48, lighting, tone_map="reinhard")
    on_card = result.gbuffer.visibility.material_id == 0
    shows_background = (result.hdr - torch.tensor(background)).abs().amax(-1) < 1e-6
    assert int((on_card & shows_background).sum()) > 0.2 * int(on_card.sum())  # between the leaves
    assert int((on_card & ~shows_background).sum()) > 0.1 * int(on_card.sum())  # the leaves
    result = render(prepare_scene(decal), look_at((0.0, 0.0, 2.0), (0.0, 0.0, 0.0), fov_y_deg=30.0), 48, 48, lighting, tone_map="reinhard")
    assert torch.isclose(result.alpha, torch.ones(())).all()  # the opaque wall behind everything
    on_decal = result.gbuffer.visibility.material_id == 1
    assert int(on_decal.sum()) > 100

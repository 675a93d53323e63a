"""Shading, filtering and training pieces of the learned-mipmap bake (no files written)."""

import math

import numpy as np
import torch
from torch.func import functional_call

from neuralbake.bakes.mipmap import (
    LearnedMipChain,
    LearnedMipLevel,
    MaterialMaps,
    MipmapConfig,
    MipReferenceSampler,
    box_mip_chain,
    class_weighted_loss,
    level_slices,
    reference_chain,
    sample_directions,
    shade_texels,
    toksvig_chain,
    toksvig_roughness,
    tone_mapped_loss,
)
from neuralbake.material.frame import normalize, orthonormal_basis
from neuralbake.material.gltf import gltf_eval
from neuralbake.nn.trainer import Trainer

from ._mipmap_support import bumpy_normals

# -- shading --------------------------------------------------------------------------------------


def test_orthonormal_basis_is_a_right_handed_frame():
    n = torch.nn.functional.normalize(torch.randn(200, 3, dtype=torch.float64), dim=-1)
    n = torch.cat((n, torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0], [1.0, 0.0, 0.0]], dtype=torch.float64)))
    t, b = orthonormal_basis(n)
    frame = torch.stack((t, b, n), dim=1)
    assert torch.allclose(frame @ frame.transpose(1, 2), torch.eye(3, dtype=torch.float64).expand(len(n), 3, 3), atol=1e-12)
    assert torch.allclose(torch.linalg.det(frame), torch.ones(len(n), dtype=torch.float64), atol=1e-12)


def test_flat_normal_shading_is_the_brdf(device):
    generator = torch.Generator().manual_seed(3)
    directions = sample_directions(64, generator, torch.device("cpu"), specular_fraction=0.5).to(device)
    wi, wo = directions[:, :3], directions[:, 3:]
    normal = torch.tensor([[0.0, 0.0, 1.0]], device=device)
    base = torch.tensor([[0.7, 0.4, 0.2]], device=device)
    radiance = shade_texels(
        base, normal, torch.tensor([0.3], device=device), torch.tensor([0.5], device=device), wi, wo, light_intensity=2.0
    )
    expected = 2.0 * gltf_eval(wi, wo, base_color=base, metallic=0.5, roughness=0.3)
    expected = expected * ((wi[:, 2] > 0) & (wo[:, 2] > 0)).float()[:, None]
    assert radiance.shape == (64, 1, 3)
    assert torch.allclose(radiance[:, 0], expected, rtol=1e-5, atol=1e-6)


def test_tilted_normal_matches_the_brdf_in_the_tilted_frame():
    # Shading is rotation invariant: tilting the normal and both directions together changes nothing.
    angle = 0.4
    rot = torch.tensor(
        [[math.cos(angle), 0.0, math.sin(angle)], [0.0, 1.0, 0.0], [-math.sin(angle), 0.0, math.cos(angle)]], dtype=torch.float64
    )
    wi = torch.tensor([[0.3, 0.2, 0.93]], dtype=torch.float64)
    wo = torch.tensor([[-0.2, 0.1, 0.97]], dtype=torch.float64)
    wi, wo = torch.nn.functional.normalize(wi, dim=-1), torch.nn.functional.normalize(wo, dim=-1)
    normal = (rot @ torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64))[None]
    args = (
        torch.full((1, 3), 0.5, dtype=torch.float64),
        normal,
        torch.tensor([0.4], dtype=torch.float64),
        torch.tensor([0.0], dtype=torch.float64),
    )
    tilted = shade_texels(*args, wi @ rot.T, wo @ rot.T, light_intensity=1.0)
    flat = gltf_eval(wi, wo, base_color=0.5, metallic=0.0, roughness=0.4)
    assert torch.allclose(tilted[0], flat, rtol=1e-10)


def test_gradcheck_shade_texels():
    generator = torch.Generator().manual_seed(0)
    directions = sample_directions(3, generator, torch.device("cpu"), specular_fraction=0.5).double()
    directions[:, 2] = directions[:, 2].abs() + 0.2  # keep the lights above the surface for a smooth check
    directions[:, :3] = torch.nn.functional.normalize(directions[:, :3], dim=-1)
    base = torch.tensor([[0.6, 0.3, 0.2], [0.2, 0.5, 0.8]], dtype=torch.float64, requires_grad=True)
    normal = torch.nn.functional.normalize(torch.tensor([[0.2, -0.1, 1.0], [-0.3, 0.2, 1.0]], dtype=torch.float64), dim=-1).requires_grad_()
    roughness = torch.tensor([0.35, 0.6], dtype=torch.float64, requires_grad=True)
    metallic = torch.tensor([0.2, 0.9], dtype=torch.float64, requires_grad=True)

    def f(b, n, r, m):
        return shade_texels(b, n, r, m, directions[:, :3], directions[:, 3:], light_intensity=3.0)

    assert torch.autograd.gradcheck(f, (base, normal, roughness, metallic))


def _shade_texels_before(base_color, normal, roughness, metallic, wi, wo, *, light_intensity):
    """The bake's own shading before it moved onto the material layer's frame, kept frozen as the reference."""
    x, y, z = normal.unbind(-1)
    sign = torch.copysign(torch.ones_like(z), z)
    a = -1.0 / (sign + z)
    b = x * y * a
    t = torch.stack((1.0 + sign * x * x * a, sign * b, -sign * x), dim=-1)
    bt = torch.stack((b, sign + y * y * a, -y), dim=-1)
    frame = torch.stack((t, bt, normal), dim=1)
    count, texels = wi.shape[0], normal.shape[0]

    def local(w):
        return torch.einsum("max,dx->dma", frame, w).reshape(count * texels, 3)

    f_cos = gltf_eval(
        local(wi), local(wo), base_color=base_color.repeat(count, 1), metallic=metallic.repeat(count), roughness=roughness.repeat(count)
    ).reshape(count, texels, 3)
    above = ((wi[:, 2] > 0.0) & (wo[:, 2] > 0.0)).to(f_cos.dtype)
    return f_cos * (light_intensity * above)[:, None, None]


def test_shading_matches_the_bakes_numbers_before_the_move():
    # The texel frame now comes from the material layer; every value must stay what it was (fp32).
    generator = torch.Generator().manual_seed(11)
    directions = sample_directions(48, generator, torch.device("cpu"), specular_fraction=0.5)
    wi, wo = directions[:, :3], directions[:, 3:]
    texels = 160
    normal = normalize(torch.tensor(bumpy_normals(16)[:10].reshape(-1, 3) * 2 - 1, dtype=torch.float32))
    base = torch.rand(texels, 3, generator=generator)
    roughness = torch.rand(texels, generator=generator) * 0.95 + 0.02
    metallic = torch.rand(texels, generator=generator)
    now = shade_texels(base, normal, roughness, metallic, wi, wo, light_intensity=5.0)
    before = _shade_texels_before(base, normal, roughness, metallic, wi, wo, light_intensity=5.0)
    assert torch.allclose(now, before, rtol=1e-6, atol=1e-7)
    assert float(now.abs().max()) > 1.0  # highlights were hit, so the check covers the GGX peak


def test_shading_does_not_depend_on_the_frame_around_the_normal():
    # The glTF BRDF is isotropic: a frame built another way (cross products) gives the same radiance.
    generator = torch.Generator().manual_seed(5)
    directions = sample_directions(32, generator, torch.device("cpu"), specular_fraction=0.5).double()
    wi, wo = directions[:, :3], directions[:, 3:]
    normal = normalize(
        torch.randn(6, 3, generator=generator, dtype=torch.float64) * torch.tensor([0.3, 0.3, 1.0], dtype=torch.float64)
        + torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
    )
    base = torch.rand(6, 3, generator=generator, dtype=torch.float64)
    roughness = torch.rand(6, generator=generator, dtype=torch.float64) * 0.8 + 0.1
    metallic = torch.rand(6, generator=generator, dtype=torch.float64)
    t = normalize(torch.linalg.cross(torch.tensor([[0.0, 1.0, 0.0]], dtype=torch.float64).expand(6, 3), normal))
    b = torch.linalg.cross(normal, t)
    expected = torch.zeros(32, 6, 3, dtype=torch.float64)
    for d in range(32):

        def local(w):
            return torch.stack(((w * t).sum(-1), (w * b).sum(-1), (w * normal).sum(-1)), dim=-1)

        above = float(wi[d, 2] > 0 and wo[d, 2] > 0)
        expected[d] = (
            2.0
            * above
            * gltf_eval(local(wi[d].expand(6, 3)), local(wo[d].expand(6, 3)), base_color=base, metallic=metallic, roughness=roughness)
        )
    now = shade_texels(base, normal, roughness, metallic, wi, wo, light_intensity=2.0)
    assert torch.allclose(now, expected, rtol=1e-9, atol=1e-12)


def test_gradcheck_shading_of_a_learned_mip_level():
    # The whole shading-of-mip path: texel parameters -> maps -> shading -> tone-mapped loss.
    rng = np.random.default_rng(1)
    init = MaterialMaps(
        torch.tensor(rng.uniform(0.2, 0.8, (2, 2, 3))),
        torch.nn.functional.normalize(torch.tensor(rng.normal([0, 0, 1], 0.2, (2, 2, 3))), dim=-1),
        torch.tensor(rng.uniform(0.3, 0.7, (2, 2, 1))),
        torch.tensor(rng.uniform(0.1, 0.9, (2, 2, 1))),
    )
    level = LearnedMipLevel(init, learn_metallic=True).double()
    chain = LearnedMipChain([init], light_intensity=4.0, learn_metallic=True).double()
    chain.levels[0] = level
    directions = torch.tensor([[0.3, 0.1, 0.95, -0.25, 0.05, 0.97], [-0.5, 0.3, 0.81, 0.1, -0.6, 0.79]], dtype=torch.float64)
    directions = torch.cat(
        (torch.nn.functional.normalize(directions[:, :3], dim=-1), torch.nn.functional.normalize(directions[:, 3:], dim=-1)), dim=1
    )
    target = torch.rand(2, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    loss = tone_mapped_loss([slice(0, 12)])
    names = [name for name, _ in chain.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in chain.parameters())
    assert names == ["levels.0.base_logit", "levels.0.slope", "levels.0.roughness_logit", "levels.0.metallic_logit"]

    def f(*values):
        shading = functional_call(chain, dict(zip(names, values)), (directions,))
        return shading, loss(shading, target)

    assert torch.autograd.gradcheck(f, params)


# -- filtering ------------------------------------------------------------------------------------


def test_box_chain_and_reference_are_footprint_averages():
    rng = np.random.default_rng(0)
    maps = MaterialMaps(*(torch.tensor(rng.uniform(0, 1, (8, 8, c)), dtype=torch.float32) for c in (3, 3, 1, 1)))
    chain = box_mip_chain(maps, 3)
    assert [lv.side for lv in chain] == [4, 2, 1]
    assert torch.allclose(chain[0].base_color[1, 2], maps.base_color[2:4, 4:6].mean(dim=(0, 1)))
    assert torch.allclose(chain[2].roughness[0, 0], maps.roughness.mean(dim=(0, 1)))
    full = torch.tensor(rng.uniform(0, 1, (2, 8, 8, 3)), dtype=torch.float32)
    ref = reference_chain(full, 3)
    slices = level_slices(8, 3)
    assert ref.shape == (2, (16 + 4 + 1) * 3)
    assert torch.allclose(ref[:, slices[2]], full.mean(dim=(1, 2)))


def test_toksvig_roughness():
    r = torch.tensor([0.2, 0.2, 0.5, 1.0])
    unit = torch.ones(4)
    assert torch.allclose(toksvig_roughness(r, unit), r)
    assert torch.allclose(toksvig_roughness(r, unit, variant="phong"), r, atol=1e-5)
    length = torch.tensor([0.9, 0.99, 0.95, 0.5])
    widened = toksvig_roughness(r, length)
    sigma2 = (1 - length) / length
    assert torch.allclose(widened**4, torch.clamp(r**4 + sigma2, max=1.0))
    assert torch.all(widened[:3] > r[:3]) and widened[3] == 1.0
    # For a sharp lobe Toksvig's Phong form adds about twice the variance.
    phong = toksvig_roughness(torch.tensor([0.1]), torch.tensor([0.9999]), variant="phong")
    assert abs(float(phong**4) - (0.1**4 + 2 * 1e-4 / 0.9999)) < 5e-6


def test_toksvig_chain_renormalises_and_widens():
    normals = torch.nn.functional.normalize(
        torch.tensor([[[0.5, 0.0, 1.0], [-0.5, 0.0, 1.0]], [[0.0, 0.5, 1.0], [0.0, -0.5, 1.0]]]), dim=-1
    )
    maps = MaterialMaps(torch.full((2, 2, 3), 0.5), normals, torch.full((2, 2, 1), 0.2), torch.zeros(2, 2, 1))
    (level,) = toksvig_chain(box_mip_chain(maps, 1))
    assert torch.allclose(level.normal[0, 0], torch.tensor([0.0, 0.0, 1.0]))
    assert float(level.roughness) > 0.2


def test_trainer_steps_every_parameter_downhill():
    # The trainer's first Adam step is -lr * sign(grad) for every texel; a gradient whose strides
    # differ from its parameter's would make fused Adam step texels at random.
    maps = MaterialMaps(
        torch.full((8, 8, 3), 0.5),
        torch.tensor(bumpy_normals(8) * 2 - 1, dtype=torch.float32),
        torch.full((8, 8, 1), 0.3),
        torch.zeros(8, 8, 1),
    )
    config = MipmapConfig(base_color="x", normal="y", device="cpu")
    config.train.steps = 1
    chain = LearnedMipChain(box_mip_chain(maps, 2), light_intensity=5.0, learn_metallic=True)
    sampler = MipReferenceSampler(maps, 2, config)
    loss = class_weighted_loss(level_slices(8, 2), chain.class_weights)
    before = [p.detach().clone() for p in chain.parameters()]
    batch = sampler.sample(torch.Generator().manual_seed(config.train.seed))
    grads = torch.autograd.grad(loss(chain(batch.inputs), batch.targets), list(chain.parameters()))
    Trainer(chain, sampler, loss, config.train, device=torch.device("cpu")).train_step()
    for old, new, grad in zip(before, chain.parameters(), grads):
        moved = (new.detach() - old)[grad.abs() > 1e-9]
        assert torch.all(moved * grad[grad.abs() > 1e-9] < 0)

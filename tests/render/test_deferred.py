"""Deferred rendering: mip-mapped texture sampling and tone mapping (values and
gradcheck), shading that equals the glTF BRDF evaluated by hand for single pixels, gradients of
whole renders (textures, factors, vertex colours, positions, environment light), shadows,
normal mapping, determinism, and DamagedHelmet from the shared assets."""

from __future__ import annotations

import math
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from neuralbake.errors import InputError
from neuralbake.io.gltf import Material, Mesh, Scene, TextureRef, load_gltf
from neuralbake.material.gltf import gltf_eval
from neuralbake.material.texture import sample_texture
from neuralbake.render.camera import framing_radius, look_at, orbit
from neuralbake.render.deferred import DirectionalLight, Lighting, render, shade
from neuralbake.render.envmap import EnvironmentLight, default_environment
from neuralbake.render.gbuffer import render_gbuffer
from neuralbake.render.mip import build_mip_pyramid, mip_level, pack_pyramid, sample_bilinear, sample_trilinear
from neuralbake.render.scene import prepare_scene
from neuralbake.render.tonemap import tone_map, tone_map_modified_reinhard

F64 = torch.float64


# --- ops -------------------------------------------------------------------------------------------------


def test_bilinear_matches_the_material_sampler_and_wraps_per_axis() -> None:
    gen = torch.Generator().manual_seed(1)
    tex = torch.rand(5, 7, 3, generator=gen, dtype=F64)
    uv = torch.rand(50, 2, generator=gen, dtype=F64) * 3 - 1
    for mode in ("repeat", "clamp", "mirror"):
        torch.testing.assert_close(sample_bilinear(tex, uv, wrap_s=mode, wrap_t=mode), sample_texture(tex, uv, wrap=mode))
    mixed = sample_bilinear(tex, uv, wrap_s="repeat", wrap_t="clamp")
    # Clamp-to-edge along v is sampling with v held between the first and last row centres.
    v = uv[:, 1].clamp(0.5 / 5, 1 - 0.5 / 5)
    torch.testing.assert_close(mixed, sample_texture(tex, torch.stack((uv[:, 0], v), -1), wrap="repeat"))


def test_mip_pyramid_and_trilinear_filtering() -> None:
    gen = torch.Generator().manual_seed(2)
    tex = torch.rand(8, 4, 2, generator=gen, dtype=F64)
    pyramid = build_mip_pyramid(tex)
    assert [tuple(p.shape[:2]) for p in pyramid] == [(8, 4), (4, 2), (2, 1), (1, 1)]
    torch.testing.assert_close(pyramid[1][0, 0], tex[:2, :2].mean((0, 1)))
    torch.testing.assert_close(pyramid[-1][0, 0], tex.mean((0, 1)))
    uv = torch.rand(6, 2, generator=gen, dtype=F64)
    small = torch.full((6, 2), 1e-4, dtype=F64)
    torch.testing.assert_close(sample_trilinear(pyramid, uv, small, small), sample_bilinear(tex, uv))
    huge = torch.full((6, 2), 10.0, dtype=F64)
    torch.testing.assert_close(sample_trilinear(pyramid, uv, huge, huge), tex.mean((0, 1)).expand(6, 2))
    # A footprint of 1.5 texels of level 0 (lod = log2 1.5) blends levels 0 and 1.
    dx = torch.tensor([[1.5 / 4, 0.0]], dtype=F64).expand(6, 2)
    lod = mip_level(dx, torch.zeros_like(dx), 8, 4, len(pyramid))
    torch.testing.assert_close(lod, torch.full((6,), math.log2(1.5), dtype=F64))
    w = math.log2(1.5)
    expected = (1 - w) * sample_bilinear(pyramid[0], uv) + w * sample_bilinear(pyramid[1], uv)
    torch.testing.assert_close(sample_trilinear(pyramid, uv, dx, torch.zeros_like(dx)), expected)


def test_trilinear_gradients() -> None:
    gen = torch.Generator().manual_seed(3)
    tex = torch.rand(4, 4, 2, generator=gen, dtype=F64, requires_grad=True)
    uv = (torch.rand(5, 2, generator=gen, dtype=F64) * 0.8 + 0.1).requires_grad_(True)
    dx = (torch.rand(5, 2, generator=gen, dtype=F64) * 0.4 + 0.1).requires_grad_(True)
    dy = torch.rand(5, 2, generator=gen, dtype=F64) * 0.1

    def f(t: torch.Tensor, u: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        return sample_trilinear(build_mip_pyramid(t), u, d, dy, wrap_s="mirror", wrap_t="repeat")

    assert torch.autograd.gradcheck(f, (tex, uv, dx))


def test_packed_trilinear_matches_level_by_level_sampling() -> None:
    """The packed lookup (both levels' taps gathered at once, sizes per row) against bilinear sampling of each level
    on its own, on a non-square pyramid, per-axis wrap modes, and footprints over every level."""
    gen = torch.Generator().manual_seed(5)
    tex = torch.rand(16, 8, 3, generator=gen, dtype=F64)
    pyramid = build_mip_pyramid(tex)
    uv = torch.rand(400, 2, generator=gen, dtype=F64) * 3 - 1
    dx = torch.randn(400, 2, generator=gen, dtype=F64) * torch.logspace(-4, 1, 400, dtype=F64)[:, None]
    dy = torch.randn(400, 2, generator=gen, dtype=F64) * 1e-3
    lod = mip_level(dx, dy, 16, 8, len(pyramid))
    lo = lod.floor().long()
    hi = (lo + 1).clamp(max=len(pyramid) - 1)
    assert set(lo.tolist()) == set(range(len(pyramid)))
    for ws, wt in (("repeat", "repeat"), ("clamp", "mirror"), ("mirror", "clamp"), ("clamp", "clamp")):
        taps = [sample_bilinear(level, uv, wrap_s=ws, wrap_t=wt) for level in pyramid]
        rows = torch.arange(400)
        a = torch.stack(taps)[lo, rows]
        b = torch.stack(taps)[hi, rows]
        frac = (lod - lo)[:, None]
        expected = (1 - frac) * a + frac * b
        torch.testing.assert_close(sample_trilinear(pyramid, uv, dx, dy, wrap_s=ws, wrap_t=wt), expected)
        torch.testing.assert_close(sample_trilinear(pack_pyramid(pyramid), uv, dx, dy, wrap_s=ws, wrap_t=wt), expected)


def test_packed_trilinear_gradients_with_clamped_non_square_levels() -> None:
    gen = torch.Generator().manual_seed(6)
    tex = torch.rand(8, 4, 2, generator=gen, dtype=F64, requires_grad=True)
    uv = (torch.rand(6, 2, generator=gen, dtype=F64) * 1.4 - 0.2).requires_grad_(True)
    dx = (torch.rand(6, 2, generator=gen, dtype=F64) * 0.6 + 0.05).requires_grad_(True)
    dy = torch.rand(6, 2, generator=gen, dtype=F64) * 0.1

    def f(t: torch.Tensor, u: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        return sample_trilinear(pack_pyramid(build_mip_pyramid(t)), u, d, dy, wrap_s="clamp", wrap_t="mirror")

    assert torch.autograd.gradcheck(f, (tex, uv, dx))


def test_tone_mapping() -> None:
    x = torch.tensor([0.0, 0.5, 2.0, 4.0, 9.0], dtype=F64)
    out = tone_map_modified_reinhard(x, 4.0)
    torch.testing.assert_close(out[:4], x[:4] * (1 + x[:4] / 16) / (1 + x[:4]))
    assert out[3] == 1.0 and out[4] == 1.0  # the white point maps to 1, above clamps
    hdr = (torch.rand(3, 2, 3, generator=torch.Generator().manual_seed(4), dtype=F64) * 2).requires_grad_(True)
    white = torch.tensor(3.5, dtype=F64, requires_grad=True)
    exposure = torch.tensor(0.3, dtype=F64, requires_grad=True)
    for op in ("aces", "reinhard", "modified_reinhard"):
        assert torch.autograd.gradcheck(lambda h, w, e, op=op: tone_map(h, operator=op, white=w, exposure=e), (hdr, white, exposure))
    assert tone_map(torch.tensor([1e6]), operator="reinhard").item() == pytest.approx(1.0)
    with pytest.raises(InputError, match="tone-map operator"):
        tone_map(hdr, operator="filmic")


# --- a tiny scene --------------------------------------------------------------------------------------------

LIGHT = (0.3, 0.4, math.sqrt(1 - 0.25))
IRRADIANCE = (1.5, 1.2, 1.0)


def two_quads(texture: np.ndarray | None = None, colors: bool = False) -> Scene:
    """Two quads on z = 0 (left x in [-1, 0] with material 0, right x in [0, 1] with material 1)."""
    meshes = []
    for k, (x0, x1) in enumerate(((-1.0, 0.0), (0.0, 1.0))):
        pos = np.array([[x0, -1, 0], [x1, -1, 0], [x1, 1, 0], [x0, 1, 0]], np.float32)
        uv = np.stack([(pos[:, 0] + 1) / 2, (1 - pos[:, 1]) / 2], 1).astype(np.float32)
        tangents = np.tile(np.array([1, 0, 0, 1], np.float32), (4, 1))
        rgba = np.array([[1, 1, 1, 1], [0.5, 0.8, 1, 1], [1, 0.6, 0.7, 1], [0.9, 1, 0.4, 1]], np.float32) if colors else None
        meshes.append(
            Mesh(pos, np.array([[0, 1, 2], [0, 2, 3]]), np.tile(np.float32([0, 0, 1]), (4, 1)), tangents, uv, uv, rgba, k, f"q{k}")
        )
    tex = np.full((4, 4, 3), 0.5, np.float32) if texture is None else texture
    mats = [
        Material("textured", (0.8, 0.6, 0.4, 1.0), TextureRef(tex, 0), metallic_factor=0.3, roughness_factor=0.6),
        Material("plain", (0.2, 0.5, 0.9, 1.0), metallic_factor=0.9, roughness_factor=0.3),
    ]
    return Scene(meshes, mats)


CAMERA = look_at((0.2, 0.3, 3.0), (0.0, 0.0, 0.0), fov_y_deg=50.0)


@pytest.mark.parametrize(("ior", "specular", "tint"), [(1.5, 1.0, (1.0, 1.0, 1.0)), (2.4, 1.0, (1.0, 1.0, 1.0)), (1.5, 0.6, (2.0, 1.0, 0.5))])
def test_one_pixel_equals_the_brdf_evaluated_directly(ior: float, specular: float, tint: tuple[float, float, float]) -> None:
    srgb_half = 0.5
    linear = ((srgb_half + 0.055) / 1.055) ** 2.4  # the texture is sRGB; the renderer decodes it
    scene = two_quads()
    scene.materials[0].ior = ior  # KHR_materials_ior and _specular on the dielectric-ish material
    scene.materials[0].specular, scene.materials[0].specular_color = specular, tint
    rs = prepare_scene(scene, dtype=F64)
    lighting = Lighting([DirectionalLight(LIGHT, IRRADIANCE)], shadows=False)
    g = render_gbuffer(rs, CAMERA, 16, 12)
    out = shade(rs, g, lighting)
    _, dirs = CAMERA.generate_rays(16, 12, dtype=F64)
    checked = set()
    for row, col in ((6, 5), (5, 10)):
        pixel = row * 16 + col
        k = int((g.pixel == pixel).nonzero())
        material = int(g.material_id[k])
        wo = -dirs[row, col][None]
        wi = torch.tensor([LIGHT], dtype=F64)
        if material == 0:
            params = {"base_color": torch.tensor([0.8, 0.6, 0.4], dtype=F64) * linear, "metallic": 0.3, "roughness": 0.6,
                      "f0": torch.tensor([min(((ior - 1) / (ior + 1)) ** 2 * t, 1.0) * specular for t in tint], dtype=F64), "f90": specular}
        else:
            params = {"base_color": torch.tensor([0.2, 0.5, 0.9], dtype=F64), "metallic": 0.9, "roughness": 0.3}
        expected = gltf_eval(wi, wo, **params)[0] * torch.tensor(IRRADIANCE, dtype=F64)
        torch.testing.assert_close(out.hdr[row, col], expected, rtol=1e-10, atol=1e-12)
        checked.add(material)
    assert checked == {0, 1}  # both materials in one deferred pass
    assert out.alpha.sum() == len(g.pixel) and bool((out.hdr[out.alpha == 0] == 0).all())


def _params_render(rs, lighting: Lighting, size: int = 4):
    return lambda: shade(rs, render_gbuffer(rs, CAMERA, size, size), lighting).hdr


def test_render_gradients_reach_textures_factors_and_vertex_colours() -> None:
    tex = np.random.default_rng(0).random((2, 2, 3)).astype(np.float32)
    rs = prepare_scene(two_quads(tex, colors=True), dtype=F64)
    lighting = Lighting([DirectionalLight(LIGHT, IRRADIANCE)], shadows=False)
    mat0, mat1 = rs.materials
    texels = mat0.textures["base_color"].texels.clone().requires_grad_(True)
    metallic = mat1.metallic_factor.clone().requires_grad_(True)
    roughness = mat0.roughness_factor.clone().requires_grad_(True)
    colors = rs.colors.clone().requires_grad_(True)

    def f(t: torch.Tensor, m: torch.Tensor, r: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        mat0.textures["base_color"].texels, mat1.metallic_factor, mat0.roughness_factor, rs.colors = t, m, r, c
        return _params_render(rs, lighting, 5)()

    out = f(texels, metallic, roughness, colors)
    out.sum().backward()
    assert texels.grad.abs().sum() > 0 and metallic.grad.abs() > 0 and roughness.grad.abs() > 0 and colors.grad.abs().sum() > 0
    assert torch.autograd.gradcheck(f, (texels, metallic, roughness, colors))


def test_render_gradients_reach_vertex_positions() -> None:
    rs = prepare_scene(two_quads(), dtype=F64)
    rs.normals = torch.nn.functional.normalize(
        rs.normals + 0.3 * torch.randn(rs.normals.shape, generator=torch.Generator().manual_seed(5), dtype=F64), dim=-1
    )
    lighting = Lighting([DirectionalLight(LIGHT, IRRADIANCE)], shadows=False)
    positions = rs.positions.clone().requires_grad_(True)

    def f(p: torch.Tensor) -> torch.Tensor:
        rs.positions = p  # the BVH keeps the old ones: triangle ids stay fixed, as for a small step
        return _params_render(rs, lighting)()

    assert torch.autograd.gradcheck(f, (positions,))


def tiny_environment() -> EnvironmentLight:
    return EnvironmentLight.from_map(default_environment(16, 8))


def test_environment_lighting_is_seeded_and_differentiable() -> None:
    rs = prepare_scene(two_quads(), dtype=F64)
    env = tiny_environment()
    light = Lighting([], environment=env, environment_samples=4, seed=7, shadows=False)
    a = _params_render(rs, light)()
    b = _params_render(rs, light)()
    c = _params_render(rs, Lighting([], environment=env, environment_samples=4, seed=8))()
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.equal(a, c) and bool((a > 0).all())
    base = rs.materials[1].base_color_factor.clone().requires_grad_(True)

    def f(bc: torch.Tensor) -> torch.Tensor:
        rs.materials[1].base_color_factor = bc
        return _params_render(rs, light)()

    assert torch.autograd.gradcheck(f, (base,))


def directional_albedo(wo: torch.Tensor, **params: float) -> torch.Tensor:
    """``int f(wi, wo) cos dwi`` over the hemisphere by midpoint quadrature, ``[N, 3]`` for ``wo`` ``[N, 3]``."""
    n = 200
    theta = (torch.arange(n, dtype=F64) + 0.5) / n * (math.pi / 2)
    phi = (torch.arange(2 * n, dtype=F64) + 0.5) / (2 * n) * (2 * math.pi)
    t, p = torch.meshgrid(theta, phi, indexing="ij")
    wi = torch.stack([torch.sin(t) * torch.cos(p), torch.sin(t) * torch.sin(p), torch.cos(t)], -1).reshape(-1, 3)
    dw = (torch.sin(t) * (math.pi / 2 / n) * (math.pi / n)).reshape(-1, 1)
    return torch.stack([(gltf_eval(wi, w.expand_as(wi), **params) * dw).sum(0) for w in wo])


def test_environment_estimate_matches_the_albedo_in_a_furnace() -> None:
    """Under a constant environment of radiance 1 each pixel shows the BRDF's directional albedo."""
    scene = two_quads()
    scene.materials = [Material("metal", (1.0, 1.0, 1.0, 1.0), metallic_factor=1.0, roughness_factor=0.5)] * 2
    rs = prepare_scene(scene, dtype=F64)
    light = Lighting([], environment=EnvironmentLight.from_map(torch.ones(8, 16, 3)), environment_samples=64, shadows=False)
    cam = look_at((0.5, 0.2, 2.0), (0.1, 0.0, 0.0), fov_y_deg=40)
    g = render_gbuffer(rs, cam, 4, 4)
    out = shade(rs, g, light)
    expected = directional_albedo(out.surface.to_local(g.view), base_color=1.0, metallic=1.0, roughness=0.5)
    torch.testing.assert_close(out.radiance, expected, atol=0.02, rtol=0)


def test_shadows_unlit_emission_and_normal_maps() -> None:
    scene = two_quads()
    blocker = Mesh(
        np.array([[-0.6, -0.3, 0.5], [-0.2, -0.3, 0.5], [-0.2, 0.3, 0.5], [-0.6, 0.3, 0.5]], np.float32),
        np.array([[0, 1, 2], [0, 2, 3]]),
        np.tile(np.float32([0, 0, 1]), (4, 1)),
        material=1,
        name="blocker",
    )
    up = (0.0, 0.0, 1.0)
    cam = look_at((0.0, 0.0, 3.0), fov_y_deg=60.0)
    lit = Lighting([DirectionalLight(up, 1.0)], shadows=True)
    rs = prepare_scene(Scene([*scene.meshes, blocker], scene.materials))
    img = shade(rs, render_gbuffer(rs, cam, 32, 32), lit).hdr
    seen_through = shade(rs, render_gbuffer(rs, look_at((1.5, 0.0, 3.0), (-0.4, 0.0, 0.0), fov_y_deg=60.0), 32, 32), lit).hdr
    no_shadow = shade(
        rs,
        render_gbuffer(rs, look_at((1.5, 0.0, 3.0), (-0.4, 0.0, 0.0), fov_y_deg=60.0), 32, 32),
        Lighting([DirectionalLight(up, 1.0)], shadows=False),
    ).hdr
    assert bool((seen_through <= no_shadow + 1e-6).all()) and float((no_shadow - seen_through).max()) > 0.05
    assert bool(torch.isfinite(img).all())

    scene.materials[1].unlit = True
    scene.materials[0].emissive_factor = (0.25, 0.0, 0.0)
    rs = prepare_scene(scene, dtype=F64)
    g = render_gbuffer(rs, cam, 8, 8)
    dark = shade(rs, g, Lighting([]))
    right = g.material_id == 1
    torch.testing.assert_close(dark.radiance[right], torch.tensor([0.2, 0.5, 0.9], dtype=F64).expand(int(right.sum()), 3))
    torch.testing.assert_close(dark.radiance[~right], torch.tensor([0.25, 0.0, 0.0], dtype=F64).expand(int((~right).sum()), 3))

    # A constant normal map tilting towards +u tilts the shading normal towards the tangent (+x).
    tilt = np.array([0.5 + 0.5 * math.sin(0.4), 0.5, 0.5 + 0.5 * math.cos(0.4)], np.float32)
    scene.materials[0].normal_texture = TextureRef(np.tile(tilt, (2, 2, 1)), 0)
    rs = prepare_scene(scene, dtype=F64)
    g = render_gbuffer(rs, cam, 8, 8)
    s = shade(rs, g, Lighting([])).surface
    left = g.material_id == 0
    expected = torch.tensor([math.sin(0.4), 0.0, math.cos(0.4)], dtype=F64)
    torch.testing.assert_close(s.normal[left], expected.expand(int(left.sum()), 3), atol=1e-6, rtol=0)
    torch.testing.assert_close(s.normal[~left], torch.tensor([0.0, 0.0, 1.0], dtype=F64).expand(int((~left).sum()), 3))


def test_render_outputs_and_bad_lighting() -> None:
    rs = prepare_scene(two_quads())
    out = render(
        rs, CAMERA, 12, 10, Lighting(environment=tiny_environment(), environment_samples=2), tone_map="modified_reinhard", white=2.0
    )
    assert out.hdr.shape == out.ldr.shape == (10, 12, 3) and out.alpha.shape == (10, 12)
    assert bool(torch.isfinite(out.hdr).all()) and float(out.ldr.min()) >= 0.0 and float(out.ldr.max()) <= 1.0
    assert bool((out.hdr[out.alpha == 0] > 0).all())  # the environment shows behind the quads
    for bad in (
        Lighting(environment_samples=0),
        Lighting(environment=torch.ones(4, 8, 3)),  # type: ignore[arg-type]
        Lighting([DirectionalLight((0.0, 0.0, 0.0))]),
        Lighting([DirectionalLight(irradiance=-1.0)]),
        Lighting(background="sky"),
    ):
        with pytest.raises(InputError, match="Fix:"):
            shade(rs, render_gbuffer(rs, CAMERA, 4, 4), bad)
    scene = two_quads()
    scene.meshes[0].uv0 = None
    with pytest.raises(InputError, match="uv set 0"):
        prepare_scene(scene)


def test_round_trip_of_a_render_scene(tmp_path: Path) -> None:
    from neuralbake.io.gltf import write_gltf

    rs = prepare_scene(two_quads(colors=True))
    back = prepare_scene(load_gltf(write_gltf(tmp_path / "rs.gltf", rs.to_gltf_scene())))
    a = render(rs, CAMERA, 8, 8, Lighting(shadows=False)).hdr
    b = render(back, CAMERA, 8, 8, Lighting(shadows=False)).hdr
    torch.testing.assert_close(a, b, atol=2e-3, rtol=0)  # 8-bit texture quantisation only


def test_the_shaded_extension_factors_survive_the_render_scene() -> None:
    """Every factor of :data:`SHADED_FACTOR_FIELDS` goes into the renderer's material and back out unchanged."""
    from dataclasses import replace

    from neuralbake.io.gltf.extensions import SHADED_FACTOR_FIELDS

    factors = {"ior": 1.7, "specular": 0.6, "specular_color": (0.9, 0.8, 0.7), "iridescence": 0.5, "iridescence_ior": 1.4,
               "iridescence_thickness": (120.0, 380.0), "clearcoat": 0.8, "clearcoat_roughness": 0.3, "sheen_color": (0.2, 0.3, 0.4),
               "sheen_roughness": 0.6}
    assert set(factors) == set(SHADED_FACTOR_FIELDS)
    scene = two_quads()
    scene = replace(scene, materials=[replace(scene.materials[0], **factors), scene.materials[1]])
    rs = prepare_scene(scene)
    for holder in (rs.materials[0], rs.to_gltf_scene().materials[0]):
        for name, value in factors.items():
            assert getattr(holder, name) == pytest.approx(value), name


@pytest.mark.needs_shared
def test_damaged_helmet_renders(shared_dir: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tangents are generated
        scene = load_gltf(shared_dir / "assets/DamagedHelmet/DamagedHelmet.gltf")
    rs = prepare_scene(scene)
    lo, hi = scene.bounds()
    (cam,) = orbit([20.0], [15.0], framing_radius(float(np.linalg.norm(hi - lo)) / 2, 40.0), target=(lo + hi) / 2, fov_y_deg=40.0)
    lighting = Lighting(environment=EnvironmentLight.from_map(default_environment(64, 32)), environment_samples=2)
    start = time.perf_counter()
    out = render(rs, cam, 64, 64, lighting)
    seconds = time.perf_counter() - start
    assert 0.1 < float(out.alpha.mean()) < 0.9
    assert bool(torch.isfinite(out.hdr).all()) and bool(torch.isfinite(out.ldr).all())
    lit = out.hdr[out.alpha > 0]
    assert float(lit.mean()) > 0.02 and float(lit.std()) > 0.01  # textured and shaded, not flat
    assert seconds < 10.0


def test_antialiased_render_has_silhouette_gradients_and_no_seams() -> None:
    # the two quads are separate primitives meeting at x = 0: welded by position, that join is
    # not a silhouette; the outer outline is, and moving it changes the coverage
    rs = prepare_scene(two_quads(), dtype=F64)
    lighting = Lighting([DirectionalLight(LIGHT, IRRADIANCE)], shadows=False)
    plain = render(rs, CAMERA, 20, 16, lighting)
    smooth = render(rs, CAMERA, 20, 16, lighting, antialias=True)
    changed = (smooth.alpha != plain.alpha)
    assert changed.any()
    inside = torch.zeros_like(changed)
    inside[1:-1, 1:-1] = (plain.alpha[:-2, 1:-1] > 0) & (plain.alpha[2:, 1:-1] > 0) & (plain.alpha[1:-1, :-2] > 0) & (plain.alpha[1:-1, 2:] > 0)
    torch.testing.assert_close(smooth.hdr[inside], plain.hdr[inside])
    positions = rs.positions.clone().requires_grad_(True)
    rs.positions = positions
    out = render(rs, CAMERA, 20, 16, lighting, antialias=True)
    (grad,) = torch.autograd.grad(out.alpha.sum(), positions)
    assert grad[:, :2].abs().sum() > 0  # coverage grows as the outline moves outwards


@pytest.mark.parametrize("extension", [{"iridescence": 1.0, "iridescence_ior": 1.4, "iridescence_thickness": (100.0, 350.0)},
                                       {"clearcoat": 1.0, "clearcoat_roughness": 0.2},
                                       {"sheen_color": (0.9, 0.6, 0.5), "sheen_roughness": 0.4}], ids=["iridescence", "clearcoat", "sheen"])
def test_extension_material_is_shaded_with_it(extension: dict) -> None:
    """``KHR_materials_iridescence`` and ``_clearcoat`` reach the renderer: they change the quad that has them (direct and
    environment light, the coat sampled too), not the other one."""
    from dataclasses import replace

    scene = two_quads()
    film = replace(scene, materials=[scene.materials[0], replace(scene.materials[1], **extension)])
    camera = look_at((0.3, -0.8, 2.0), (0.0, 0.0, 0.0), fov_y_deg=60.0)
    lighting = Lighting(directional=[DirectionalLight(direction=LIGHT, irradiance=IRRADIANCE)], shadows=False,
                        environment=EnvironmentLight.from_map(default_environment(32, 16)), environment_samples=4)
    plain = render(prepare_scene(scene, dtype=F64), camera, 24, 24, lighting).hdr
    tinted = render(prepare_scene(film, dtype=F64), camera, 24, 24, lighting).hdr
    changed = (tinted - plain).abs().sum(-1) > 1e-6
    cols = torch.arange(24)[None, :].expand(24, 24)
    assert bool(changed.any()) and bool((cols[changed] >= 10).all())  # only the right quad (material 1) has the film

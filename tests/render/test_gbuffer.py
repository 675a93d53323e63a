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


def _textured_scene() -> tuple[object, object]:
    """The two quads of ``test_deferred`` with random textures of two sizes, addressing modes and uv sets on material 0
    and a normal map on material 1, seen at an angle (so footprints span several mip levels)."""
    from neuralbake.render.camera import look_at
    from neuralbake.render.scene import TextureSlot, prepare_scene
    from tests.render.test_deferred import two_quads

    rs = prepare_scene(two_quads(colors=True), dtype=F64)
    gen = torch.Generator().manual_seed(7)
    rand = lambda *shape: torch.rand(*shape, generator=gen, dtype=F64)  # noqa: E731
    first, second = rs.materials
    first.textures["base_color"] = TextureSlot(rand(64, 64, 4))
    first.textures["metallic_roughness"] = TextureSlot(rand(64, 64, 3))  # packed with the base colour
    first.textures["occlusion"] = TextureSlot(rand(16, 16, 1))  # another size
    first.textures["emissive"] = TextureSlot(rand(64, 64, 3), wrap_s="clamp", wrap_t="mirror")  # other addressing
    second.textures["normal"] = TextureSlot(rand(64, 64, 3), texcoord=1)
    return rs, look_at((0.4, -1.2, 2.0), (0.0, 0.0, 0.0), fov_y_deg=60.0)


def test_gbuffer_rays_and_materials_match_slot_by_slot_sampling() -> None:
    """The batched G-buffer (one solve for the pixel's ray and its two differentials) against the differentials
    recomputed from whole-image rays, and the packed multi-texture lookups against each slot sampled on its own."""
    from neuralbake.material.texture import decode_normal_map
    from neuralbake.render.gbuffer import evaluate_materials, render_gbuffer
    from neuralbake.render.mip import build_mip_pyramid, sample_trilinear
    from neuralbake.render.visibility import ray_triangle_barycentrics

    rs, camera = _textured_scene()
    g = render_gbuffer(rs, camera, 16, 12)
    assert g.pixel.numel() > 60
    for offset, derivative in (((1.5, 0.5), g.uv_dx), ((0.5, 1.5), g.uv_dy)):
        o, d = camera.generate_rays(16, 12, offset=offset, dtype=F64)
        b, _ = ray_triangle_barycentrics(rs.positions, rs.faces, g.triangle, o.reshape(-1, 3)[g.pixel], d.reshape(-1, 3)[g.pixel])
        for k, attribute in enumerate((rs.uv0, rs.uv1)):
            torch.testing.assert_close(derivative[k], interpolate(attribute, rs.faces, g.triangle, b) - g.uv[k])
    levels = torch.log2(torch.maximum((g.uv_dx[0] * 64).norm(dim=-1), (g.uv_dy[0] * 64).norm(dim=-1))).floor().clamp(0, 6)
    assert len(set(levels.tolist())) >= 2  # the footprints reach several levels

    s = evaluate_materials(rs, g)
    first, second = rs.materials
    rows = g.material_id == 0

    def tap(slot: object, at: torch.Tensor) -> torch.Tensor:
        k = slot.texcoord
        return sample_trilinear(build_mip_pyramid(slot.texels), g.uv[k][at], g.uv_dx[k][at], g.uv_dy[k][at], wrap_s=slot.wrap_s, wrap_t=slot.wrap_t)

    colour = first.base_color_factor * g.color[rows] * tap(first.textures["base_color"], rows)
    torch.testing.assert_close(s.base_color[rows], colour[:, :3])
    torch.testing.assert_close(s.alpha[rows], colour[:, 3])
    mr = tap(first.textures["metallic_roughness"], rows)
    torch.testing.assert_close(s.roughness[rows], (first.roughness_factor * mr[:, 1]).clamp(0, 1))
    torch.testing.assert_close(s.metallic[rows], (first.metallic_factor * mr[:, 2]).clamp(0, 1))
    torch.testing.assert_close(s.occlusion[rows], 1.0 + first.occlusion_strength * (tap(first.textures["occlusion"], rows)[:, 0] - 1.0))
    torch.testing.assert_close(s.emissive[rows], first.emissive_factor * tap(first.textures["emissive"], rows))
    normal_map = decode_normal_map(tap(second.textures["normal"], ~rows), strength=second.normal_scale)
    assert not torch.allclose(normal_map, torch.tensor([0.0, 0.0, 1.0], dtype=F64).expand_as(normal_map))
    # each slot's cached pyramid is now a view of one packed table per group, equal to its own pyramid
    base, metal = first.textures["base_color"], first.textures["metallic_roughness"]
    for slot in (base, metal):
        for view, level in zip(slot.pyramid(), build_mip_pyramid(slot.texels), strict=True):
            torch.testing.assert_close(view, level)
    assert base.pyramid()[0].untyped_storage().data_ptr() == metal.pyramid()[0].untyped_storage().data_ptr()
    # changed texels are seen at the next lookup (the cache follows the tensor's version)
    with torch.no_grad():
        base.texels.mul_(0.5)
    torch.testing.assert_close(evaluate_materials(rs, g).base_color[rows], colour[:, :3] * 0.5)
    # and new texels in place of the old (a new tensor, whatever id it gets) are seen too
    base.texels = base.texels * 2.0
    torch.testing.assert_close(evaluate_materials(rs, g).base_color[rows], colour[:, :3])


def test_single_material_scene_needs_no_split() -> None:
    """With one material every hit takes its inputs directly (no per-material rows), and they equal the two-material
    scene's where that material is hit."""
    from neuralbake.render.gbuffer import evaluate_materials, render_gbuffer
    from neuralbake.render.scene import prepare_scene
    from tests.render.test_deferred import two_quads

    scene = two_quads(colors=True)
    one = prepare_scene(type(scene)(**{**scene.__dict__, "materials": scene.materials[:1],
                                       "meshes": [type(m)(**{**m.__dict__, "material": 0}) for m in scene.meshes]}), dtype=F64)
    two = prepare_scene(scene, dtype=F64)
    from neuralbake.render.camera import look_at

    camera = look_at((0.4, -1.2, 2.0), (0.0, 0.0, 0.0), fov_y_deg=60.0)
    g1, g2 = render_gbuffer(one, camera, 16, 16), render_gbuffer(two, camera, 16, 16)
    s1, s2 = evaluate_materials(one, g1), evaluate_materials(two, g2)
    rows = g2.material_id == 0
    torch.testing.assert_close(s1.base_color[rows], s2.base_color[rows])
    torch.testing.assert_close(s1.roughness[rows], s2.roughness[rows])

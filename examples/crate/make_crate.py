"""Make the example PBR asset that ships with neuralbake: a small sci-fi crate.

A rounded box (flat panels, rounded edges) with a full glTF metal/rough material: base colour,
metallic-roughness, tangent-space normal, occlusion and emissive maps, 256 x 256 each. The paint is
worn off at the panel edges and along scratches, showing bare metal (metallic 1, smooth); grooves
between panels and rivets live in a height field that gives both the normal map and the occlusion;
one face carries a glowing status strip. Everything is procedural and deterministic (fixed seed),
so the asset is the project's own work and free to use (CC0).

It also writes ``crates.gltf``: three such crates side by side, each with its own material (the
crate's and two other paint schemes): a small multi-material scene for ``material pack`` and the
frame-time bench. The files beside this script (``crate.gltf``, ``crate.bin``, ``crate_*.png``,
``crates.gltf``, ``crates.bin``, ``crates_*.png``) were written by it; re-run it to make them again::

    python examples/crate/make_crate.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from neuralbake.io.gltf import Material, Mesh, Scene, TextureRef, generate_tangents, write_gltf

SIZE = 256
"""Texture side in texels."""
GRID = 12
"""Quads per face side (the rounded edges need a few rows)."""
ROUNDING = 0.12
"""Edge radius, as a fraction of the half side."""

# The six faces: (normal axis, sign); their uv cells form a 3 x 2 atlas.
_FACES = [(0, 1.0), (0, -1.0), (1, 1.0), (1, -1.0), (2, 1.0), (2, -1.0)]
_PAD = 4  # texels of padding around each cell, so bilinear fetches do not bleed across cells
PAINTS = [
    ((0.85, 0.35, 0.08), (0.12, 0.30, 0.55)),  # the crate: orange and blue panels
    ((0.20, 0.45, 0.12), (0.55, 0.55, 0.50)),  # the scene's second crate: green and grey
    ((0.65, 0.06, 0.05), (0.80, 0.78, 0.70)),  # the third: red and off-white
]
"""Paint colours of alternate faces, per crate (linear RGB)."""


def _value_noise(shape: tuple[int, int], cells: int, rng: np.random.Generator) -> np.ndarray:
    """Smooth noise in [0, 1]: a random lattice, bicubic-smoothed (tileable enough for a cell)."""
    lattice = rng.random((cells + 1, cells + 1))
    y = np.linspace(0.0, cells, shape[0], endpoint=False)
    x = np.linspace(0.0, cells, shape[1], endpoint=False)
    yi, xi = np.floor(y).astype(int), np.floor(x).astype(int)
    fy, fx = y - yi, x - xi
    sy, sx = fy * fy * (3 - 2 * fy), fx * fx * (3 - 2 * fx)
    a = lattice[yi][:, xi]
    b = lattice[yi][:, xi + 1]
    c = lattice[yi + 1][:, xi]
    d = lattice[yi + 1][:, xi + 1]
    top = a + (b - a) * sx[None, :]
    bottom = c + (d - c) * sx[None, :]
    return top + (bottom - top) * sy[:, None]


def _face_maps(cell: int, face: int, rng: np.random.Generator, colours: tuple = PAINTS[0]) -> dict[str, np.ndarray]:
    """Height, paint mask, emissive mask and colour of one face's square cell."""
    t = (np.arange(cell) + 0.5) / cell
    u, v = np.meshgrid(t, t)
    # Panel grooves: a 3 x 3 grid of panels, with a groove profile of width ~1.5 texels.
    panel_u, panel_v = (u * 3.0) % 1.0, (v * 3.0) % 1.0
    edge = np.minimum(np.minimum(panel_u, 1 - panel_u), np.minimum(panel_v, 1 - panel_v))
    groove = np.clip(1.0 - edge / 0.035, 0.0, 1.0)
    height = -0.6 * groove
    # Rivets near each panel's corners.
    for cu in (0.12, 0.88):
        for cv in (0.12, 0.88):
            d = np.hypot(panel_u - cu, panel_v - cv)
            height += 0.5 * np.clip(1.0 - (d / 0.06) ** 2, 0.0, 1.0)
    # Worn paint: paint survives away from panel edges, broken up by noise, and along scratches.
    wear = _value_noise((cell, cell), 6, rng) * 0.6 + _value_noise((cell, cell), 18, rng) * 0.4
    paint = (edge * 4.0 + wear * 0.9) > 0.62
    for _ in range(5):  # straight scratches to bare metal
        p0, angle = rng.random(2), rng.random() * np.pi
        direction = np.array([np.cos(angle), np.sin(angle)])
        along = (u - p0[0]) * direction[0] + (v - p0[1]) * direction[1]
        across = np.abs(-(u - p0[0]) * direction[1] + (v - p0[1]) * direction[0])
        length = 0.15 + 0.3 * rng.random()
        paint &= ~((across < 0.006) & (np.abs(along) < length))
        height -= 0.15 * ((across < 0.006) & (np.abs(along) < length))
    emissive = np.zeros((cell, cell))
    if face == 4:  # a status strip on the top face
        emissive = ((np.abs(v - 0.5) < 0.03) & (np.abs(u - 0.5) < 0.3)).astype(float)
    paint_colour = np.array(colours[face % 2])
    return {"height": height, "paint": paint.astype(float), "emissive": emissive, "paint_colour": paint_colour, "wear": wear}


def make_textures(seed: int = 7, colours: tuple = PAINTS[0]) -> dict[str, np.ndarray]:
    """The five 256 x 256 maps, float32 ``[H, W, C]`` in ``[0, 1]`` as stored (colour maps sRGB)."""
    rng = np.random.default_rng(seed)
    cell = SIZE // 3 - 2 * _PAD
    height = np.zeros((SIZE, SIZE))
    base = np.zeros((SIZE, SIZE, 3))
    metal_rough = np.zeros((SIZE, SIZE, 3))
    emissive = np.zeros((SIZE, SIZE, 3))
    bare_metal = np.array([0.62, 0.62, 0.60])
    for face in range(6):
        maps = _face_maps(cell, face, rng, colours)
        row, col = divmod(face, 3)
        y0 = row * (SIZE // 2) + (SIZE // 2 - cell) // 2
        x0 = col * (SIZE // 3) + _PAD
        region = (slice(y0 - _PAD, y0 + cell + _PAD), slice(x0 - _PAD, x0 + cell + _PAD))
        paint = np.pad(maps["paint"], _PAD, mode="edge")
        grime = 0.75 + 0.25 * np.pad(maps["wear"], _PAD, mode="edge")
        colour = paint[..., None] * maps["paint_colour"] * grime[..., None] + (1 - paint[..., None]) * bare_metal
        base[region] = colour
        height[region] = np.pad(maps["height"], _PAD, mode="edge")
        roughness = 0.55 + 0.2 * grime * paint + (1 - paint) * (0.25 - 0.1 * grime)
        metal_rough[region] = np.stack([np.ones_like(paint), roughness, 1 - paint], axis=-1)
        emissive[region] = np.pad(maps["emissive"], _PAD, mode="edge")[..., None] * np.array([0.2, 1.0, 0.6])
    # Texels outside every face's cell are never sampled; fill them from the nearest cell edge
    # (dilation), so mip levels and compressors see no black seams.
    filled = np.zeros((SIZE, SIZE), dtype=bool)
    for face in range(6):
        row, col = divmod(face, 3)
        y0 = row * (SIZE // 2) + (SIZE // 2 - cell) // 2
        x0 = col * (SIZE // 3) + _PAD
        filled[y0 - _PAD : y0 + cell + _PAD, x0 - _PAD : x0 + cell + _PAD] = True
    maps = [height[..., None], base, metal_rough, emissive]
    while not filled.all():
        grow = filled.copy()
        for axis, shift in ((0, 1), (0, -1), (1, 1), (1, -1)):
            source = np.roll(filled, shift, axis=axis)
            take = source & ~grow
            for m in maps:
                m[take] = np.roll(m, shift, axis=axis)[take]
            grow |= take
        filled = grow
    # Normal map (OpenGL convention: green up = +v goes up the image) from the height field.
    dh_dx = (np.roll(height, -1, axis=1) - np.roll(height, 1, axis=1)) * 0.5
    dh_dy = (np.roll(height, -1, axis=0) - np.roll(height, 1, axis=0)) * 0.5
    strength = 3.0
    n = np.stack([-dh_dx * strength, dh_dy * strength, np.ones_like(height)], axis=-1)
    n /= np.linalg.norm(n, axis=-1, keepdims=True)
    # Occlusion: grooves are darker than the panels around them.
    blurred = height.copy()
    for _ in range(4):
        blurred = 0.2 * (blurred + np.roll(blurred, 1, 0) + np.roll(blurred, -1, 0) + np.roll(blurred, 1, 1) + np.roll(blurred, -1, 1))
    ao = np.clip(1.0 + 1.5 * (height - blurred) - 0.25 * (height < -0.3), 0.3, 1.0)
    srgb = lambda linear: np.where(linear <= 0.0031308, 12.92 * linear, 1.055 * np.power(np.clip(linear, 0, 1), 1 / 2.4) - 0.055)
    f32 = lambda a: np.clip(a, 0.0, 1.0).astype(np.float32)
    return {
        "base_color": f32(srgb(base)),
        "metallic_roughness": f32(metal_rough),
        "normal": f32(n * 0.5 + 0.5),
        "occlusion": f32(np.repeat(ao[..., None], 3, axis=-1)),
        "emissive": f32(srgb(emissive)),
    }


def make_mesh(centre: tuple[float, float, float] = (0.0, 0.0, 0.0), material: int = 0, name: str = "crate") -> Mesh:
    """The rounded box, half side 1 (centred at ``centre``), one uv cell of the 3 x 2 atlas per face."""
    cell = (SIZE // 3 - 2 * _PAD) / SIZE
    positions, normals, uvs, indices = [], [], [], []
    t = np.linspace(-1.0, 1.0, GRID + 1)
    a, b = np.meshgrid(t, t)
    inner = 1.0 - ROUNDING
    for face, (axis, sign) in enumerate(_FACES):
        others = [k for k in range(3) if k != axis]
        cube = np.zeros((GRID + 1, GRID + 1, 3))
        cube[..., axis] = sign
        # Orient each face so that (u, v) x normal is right-handed (counter-clockwise fronts).
        first, second = (others if sign > 0 else others[::-1]) if axis != 1 else (others[::-1] if sign > 0 else others)
        cube[..., first] = a
        cube[..., second] = -b
        core = np.clip(cube, -inner, inner)
        offset = cube - core
        normal = offset / np.linalg.norm(offset, axis=-1, keepdims=True)
        row, col = divmod(face, 3)
        u0 = (col * (SIZE // 3) + _PAD) / SIZE
        v0 = (row * (SIZE // 2) + (SIZE // 2 - cell * SIZE) // 2) / SIZE
        uv = np.stack([u0 + (a + 1) / 2 * cell, v0 + (b + 1) / 2 * cell], axis=-1)
        base = len(positions) and sum(len(p) for p in positions)
        positions.append((core + ROUNDING * normal).reshape(-1, 3))
        normals.append(normal.reshape(-1, 3))
        uvs.append(uv.reshape(-1, 2))
        k = np.arange((GRID + 1) * (GRID + 1)).reshape(GRID + 1, GRID + 1) + base
        quads = np.stack([k[:-1, :-1], k[1:, :-1], k[1:, 1:], k[:-1, 1:]], axis=-1).reshape(-1, 4)
        tri = np.concatenate([quads[:, [0, 1, 2]], quads[:, [0, 2, 3]]])
        p = positions[-1]
        local = tri - base
        cross = np.cross(p[local[:, 1]] - p[local[:, 0]], p[local[:, 2]] - p[local[:, 0]])
        if np.mean(np.sum(cross * normals[-1][local[:, 0]], axis=1)) < 0:
            tri = tri[:, [0, 2, 1]]
        indices.append(tri)
    positions_all = np.concatenate(positions).astype(np.float32)
    normals_all = np.concatenate(normals).astype(np.float32)
    uv_all = np.concatenate(uvs).astype(np.float32)
    index_all = np.concatenate(indices).astype(np.int64)
    tangents = generate_tangents(positions_all, normals_all, uv_all, index_all)
    return Mesh(positions_all + np.asarray(centre, dtype=np.float32), index_all, normals_all, tangents, uv_all, material=material, name=name)


def make_material(name: str, maps: dict[str, np.ndarray], prefix: str = "") -> Material:
    ref = lambda key: TextureRef(maps[key], name=f"{prefix}{key}.png")
    return Material(
        name=name,
        base_color_texture=ref("base_color"),
        metallic_roughness_texture=ref("metallic_roughness"),
        normal_texture=ref("normal"),
        occlusion_texture=ref("occlusion"),
        emissive_texture=ref("emissive"),
        emissive_factor=(1.0, 1.0, 1.0),
    )


def main() -> None:
    folder = Path(__file__).resolve().parent
    out = folder / "crate.gltf"
    write_gltf(out, Scene(meshes=[make_mesh()], materials=[make_material("crate_paint", make_textures())]))
    print(f"wrote {out} and its .bin + 5 PNG maps")
    # A scene of three crates side by side, each with its own material (the crate's, and two more
    # paint schemes with their own wear): a multi-material scene for `material pack` and the frame bench.
    names = ["crate_paint", "crate_green", "crate_red"]
    materials = [make_material(name, make_textures(seed, paints), prefix=f"{name}_") for name, seed, paints in zip(names, (7, 11, 13), PAINTS, strict=True)]
    meshes = [make_mesh((2.6 * (k - 1), 0.0, 0.0), material=k, name=f"crate_{k}") for k in range(3)]
    out = folder / "crates.gltf"
    write_gltf(out, Scene(meshes=meshes, materials=materials))
    print(f"wrote {out} and its .bin + 15 PNG maps")


if __name__ == "__main__":
    main()

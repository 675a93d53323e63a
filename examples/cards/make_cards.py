"""Make the see-through example assets that ship with neuralbake: a foliage card (alphaMode MASK) and a decal (BLEND).

- ``foliage.gltf``: two crossed, double-sided quads (the usual grass or fern card) whose base colour texture holds a
  spray of leaves in its alpha: 1 on a leaf, 0 between them, cut out at 0.5. Leaves are ellipses along a curved stem,
  with darker veins and a lighter rim in their colour, roughness 0.55.
- ``decal.gltf``: a concrete wall quad (opaque, noisy grey, rough) and, 2 mm in front of it, a painted stencil decal
  (a hazard chevron in a ring) whose alpha is soft at its edges and worn by noise, blended over the wall.

Everything is procedural and deterministic (fixed seed), so the assets are the project's own work and free to use
(CC0). The files beside this script (``foliage.gltf``, ``foliage.bin``, ``foliage_*.png``, ``decal.gltf``,
``decal.bin``, ``decal_*.png``) were written by it, and ``transparency.png`` (each asset rendered as authored and with
its alpha ignored); re-run it to make them again::

    python examples/cards/make_cards.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from neuralbake.io.gltf import Material, Mesh, Scene, TextureRef, generate_tangents, write_gltf

SIZE = 128
"""Texture side in texels."""
HERE = Path(__file__).resolve().parent


def _value_noise(side: int, cells: int, rng: np.random.Generator) -> np.ndarray:
    """Smooth noise in [0, 1] on a ``side x side`` grid: a random lattice, smoothstep-interpolated."""
    lattice = rng.random((cells + 1, cells + 1))
    t = np.linspace(0.0, cells, side, endpoint=False)
    i = np.floor(t).astype(int)
    f = t - i
    s = f * f * (3 - 2 * f)
    rows = lattice[i] * (1 - s)[:, None] + lattice[i + 1] * s[:, None]
    return rows[:, i] * (1 - s)[None, :] + rows[:, i + 1] * s[None, :]


def _quad(corners: np.ndarray, material: int, name: str) -> Mesh:
    """A quad (corners counter-clockwise from the lower left) with uv (0, 1) at its lower left, tangents generated."""
    uv = np.array([[0, 1], [1, 1], [1, 0], [0, 0]], np.float32)
    normal = np.cross(corners[1] - corners[0], corners[3] - corners[0])
    normals = np.tile((normal / np.linalg.norm(normal)).astype(np.float32), (4, 1))
    faces = np.array([[0, 1, 2], [0, 2, 3]])
    tangents = generate_tangents(corners.astype(np.float32), normals, uv, faces)
    return Mesh(corners.astype(np.float32), faces, normals, tangents, uv, None, None, material, name)


def foliage_textures(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """sRGB base colour with the leaves in alpha, and metallic-roughness."""
    t = (np.arange(SIZE) + 0.5) / SIZE
    u, v = np.meshgrid(t, t)  # v = 0 at the top of the image: the card's top
    vein = np.zeros((SIZE, SIZE))
    rim = np.zeros((SIZE, SIZE))

    def stem_x(y: np.ndarray | float) -> np.ndarray | float:
        return 0.5 + 0.08 * np.sin(3.0 * y)  # the stem bends a little

    alpha = ((np.abs(u - stem_x(v)) < 0.012) & (v > 0.08)).astype(float)
    for k in range(9):
        y = 0.16 + 0.085 * k
        side = 1.0 if k % 2 else -1.0
        length, width = 0.30 - 0.015 * k + 0.04 * rng.random(), 0.06 + 0.012 * rng.random()
        rise = 0.35 + 0.3 * rng.random()  # radians above the horizontal (v grows downwards)
        du_dir, dv_dir = side * np.cos(rise), -np.sin(rise)
        cx, cy = stem_x(y) + du_dir * 0.5 * length, y + dv_dir * 0.5 * length
        du, dv = u - cx, v - cy
        along = du * du_dir + dv * dv_dir
        across = -du * dv_dir + dv * du_dir
        r = (along / (0.5 * length)) ** 2 + (across / width) ** 2
        leaf = r < 1.0
        alpha = np.maximum(alpha, leaf)
        vein = np.maximum(vein, leaf & (np.abs(across) < 0.006))
        rim = np.maximum(rim, leaf * np.clip((r - 0.6) / 0.4, 0.0, 1.0))
    noise = _value_noise(SIZE, 10, rng)
    green = np.array([0.16, 0.42, 0.08]) * (0.8 + 0.4 * noise)[..., None]
    colour = green * (1 - 0.45 * vein)[..., None] + np.array([0.35, 0.55, 0.12]) * (0.5 * rim)[..., None]
    srgb = np.clip(colour, 0, 1) ** (1 / 2.2)
    base = np.concatenate((srgb, alpha[..., None].astype(float)), axis=-1).astype(np.float32)
    mr = np.zeros((SIZE, SIZE, 3), np.float32)
    mr[..., 1] = 0.55 + 0.1 * noise
    return {"base_color": base, "metallic_roughness": mr}


def decal_textures(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The wall's sRGB base colour and the decal's sRGB colour with its soft, worn alpha."""
    t = (np.arange(SIZE) + 0.5) / SIZE
    u, v = np.meshgrid(t, t)
    concrete = 0.45 + 0.18 * _value_noise(SIZE, 8, rng) + 0.1 * _value_noise(SIZE, 32, rng)
    wall = np.repeat(np.clip(concrete, 0, 1)[..., None], 3, axis=-1).astype(np.float32)
    x, y = u - 0.5, v - 0.5
    radius = np.hypot(x, y)
    ring = np.clip(1.0 - np.abs(radius - 0.38) / 0.05, 0.0, 1.0)
    chevron = np.clip(1.0 - np.abs(np.abs(x) * 1.3 + y * 0.9 - 0.05) / 0.07, 0.0, 1.0) * (np.abs(x) < 0.26)
    paint = np.clip(np.maximum(ring, chevron) * 1.6, 0.0, 1.0)
    wear = np.clip((_value_noise(SIZE, 16, rng) - 0.25) * 2.0, 0.0, 1.0)
    alpha = paint * (0.35 + 0.65 * wear) * (radius < 0.45)
    yellow = np.broadcast_to(np.array([0.95, 0.72, 0.05]), (SIZE, SIZE, 3))
    decal = np.concatenate((yellow, alpha[..., None]), axis=-1).astype(np.float32)
    return {"wall": wall, "decal": decal}


def foliage_scene() -> Scene:
    rng = np.random.default_rng(41)
    maps = foliage_textures(rng)
    leaf = Material("leaves", (1.0, 1.0, 1.0, 1.0), TextureRef(maps["base_color"], 0, name="foliage_base_color"),
                    metallic_factor=0.0, roughness_factor=1.0, metallic_roughness_texture=TextureRef(maps["metallic_roughness"], 0, name="foliage_metallic_roughness"),
                    alpha_mode="MASK", alpha_cutoff=0.5, double_sided=True)  # fmt: skip
    h = 0.5
    cards = [
        _quad(np.array([[-h, 0, 0], [h, 0, 0], [h, 2 * h, 0], [-h, 2 * h, 0]]), 0, "card_x"),
        _quad(np.array([[0, 0, h], [0, 0, -h], [0, 2 * h, -h], [0, 2 * h, h]]), 0, "card_z"),
    ]
    return Scene(meshes=cards, materials=[leaf])


def decal_scene() -> Scene:
    rng = np.random.default_rng(42)
    maps = decal_textures(rng)
    wall = Material("concrete", (1.0, 1.0, 1.0, 1.0), TextureRef(maps["wall"], 0, name="decal_wall_base_color"), metallic_factor=0.0, roughness_factor=0.9)
    decal = Material("hazard_decal", (1.0, 1.0, 1.0, 1.0), TextureRef(maps["decal"], 0, name="decal_base_color"), metallic_factor=0.0,
                     roughness_factor=0.5, alpha_mode="BLEND")  # fmt: skip
    s, d = 0.6, 0.35
    return Scene(
        meshes=[
            _quad(np.array([[-s, -s, 0], [s, -s, 0], [s, s, 0], [-s, s, 0]]), 0, "wall"),
            _quad(np.array([[-d, -d, 0.002], [d, -d, 0.002], [d, d, 0.002], [-d, d, 0.002]]), 1, "decal"),
        ],
        materials=[wall, decal],
    )


def render_comparison(path: Path) -> None:
    """``transparency.png``: each asset as authored (MASK, BLEND) and with its alpha ignored (OPAQUE)."""
    import dataclasses

    import torch

    from neuralbake.io.images import save_png
    from neuralbake.render.camera import look_at
    from neuralbake.render.deferred import Lighting, render
    from neuralbake.render.envmap import EnvironmentLight, default_environment
    from neuralbake.render.scene import prepare_scene

    panels = []
    for scene, eye, target in ((foliage_scene(), (1.6, 1.0, 1.3), (0.0, 0.5, 0.0)), (decal_scene(), (0.3, 0.25, 1.7), (0.0, 0.0, 0.0))):
        camera = look_at(eye, target, fov_y_deg=40.0)
        for authored in (True, False):
            materials = scene.materials if authored else [dataclasses.replace(m, alpha_mode="OPAQUE") for m in scene.materials]
            rs = prepare_scene(dataclasses.replace(scene, materials=materials))
            lighting = Lighting(environment=EnvironmentLight.from_map(default_environment(128, 64)), environment_samples=32,
                                shadows=False, background=(0.55, 0.6, 0.68))
            panels.append(render(rs, camera, 192, 192, lighting, tone_map="aces").ldr)
    save_png(path, torch.cat(panels, dim=1).numpy())


def main() -> None:
    write_gltf(HERE / "foliage.gltf", foliage_scene())
    write_gltf(HERE / "decal.gltf", decal_scene())
    render_comparison(HERE / "transparency.png")


if __name__ == "__main__":
    main()

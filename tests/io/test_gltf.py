"""glTF reading and writing: an exact write -> read round trip, node transforms, generated normals
and tangents, embedded (.glb) data, and a clear error for every bad input the loader refuses."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pygltflib
import pytest

from neuralbake.errors import InputError
from neuralbake.io.gltf import Material, Mesh, Scene, TextureRef, generate_tangents, load_gltf, write_gltf


def quantised(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Texels that survive 8-bit PNG exactly."""
    return (rng.integers(0, 256, shape) / 255.0).astype(np.float32)


def two_material_scene(seed: int = 0) -> Scene:
    rng = np.random.default_rng(seed)
    quad = np.array([[-1, -1, 0], [1, -1, 0], [1, 1, 0], [-1, 1, 0]], np.float32)
    faces = np.array([[0, 1, 2], [0, 2, 3]], np.int64)
    uv = np.array([[0, 1], [1, 1], [1, 0], [0, 0]], np.float32)
    base = quantised(rng, (4, 6, 4))
    rough = quantised(rng, (3, 5, 3))
    normal = quantised(rng, (4, 4, 3))
    mats = [
        Material(
            name="painted",
            base_color_factor=(0.9, 0.8, 0.7, 1.0),
            base_color_texture=TextureRef(base, 0, "repeat", "clamp", "paint.png"),
            metallic_factor=0.25,
            roughness_factor=0.5,
            metallic_roughness_texture=TextureRef(rough, 1, "mirror", "repeat", "orm.png"),
            normal_texture=TextureRef(normal, 0, name="normal.png"),
            normal_scale=0.5,
            occlusion_texture=TextureRef(rough, 1, "mirror", "repeat", "orm.png"),
            occlusion_strength=0.75,
            emissive_factor=(0.1, 0.2, 0.3),
            double_sided=True,
        ),
        Material(name="flat", base_color_factor=(0.2, 0.4, 0.6, 1.0), unlit=True),
    ]
    colors = rng.random((4, 4)).astype(np.float32)
    tangents = np.tile(np.array([1, 0, 0, 1], np.float32), (4, 1))
    meshes = [
        Mesh(quad, faces, np.tile([0, 0, 1], (4, 1)).astype(np.float32), tangents, uv, uv * 0.5 + 0.25, colors, 0, "front"),
        Mesh(quad + [0, 0, -1], faces, np.tile([0, 0, 1], (4, 1)).astype(np.float32), None, uv, None, None, 1, "back"),
    ]
    return Scene(meshes=meshes, materials=mats)


def test_write_read_round_trip_is_exact(tmp_path: Path) -> None:
    scene = two_material_scene()
    path = write_gltf(tmp_path / "out.gltf", scene)
    assert {p.name for p in tmp_path.iterdir()} >= {"out.gltf", "out.bin"}
    back = load_gltf(path)
    assert len(back.meshes) == 2 and len(back.materials) == 2
    for a, b in zip(scene.meshes, back.meshes):
        np.testing.assert_array_equal(a.positions, b.positions)
        np.testing.assert_array_equal(a.indices, b.indices)
        for attr in ("normals", "tangents", "uv0", "uv1", "colors"):
            x, y = getattr(a, attr), getattr(b, attr)
            assert (x is None) == (y is None), attr
            if x is not None:
                np.testing.assert_array_equal(x, y)
        assert a.material == b.material
    for a, b in zip(scene.materials, back.materials):
        for attr in (
            "name",
            "metallic_factor",
            "roughness_factor",
            "normal_scale",
            "occlusion_strength",
            "double_sided",
            "unlit",
            "alpha_mode",
        ):
            assert (
                getattr(a, attr) == pytest.approx(getattr(b, attr))
                if isinstance(getattr(a, attr), float)
                else getattr(a, attr) == getattr(b, attr)
            )
        np.testing.assert_allclose(a.base_color_factor, b.base_color_factor, rtol=0, atol=1e-7)
        np.testing.assert_allclose(a.emissive_factor, b.emissive_factor, rtol=0, atol=1e-7)
        assert a.textures().keys() == b.textures().keys()
        for slot, ref in a.textures().items():
            got = b.textures()[slot]
            np.testing.assert_array_equal(ref.image, got.image)
            assert (ref.texcoord, ref.wrap_s, ref.wrap_t) == (got.texcoord, got.wrap_s, got.wrap_t)
    doc = json.loads(path.read_text())
    assert "KHR_materials_unlit" in doc["extensionsUsed"] and "KHR_materials_unlit" in doc["materials"][1]["extensions"]
    assert len(doc["images"]) == 3  # the shared ORM image is written once


def test_write_sixteen_bit_textures_keep_precision(tmp_path: Path) -> None:
    scene = two_material_scene()
    image = np.linspace(0, 1, 4 * 4 * 3, dtype=np.float32).reshape(4, 4, 3)
    scene.materials[0].base_color_texture = TextureRef(image, 0, name="fine")
    back = load_gltf(write_gltf(tmp_path / "fine.gltf", scene, texture_bits=16))
    np.testing.assert_allclose(back.materials[0].base_color_texture.image, image, atol=0.5 / 65535)


def test_texture_files_do_not_repeat_the_gltf_name(tmp_path: Path) -> None:
    """A fit's texture is named lod_uv1 and its glTF lod.gltf: the file was lod_lod_uv1.png."""
    scene = two_material_scene()
    scene.materials[0].base_color_texture = TextureRef(scene.materials[0].base_color_texture.image, 1, name="lod_uv1")
    path = write_gltf(tmp_path / "lod.gltf", scene)
    files = sorted(p.name for p in tmp_path.glob("*.png"))
    assert files == ["lod_normal.png", "lod_orm.png", "lod_uv1.png"], files
    assert {image["uri"] for image in json.loads(path.read_text())["images"]} == set(files)
    back = load_gltf(path)
    assert back.materials[0].base_color_texture.image.shape == scene.materials[0].base_color_texture.image.shape


def test_node_transforms_are_flattened(tmp_path: Path) -> None:
    path = write_gltf(tmp_path / "t.gltf", two_material_scene())
    doc = json.loads(path.read_text())
    # Parent: translate +x by 2; child: 90 degrees about +z then the front quad; the back quad is mirrored.
    s = math.sqrt(0.5)
    doc["nodes"] = [
        {"translation": [2, 0, 0], "children": [1, 2]},
        {"rotation": [0, 0, s, s], "mesh": 0},
        {"scale": [-1, 1, 1], "mesh": 1},
    ]
    doc["scenes"] = [{"nodes": [0]}]
    path.write_text(json.dumps(doc))
    scene = load_gltf(path)
    front = scene.meshes[0]
    # (1, -1, 0) rotated by 90 degrees about z is (1, 1, 0); then +2 in x.
    np.testing.assert_allclose(front.positions[1], [3, 1, 0], atol=1e-6)
    np.testing.assert_allclose(front.tangents[0], [0, 1, 0, 1], atol=1e-6)
    back = scene.meshes[1]
    np.testing.assert_allclose(back.positions[1], [1, -1, -1], atol=1e-6)
    # Mirroring flips the winding so the face normal still agrees with the vertex normal.
    p = back.positions[back.indices[0]]
    face = np.cross(p[1] - p[0], p[2] - p[0])
    assert np.dot(face, back.normals[0]) > 0


def test_glb_with_embedded_textures(tmp_path: Path) -> None:
    scene = two_material_scene()
    gltf_path = write_gltf(tmp_path / "e.gltf", scene)
    gltf = pygltflib.GLTF2().load(str(gltf_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pygltflib warns that e.bin is left behind
        gltf.convert_images(pygltflib.ImageFormat.DATAURI)
        gltf.convert_buffers(pygltflib.BufferFormat.BINARYBLOB)
    glb = tmp_path / "e.glb"
    gltf.save_binary(str(glb))
    back = load_gltf(glb)
    np.testing.assert_array_equal(back.meshes[0].colors, scene.meshes[0].colors)
    np.testing.assert_array_equal(back.materials[0].base_color_texture.image, scene.materials[0].base_color_texture.image)


def test_missing_normals_are_generated_with_a_warning(tmp_path: Path) -> None:
    scene = two_material_scene()
    for m in scene.meshes:
        m.normals = None
    path = write_gltf(tmp_path / "n.gltf", scene)
    with pytest.warns(UserWarning, match="no normals; generating smooth"):
        smooth = load_gltf(path)
    np.testing.assert_allclose(smooth.meshes[0].normals, np.tile([0, 0, 1], (4, 1)), atol=1e-6)
    with pytest.warns(UserWarning, match="generating flat"):
        flat = load_gltf(path, generate_normals_mode="flat")
    assert flat.meshes[0].positions.shape == (6, 3) and flat.meshes[0].uv0.shape == (6, 2)


def test_generated_tangents_follow_u_and_glTF_handedness() -> None:
    quad = np.array([[-1, -1, 0], [1, -1, 0], [1, 1, 0], [-1, 1, 0]], np.float32)
    faces = np.array([[0, 1, 2], [0, 2, 3]])
    normals = np.tile(np.array([0, 0, 1], np.float32), (4, 1))
    uv = np.array([[0, 1], [1, 1], [1, 0], [0, 0]], np.float32)  # v down the image, as glTF stores it
    np.testing.assert_allclose(generate_tangents(quad, normals, uv, faces), np.tile([1, 0, 0, 1], (4, 1)), atol=1e-6)
    mirrored = uv.copy()
    mirrored[:, 1] = 1 - mirrored[:, 1]
    np.testing.assert_allclose(generate_tangents(quad, normals, mirrored, faces)[:, 3], -1)


def test_degenerate_triangles_are_dropped_and_counted(tmp_path: Path) -> None:
    scene = two_material_scene()
    mesh = scene.meshes[0]
    mesh.indices = np.concatenate([mesh.indices, [[0, 0, 1], [0, 1, 1]]])
    mesh.positions = mesh.positions.copy()
    path = write_gltf(tmp_path / "d.gltf", scene)
    with pytest.warns(UserWarning, match="dropped 2 degenerate"):
        back = load_gltf(path)
    assert back.meshes[0].num_triangles == 2


# --- refused inputs ------------------------------------------------------------------------------------


def edit(path: Path, change) -> Path:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def written(tmp_path: Path) -> Path:
    return write_gltf(tmp_path / "s.gltf", two_material_scene())


def test_missing_texture_file_names_image_and_material(written: Path) -> None:
    (written.parent / "s_paint.png").unlink()
    with pytest.raises(InputError, match=r"s_paint\.png.*painted") as err:
        load_gltf(written)
    assert "images[" in str(err.value) and "Fix:" in str(err.value)


def test_missing_buffer_file(written: Path) -> None:
    (written.parent / "s.bin").unlink()
    with pytest.raises(InputError, match=r"buffers\[0\].*s\.bin"):
        load_gltf(written)


def test_corrupt_draco_payload_is_refused(written: Path) -> None:
    # Draco is decoded (tests/io/test_draco.py); a payload that is not Draco data is an InputError.
    def add_draco(doc: dict) -> None:
        doc["extensionsUsed"] = ["KHR_draco_mesh_compression"]
        doc["extensionsRequired"] = ["KHR_draco_mesh_compression"]
        doc["meshes"][0]["primitives"][0]["extensions"] = {"KHR_draco_mesh_compression": {"bufferView": 0, "attributes": {"POSITION": 0}}}

    with pytest.raises(InputError, match=r"KHR_draco_mesh_compression\.bufferView.*Draco payload cannot be decoded"):
        load_gltf(edit(written, add_draco))


def test_texture_without_its_uv_set(written: Path) -> None:
    with pytest.raises(InputError, match=r"TEXCOORD_1.*painted|painted.*TEXCOORD_1"):
        load_gltf(edit(written, lambda d: d["meshes"][0]["primitives"][0]["attributes"].pop("TEXCOORD_1")))


def test_lines_are_refused(written: Path) -> None:
    def lines(doc: dict) -> None:
        doc["meshes"][0]["primitives"][0]["mode"] = 1

    with pytest.raises(InputError, match="LINES.*TRIANGLES"):
        load_gltf(edit(written, lines))


def test_triangle_budget(written: Path) -> None:
    with pytest.raises(InputError, match="4 triangles, over the budget of 3"):
        load_gltf(written, max_triangles=3)


def test_not_a_gltf(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gltf"
    bad.write_text("{ not json")
    with pytest.raises(InputError, match="not a readable glTF"):
        load_gltf(bad)
    with pytest.raises(InputError, match="does not exist"):
        load_gltf(tmp_path / "absent.glb")


def test_writer_rejects_inconsistent_meshes(tmp_path: Path) -> None:
    scene = two_material_scene()
    scene.meshes[0].uv0 = scene.meshes[0].uv0[:3]
    with pytest.raises(InputError, match="uv0"):
        write_gltf(tmp_path / "x.gltf", scene)
    assert not (tmp_path / "x.gltf").exists()


@pytest.mark.needs_shared
def test_shared_assets(shared_dir: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        helmet = load_gltf(shared_dir / "assets/DamagedHelmet/DamagedHelmet.gltf")
    mesh = helmet.meshes[0]
    assert mesh.num_triangles == 46356 // 3 and mesh.tangents is not None
    assert set(helmet.materials[0].textures()) == {
        "base_color_texture",
        "metallic_roughness_texture",
        "normal_texture",
        "occlusion_texture",
        "emissive_texture",
    }
    # The node rotates +90 degrees about x: the source's y range becomes the z range.
    lo, hi = helmet.bounds()
    assert lo[2] == pytest.approx(-1.18715500831604, abs=1e-5) and hi[2] == pytest.approx(0.8128451108932495, abs=1e-5)
    # BrainStem.glb itself is not compressed (its Draco twin is checked in tests/io/test_draco.py).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert load_gltf(shared_dir / "assets/BrainStem/BrainStem.glb").meshes[0].joints is not None


def test_a_glb_holds_everything_and_reads_back_exactly(tmp_path: Path) -> None:
    from neuralbake.render.skinning import pose_scene

    root = Path(__file__).resolve().parents[2] / "examples"
    for source in (root / "crate" / "crate.gltf", root / "arm" / "arm.gltf"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scene = load_gltf(source)
            out = write_gltf(tmp_path / f"{source.stem}.glb", scene)
            back = load_gltf(out)
        assert out.read_bytes()[:4] == b"glTF" and not list(tmp_path.glob(f"{source.stem}*.png")) and not list(tmp_path.glob("*.bin"))
        for a, b in zip(scene.meshes, back.meshes):
            assert np.array_equal(a.positions, b.positions) and np.array_equal(a.indices, b.indices)
        for a, b in zip(scene.materials, back.materials):
            for slot, ref in a.textures().items():
                assert np.array_equal(ref.image, getattr(b, slot).image)  # 8-bit texels survive the embedded PNG
        if scene.rig is not None:
            assert np.array_equal(pose_scene(scene, 0, 1.0).meshes[0].positions, pose_scene(back, 0, 1.0).meshes[0].positions)


@pytest.mark.parametrize(
    ("mode", "factor_alpha", "texel_alpha", "vertex_alpha", "refused"),
    [
        ("OPAQUE", 0.0, 0.0, 0.0, False),  # alpha is ignored: drawn opaque, as the file says
        ("MASK", 1.0, 0.6, 1.0, False),  # never under the 0.5 cutoff: nothing cuts out
        ("MASK", 1.0, 0.4, 1.0, True),  # a texel cuts out
        ("MASK", 1.0, 1.0, 0.3, True),  # a vertex colour cuts out
        ("BLEND", 1.0, 1.0, 1.0, False),  # blends with alpha 1 everywhere: opaque
        ("BLEND", 0.9, 1.0, 1.0, True),
    ],
)
def test_a_bake_input_that_would_cut_out_or_blend_is_refused_not_baked_solid(
    tmp_path: Path, mode: str, factor_alpha: float, texel_alpha: float, vertex_alpha: float, refused: bool
) -> None:
    from neuralbake.io.gltf import load_bake_input

    scene = two_material_scene()
    leaf = scene.materials[0]
    leaf.alpha_mode, leaf.base_color_factor = mode, (*leaf.base_color_factor[:3], factor_alpha)
    image = leaf.base_color_texture.image.copy()
    image[..., 3] = 1.0
    image[0, 0, 3] = round(texel_alpha * 255) / 255
    leaf.base_color_texture = TextureRef(image, 0, name="leaf.png")
    scene.meshes[0].colors[:, 3] = 1.0
    scene.meshes[0].colors[1, 3] = vertex_alpha
    path = write_gltf(tmp_path / "card.gltf", scene)
    assert load_gltf(path).materials[0].alpha_mode == mode  # the plain reader reads it whatever it is
    if not refused:
        assert len(load_bake_input(path).meshes) == 2
        return
    with pytest.raises(InputError, match=f"alphaMode {mode}") as error:
        load_bake_input(path)
    assert "materials[0].alphaMode" in str(error.value) and "'painted'" in str(error.value)


@pytest.mark.parametrize("extension", ["KHR_materials_volume", "KHR_materials_transmission", "KHR_materials_anisotropy"])
def test_a_bake_input_whose_look_needs_an_unshaded_extension_is_refused_by_name(tmp_path: Path, extension: str) -> None:
    from neuralbake.io.gltf import load_bake_input

    path = write_gltf(tmp_path / "coat.gltf", two_material_scene())
    doc = json.loads(path.read_text())
    doc["materials"][1]["extensions"] = {**doc["materials"][1].get("extensions", {}), extension: {}}
    doc["extensionsUsed"] = sorted({*doc.get("extensionsUsed", []), extension})
    path.write_text(json.dumps(doc))
    assert load_gltf(path).materials[1].unshaded_extensions == (extension,)  # read and recorded
    with pytest.raises(InputError, match=extension) as error:
        load_bake_input(path)
    assert "materials[1].extensions" in str(error.value) and "'flat'" in str(error.value)


def test_khr_materials_ior_is_read_written_and_checked(tmp_path: Path) -> None:
    path = write_gltf(tmp_path / "glass.gltf", two_material_scene())
    doc = json.loads(path.read_text())
    doc["materials"][1]["extensions"] = {"KHR_materials_ior": {"ior": 2.0}}
    doc["extensionsUsed"] = ["KHR_materials_ior"]
    path.write_text(json.dumps(doc))
    scene = load_gltf(path)
    assert scene.materials[1].ior == 2.0 and scene.materials[0].ior == 1.5 and scene.materials[1].unshaded_extensions == ()
    again = json.loads(write_gltf(tmp_path / "again.gltf", scene).read_text())
    assert again["materials"][1]["extensions"] == {"KHR_materials_ior": {"ior": 2.0}} and "KHR_materials_ior" in again["extensionsUsed"]
    assert "extensions" not in again["materials"][0]
    doc["materials"][1]["extensions"]["KHR_materials_ior"]["ior"] = 0.5
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="KHR_materials_ior") as error:
        load_gltf(path)
    assert "materials[1].extensions.KHR_materials_ior.ior" in str(error.value)


def test_khr_materials_specular_factors_are_shaded_and_its_textures_refused(tmp_path: Path) -> None:
    from neuralbake.io.gltf import load_bake_input

    path = write_gltf(tmp_path / "tinted.gltf", two_material_scene())
    doc = json.loads(path.read_text())
    doc["materials"][1]["extensions"] = {"KHR_materials_specular": {"specularFactor": 0.5, "specularColorFactor": [1.0, 0.5, 0.25]}}
    path.write_text(json.dumps(doc))
    scene = load_bake_input(path)
    assert scene.materials[1].specular == 0.5 and scene.materials[1].specular_color == (1.0, 0.5, 0.25)
    again = json.loads(write_gltf(tmp_path / "again.gltf", scene).read_text())
    assert again["materials"][1]["extensions"]["KHR_materials_specular"] == {"specularFactor": 0.5, "specularColorFactor": [1.0, 0.5, 0.25]}
    doc["materials"][1]["extensions"]["KHR_materials_specular"]["specularColorTexture"] = {"index": 0}
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="KHR_materials_specular"):
        load_bake_input(path)  # its textures are not sampled yet: refused by name
    doc["materials"][1]["extensions"]["KHR_materials_specular"] = {"specularFactor": 2.0}
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="specularFactor"):
        load_gltf(path)


def test_khr_materials_iridescence_factors_are_shaded_and_its_textures_refused(tmp_path: Path) -> None:
    from neuralbake.io.gltf import load_bake_input

    path = write_gltf(tmp_path / "soap.gltf", two_material_scene())
    doc = json.loads(path.read_text())
    film = {"iridescenceFactor": 0.8, "iridescenceIor": 1.4, "iridescenceThicknessMinimum": 200.0, "iridescenceThicknessMaximum": 450.0}
    doc["materials"][1]["extensions"] = {"KHR_materials_iridescence": dict(film)}
    path.write_text(json.dumps(doc))
    scene = load_bake_input(path)
    m = scene.materials[1]
    assert (m.iridescence, m.iridescence_ior, m.iridescence_thickness, m.unshaded_extensions) == (0.8, 1.4, (200.0, 450.0), ())
    again = json.loads(write_gltf(tmp_path / "again.gltf", scene).read_text())
    assert again["materials"][1]["extensions"]["KHR_materials_iridescence"] == film
    assert "KHR_materials_iridescence" in again["extensionsUsed"] and "extensions" not in again["materials"][0]
    doc["materials"][1]["extensions"]["KHR_materials_iridescence"]["iridescenceThicknessTexture"] = {"index": 0}
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="KHR_materials_iridescence"):
        load_bake_input(path)  # its textures are not sampled yet: refused by name
    doc["materials"][1]["extensions"]["KHR_materials_iridescence"] = {"iridescenceFactor": 1.5}
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="iridescenceFactor"):
        load_gltf(path)


def test_khr_materials_clearcoat_factors_are_shaded_and_its_textures_refused(tmp_path: Path) -> None:
    from neuralbake.io.gltf import load_bake_input

    path = write_gltf(tmp_path / "paint.gltf", two_material_scene())
    doc = json.loads(path.read_text())
    coat = {"clearcoatFactor": 1.0, "clearcoatRoughnessFactor": 0.05}
    doc["materials"][0]["extensions"] = {"KHR_materials_clearcoat": dict(coat)}
    path.write_text(json.dumps(doc))
    scene = load_bake_input(path)
    assert (scene.materials[0].clearcoat, scene.materials[0].clearcoat_roughness, scene.materials[0].unshaded_extensions) == (1.0, 0.05, ())
    again = json.loads(write_gltf(tmp_path / "again.gltf", scene).read_text())
    assert again["materials"][0]["extensions"]["KHR_materials_clearcoat"] == coat and "KHR_materials_clearcoat" in again["extensionsUsed"]
    doc["materials"][0]["extensions"]["KHR_materials_clearcoat"]["clearcoatNormalTexture"] = {"index": 0}
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="KHR_materials_clearcoat"):
        load_bake_input(path)
    doc["materials"][0]["extensions"]["KHR_materials_clearcoat"] = {"clearcoatRoughnessFactor": -0.5}
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="clearcoatRoughnessFactor"):
        load_gltf(path)


def test_khr_materials_sheen_factors_are_shaded_and_its_textures_refused(tmp_path: Path) -> None:
    from neuralbake.io.gltf import load_bake_input

    path = write_gltf(tmp_path / "velvet.gltf", two_material_scene())
    doc = json.loads(path.read_text())
    sheen = {"sheenColorFactor": [0.9, 0.5, 0.4], "sheenRoughnessFactor": 0.6}
    doc["materials"][0]["extensions"] = {"KHR_materials_sheen": dict(sheen)}
    path.write_text(json.dumps(doc))
    scene = load_bake_input(path)
    assert (scene.materials[0].sheen_color, scene.materials[0].sheen_roughness, scene.materials[0].unshaded_extensions) == ((0.9, 0.5, 0.4), 0.6, ())
    again = json.loads(write_gltf(tmp_path / "again.gltf", scene).read_text())
    assert again["materials"][0]["extensions"]["KHR_materials_sheen"] == sheen
    doc["materials"][0]["extensions"]["KHR_materials_sheen"]["sheenRoughnessTexture"] = {"index": 0}
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="KHR_materials_sheen"):
        load_bake_input(path)
    doc["materials"][0]["extensions"]["KHR_materials_sheen"] = {"sheenColorFactor": [2, 0, 0]}
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="sheenColorFactor"):
        load_gltf(path)

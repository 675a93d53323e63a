"""Build the bad-input corpus that ``tests/cli/test_bad_inputs.py`` throws at every command.

Each case is a folder under ``tests/data/bad_inputs/`` holding a hostile or broken input, and an
entry in ``cases.json``: the command line (``{case}`` is the case's folder, ``{out}`` a fresh
output folder, ``{sentinel}`` the sentinel file beside the corpus), and a word the error must
contain. The corpus covers what a fuzz campaign found: references that reach outside the input's
folder, absurd nesting, lying headers, wrong JSON types, decompression bombs. Bundles are mutated
at test time from real tiny bakes instead (their format follows the code), see the test module.

The sentinel ``tests/data/SENTINEL_outside.bin`` lies *outside* every case folder: a case that
manages to read it has broken confinement, which the test detects with an audit hook.

Run it to rebuild the corpus after changing a case::

    python tests/data/make_bad_inputs.py
"""

from __future__ import annotations

import base64
import json
import shutil
import struct
import zlib
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "bad_inputs"
SENTINEL = HERE / "SENTINEL_outside.bin"
SENTINEL_BYTES = b"NEURALBAKE-SENTINEL-" + bytes(range(256)) * 4

_CASES: list[dict] = []


def case(name: str, argv: list[str], expect: str = "", *, exit_code: int = 2) -> Path:
    """Register a case; returns its (fresh) folder."""
    folder = CORPUS / name
    folder.mkdir(parents=True, exist_ok=True)
    _CASES.append({"id": name, "argv": argv, "expect": expect, "exit_code": exit_code})
    return folder


# --- glTF -------------------------------------------------------------------------------------


def _triangle_gltf(buffer_uri: str | None = None, *, positions: np.ndarray | None = None) -> tuple[dict, bytes]:
    """A one-triangle glTF document and its binary buffer (positions only, with normals)."""
    p = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], dtype=np.float32) if positions is None else positions.astype(np.float32)
    n = np.array([[0, 0, 1]] * 3, dtype=np.float32)
    blob = p.tobytes() + n.tobytes()
    doc = {
        "asset": {"version": "2.0"},
        "scene": 0,
        "scenes": [{"nodes": [0]}],
        "nodes": [{"mesh": 0}],
        "meshes": [{"primitives": [{"attributes": {"POSITION": 0, "NORMAL": 1}, "mode": 4}]}],
        "accessors": [
            {"bufferView": 0, "componentType": 5126, "count": 3, "type": "VEC3", "min": [0, 0, 0], "max": [1, 1, 0]},
            {"bufferView": 1, "componentType": 5126, "count": 3, "type": "VEC3"},
        ],
        "bufferViews": [{"buffer": 0, "byteOffset": 0, "byteLength": 36}, {"buffer": 0, "byteOffset": 36, "byteLength": 36}],
        "buffers": [{"byteLength": len(blob)}],
    }
    if buffer_uri is not None:
        doc["buffers"][0]["uri"] = buffer_uri
    return doc, blob


def _data_uri(blob: bytes) -> str:
    return "data:application/octet-stream;base64," + base64.b64encode(blob).decode("ascii")


def _glb(doc: dict, blob: bytes, *, version: int = 2, length: int | None = None, bin_length: int | None = None) -> bytes:
    text = json.dumps(doc).encode("utf-8")
    text += b" " * ((-len(text)) % 4)
    blob += b"\0" * ((-len(blob)) % 4)
    body = struct.pack("<II", len(text), 0x4E4F534A) + text + struct.pack("<II", len(blob) if bin_length is None else bin_length, 0x004E4942) + blob
    total = 12 + len(body)
    return struct.pack("<III", 0x46546C67, version, total if length is None else length) + body


def gltf_cases() -> None:
    fit = ["fit", "{case}/model.gltf", "--out", "{out}", "--render-size", "16", "--size", "16", "--views", "2", "--epochs", "1", "-q"]
    fit_glb = [a if a != "{case}/model.gltf" else "{case}/model.glb" for a in fit]
    ntc = ["ntc", "compress", "{case}/model.gltf", "--out", "{out}", "--steps", "2", "--finetune-steps", "0"]

    doc, _ = _triangle_gltf("../../SENTINEL_outside.bin")
    (case("gltf_buffer_parent_dirs", fit, "outside") / "model.gltf").write_text(json.dumps(doc))
    doc, _ = _triangle_gltf("/etc/passwd")
    (case("gltf_buffer_absolute", fit, "outside") / "model.gltf").write_text(json.dumps(doc))
    folder = case("gltf_buffer_symlink_out", fit, "outside")
    doc, _ = _triangle_gltf("link.bin")
    (folder / "model.gltf").write_text(json.dumps(doc))
    link = folder / "link.bin"
    link.unlink(missing_ok=True)
    link.symlink_to("../../SENTINEL_outside.bin")

    # An image outside the folder, through ntc (which reads a glTF's texture set).
    doc, blob = _triangle_gltf()
    doc["buffers"][0]["uri"] = _data_uri(blob)
    doc["images"] = [{"uri": "../../SENTINEL_outside.bin"}]
    doc["textures"] = [{"source": 0}]
    doc["materials"] = [{"pbrMetallicRoughness": {"baseColorTexture": {"index": 0}}}]
    doc["meshes"][0]["primitives"][0]["material"] = 0
    (case("gltf_image_outside", ntc, "outside") / "model.gltf").write_text(json.dumps(doc))

    def broken(name: str, mutate, expect: str) -> None:
        doc, blob = _triangle_gltf()
        doc["buffers"][0]["uri"] = _data_uri(blob)
        mutate(doc)
        (case(name, fit, expect) / "model.gltf").write_text(json.dumps(doc))

    broken("gltf_negative_byte_offset", lambda d: d["bufferViews"][0].update(byteOffset=-8), "byteOffset")
    broken("gltf_missing_buffer_view", lambda d: d["accessors"][0].update(bufferView=7), "bufferView")
    broken("gltf_bad_component_type", lambda d: d["accessors"][0].update(componentType=1234), "componentType")
    broken("gltf_node_cycle", lambda d: d["nodes"][0].update(children=[0]), "nodes")
    broken("gltf_string_count", lambda d: d["accessors"][0].update(count="3"), "count")
    broken("gltf_component_type_list", lambda d: d["accessors"][0].update(componentType=[5126]), "componentType")
    broken("gltf_normalized_float", lambda d: d["accessors"][0].update(normalized=True), "normalized")
    broken("gltf_huge_count_no_buffer_view", lambda d: d["accessors"][1].update(count=2**45, bufferView=None) or d["accessors"][1].pop("bufferView"), "count")
    broken("gltf_textures_is_a_number", lambda d: d.update(textures=5), "textures")

    doc, _ = _triangle_gltf(positions=np.array([[0, 0, 0], [np.nan, 0, 0], [0, 1, 0]]))
    _, blob = _triangle_gltf(positions=np.array([[0, 0, 0], [np.nan, 0, 0], [0, 1, 0]]))
    doc["buffers"][0]["uri"] = _data_uri(blob)
    (case("gltf_nan_positions", fit, "non-finite") / "model.gltf").write_text(json.dumps(doc))

    deep = "[" * 100_000 + "]" * 100_000
    (case("gltf_json_100k_deep", fit, "nest") / "model.gltf").write_text('{"asset": {"version": "2.0"}, "extras": ' + deep + "}")

    doc, blob = _triangle_gltf()
    for name, kwargs, expect in (
        ("glb_length_0", {"length": 0}, "length"),
        ("glb_length_20", {"length": 20}, "length"),
        ("glb_length_1e9", {"length": 1_000_000_000}, "length"),
        ("glb_version_99", {"version": 99}, "version"),
        ("glb_bin_chunk_huge", {"bin_length": 0x7FFFFFFF}, "chunk"),
    ):
        (case(name, fit_glb, expect) / "model.glb").write_bytes(_glb(doc, blob, **kwargs))
    (case("glb_truncated_header", fit_glb, "") / "model.glb").write_bytes(b"glTF\x02\x00")


# --- materials --------------------------------------------------------------------------------


def _material(surface: dict, nodes: dict | None = None) -> dict:
    return {"format": "neuralbake.material", "version": 1, "name": "bad", "nodes": nodes or {}, "surface": surface}


def material_cases() -> None:
    preview = ["material", "preview", "{case}/material.json", "--out", "{out}", "--size", "8", "--spp", "1", "-q"]
    bake = ["material", "bake", "{case}/material.json", "--out", "{out}", "--steps", "2", "-q"]
    lambert = {"lobe": "lambert", "params": {"albedo": "@tex"}}
    for name, file in (("material_texture_parent_dirs", "../../SENTINEL_outside.bin"), ("material_texture_absolute", "/etc/passwd")):
        doc = _material(lambert, {"tex": {"op": "texture", "file": file}})
        (case(name, preview, "outside") / "material.json").write_text(json.dumps(doc))
    deep = "[" * 100_000 + "]" * 100_000
    (case("material_json_100k_deep", preview, "nest") / "material.json").write_text('{"format": "neuralbake.material", "x": ' + deep + "}")
    layer: dict = {"lobe": "lambert", "params": {"albedo": [0.5, 0.5, 0.5]}}
    for _ in range(450):
        layer = {"mix": [layer, {"lobe": "lambert", "params": {"albedo": [0.1, 0.1, 0.1]}}], "mask": 0.5}
    (case("material_450_nested_mixes", bake, "deep") / "material.json").write_text(json.dumps(_material(layer)))
    (case("material_surface_is_list", preview, "surface") / "material.json").write_text(json.dumps(_material([1, 2])))  # type: ignore[arg-type]
    bad_albedo = {"lobe": "lambert", "params": {"albedo": [[1], [2]]}}
    (case("material_albedo_nested_list", preview, "albedo") / "material.json").write_text(json.dumps(_material(bad_albedo)))
    (case("material_not_utf8", preview, "") / "material.json").write_bytes(b"\xff\xfe{\x00")

    mtlx = ["material", "preview", "{case}/material.mtlx", "--out", "{out}", "--size", "8", "--spp", "1", "-q"]
    for name, href in (("mtlx_include_absolute", "/etc/passwd"), ("mtlx_include_parent_dirs", "../../SENTINEL_outside.bin")):
        text = f'<?xml version="1.0"?>\n<materialx version="1.39" xmlns:xi="http://www.w3.org/2001/XInclude">\n  <xi:include href="{href}" />\n</materialx>\n'
        (case(name, mtlx, "outside") / "material.mtlx").write_text(text)
    image = (
        '<?xml version="1.0"?>\n<materialx version="1.39">\n'
        '  <image name="img" type="color3"><input name="file" type="filename" value="../../SENTINEL_outside.bin" /></image>\n'
        '  <standard_surface name="srf" type="surfaceshader"><input name="base_color" type="color3" nodename="img" /></standard_surface>\n'
        '  <surfacematerial name="mat" type="material"><input name="surfaceshader" type="surfaceshader" nodename="srf" /></surfacematerial>\n'
        "</materialx>\n"
    )
    (case("mtlx_image_outside", mtlx, "outside") / "material.mtlx").write_text(image)
    entity = (
        '<?xml version="1.0"?>\n<!DOCTYPE m [<!ENTITY x SYSTEM "file:///etc/passwd">]>\n<materialx version="1.39">&x;</materialx>\n'
    )
    (case("mtlx_external_entity", mtlx, "") / "material.mtlx").write_text(entity)
    # 4 levels of 300 repeated includes: ~8e9 parses if each include were read every time it is named.
    folder = case("mtlx_include_fan_out", mtlx, "material")
    head = '<?xml version="1.0"?>\n<materialx version="1.39" xmlns:xi="http://www.w3.org/2001/XInclude">\n'
    for name, child in (("material", "b"), ("b", "c"), ("c", "d"), ("d", "e")):
        (folder / f"{name}.mtlx").write_text(head + f'  <xi:include href="{child}.mtlx" />\n' * 300 + "</materialx>\n")
    (folder / "e.mtlx").write_text(head + "</materialx>\n")


# --- images and configs -------------------------------------------------------------------------


def _png(width: int, height: int, *, bit_depth: int = 8, colour: int = 0, rows: bytes | None = None) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, colour, 0, 0, 0)
    data = rows if rows is not None else b""
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(data, 9)) + chunk(b"IEND", b"")


def image_cases() -> None:
    texture = ["texture", "bake", "{case}/image.png", "--out", "{out}", "--steps", "2", "-q"]
    # 12000 x 12000 grey zeros compresses to ~140 kB: a decompression bomb that passes a per-side check.
    side = 12000
    compressor = zlib.compressobj(9)
    row = b"\0" * (side + 1)
    payload = b"".join(compressor.compress(row) for _ in range(side)) + compressor.flush()
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    bomb = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", payload) + chunk(b"IEND", b"")
    (case("png_12000_zero_bomb", texture, "pixels") / "image.png").write_bytes(bomb)
    (case("png16_header_30000", texture, "pixels") / "image.png").write_bytes(_png(30000, 30000, bit_depth=16))
    (case("png_truncated", texture, "") / "image.png").write_bytes(_png(64, 64, rows=b"\0" * (65 * 64))[:60])
    (case("png_zero_bytes", texture, "") / "image.png").write_bytes(b"")
    (case("png_is_text", texture, "") / "image.png").write_text("not an image\n")

    folder = case("config_json_100k_deep", ["texture", "bake", "{case}/image.png", "--config", "{case}/bake.json", "--out", "{out}", "-q"], "nest")
    (folder / "bake.json").write_text('{"x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    (folder / "image.png").write_bytes(_png(4, 4, rows=b"\0" * 20))
    folder = case("config_wrong_types", ["texture", "bake", "{case}/image.png", "--config", "{case}/bake.json", "--out", "{out}", "-q"], "")
    (folder / "bake.json").write_text(json.dumps({"train": {"steps": "many"}, "network": [1, 2]}))
    (folder / "image.png").write_bytes(_png(4, 4, rows=b"\0" * 20))
    folder = case("config_kernels_unknown", ["texture", "bake", "{case}/image.png", "--config", "{case}/bake.json", "--out", "{out}", "-q"], "kernels")
    (folder / "bake.json").write_text(json.dumps({"kernels": "cuda"}))
    (folder / "image.png").write_bytes(_png(4, 4, rows=b"\0" * 20))
    folder = case("kernels_triton_network_too_wide", [*texture, "--kernels", "triton", "--hidden", "256", "--device", "cpu"], "256 wide")
    (folder / "image.png").write_bytes(_png(4, 4, rows=b"\0" * 20))
    # the neural material's fused training: an encoder the kernels cannot hold stops the bake before any step
    folder = case(
        "kernels_triton_material_encoder_too_wide",
        ["material", "bake", "{case}/velvet.json", "--out", "{out}", "--kernels", "triton", "--encoder-hidden", "256", "--device", "cpu", "-q"],
        "encoder",
    )
    shutil.copy(HERE.parents[1] / "examples" / "materials" / "velvet.json", folder / "velvet.json")
    folder = case("config_toml_deep", ["texture", "bake", "{case}/image.png", "--config", "{case}/bake.toml", "--out", "{out}", "-q"], "")
    (folder / "bake.toml").write_text("x = " + "[" * 20_000 + "]" * 20_000 + "\n")
    (folder / "image.png").write_bytes(_png(4, 4, rows=b"\0" * 20))


# --- options ------------------------------------------------------------------------------------


def option_cases() -> None:
    image = "{case}/image.png"
    rows = b"".join(b"\0" + bytes((x * 16) % 256 for x in range(16)) for _ in range(16))
    for name, argv, expect in (
        ("option_lr_1e30", ["texture", "bake", image, "--out", "{out}", "--steps", "20", "--lr", "1e30", "--precision", "fp32", "-q"], "diverged"),
        ("option_out_empty", ["texture", "bake", image, "--out", "", "-q"], "--out"),
        ("option_size_too_big", ["texture", "bake", image, "--out", "{out}", "--size", "100000x100000", "-q"], "size"),
        ("option_decay_fraction_zero", ["texture", "bake", image, "--out", "{out}", "--decay-fraction", "0", "-q"], "decay_fraction"),
        ("option_latent_5", ["material", "bake", "{case}/material.json", "--out", "{out}", "--latent", "5", "-q"], "latent"),
        ("option_markup_path", ["texture", "bake", "{case}/a[red]b/x[/y].png", "--out", "{out}", "-q"], "a[red]b/x[/y].png"),
        # values the command line parses itself: one `error:` line naming the option, never a usage box
        ("option_infer_size_0x5", ["texture", "infer", "{case}", "--out", "{out}/x.png", "--size", "0x5"], "--size: '0x5' is not a size"),
        ("option_steps_not_a_number", ["texture", "bake", image, "--out", "{out}", "--steps", "many", "-q"], "--steps: 'many'"),
        ("option_size_below_its_range", ["postfx", "conditions", image, "--out", "{out}", "--size", "3"], "from 16 to 4096"),
    ):
        folder = case(name, argv, expect)
        (folder / "image.png").write_bytes(_png(16, 16, rows=rows))
        if name == "option_latent_5":
            (folder / "material.json").write_text(json.dumps(_material({"lobe": "lambert", "params": {"albedo": [0.5, 0.5, 0.5]}})))
        if name == "option_markup_path":
            (folder / "a[red]b").mkdir(exist_ok=True)


def runner_and_service_cases() -> None:
    """Inputs of the bake runner and the asset service: an unfinished bake folder, an old config
    key, a broken bake.json, bad database URLs and malformed submit arguments (no server needed)."""
    unfinished = case("bake_folder_unfinished", ["texture", "infer", "{case}/bake", "--out", "{out}/x.png", "--size", "8x8"], "never finished")
    (unfinished / "bake" / ".neuralbake").mkdir(parents=True, exist_ok=True)
    (unfinished / "bake" / ".neuralbake" / "lock").write_bytes(b"")
    (unfinished / "bake" / "network.json").write_text("{}")
    forged = case("bake_json_path_escape", ["texture", "infer", "{case}/bake", "--out", "{out}/x.png", "--size", "8x8"], "not a path inside the folder")
    (forged / "bake").mkdir(parents=True, exist_ok=True)
    (forged / "bake" / "bake.json").write_text(json.dumps({"format": "neuralbake.bake", "version": 1, "bake": "neural_texture",
                                                           "files": {"../SENTINEL_outside.bin": {"bytes": 1, "sha256": "0" * 64}}}))
    old_key = case("config_old_size_key", ["texture", "bake", "{case}/image.png", "--out", "{out}", "--config", "{case}/old.json", "-q"], "texture_size")
    (old_key / "image.png").write_bytes(_png(8, 8))
    (old_key / "old.json").write_text(json.dumps({"size": [8, 8]}))
    case("token_bad_db_url", ["token", "create", "me", "--data", "{out}", "--db", "service.db"], "not a database URL")
    case("submit_input_without_path", ["submit", "texture", "--input", "image", "--server", "http://127.0.0.1:9"], "FIELD=PATH")
    case("submit_unknown_kind", ["submit", "sculpt", "--input", "image={case}/x.png", "--server", "http://127.0.0.1:9"], "unknown job kind")
    # settings beyond any machine (a security probe's batch of 10^9 grew a worker to 16 GB): refused by the bake's
    # footprint before the image is read or the output folder is made
    case("texture_batch_size_1e9", ["texture", "examples/neural_texture/grace_hopper_256.png", "--batch-size", "1000000000", "--out", "{out}"],
         "batch_size")


def simplify_cases() -> None:
    """``neuralbake simplify``: budgets out of range, a mesh with no usable triangle."""
    simplify = ["simplify", "{case}/model.gltf", "--out", "{out}", "--render-size", "16", "--views", "2", "--held-out", "1", "--epochs", "1", "-q"]
    for name, extra, expect in (("simplify_ratio_zero", ["--ratio", "0"], "ratio"), ("simplify_ratio_two", ["--ratio", "2"], "ratio"),
                                ("simplify_triangles_negative", ["--triangles", "-5"], "triangles"),
                                ("simplify_patience_negative", ["--patience", "-1"], "patience")):
        doc, blob = _triangle_gltf()
        doc["buffers"][0]["uri"] = _data_uri(blob)
        (case(name, simplify + extra, expect) / "model.gltf").write_text(json.dumps(doc))
    doc, blob = _triangle_gltf(positions=np.array([[0, 0, 0], [0, 0, 0], [0, 0, 0]]))  # its one triangle has no area
    doc["buffers"][0]["uri"] = _data_uri(blob)
    (case("simplify_empty_mesh", simplify, "no triangle") / "model.gltf").write_text(json.dumps(doc))


def lod_cases() -> None:
    """``skin``, ``fit --reference / --warm-start / --shape`` and ``lod``: the refusals of the LOD chain."""
    def triangle(folder: Path, name: str = "model.gltf") -> None:
        doc, blob = _triangle_gltf()
        doc["buffers"][0]["uri"] = _data_uri(blob)
        (folder / name).write_text(json.dumps(doc))

    small = ["--out", "{out}", "--device", "cpu", "-q"]
    triangle(folder := case("skin_static_reference", ["skin", "{case}/lod.gltf", "--reference", "{case}/model.gltf", *small], "no skin"))
    triangle(folder, "lod.gltf")
    triangle(case("skin_missing_reference", ["skin", "{case}/model.gltf", "--reference", "{case}/none.glb", *small], "reference: file not found"))
    fit = ["fit", "{case}/model.gltf", "--size", "8", "--render-size", "16", "--views", "2", "--held-out", "1", "--epochs", "1", "--no-shadows", *small]
    triangle(case("fit_missing_reference", [*fit, "--reference", "{case}/none.gltf"], "reference: file not found"))
    triangle(folder := case("fit_warm_start_not_a_checkpoint", [*fit, "--warm-start", "{case}/fit.pt"], "cannot be read"))
    (folder / "fit.pt").write_bytes(b"not a checkpoint")
    triangle(case("fit_shape_luma_chroma", [*fit, "--shape", "--target", "luma-chroma"], "luma-chroma"))
    triangle(case("fit_shape_negative_rate", [*fit, "--shape", "--shape-learning-rate", "-1"], "shape_learning_rate"))
    triangle(case("lod_ratio_zero", ["lod", "{case}/model.gltf", "--ratio", "0", *small], "ratio"))
    triangle(folder := case("lod_unknown_stage_option", ["lod", "{case}/model.gltf", "--config", "{case}/lod.toml", *small], "unknown stage"))
    (folder / "lod.toml").write_text("[stage_options.sculpt]\nsteps = 3\n")


def postfx_cases() -> None:
    """``postfx``: a pass file without the pass, a damaged EXR, passes of another size, NaN ids; damaged or incomplete model
    folders; a LoRA training folder without images."""
    from neuralbake.io.images import save_exr  # the passes are OpenEXR, as Blender writes them

    def render(folder: Path) -> None:
        (folder / "render.png").write_bytes(_png(8, 6, colour=2, rows=b"".join(b"\x00" + bytes(range(24)) for _ in range(6))))

    conditions = ["postfx", "conditions", "{case}/render.png", "--out", "{out}"]
    render(folder := case("postfx_depth_pass_missing", [*conditions, "--depth", "{case}/passes.exr"], "no depth channel"))
    save_exr(folder / "passes.exr", np.zeros((6, 8, 3), np.float32))
    render(folder := case("postfx_exr_damaged", [*conditions, "--normal", "{case}/passes.exr"], "not a readable OpenEXR"))
    (folder / "passes.exr").write_bytes(b"\x76\x2f\x31\x01" + b"\x00" * 40)
    render(folder := case("postfx_pass_other_size", [*conditions, "--depth", "{case}/passes.exr"], "but the render is"))
    save_exr(folder / "passes.exr", np.ones((3, 4, 1), np.float32), channels=["Z"])
    render(folder := case("postfx_ids_nan", [*conditions, "--ids", "{case}/passes.exr"], "whole non-negative"))
    save_exr(folder / "passes.exr", np.full((6, 8, 1), np.nan, np.float32), channels=["IndexOB.X"])
    render(case("postfx_pass_file_missing", [*conditions, "--normal", "{case}/none.exr"], "does not exist"))
    # the render pass's model folders: damaged, of a pipeline it does not run, missing a component; a LoRA training set without images
    chain = ["postfx", "{case}/render.png", "--model", "{case}/model", "--out", "{out}"]
    render(folder := case("postfx_model_index_damaged", chain, "JSON"))
    (folder / "model").mkdir()
    (folder / "model" / "model_index.json").write_text('{"_class_name": "StableDiffusionPipeline",')
    render(folder := case("postfx_model_unknown_pipeline", chain, "does not run"))
    (folder / "model").mkdir()
    (folder / "model" / "model_index.json").write_text('{"_class_name": "AudioLDMPipeline", "unet": ["diffusers", "UNet2DConditionModel"]}')
    render(folder := case("postfx_model_component_missing", chain, "unet/ is missing"))
    (folder / "model").mkdir()
    (folder / "model" / "model_index.json").write_text('{"_class_name": "StableDiffusionPipeline", "unet": ["diffusers", "UNet2DConditionModel"]}')
    folder = case("postfx_lora_no_images", ["postfx", "lora", "{case}/images", "--base", "{case}/model", "--prompt", "x", "--out", "{out}"], "no PNG or JPEG")
    (folder / "images").mkdir()
    (folder / "images" / "notes.txt").write_text("not an image\n")
    (folder / "model").mkdir()  # there (a missing one is "file or folder not found"), so the images are what is refused
    (folder / "model" / "model_index.json").write_text('{"_class_name": "StableDiffusionPipeline"}')


def material_asset_cases() -> None:
    """``material bake MODEL.gltf`` and ``material bake MATERIAL --asset MODEL.gltf``: assets that cannot carry a neural material."""
    small = ["--out", "{out}", "--size", "8", "--steps", "2", "--batch-size", "64", "--compare-size", "8", "--compare-spp", "1", "--device", "cpu", "-q"]
    bake = ["material", "bake", "{case}/model.gltf", *small]

    def triangle(folder: Path, *, uv: bool = True, material: bool = True, outside: str | None = None) -> None:
        doc, blob = _triangle_gltf(outside)
        if uv:
            blob += np.array([[0, 0], [1, 0], [0, 1]], np.float32).tobytes()
            doc["accessors"].append({"bufferView": 2, "componentType": 5126, "count": 3, "type": "VEC2"})
            doc["bufferViews"].append({"buffer": 0, "byteOffset": 72, "byteLength": 24})
            doc["meshes"][0]["primitives"][0]["attributes"]["TEXCOORD_0"] = 2
            doc["buffers"][0]["byteLength"] = len(blob)
        if material:
            doc["materials"] = [{"name": "paint", "pbrMetallicRoughness": {"baseColorFactor": [0.8, 0.2, 0.1, 1.0]}}]
            doc["meshes"][0]["primitives"][0]["material"] = 0
        if outside is None:
            doc["buffers"][0]["uri"] = _data_uri(blob)
        (folder / "model.gltf").write_text(json.dumps(doc))

    triangle(case("material_asset_no_uv", bake, "no uv0 area"), uv=False)
    triangle(case("material_asset_unknown_material", [*bake, "--material", "steel"], "no material 'steel'"))
    triangle(case("material_asset_buffer_outside", bake, "outside"), outside="../../SENTINEL_outside.bin")
    doc, blob = _triangle_gltf()
    doc["buffers"][0]["uri"] = _data_uri(blob)
    doc["materials"] = [{"name": "flat", "extensions": {"KHR_materials_unlit": {}}}]
    doc["extensionsUsed"] = ["KHR_materials_unlit"]
    doc["meshes"][0]["primitives"][0]["material"] = 0
    (case("material_asset_unlit", bake, "unlit") / "model.gltf").write_text(json.dumps(doc))
    layered = ["material", "bake", "{case}/velvet.json", *small]
    folder = case("material_name_without_asset", [*layered, "--material", "paint"], "not one")
    shutil.copy(HERE.parents[1] / "examples" / "materials" / "velvet.json", folder / "velvet.json")
    folder = case("material_asset_missing", [*layered, "--asset", "{case}/none.gltf"], "asset: file not found")
    shutil.copy(HERE.parents[1] / "examples" / "materials" / "velvet.json", folder / "velvet.json")
    folder = case("material_sampling_steps_negative", [*layered, "--sampling-steps", "-1"], "sampling_steps")
    shutil.copy(HERE.parents[1] / "examples" / "materials" / "velvet.json", folder / "velvet.json")


def ntc_cases() -> None:
    """``ntc export``: a folder that does not exist, and one without its container (damaged containers are mutated from a
    real compression in the test module)."""
    export = ["ntc", "export", "{case}/set", "--out", "{out}"]
    folder = case("ntc_export_missing_folder", export, "does not exist")
    (folder / "README.txt").write_text("This case names {case}/set, a folder that does not exist.\n")
    folder = case("ntc_export_without_container", export, "texture.ntc")
    (folder / "set").mkdir()
    manifest = {"file": "texture.ntc", "bytes": 100, "sha256": "0" * 64, "format": "neuralbake.ntc", "version": 1}
    (folder / "set" / "manifest.json").write_text(json.dumps(manifest))


def missing_input_cases() -> None:
    """A typo'd input path: every bake names the field and says ``file not found: PATH`` (a missing ``.glb`` given to
    ``material bake`` was "the material does not exist. Fix: pass a .gltf or .glb asset"); ``mipmap`` given a glTF
    says it takes images; ``lod --set`` naming an unknown stage or setting names the valid ones."""
    small = ["--out", "{out}", "--device", "cpu", "-q"]
    rows = b"".join(b"\0" + bytes((x * 16) % 256 for x in range(16 * 3)) for _ in range(16))
    case("missing_material_glb", ["material", "bake", "{case}/DamagedHelmet.glb", *small], "material: file not found")
    case("missing_fit_asset", ["fit", "{case}/model.glb", *small], "asset: file not found")
    (case("missing_ntc_source", ["ntc", "compress", "{case}/base.png", "normal={case}/normal.png", *small], "sources[1]: file not found")
     / "base.png").write_bytes(_png(16, 16, colour=2, rows=rows))
    (case("missing_mipmap_normal", ["mipmap", "{case}/base.png", "{case}/normal.png", *small], "normal: file not found")
     / "base.png").write_bytes(_png(16, 16, colour=2, rows=rows))
    case("missing_texture_image", ["texture", "bake", "{case}/photo.png", *small], "image: file not found")
    doc, blob = _triangle_gltf()
    doc["buffers"][0]["uri"] = _data_uri(blob)
    lod = ["lod", "{case}/model.gltf", *small]
    for name, item, expect in (("missing_lod_stage_path", "fit.weights={case}/mask.png", "stage_options.fit.weights: file not found"),
                               ("lod_set_unknown_stage", "sculpt.steps=3", "unknown stage 'sculpt'"),
                               ("lod_set_unknown_setting", "fit.epoch=3", "the fit stage has no setting 'epoch'")):
        (case(name, [*lod, "--set", item], expect) / "model.gltf").write_text(json.dumps(doc))
    case("mipmap_given_a_glb", ["mipmap", "{case}/crate.glb", "--out", "{out}"], "mipmap takes images")


def transparency_cases() -> None:
    """A card whose material cuts out (``MASK``, alpha 0.2 under the 0.5 cutoff) or blends (``BLEND``, alpha 0.5): each
    bake that cannot keep alpha refuses it by name instead of baking it solid (``fit`` and ``lod`` with ``--target
    unlit`` keep it in the LOD's texture, ``simplify`` keeps the material, ``ntc compress`` keeps it as a fourth
    channel, ``postfx conditions`` renders it)."""
    small = ["--out", "{out}", "--device", "cpu", "-q"]

    def card(folder: Path, mode: str, alpha: float) -> None:
        doc, blob = _triangle_gltf()
        blob += np.array([[0, 0], [1, 0], [0, 1]], np.float32).tobytes()
        doc["accessors"].append({"bufferView": 2, "componentType": 5126, "count": 3, "type": "VEC2"})
        doc["bufferViews"].append({"buffer": 0, "byteOffset": 72, "byteLength": 24})
        doc["meshes"][0]["primitives"][0]["attributes"]["TEXCOORD_0"] = 2
        doc["buffers"][0] = {"byteLength": len(blob), "uri": _data_uri(blob)}
        doc["materials"] = [{"name": "leaf", "alphaMode": mode, "pbrMetallicRoughness": {"baseColorFactor": [0.2, 0.6, 0.1, alpha]}}]
        doc["meshes"][0]["primitives"][0]["material"] = 0
        (folder / "card.gltf").write_text(json.dumps(doc))

    for name, argv in (("fit_vertex_color", ["fit", "{case}/card.gltf", "--target", "vertex-color", "--render-size", "16", "--views", "2", "--epochs", "1"]),
                       ("lod_vertex_color", ["lod", "{case}/card.gltf", "--target", "vertex-color"]),
                       ("material", ["material", "bake", "{case}/card.gltf", "--steps", "2"])):
        card(case(f"alpha_mask_{name}", [*argv, *small], "alphaMode MASK"), "MASK", 0.2)
    card(case("alpha_blend_fit_shape", ["fit", "{case}/card.gltf", "--shape", *small], "alphaMode BLEND"), "BLEND", 0.5)


def material_extension_cases() -> None:
    """``KHR_materials_ior`` and ``KHR_materials_specular`` values the extensions forbid: refused by the reader, naming
    the material's field."""
    small = ["--render-size", "16", "--size", "16", "--views", "2", "--epochs", "1", "--out", "{out}", "--device", "cpu", "-q"]
    for name, extension, expect in (("khr_ior_below_one", {"KHR_materials_ior": {"ior": 0.5}}, "KHR_materials_ior.ior"),
                                    ("khr_specular_factor_above_one", {"KHR_materials_specular": {"specularFactor": 2.0}}, "specularFactor"),
                                    ("khr_iridescence_thickness_negative", {"KHR_materials_iridescence": {"iridescenceFactor": 1.0,
                                     "iridescenceThicknessMaximum": -50}}, "iridescenceThicknessMaximum"),
                                    ("khr_clearcoat_factor_above_one", {"KHR_materials_clearcoat": {"clearcoatFactor": 3}}, "clearcoatFactor"),
                                    ("khr_sheen_roughness_negative", {"KHR_materials_sheen": {"sheenRoughnessFactor": -1}}, "sheenRoughnessFactor")):
        folder = case(name, ["fit", "{case}/glass.gltf", *small], expect)
        doc, blob = _triangle_gltf()
        doc["buffers"][0] = {"byteLength": len(blob), "uri": _data_uri(blob)}
        doc["materials"] = [{"name": "glass", "pbrMetallicRoughness": {"baseColorFactor": [0.8, 0.8, 0.8, 1.0]}, "extensions": extension}]
        doc["extensionsUsed"] = list(extension)
        doc["meshes"][0]["primitives"][0]["material"] = 0
        (folder / "glass.gltf").write_text(json.dumps(doc))


def main() -> None:
    if CORPUS.exists():
        shutil.rmtree(CORPUS)
    SENTINEL.write_bytes(SENTINEL_BYTES)
    gltf_cases()
    material_cases()
    image_cases()
    option_cases()
    runner_and_service_cases()
    simplify_cases()
    lod_cases()
    postfx_cases()
    material_asset_cases()
    ntc_cases()
    missing_input_cases()
    transparency_cases()
    material_extension_cases()
    (CORPUS / "cases.json").write_text(json.dumps(_CASES, indent=1) + "\n")
    print(f"{len(_CASES)} cases -> {CORPUS}")


if __name__ == "__main__":
    main()

"""Hostile and broken inputs fail fast with an InputError / ConfigError naming the file and field.

JSON and TOML nested 100,000 deep, 450 nested layers, a 1,500-node MaterialX chain, images whose
header announces more pixels (or memory) than allowed, damaged, empty and non-regular image
files, and every wrong JSON type in a material document or a config.
"""

from __future__ import annotations

import builtins
import json
import os
import struct
import time
import zlib
from pathlib import Path

import numpy as np
import png
import pytest
from PIL import Image

from neuralbake.bakes.neural_texture import NeuralTextureConfig
from neuralbake.core.config import load_config
from neuralbake.errors import ConfigError, InputError
from neuralbake.io import limits
from neuralbake.io.images import load_image
from neuralbake.material.graph import MaterialGraph, compile_material
from neuralbake.material.layering import MAX_LAYER_DEPTH, layer, mix
from neuralbake.material.mtlx_compiler import compile_materialx

DEEP = 100_000


class _Fast:
    """Asserts the block ran in well under a second (no minutes of work before the error)."""

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        assert time.perf_counter() - self.start < 2.0


# --- nesting ------------------------------------------------------------------------------------


def test_material_json_nested_100000_deep(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * DEEP + "]" * DEEP)
    with _Fast(), pytest.raises(InputError, match="nests arrays/objects") as info:
        compile_material(path)
    assert "deep.json" in str(info.value)


@pytest.mark.parametrize("suffix, text", [
    (".json", '{"train": ' + "[" * DEEP + "]" * DEEP + "}"),
    (".toml", "size = " + "[" * DEEP + "]" * DEEP + "\n"),
    (".toml", "x = " + "{a = " * 5000 + "1" + "}" * 5000 + "\n"),
    (".toml", "[" + ".".join(["a"] * 40_000) + "]\nx = 1\n"),
    (".toml", ".".join(["a"] * 40_000) + " = 1\n"),
])
def test_config_nested_deep(tmp_path, suffix, text):
    path = tmp_path / f"bake{suffix}"
    path.write_text(text)
    with _Fast(), pytest.raises(ConfigError, match="nest") as info:
        load_config(NeuralTextureConfig, path)
    assert path.name in str(info.value)


def _nested(kind: str, levels: int) -> dict:
    spec: dict = {"lobe": "lambert", "params": {"albedo": 0.5}}
    for _ in range(levels):
        spec = {"coat": spec} if kind == "coat" else {"mix": [spec, {"lobe": "lambert", "params": {"albedo": 0.2}}], "mask": 0.5}
    return spec


@pytest.mark.parametrize("kind", ["coat", "mix"])
def test_layers_nested_past_the_limit_fail_at_compile_time(tmp_path, kind):
    document = {"format": "neuralbake.material", "version": 1, "surface": _nested(kind, 450)}
    path = tmp_path / "layers.json"
    path.write_text(json.dumps(document))
    with _Fast(), pytest.raises(InputError) as info:
        compile_material(path)  # the JSON depth limit already refuses the file
    assert "layers.json" in str(info.value)
    with _Fast(), pytest.raises(InputError, match=f"more than {MAX_LAYER_DEPTH} deep") as info:
        MaterialGraph(document, source=path, device="cpu", dtype=torch_float32())  # a document built in Python
    step = ".coat" if kind == "coat" else ".mix[0]"
    assert "surface" + step * MAX_LAYER_DEPTH in str(info.value)


def test_coats_nested_within_json_limit_but_past_layer_limit(tmp_path):
    path = tmp_path / "coats.json"
    path.write_text(json.dumps({"format": "neuralbake.material", "version": 1, "surface": _nested("coat", 40)}))
    with _Fast(), pytest.raises(InputError, match="layers nest more than") as info:
        compile_material(path)
    assert "surface.coat.coat" in str(info.value)


def test_layering_refuses_deep_trees_when_built():
    built = layer("lambert", {"albedo": 0.5})
    for _ in range(MAX_LAYER_DEPTH - 1):
        built = mix(built, layer("lambert", {"albedo": 0.1}), 0.5)
    with pytest.raises(InputError, match="layers nest"):
        mix(built, built, 0.5)


def test_long_node_chain_compiles_without_recursion(tmp_path):
    nodes = {"n0": {"op": "noise"}}
    nodes.update({f"n{i}": {"op": "invert", "x": f"@n{i - 1}"} for i in range(1, 3000)})
    surface = {"mix": [{"lobe": "lambert", "params": {"albedo": 0.5}}, {"lobe": "lambert", "params": {"albedo": 0.1}}], "mask": "@n2999"}
    document = {"format": "neuralbake.material", "version": 1, "nodes": nodes, "surface": surface}
    path = tmp_path / "chain.json"
    path.write_text(json.dumps(document))
    compile_material(path)


def test_materialx_node_chain_past_the_limit(tmp_path):
    nodes = ['<constant name="n0" type="float"><input name="value" type="float" value="0.1" /></constant>']
    nodes += [
        f'<add name="n{i}" type="float"><input name="in1" type="float" nodename="n{i - 1}" /><input name="in2" type="float" value="0.0" /></add>'
        for i in range(1, 1500)
    ]
    path = tmp_path / "chain.mtlx"
    path.write_text(
        f'<?xml version="1.0"?>\n<materialx version="1.39">\n<nodegraph name="g">{"".join(nodes)}'
        '<output name="out" type="float" nodename="n1499" /></nodegraph>\n'
        '<standard_surface name="SR" type="surfaceshader"><input name="base" type="float" nodegraph="g" output="out" /></standard_surface>\n'
        '<surfacematerial name="M" type="material"><input name="surfaceshader" type="surfaceshader" nodename="SR" /></surfacematerial>\n'
        "</materialx>\n"
    )
    with pytest.raises(InputError, match="links long"):
        compile_materialx(path)


def torch_float32():
    import torch

    return torch.float32


# --- images -------------------------------------------------------------------------------------


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _png_header_only(path: Path, width: int, height: int, bit_depth: int = 8, colour_type: int = 2) -> Path:
    """A PNG that announces ``width x height`` but holds a few bytes of (too little) data."""
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, colour_type, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", zlib.compress(b"\0" * 64)) + _png_chunk(b"IEND", b""))
    return path


def test_pillow_guard_matches_our_limit():
    assert Image.MAX_IMAGE_PIXELS == limits.MAX_IMAGE_PIXELS


@pytest.mark.parametrize("bits", [8, 16])
def test_pixel_limit_is_checked_from_the_header(tmp_path, monkeypatch, bits):
    path = _png_header_only(tmp_path / "big.png", 12000, 12000, bit_depth=bits)

    def no_decoding(*args, **kwargs):
        raise AssertionError("decoded although the header is over the limit")

    monkeypatch.setattr(png, "Reader", no_decoding)
    monkeypatch.setattr(Image, "open", no_decoding)
    with _Fast(), pytest.raises(InputError, match="144,000,000 pixels") as info:
        load_image(path, max_pixels=10_000_000)
    assert "big.png" in str(info.value)


@pytest.mark.parametrize("bits", [8, 16])
def test_max_pixels_on_real_images(tmp_path, bits):
    path = tmp_path / "small.png"
    if bits == 8:
        Image.new("RGB", (40, 30)).save(path)
    else:
        with open(path, "wb") as handle:
            png.Writer(width=40, height=30, bitdepth=16, greyscale=True).write(handle, [[0] * 40] * 30)
    assert load_image(path)[0].shape[:2] == (30, 40)
    with pytest.raises(InputError, match="1,200 pixels"):
        load_image(path, max_pixels=1000)
    Image.new("RGB", (40, 30)).save(tmp_path / "small.jpg")
    with pytest.raises(InputError, match="1,200 pixels"):
        load_image(tmp_path / "small.jpg", max_pixels=1000)


@pytest.mark.parametrize("bits", [8, 16])
def test_memory_is_checked_before_decoding(tmp_path, monkeypatch, bits):
    path = _png_header_only(tmp_path / "zeros.png", 12000, 12000, bit_depth=bits)
    monkeypatch.setattr(limits, "available_memory_bytes", lambda: 2 * 2**30)
    with _Fast(), pytest.raises(InputError, match="GiB of memory") as info:
        load_image(path)
    assert "zeros.png" in str(info.value) and "12000x12000" in str(info.value)


@pytest.mark.parametrize("bits", [8, 16])
def test_header_announcing_more_than_the_data_is_damaged(tmp_path, bits):
    path = _png_header_only(tmp_path / "short.png", 300, 200, bit_depth=bits)
    with _Fast(), pytest.raises(InputError, match="damaged|truncated"):
        load_image(path)


def _good_png(path: Path, bits: int) -> bytes:
    pixels = np.random.default_rng(0).integers(0, 2**bits, (32, 32), dtype=np.uint16 if bits == 16 else np.uint8)
    if bits == 8:
        Image.fromarray(pixels).save(path)
    else:
        with open(path, "wb") as handle:
            png.Writer(width=32, height=32, bitdepth=16, greyscale=True).write(handle, pixels.tolist())
    return path.read_bytes()


@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("damage", ["truncated", "flipped", "signature-only", "short-ihdr"])
def test_damaged_pngs(tmp_path, bits, damage):
    data = _good_png(tmp_path / "good.png", bits)
    if damage == "truncated":
        data = data[: len(data) * 2 // 3]
    elif damage == "flipped":
        data = data[:60] + bytes(b ^ 0x5A for b in data[60:-12]) + data[-12:]
    elif damage == "signature-only":
        data = data[:8]
    else:
        data = data[:20]
    (tmp_path / "bad.png").write_bytes(data)
    with pytest.raises(InputError) as info:
        load_image(tmp_path / "bad.png")
    assert "bad.png" in str(info.value) and "Fix:" in str(info.value)


def test_damaged_jpeg(tmp_path):
    Image.fromarray(np.random.default_rng(1).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(tmp_path / "x.jpg")
    data = (tmp_path / "x.jpg").read_bytes()
    (tmp_path / "cut.jpg").write_bytes(data[: len(data) // 3])
    (tmp_path / "head.jpg").write_bytes(data[:4])
    for name in ("cut.jpg", "head.jpg"):
        with pytest.raises(InputError, match="damaged|truncated|not an image"):
            load_image(tmp_path / name)


def test_empty_folder_fifo_and_unreadable_files(tmp_path, monkeypatch):
    (tmp_path / "empty.png").write_bytes(b"")
    with pytest.raises(InputError, match="empty"):
        load_image(tmp_path / "empty.png")
    (tmp_path / "folder.png").mkdir()
    with pytest.raises(InputError, match="folder"):
        load_image(tmp_path / "folder.png")
    os.mkfifo(tmp_path / "pipe.png")
    with _Fast(), pytest.raises(InputError, match="not a regular file"):
        load_image(tmp_path / "pipe.png")
    Image.new("RGB", (4, 4)).save(tmp_path / "locked.png")
    real_open = builtins.open

    def denied(file, *args, **kwargs):
        if str(file).endswith("locked.png"):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", denied)
    with pytest.raises(InputError, match="Permission denied") as info:
        load_image(tmp_path / "locked.png")
    assert "locked.png" in str(info.value)


# --- wrong JSON types in a material --------------------------------------------------------------

_NODE = '{"format": "neuralbake.material", "version": 1, "nodes": {"a": %s}, "surface": {"lobe": "lambert", "params": {"albedo": 0.5}}}'
_SURFACE = '{"format": "neuralbake.material", "version": 1, "nodes": {"c": {"op": "clamp", "x": 0.5}}, "surface": %s}'


@pytest.mark.parametrize("text, field", [
    ("[]", None),
    ("null", None),
    ('{"format": "neuralbake.material", "version": true, "surface": {}}', "version"),
    ('{"format": "neuralbake.material", "version": 1, "nodes": [], "surface": {}}', "nodes"),
    (_NODE % "[1]", "nodes.a"),
    (_NODE % '"noise"', "nodes.a"),
    (_NODE % '{"op": ["noise"]}', "nodes.a.op"),
    (_NODE % '{"op": {"x": 1}}', "nodes.a.op"),
    (_NODE % '{"op": "noise", "scale": null}', "nodes.a.scale"),
    (_NODE % '{"op": "noise", "scale": 1e309}', "nodes.a.scale"),
    (_NODE % '{"op": "noise", "scale": NaN}', "nodes.a.scale"),
    (_NODE % '{"op": "noise", "scale": -Infinity}', "nodes.a.scale"),
    (_NODE % '{"op": "noise", "scale": "big"}', "nodes.a.scale"),
    (_NODE % '{"op": "noise", "scale": [[1], [1, 2]]}', "nodes.a.scale"),
    (_NODE % '{"op": "noise", "scale": [true, false]}', "nodes.a.scale"),
    (_NODE % '{"op": "noise", "scale": []}', "nodes.a.scale"),
    (_NODE % '{"op": "noise", "scale": {"x": 1}}', "nodes.a.scale"),
    (_NODE % '{"op": "noise", "scale": [[[1]]]}', "nodes.a.scale"),
    (_NODE % '{"op": "noise", "seed": 1e400}', "nodes.a.seed"),
    (_NODE % '{"op": "noise", "seed": 123456789012345678901234567890}', "nodes.a.seed"),
    (_NODE % '{"op": "noise", "octaves": "6"}', "nodes.a.octaves"),
    (_NODE % '{"op": "noise", "lacunarity": NaN}', "nodes.a.lacunarity"),
    (_NODE % '{"op": "noise", "type": 3}', "nodes.a.type"),
    (_NODE % '{"op": "texture", "file": 5}', "nodes.a.file"),
    (_NODE % '{"op": "texture", "file": ""}', "nodes.a.file"),
    (_NODE % '{"op": "texture", "file": "t.png", "srgb": "yes"}', "nodes.a.srgb"),
    (_NODE % '{"op": "component", "x": "@uv", "index": 7}', "nodes.a.index"),
    (_NODE % '{"op": "up_facing", "axis": -1}', "nodes.a.axis"),
    (_NODE % '{"op": "ramp", "x": "@uv", "positions": [0, 1], "colors": [[0, 0, 0]]}', "nodes.a"),
    (_SURFACE % "[]", "surface"),
    (_SURFACE % "null", "surface"),
    (_SURFACE % '{"lobe": ["lambert"]}', "surface.lobe"),
    (_SURFACE % '{"lobe": "lambert", "params": [1]}', "surface.params"),
    (_SURFACE % '{"lobe": "lambert", "params": {"albedo": [0.5, 0.5]}}', "surface.params.albedo"),
    (_SURFACE % '{"lobe": "lambert", "params": {"albedo": "@uv"}}', "surface.params.albedo"),
    (_SURFACE % '{"lobe": "conductor", "params": {"metal": ["Cu"]}}', "surface.params.metal"),
    (_SURFACE % '{"lobe": "conductor", "params": {"metal": "Cu", "roughness": null}}', "surface.params.roughness"),
    (_SURFACE % '{"mix": {"a": 1}, "mask": 0.5}', "surface.mix"),
    (_SURFACE % '{"mix": [null, null], "mask": 0.5}', "surface.mix[0]"),
    (_SURFACE % '{"mix": [{"lobe": "lambert", "params": {"albedo": 0.5}}, {"lobe": "lambert", "params": {"albedo": 0.5}}], "mask": "@c"}', "surface.mask"),
    (_SURFACE % '{"coat": {"lobe": "lambert"}, "ior": -Infinity}', "surface.ior"),
    (_SURFACE % '{"coat": {"lobe": "lambert", "params": {"albedo": 0.5}}, "absorption": [1, 2]}', "surface.absorption"),
])
def test_wrong_json_types_in_a_material(tmp_path, text, field):
    path = tmp_path / "m.json"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        compile_material(path)
    message = str(info.value)
    assert message.startswith(str(path)) and "Fix:" in message
    if field:
        assert f": {field}:" in message, message


def test_huge_integer_literal_in_a_material(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(_NODE % ('{"op": "noise", "seed": ' + "9" * 5000 + "}"))
    with pytest.raises(InputError, match="m.json"):
        compile_material(path)


# --- wrong types in a config ---------------------------------------------------------------------


@pytest.mark.parametrize("text, field", [
    ("[]", None),
    ('"image"', None),
    ('{"image": 5}', "image"),
    ('{"image": null}', "image"),
    ('{"batch_size": "12"}', "batch_size"),
    ('{"batch_size": 12.5}', "batch_size"),
    ('{"batch_size": true}', "batch_size"),
    ('{"batch_size": 1e309}', "batch_size"),
    ('{"batch_size": 123456789012345678901234567890}', "batch_size"),
    ('{"texture_size": [1, 2, 3]}', "texture_size"),
    ('{"texture_size": "64x64"}', "texture_size"),
    ('{"texture_size": [64, 1e309]}', "texture_size[1]"),
    ('{"texture_size": {"w": 1}}', "texture_size"),
    ('{"transform": ["zoom"]}', "transform"),
    ('{"transform": {}}', "transform"),
    ('{"train": []}', "train"),
    ('{"train": null}', "train"),
    ('{"train": {"learning_rate": NaN}}', "train.learning_rate"),
    ('{"train": {"learning_rate": Infinity}}', "train.learning_rate"),
    ('{"train": {"learning_rate": 1e309}}', "train.learning_rate"),
    ('{"train": {"steps": -1e400}}', "train.steps"),
    ('{"network": {"hidden": [64]}}', "network.hidden"),
    ('{"network": 7}', "network"),
    ('{"batch_size": ' + "9" * 5000 + "}", None),
    ("{\"image\": \"a.png\", }", None),
])
def test_wrong_types_in_a_config(tmp_path, text, field):
    path = tmp_path / "bake.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(NeuralTextureConfig, path).validate()
    message = str(info.value)
    assert "bake.json" in message and "Fix:" in message
    if field:
        assert f": {field}:" in message, message


@pytest.mark.parametrize("text, field", [
    ('batch_size = "12"', "batch_size"),
    ("batch_size = inf", "batch_size"),
    ("[train]\nlearning_rate = nan", "train.learning_rate"),
    ("size = [1, 2, 3]", "size"),
    ("train = 3", "train"),
    ("batch_size = " + "9" * 5000, None),
])
def test_wrong_types_in_a_toml_config(tmp_path, text, field):
    path = tmp_path / "bake.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as info:
        load_config(NeuralTextureConfig, path)
    message = str(info.value)
    assert "bake.toml" in message and "Fix:" in message
    if field:
        assert f": {field}:" in message, message


def test_config_file_that_is_not_utf8_or_a_folder(tmp_path):
    (tmp_path / "bad.json").write_bytes(b'{"image": "\xff\xfe"}')
    with pytest.raises(ConfigError, match="UTF-8"):
        load_config(NeuralTextureConfig, tmp_path / "bad.json")
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(ConfigError, match="folder"):
        load_config(NeuralTextureConfig, tmp_path / "dir.json")


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("", 0),
        ("{}", 1),
        ('{"a": [1, {"b": "[[[\\"]]"}], "c": "x\\\\"}', 3),
        ("[" * 1000 + "]" * 1000, 1000),
        ('["a\\"b", "[", {"k": "}"}]', 2),
    ],
)
def test_json_depth_ignores_brackets_inside_strings(text: str, depth: int) -> None:
    from neuralbake.io.limits import json_depth

    assert json_depth(text) == depth


def test_materialx_includes_are_read_once_however_often_named(tmp_path: Path) -> None:
    from neuralbake.io import materialx, materialx_xml

    head = '<?xml version="1.0"?>\n<materialx version="1.39" xmlns:xi="http://www.w3.org/2001/XInclude">\n'
    for name, child in (("a", "b"), ("b", "c"), ("c", "d")):
        body = "".join(f'  <xi:include href="{child}.mtlx" />\n' for _ in range(200))
        (tmp_path / f"{name}.mtlx").write_text(head + body + "</materialx>\n")
    (tmp_path / "d.mtlx").write_text(head + "</materialx>\n")
    reads: list[str] = []
    original = materialx_xml._scan_xml
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(materialx_xml, "_scan_xml", lambda path, top: reads.append(Path(path).name) or original(path, top))
        with pytest.raises(InputError, match="no material"):
            materialx.load_materialx(tmp_path / "a.mtlx")
    assert sorted(reads) == ["a.mtlx", "b.mtlx", "c.mtlx", "d.mtlx"]

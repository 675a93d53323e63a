"""Damaged, mistyped and hostile bundles: every reader refuses them with a BundleError/InputError naming the file or field.

A tiny real neural material bundle (written by the bake's own writer, without training) and a
tiny neural texture bundle are made once per module; each test copies one, mutates its manifest
or its files, and runs every path that reads it: ``read_bundle``, the neural-material load and
render path, and the shader exports. Anything but a NeuralbakeError (a TypeError, a
SafetensorError, a KeyError...) fails the test, and so does a message that does not name the
file or the field. Also here: NTC containers with damaged headers/manifests, the check that a
render compares against the material the bundle was baked from, and ``--latent`` values.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from neuralbake.bakes.neural_material import (
    NeuralMaterial,
    NeuralMaterialConfig,
    load_neural_material,
    render_neural_material,
    write_material_bundle,
)
from neuralbake.bakes.neural_texture import render_saved_network
from neuralbake.bakes.ntc import (
    CONTAINER_NAME,
    LATENT_SHAPES,
    MANIFEST_NAME,
    ChannelGroup,
    NTCLayout,
    NTCModel,
    open_container,
    pack_container,
    read_container,
)
from neuralbake.errors import BundleError, ConfigError, InputError, NeuralbakeError
from neuralbake.export.neural_material import export_neural_material_shader
from neuralbake.export.slang import export_bundle_shader
from neuralbake.io.bundle import read_bundle, read_device_layout
from neuralbake.io.refs import allow_outside_refs
from neuralbake.nn.mlp import MLP, CoordinateNetwork, CoordinateNetworkConfig, MLPConfig
from neuralbake.nn.serialize import load_coordinate_network, save_coordinate_network

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "materials"
MATERIAL = EXAMPLES / "velvet.json"
OTHER_MATERIAL = EXAMPLES / "antique_copper_tray.json"
REFUSED = (BundleError, InputError)


# -- fixtures ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def originals(tmp_path_factory) -> dict[str, Path]:
    """A neural material bundle (latent 4, decoder 13 -> 8 -> 3, 4x4 latents with 3 mips) and a neural texture bundle."""
    root = tmp_path_factory.mktemp("bundles")
    torch.manual_seed(0)
    config = NeuralMaterialConfig(material=str(MATERIAL), latent=4, texture_size=4, decoder_hidden=8, decoder_layers=1)
    decoder = MLP(MLPConfig(inputs=4 + 9, hidden=8, layers=1, outputs=3, hidden_activation="relu", output_activation="none"))
    levels = [torch.randn(side, side, 4) for side in (4, 2, 1)]
    material = root / "material"
    material.mkdir()
    write_material_bundle(material, NeuralMaterial(levels, decoder, config.direction_inputs), config, features=5)
    texture = root / "texture"
    save_coordinate_network(texture, CoordinateNetwork(CoordinateNetworkConfig(frequencies=2, hidden=8, layers=1, outputs=3)), training_precision="fp32")
    return {"material": material, "texture": texture}


def _copy(originals: dict[str, Path], which: str, tmp_path: Path) -> Path:
    target = tmp_path / "bundle" / which
    shutil.copytree(originals[which], target)
    return target


def _edit_manifest(folder: Path, change: Callable[[dict[str, Any]], Any]) -> None:
    path = folder / "network.json"
    manifest = json.loads(path.read_text())
    result = change(manifest)
    path.write_text(json.dumps(manifest if result is None else result))


def _refused(call: Callable[[], Any], *needles: str) -> NeuralbakeError:
    """``call()`` must raise a BundleError or InputError whose message contains every needle."""
    try:
        call()
    except REFUSED as exc:
        text = str(exc)
        for needle in needles:
            assert needle in text, f"{needle!r} not in {text!r}"
        assert "Fix:" in text, text
        return exc
    except Exception as exc:  # noqa: BLE001 - anything else is the bug under test
        pytest.fail(f"{type(exc).__name__} instead of a BundleError/InputError: {exc}")
    pytest.fail("the damaged bundle was accepted")


def _material_paths(folder: Path, tmp_path: Path) -> list[Callable[[], Any]]:
    """Every way the neural material bundle is read: load (fp16, u8), render, shader export (fp16/u8 latents, both precisions)."""
    return [
        lambda: load_neural_material(folder),
        lambda: load_neural_material(folder, quantized=True),
        lambda: render_neural_material(folder, tmp_path / "render", size=4, spp=1, device="cpu"),
        lambda: export_neural_material_shader(folder, tmp_path / "shader"),
        lambda: export_neural_material_shader(folder, tmp_path / "shader_u8", precision="fp16", latent_format="u8"),
    ]


def test_the_tiny_bundles_are_readable(originals, tmp_path):
    material = load_neural_material(originals["material"])
    assert [tuple(level.shape) for level in material.latents] == [(4, 4, 4), (2, 2, 4), (1, 1, 4)]
    manifest = read_bundle(originals["material"]).manifest
    assert {"latents_fp16", "latents_u8"} <= set(manifest["files"]) and len(manifest["material"]["sha256"]) == 64
    export_neural_material_shader(originals["material"], tmp_path / "shader", latent_format="u8")
    load_coordinate_network(originals["texture"])
    export_bundle_shader(originals["texture"], tmp_path / "texture_shader")


# -- the manifest: types, structure, agreement with the weights ---------------------------------------


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Set ``a.b[1].c`` in the manifest (``value`` may be a function of the old value)."""

    def change(manifest: dict[str, Any]) -> None:
        keys: list[Any] = []
        for part in path.split("."):
            name, _, index = part.partition("[")
            keys.append(name)
            if index:
                keys.append(int(index.rstrip("]")))
        node: Any = manifest
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value(node[keys[-1]]) if callable(value) else value

    return change


def _delete(path: str) -> Callable[[dict[str, Any]], None]:
    parent, _, key = path.rpartition(".")

    def change(manifest: dict[str, Any]) -> None:
        node: Any = manifest
        for part in parent.split(".") if parent else []:
            node = node[part]
        del node[key]

    return change


# (mutation, text the message must contain, whether read_bundle itself must refuse it)
MATERIAL_MUTATIONS = {
    "manifest is a list": (lambda m: [m], "network.json", True),
    "format_version is a string": (_set("format_version", "1"), "format_version", True),
    "format_version is true": (_set("format_version", True), "format_version", True),
    "kind is a list": (_set("kind", ["neural_material"]), "kind", True),
    "files is a list": (_set("files", []), "files", True),
    "files.weights is a string": (_set("files.weights", "network.safetensors"), "files.weights", True),
    "weights file climbs out": (_set("files.weights.file", "../../etc/passwd"), "files.weights.file", True),
    "weights file is absolute": (_set("files.weights.file", "/etc/passwd"), "files.weights.file", True),
    "weights file is a subfolder path": (_set("files.weights.file", "sub/network.safetensors"), "files.weights.file", True),
    "weights bytes is a string": (_set("files.weights.bytes", "932"), "files.weights.bytes", True),
    "weights bytes is negative": (_set("files.weights.bytes", -1), "files.weights.bytes", True),
    "weights sha256 is a number": (_set("files.weights.sha256", 123), "files.weights.sha256", True),
    "weights sha256 is missing": (_delete("files.weights.sha256"), "sha256", True),
    "latent file entry climbs out": (_set("files.latents_fp16.file", "../latents.fp16.safetensors"), "files.latents_fp16.file", True),
    "tensors is a string": (_set("tensors", "decoder"), "tensors", True),
    "tensor shape is a string": (lambda m: m["tensors"]["decoder.layers.0.weight"].update(shape="8x13"), "tensors.decoder.layers.0.weight.shape", True),
    "device_layouts is a list": (_set("device_layouts", []), "device_layouts", True),
    "device layout file climbs out": (_set("device_layouts.fp16.file", "../network.fp16.bin"), "device_layouts.fp16.file", True),
    "device layout layers is a string": (_set("device_layouts.fp16.layers", "2"), "device_layouts.fp16.layers", True),
    "negative weight_offset": (_set("device_layouts.fp32.layers[0].weight_offset", -64), "weight_offset", True),
    "misaligned weight_offset": (_set("device_layouts.fp32.layers[1].weight_offset", lambda v: v + 4), "weight_offset", True),
    "bias past the buffer": (_set("device_layouts.fp16.layers[1].bias_offset", 10**9), "device_layouts.fp16.layers[1]", True),
    "weights overlap the layer before": (_set("device_layouts.fp32.layers[1].weight_offset", 0), "weight_offset", True),
    "layer inputs do not chain": (_set("device_layouts.fp16.layers[1].inputs", 4), "device_layouts.fp16.layers[1]", True),
    "layer inputs is a float": (_set("device_layouts.fp16.layers[0].inputs", 13.0), "inputs", True),
    "unknown device precision": (_set("device_layouts.bf16", {}), "device_layouts.bf16", True),
    "architecture is a string": (_set("architecture", "mlp"), "architecture", False),
    "architecture is a list": (_set("architecture", [13, 8, 3]), "architecture", False),
    "architecture missing": (_delete("architecture"), "architecture", False),
    "layers is a string": (_set("architecture.layers", "1"), "architecture.layers", False),
    "layers too many": (_set("architecture.layers", 3), "architecture.layers", False),
    "layers huge": (_set("architecture.layers", 10**12), "architecture.layers", False),
    "hidden halved": (_set("architecture.hidden", 4), "architecture.hidden", False),
    "hidden huge": (_set("architecture.hidden", 10**12), "architecture.hidden", False),
    "hidden is a float": (_set("architecture.hidden", 8.5), "architecture.hidden", False),
    "inputs missing": (_delete("architecture.inputs"), "architecture.inputs", False),
    "inputs negative": (_set("architecture.inputs", -13), "architecture.inputs", False),
    "outputs 4": (_set("architecture.outputs", 4), "architecture.outputs", False),
    "activation is a number": (_set("architecture.hidden_activation", 5), "architecture.hidden_activation", False),
    "activation unknown": (_set("architecture.output_activation", "softmax"), "architecture.output_activation", False),
    "leak is a string": (_set("architecture.leak", "0.01"), "architecture.leak", False),
    "direction_inputs is a string": (_set("architecture.direction_inputs", "wi"), "architecture.direction_inputs", False),
    "direction_inputs unknown": (_set("architecture.direction_inputs", ["wi", "wo", "up"]), "architecture.direction_inputs", False),
    "latent is a list": (_set("latent", []), "latent", False),
    "latent channels wrong": (_set("latent.channels", 8), "latent.channels", False),
    "latent channels a string": (_set("latent.channels", "4"), "latent.channels", False),
    "latent file climbs out": (_set("latent.fp16", "../../etc/passwd"), "latent.fp16", False),
    "latent file is absolute": (_set("latent.u8", "/etc/passwd"), "latent.u8", False),
    "latent file is a number": (_set("latent.fp16", 7), "latent.fp16", False),
    "mip_levels a string": (_set("latent.mip_levels", "3"), "latent.mip_levels", False),
    "mip_levels zero": (_set("latent.mip_levels", 0), "latent.mip_levels", False),
    "mip_levels beyond the file": (_set("latent.mip_levels", 5), "latent.mip3", False),
    "material is a string": (_set("material", "velvet"), "material", False),
    "material source a number": (_set("material.source", 3), "material.source", False),
    "material sha256 not hex": (_set("material.sha256", "velvet"), "material.sha256", False),
    "baked normal a string": (_set("material.baked_normal", "up"), "material.baked_normal", False),
    "baked normal two values": (_set("material.baked_normal", [0, 1]), "material.baked_normal", False),
    "encoding named": (_set("encoding", {"type": "frequency"}), "encoding", False),
}


@pytest.mark.parametrize("case", list(MATERIAL_MUTATIONS))
def test_damaged_material_manifest_is_refused_everywhere(originals, tmp_path, case):
    mutation, needle, generic = MATERIAL_MUTATIONS[case]
    folder = _copy(originals, "material", tmp_path)
    _edit_manifest(folder, mutation)
    if generic:
        _refused(lambda: read_bundle(folder), needle)
    else:
        read_bundle(folder)  # the generic part is intact
    for call in _material_paths(folder, tmp_path):
        _refused(call, needle)
    assert not (tmp_path / "render").exists() and not (tmp_path / "shader").exists()


TEXTURE_MUTATIONS = {
    "config is a list": (_set("config", []), "config"),
    "hidden is a string": (_set("config.hidden", "8"), "config.hidden"),
    "hidden halved": (_set("config.hidden", 4), "config.hidden"),
    "hidden huge": (_set("config.hidden", 10**12), "config.hidden"),
    "layers negative": (_set("config.layers", -1), "config.layers"),
    "layers huge": (_set("config.layers", 10**9), "config.layers"),
    "frequencies huge": (_set("config.frequencies", 10**6), "config.frequencies"),
    "activation unknown": (_set("config.hidden_activation", "softmax"), "config.hidden_activation"),
    "leak is a list": (_set("config.leak", [0.01]), "config.leak"),
    "architecture is a string": (_set("architecture", "mlp"), "architecture"),
    "architecture disagrees": (_set("architecture.hidden_activation", "tanh"), "architecture.hidden_activation"),
    "weights file climbs out": (_set("files.weights.file", "../material/network.safetensors"), "files.weights.file"),
}


@pytest.mark.parametrize("case", list(TEXTURE_MUTATIONS))
def test_damaged_texture_manifest_is_refused(originals, tmp_path, case):
    mutation, needle = TEXTURE_MUTATIONS[case]
    folder = _copy(originals, "texture", tmp_path)
    _edit_manifest(folder, mutation)
    _refused(lambda: load_coordinate_network(folder), needle)
    _refused(lambda: render_saved_network(folder, 4, 4, tmp_path / "out.png", device="cpu"), needle)
    if needle.startswith(("files", "architecture")):
        _refused(lambda: export_bundle_shader(folder, tmp_path / "shader"), needle)
    assert not (tmp_path / "out.png").exists()


def test_texture_encoding_of_the_wrong_type_is_refused_by_the_export(originals, tmp_path):
    folder = _copy(originals, "texture", tmp_path)
    _edit_manifest(folder, _set("encoding", ["frequency"]))
    _refused(lambda: export_bundle_shader(folder, tmp_path / "shader"), "encoding")


# -- the files: truncated, flipped, replaced, symlinked -----------------------------------------------


def _truncate(name: str) -> Callable[[Path], None]:
    def change(folder: Path) -> None:
        data = (folder / name).read_bytes()
        (folder / name).write_bytes(data[: len(data) // 2])

    return change


def _flip(name: str, position: int) -> Callable[[Path], None]:
    def change(folder: Path) -> None:
        data = bytearray((folder / name).read_bytes())
        data[position] ^= 0x41
        (folder / name).write_bytes(bytes(data))

    return change


def _garbage(name: str) -> Callable[[Path], None]:
    return lambda folder: (folder / name).write_bytes(b"\xff" * 64)


# (mutation, which reader paths (indices into _material_paths) must refuse, text in the message)
FILE_MUTATIONS = {
    "fp16 latents cut in half": (_truncate("latents.fp16.safetensors"), (0, 2, 3), "latents.fp16.safetensors"),
    "u8 latents cut in half": (_truncate("latents.u8.safetensors"), (1, 4), "latents.u8.safetensors"),
    "fp16 latents last byte flipped": (_flip("latents.fp16.safetensors", -1), (0, 2, 3), "latents.fp16.safetensors"),
    "fp16 latents header byte flipped": (_flip("latents.fp16.safetensors", 12), (0, 2, 3), "latents.fp16.safetensors"),
    "u8 latents length prefix flipped": (_flip("latents.u8.safetensors", 0), (1, 4), "latents.u8.safetensors"),
    "fp16 latents garbage": (_garbage("latents.fp16.safetensors"), (0, 2, 3), "latents.fp16.safetensors"),
    "fp16 latents empty": (lambda folder: (folder / "latents.fp16.safetensors").write_bytes(b""), (0, 2, 3), "latents.fp16.safetensors"),
    "fp16 latents missing": (lambda folder: (folder / "latents.fp16.safetensors").unlink(), (0, 2, 3), "latents.fp16.safetensors"),
    "weights cut in half": (_truncate("network.safetensors"), (0, 1, 2, 3, 4), "network.safetensors"),
    "weights flipped": (_flip("network.safetensors", -3), (0, 1, 2, 3, 4), "network.safetensors"),
    "fp32 device layout flipped": (_flip("network.fp32.bin", 5), (3,), "network.fp32.bin"),
    "fp16 device layout truncated": (_truncate("network.fp16.bin"), (4,), "network.fp16.bin"),
    "manifest truncated": (_truncate("network.json"), (0, 1, 2, 3, 4), "network.json"),
    "manifest not UTF-8": (lambda folder: (folder / "network.json").write_bytes(b"\xff\xfe{}"), (0, 1, 2, 3, 4), "network.json"),
    "manifest nested 10000 deep": (lambda folder: (folder / "network.json").write_text("[" * 10000 + "]" * 10000), (0, 1, 2, 3, 4), "network.json"),
}


@pytest.mark.parametrize("case", list(FILE_MUTATIONS))
def test_damaged_files_are_refused(originals, tmp_path, case):
    mutation, refusing, needle = FILE_MUTATIONS[case]
    folder = _copy(originals, "material", tmp_path)
    mutation(folder)
    paths = _material_paths(folder, tmp_path)
    for index in refusing:
        _refused(paths[index], needle)


def test_old_bundles_without_latent_checksums_stay_readable(originals, tmp_path):
    folder = _copy(originals, "material", tmp_path)
    _edit_manifest(folder, lambda m: [m["files"].pop(key) for key in ("latents_fp16", "latents_u8")] and None)
    assert len(load_neural_material(folder, quantized=True).latents) == 3
    export_neural_material_shader(folder, tmp_path / "shader")


@pytest.mark.parametrize("name", ["network.safetensors", "network.fp32.bin", "latents.fp16.safetensors"])
def test_symlink_out_of_the_folder_is_refused(originals, tmp_path, name):
    """Even when the file outside is byte-identical (so only the confinement rule can refuse it)."""
    folder = _copy(originals, "material", tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.move(folder / name, outside / name)
    (folder / name).symlink_to(outside / name)
    _refused(lambda: load_neural_material(folder), "outside", name.split(".")[0])
    _refused(lambda: export_neural_material_shader(folder, tmp_path / "shader"), "outside")
    with allow_outside_refs():  # the CLI's --allow-outside-refs lifts the rule
        load_neural_material(folder)
        export_neural_material_shader(folder, tmp_path / "shader")


def test_symlink_inside_the_folder_is_followed(originals, tmp_path):
    folder = _copy(originals, "material", tmp_path)
    (folder / "store").mkdir()
    shutil.move(folder / "latents.fp16.safetensors", folder / "store" / "latents.fp16.safetensors")
    (folder / "latents.fp16.safetensors").symlink_to(Path("store") / "latents.fp16.safetensors")
    assert len(load_neural_material(folder).latents) == 3


def test_manifest_pointing_at_a_sentinel_outside_is_refused(originals, tmp_path):
    """``file: ../../sentinel`` with the right size and sha256 of the sentinel: refused, and the sentinel's bytes are not read back."""
    folder = _copy(originals, "material", tmp_path)
    sentinel = tmp_path / "sentinel.safetensors"
    shutil.copy(folder / "latents.fp16.safetensors", sentinel)
    relative = "../../sentinel.safetensors"
    entry = {"file": relative, "bytes": sentinel.stat().st_size, "sha256": hashlib.sha256(sentinel.read_bytes()).hexdigest()}
    _edit_manifest(folder, lambda m: m["files"].update(extra=entry))
    error = _refused(lambda: read_bundle(folder), "files.extra.file")
    assert error.field == "files.extra.file" and error.path == str(folder / "network.json")
    folder = _copy(originals, "material", tmp_path / "2")
    _edit_manifest(folder, _set("latent.fp16", relative))
    error = _refused(lambda: load_neural_material(folder), "latent.fp16")
    with allow_outside_refs():  # bundle entries are plain names even then
        _refused(lambda: load_neural_material(folder), "latent.fp16")


def test_read_device_layout_names_the_file(originals, tmp_path):
    folder = _copy(originals, "material", tmp_path)
    bundle = read_bundle(folder)
    (folder / "network.fp16.bin").write_bytes(b"\x00" * 7)
    _refused(lambda: read_device_layout(bundle, "fp16"), "network.fp16.bin", "device_layouts.fp16")
    _refused(lambda: read_device_layout(bundle, "bf16"), "device_layouts")


# -- render: the reference must be the material the bundle was baked from ----------------------------


def test_render_refuses_another_material(originals, tmp_path):
    folder = originals["material"]
    error = _refused(lambda: render_neural_material(folder, tmp_path / "r", material=OTHER_MATERIAL, size=4, spp=1, device="cpu"), "material.sha256")
    assert error.path == str(OTHER_MATERIAL) and "allow_other_material" in str(error)
    assert not (tmp_path / "r").exists()


def test_render_accepts_a_copy_and_an_explicit_other_material(originals, tmp_path):
    copy_of_source = tmp_path / "copies" / "renamed.json"
    copy_of_source.parent.mkdir()
    shutil.copy(MATERIAL, copy_of_source)
    report = render_neural_material(originals["material"], tmp_path / "a", material=copy_of_source, size=4, spp=1, device="cpu", precision="fp32")
    assert report["reference"] == str(copy_of_source)
    report = render_neural_material(originals["material"], tmp_path / "b", material=OTHER_MATERIAL, size=4, spp=1, device="cpu", allow_other_material=True)
    assert report["reference"] == str(OTHER_MATERIAL)


def test_render_of_an_old_bundle_compares_names_or_contents(originals, tmp_path):
    """Bundles from before material.sha256: the recorded file's content if it is there, else its name."""
    folder = _copy(originals, "material", tmp_path)
    _edit_manifest(folder, lambda m: m["material"].pop("sha256") and None)
    _refused(lambda: render_neural_material(folder, tmp_path / "r", material=OTHER_MATERIAL, size=4, spp=1, device="cpu"), "material.source")
    gone = tmp_path / "gone" / "velvet.json"
    gone.parent.mkdir()
    shutil.copy(MATERIAL, gone)
    _edit_manifest(folder, _set("material.source", str(gone)))
    # Without a pinned sha256 the recorded path (outside the bundle) is not followed at all...
    _refused(lambda: render_neural_material(folder, tmp_path / "r", size=4, spp=1, device="cpu"), "material.sha256", "--material")
    gone.unlink()
    # ...unless the user trusts the bundle; then the old rules apply.
    with allow_outside_refs():
        _refused(lambda: render_neural_material(folder, tmp_path / "r", size=4, spp=1, device="cpu"), "material.source", "is not there")
    _refused(lambda: render_neural_material(folder, tmp_path / "r", material=OTHER_MATERIAL, size=4, spp=1, device="cpu"), "velvet.json")


def test_render_refuses_a_recorded_material_that_was_edited(originals, tmp_path):
    edited = tmp_path / "velvet.json"
    edited.write_text(MATERIAL.read_text() + "\n")
    folder = _copy(originals, "material", tmp_path)
    _edit_manifest(folder, _set("material.source", str(edited)))
    _refused(lambda: render_neural_material(folder, tmp_path / "r", size=4, spp=1, device="cpu"), "changed since the bake")


def test_render_refuses_a_recorded_source_that_is_not_a_material(originals, tmp_path):
    folder = _copy(originals, "material", tmp_path)
    _edit_manifest(folder, _set("material.source", "/etc/passwd"))
    _refused(lambda: render_neural_material(folder, tmp_path / "r", size=4, spp=1, device="cpu"), "material.source")


# -- the bake's --latent -------------------------------------------------------------------------------


@pytest.mark.parametrize("latent", [0, 1, 5, 12, 32, True])
def test_latent_channels_other_than_4_8_16_are_refused(latent):
    config = NeuralMaterialConfig(material=str(MATERIAL), latent=latent)
    with pytest.raises(ConfigError) as caught:
        config.validate()
    assert caught.value.field == "latent" and "4, 8 or 16" in str(caught.value)


@pytest.mark.parametrize("latent", [4, 8, 16])
def test_latent_channels_4_8_16_are_accepted(latent):
    NeuralMaterialConfig(material=str(MATERIAL), latent=latent).validate()


# -- NTC containers ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ntc_bytes() -> bytes:
    torch.manual_seed(0)
    layout = NTCLayout(8, 8, (ChannelGroup("base_color", ("R", "G", "B"), "color"), ChannelGroup("rough", ("R",), "data")), LATENT_SHAPES[0], hidden=(8,))
    return pack_container(NTCModel(layout))


def _ntc_folder(tmp_path: Path, data: bytes, **manifest: Any) -> Path:
    folder = tmp_path / "ntc"
    folder.mkdir(exist_ok=True)
    (folder / CONTAINER_NAME).write_bytes(data)
    entry = {"file": CONTAINER_NAME, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "format": "neuralbake.ntc", "version": 1}
    (folder / MANIFEST_NAME).write_text(json.dumps({**entry, **manifest}))
    return folder


def _with_header(data: bytes, change: Callable[[dict[str, Any]], Any] | None = None, raw: bytes | None = None, length: int | None = None) -> bytes:
    prefix = struct.Struct("<8sHI")
    magic, version, header_len = prefix.unpack_from(data)
    header = json.loads(data[prefix.size : prefix.size + header_len])
    if change is not None:
        change(header)
    text = raw if raw is not None else json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    return prefix.pack(magic, version, len(text) if length is None else length) + text + data[prefix.size + header_len :]


HEADER_MUTATIONS = {
    "header length past the end": lambda d: _with_header(d, length=1 << 30),
    "header length zero": lambda d: _with_header(d, length=0),
    "header not JSON": lambda d: _with_header(d, raw=b"{not json" + b" " * 300),
    "header not UTF-8": lambda d: _with_header(d, raw=b"\xff" * 300),
    "header nested deep": lambda d: _with_header(d, raw=b"[" * 200 + b"]" * 200),
    "header a list": lambda d: _with_header(d, raw=b"[1, 2, 3]"),
    "width a string": lambda d: _with_header(d, _set("width", "8")),
    "width huge": lambda d: _with_header(d, _set("width", 10**9)),
    "groups a dict": lambda d: _with_header(d, _set("groups", {})),
    "group name climbs out": lambda d: _with_header(d, _set("groups[0].name", "../../evil")),
    "group channels a string": lambda d: _with_header(d, _set("groups[0].channels", "RGB")),
    "group kind unknown": lambda d: _with_header(d, _set("groups[0].kind", "height")),
    "latents missing": lambda d: _with_header(d, _delete("latents")),
    "bits zero": lambda d: _with_header(d, _set("latents.bits", 0)),
    "features negative": lambda d: _with_header(d, _set("latents.features", -8)),
    "hidden a string": lambda d: _with_header(d, _set("decoder.hidden", "8")),
    "hidden huge": lambda d: _with_header(d, _set("decoder.hidden", [10**6])),
    "activation unknown": lambda d: _with_header(d, _set("decoder.activation", "softmax")),
    "leak a string": lambda d: _with_header(d, _set("decoder.leak", "0.01")),
    "hidden changed": lambda d: _with_header(d, _set("decoder.hidden", [9])),
    "truncated body": lambda d: d[: len(d) - 40],
    "prefix only": lambda d: d[:14],
}


@pytest.mark.parametrize("case", list(HEADER_MUTATIONS))
def test_damaged_ntc_container_is_refused(ntc_bytes, tmp_path, case):
    data = HEADER_MUTATIONS[case](ntc_bytes)
    _refused(lambda: read_container(data))
    _refused(lambda: open_container(_ntc_folder(tmp_path, data)), CONTAINER_NAME)


def test_intact_ntc_container_reads(ntc_bytes, tmp_path):
    assert read_container(ntc_bytes).layout.channels == 4
    assert open_container(_ntc_folder(tmp_path, ntc_bytes)).layout.width == 8


@pytest.mark.parametrize(
    ("manifest", "needle"),
    [
        ({"file": "../../etc/passwd"}, "file"),
        ({"file": 3}, "file"),
        ({"sha256": 5}, "sha256"),
        ({"sha256": None}, "sha256"),
        ({"bytes": "12"}, "bytes"),
        ({"bytes": 3}, "bytes"),
    ],
)
def test_damaged_ntc_manifest_is_refused(ntc_bytes, tmp_path, manifest, needle):
    _refused(lambda: open_container(_ntc_folder(tmp_path, ntc_bytes, **manifest)), needle)


def test_ntc_manifest_of_the_wrong_type_is_refused(ntc_bytes, tmp_path):
    folder = _ntc_folder(tmp_path, ntc_bytes)
    (folder / MANIFEST_NAME).write_text("[]")
    _refused(lambda: open_container(folder), MANIFEST_NAME)
    (folder / MANIFEST_NAME).write_text("{" * 100000)
    _refused(lambda: open_container(folder), MANIFEST_NAME)


def test_ntc_container_symlinked_out_of_the_folder_is_refused(ntc_bytes, tmp_path):
    folder = _ntc_folder(tmp_path, ntc_bytes)
    outside = tmp_path / "elsewhere.ntc"
    shutil.move(folder / CONTAINER_NAME, outside)
    (folder / CONTAINER_NAME).symlink_to(outside)
    _refused(lambda: open_container(folder), "outside")


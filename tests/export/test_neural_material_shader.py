"""Exported neural material shaders against the PyTorch material they came from.

Two tiny real bakes (copper tray, velvet) are made once per module. The shaders are compiled with
slangpy's CPU device (Slang -> C++ -> host compiler) and their compute entry point is dispatched
over random (uv, wi, wo, mip): uv outside [0, 1] (repeat wrap), every mip level, some directions
below the horizon. The reference is ``NeuralMaterial.latent_at`` + ``evaluate`` on the same data
the shader reads: fp16 or 8-bit latents as loaded by ``load_neural_material``, and for fp16
weights a decoder whose weights are rounded through fp16. With identical data both sides compute
in fp32, so fp32 weights and fp16 latents must agree to 1e-4 absolute; the quantised formats get
the stated looser bound QUANTISED_TOLERANCE (relative part for the larger values fp16 weights can
give; measured: at most 6e-6 at values up to 7.4 in every format, 4000 points).
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import typer
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from neuralbake.bakes.neural_material import (
    NeuralMaterial,
    NeuralMaterialConfig,
    bake_neural_material,
    load_neural_material,
)
from neuralbake.bakes.neural_material.model import tensor_kernel_reference
from neuralbake.cli import app as neuralbake_app
from neuralbake.errors import BundleError, ConfigError
from neuralbake.export.neural_material import export_material_pack_shader, export_neural_material_shader
from neuralbake.export.neural_material_codegen import POINT_FLOATS
from neuralbake.export.neural_material_tensor import POINTS_PER_GROUP as TENSOR_POINTS_PER_GROUP
from neuralbake.export.neural_material_tensor import THREADS as TENSOR_THREADS
from neuralbake.export.neural_material_tensor import tensor_kernel_shape
from neuralbake.io.bundle import read_bundle, write_bundle
from neuralbake.io.device_layout import LayerTensors
from neuralbake.nn.mlp import MLP, CoordinateNetwork, CoordinateNetworkConfig, MLPConfig
from neuralbake.nn.quantize import quantize_latents_affine_u8
from neuralbake.nn.serialize import save_coordinate_network
from neuralbake.nn.trainer import TrainerConfig

try:
    import slangpy
except ImportError:  # pragma: no cover - depends on the environment
    slangpy = None

needs_slangpy = pytest.mark.skipif(slangpy is None, reason="slangpy is not installed (pip install slangpy); it compiles and runs the shaders")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "materials"
FP32_TOLERANCE = 1e-4
QUANTISED_TOLERANCE = (2e-4, 1e-5)
"""(absolute, relative) bound for fp16 weights or u8 latents against PyTorch run on the same quantised data."""
_module_ids = itertools.count()
_MANIFEST_KEYS_WRITTEN_BY_WRITE_BUNDLE = ("format", "format_version", "kind", "files", "tensors", "device_layouts")


# -- fixtures and helpers ---------------------------------------------------------------------------


def _bake(material: str, out: Path, sampling_steps: int = 0) -> Path:
    config = NeuralMaterialConfig(
        material=str(EXAMPLES / material), texture_size=8, batch_size=256, device="cpu", decoder_hidden=16, encoder_hidden=16,
        compare_size=8, compare_spp=1, reference_chunk=256 * 20, sampling_steps=sampling_steps,
        train=TrainerConfig(steps=20, precision="fp32", log_every=10, checkpoint_every=0, eval_every=0),
    )
    bake_neural_material(config, out, progress=False)
    return out


def derived_bundle(source: Path, out: Path, *, decoder: MLP | None = None, latents: list[torch.Tensor] | None = None, drop_direction_inputs: bool = False) -> Path:
    """A neural material bundle made from ``source`` with another decoder and/or other latents (same manifest otherwise)."""
    bundle = read_bundle(source)
    metadata = {key: value for key, value in bundle.manifest.items() if key not in _MANIFEST_KEYS_WRITTEN_BY_WRITE_BUNDLE}
    if decoder is None:
        decoder = load_neural_material(source).decoder
    metadata["architecture"] = {**metadata["architecture"], "inputs": decoder.config.inputs, "hidden": decoder.config.hidden, "layers": decoder.config.layers}
    if drop_direction_inputs:
        del metadata["architecture"]["direction_inputs"]
    out.mkdir(parents=True)
    if latents is None:
        for name in ("latents.fp16.safetensors", "latents.u8.safetensors"):
            shutil.copy(source / name, out / name)
    else:
        metadata["latent"] = {**metadata["latent"], "channels": latents[0].shape[2], "mip_levels": len(latents)}
        save_file({f"latent.mip{k}": level.half().contiguous() for k, level in enumerate(latents)}, str(out / "latents.fp16.safetensors"))
        quantised = {}
        for k, level in enumerate(latents):
            codes, scale, offset = quantize_latents_affine_u8(level)
            quantised.update({f"latent.mip{k}.codes": codes, f"latent.mip{k}.scale": scale, f"latent.mip{k}.offset": offset})
        save_file(quantised, str(out / "latents.u8.safetensors"))
    layers = [LayerTensors(f"decoder.layers.{i}", layer.weight, layer.bias) for i, layer in enumerate(decoder.layers)]
    write_bundle(out, {f"decoder.{k}": v for k, v in decoder.state_dict().items()}, kind="neural_material", metadata=metadata, layers=layers)
    return out


@pytest.fixture(scope="module")
def bakes(tmp_path_factory) -> dict[str, Path]:
    """Two tiny real bakes, and bundles derived from them (see each entry)."""
    root = tmp_path_factory.mktemp("neural_materials")
    copper = _bake("antique_copper_tray.json", root / "copper")
    velvet = _bake("velvet.json", root / "velvet")
    head = _bake("antique_copper_tray.json", root / "head", sampling_steps=20)  # with an importance-sampling head
    torch.manual_seed(0)
    # copper with its output bias raised, so f cos reaches ~10 and the tolerance is tested on large values too
    bright = load_neural_material(copper).decoder
    with torch.no_grad():
        bright.layers[-1].bias.add_(2.0)
    # velvet's decoder fine-tuned from copper's: its first two layers are copper's, byte for byte
    shared = load_neural_material(velvet).decoder
    with torch.no_grad():
        for index in (0, 1):
            shared.layers[index].load_state_dict(load_neural_material(copper).decoder.layers[index].state_dict())
    # copper with its first weight matrix and its last bias changed: layers 1 and 2 are shared, and a
    # weight matrix or a bias alone does not make a layer shared
    tweaked = load_neural_material(copper).decoder
    with torch.no_grad():
        tweaked.layers[0].weight.mul_(1.25)
        tweaked.layers[-1].bias.add_(0.5)
    # a decoder of another width (16 -> 8 hidden) and latents of another size (8 -> 4 channels)
    config = load_neural_material(copper).decoder.config
    relu_linear = {"outputs": 3, "hidden_activation": "relu", "output_activation": "none"}
    narrow = MLP(MLPConfig(inputs=config.inputs, hidden=8, layers=config.layers, **relu_linear))
    four = MLP(MLPConfig(inputs=4 + 9, hidden=config.hidden, layers=config.layers, **relu_linear))
    # an older bundle without direction_inputs in its manifest: the decoder reads [latent, wi, wo]
    old = MLP(MLPConfig(inputs=8 + 6, hidden=config.hidden, layers=config.layers, **relu_linear))
    return {
        "copper": copper,
        "velvet": velvet,
        "head": head,
        "bright": derived_bundle(copper, root / "bright", decoder=bright),
        "shared": derived_bundle(velvet, root / "shared", decoder=shared),
        "tweaked": derived_bundle(copper, root / "tweaked", decoder=tweaked),
        "narrow": derived_bundle(copper, root / "narrow", decoder=narrow),
        "latent4": derived_bundle(copper, root / "latent4", decoder=four, latents=[level[..., :4] for level in load_neural_material(copper).latents]),
        "old": derived_bundle(copper, root / "old", decoder=old, drop_direction_inputs=True),
    }


@pytest.fixture(scope="module")
def slang_device():
    """slangpy's CPU device: Slang compiles to C++ and the host compiler builds the kernel."""
    return slangpy.create_device(type=slangpy.DeviceType.cpu)


def random_queries(n: int, mip_levels: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """uv in [-1.5, 2.5) (wrapping), unit wi/wo mostly above the horizon, every mip level."""
    generator = torch.Generator().manual_seed(seed)
    uv = torch.rand(n, 2, generator=generator) * 4.0 - 1.5
    up = torch.tensor([0.0, 0.0, 0.7])
    wi = torch.nn.functional.normalize(torch.randn(n, 3, generator=generator) + up, dim=1)
    wo = torch.nn.functional.normalize(torch.randn(n, 3, generator=generator) + up, dim=1)
    mips = torch.randint(0, mip_levels, (n,), generator=generator)
    return uv, wi, wo, mips


def pytorch_reference(material: NeuralMaterial, uv: torch.Tensor, wi: torch.Tensor, wo: torch.Tensor, mips: torch.Tensor) -> np.ndarray:
    expected = torch.zeros(len(uv), 3)
    with torch.no_grad():
        for level in mips.unique().tolist():
            rows = mips == level
            expected[rows] = material.evaluate(material.latent_at(uv[rows], level), wi[rows], wo[rows])
    return expected.numpy()


def reference_material(bundle: Path, precision: str, latent_format: str) -> NeuralMaterial:
    """The PyTorch material on the data the shader reads: fp16/u8 latents, weights rounded as stored."""
    material = load_neural_material(bundle, quantized=latent_format == "u8")
    if precision == "fp16":
        with torch.no_grad():
            for parameter in material.decoder.parameters():
                parameter.copy_(parameter.half().float())
    return material


def run_shader(device, written, source: str, uv, wi, wo, mips, material_ids=None, tensor: str | None = None) -> np.ndarray:
    """Dispatch ``nb_<module>_kernel`` (or material ``tensor``'s tensor kernel) over the queries; returns f cos ``[N, 3]``."""
    module = device.load_module_from_source(f"nb_material_test_{next(_module_ids)}", source)
    entry = f"nb_{written.module}_kernel" if tensor is None else f"nb_{tensor}_tensor_kernel"
    kernel = device.create_compute_kernel(device.link_program([module], [module.entry_point(entry)]))
    usage = slangpy.BufferUsage.shader_resource
    n = len(uv)

    def raw(path: Path):
        return device.create_buffer(data=np.frombuffer(path.read_bytes(), dtype=np.uint8).copy(), usage=usage)

    def structured(array: np.ndarray):
        return device.create_buffer(data=np.ascontiguousarray(array).reshape(-1), struct_size=4, usage=usage)

    points = torch.cat([uv, wi, wo], dim=1).numpy().astype(np.float32)
    assert points.shape[1] == POINT_FLOATS
    values = device.create_buffer(data=np.full(n * 3, np.nan, dtype=np.float32), struct_size=4, usage=slangpy.BufferUsage.unordered_access)
    m = written.module
    bindings = {
        f"nb_{m}_weights": raw(written.weights),
        f"nb_{m}_latents": raw(written.latents),
        f"nb_{m}_points": structured(points),
        f"nb_{m}_mips": structured(mips.numpy().astype(np.uint32)),
        f"nb_{m}_values": values,
        f"nb_{m}_constants": {f"nb_{m}_point_count": n},
    }
    if material_ids is not None:
        bindings[f"nb_{m}_material_ids"] = structured(np.asarray(material_ids, dtype=np.uint32))
    threads = n if tensor is None else -(-n // TENSOR_POINTS_PER_GROUP) * TENSOR_THREADS
    kernel.dispatch(thread_count=[threads, 1, 1], vars=bindings)
    return values.to_numpy().view(np.float32).reshape(n, 3)


def _run_test_kernel(device, written, source: str, entry: str, queries: np.ndarray, n: int, ids: np.ndarray | None = None, outputs: int = 5) -> np.ndarray:
    """Dispatch a test kernel appended to the module over ``n`` points: binds the module's buffers, ``nb_test_queries``
    (floats), ``nb_test_ids`` (uints, if given) and ``nb_test_out`` (``outputs`` floats per point, NaN until written)."""
    module = device.load_module_from_source(f"nb_test_{next(_module_ids)}", source)
    kernel = device.create_compute_kernel(device.link_program([module], [module.entry_point(entry)]))
    usage = slangpy.BufferUsage.shader_resource
    m = written.module
    out = device.create_buffer(data=np.full(n * outputs, np.nan, dtype=np.float32), struct_size=4, usage=slangpy.BufferUsage.unordered_access)
    bindings = {
        f"nb_{m}_weights": device.create_buffer(data=np.frombuffer(written.weights.read_bytes(), dtype=np.uint8).copy(), usage=usage),
        f"nb_{m}_latents": device.create_buffer(data=np.frombuffer(written.latents.read_bytes(), dtype=np.uint8).copy(), usage=usage),
        "nb_test_queries": device.create_buffer(data=np.ascontiguousarray(queries, dtype=np.float32).reshape(-1), struct_size=4, usage=usage),
        "nb_test_out": out,
        "nb_test_constants": {"nb_test_count": n},
    }
    if ids is not None:
        bindings["nb_test_ids"] = device.create_buffer(data=np.ascontiguousarray(ids, dtype=np.uint32).reshape(-1), struct_size=4, usage=usage)
    kernel.dispatch(thread_count=[n, 1, 1], vars=bindings)
    return out.to_numpy().view(np.float32).reshape(n, outputs)


def assert_close(actual: np.ndarray, expected: np.ndarray, quantised: bool) -> None:
    assert np.isfinite(actual).all()
    error = np.abs(actual - expected)
    if quantised:
        absolute, relative = QUANTISED_TOLERANCE
        assert (error <= absolute + relative * np.abs(expected)).all(), error.max()
    else:
        assert error.max() < FP32_TOLERANCE, error.max()


# -- single material --------------------------------------------------------------------------------


@needs_slangpy
@pytest.mark.parametrize(("bundle", "precision", "latent_format"), [
    ("copper", "fp32", "fp16"),
    ("bright", "fp32", "fp16"),
    ("bright", "fp16", "fp16"),
    ("bright", "fp32", "u8"),
    ("bright", "fp16", "u8"),
    ("old", "fp32", "fp16"),
])
def test_exported_slang_matches_pytorch(tmp_path, bakes, slang_device, bundle, precision, latent_format):
    written = export_neural_material_shader(bakes[bundle], tmp_path, precision=precision, latent_format=latent_format)
    material = reference_material(bakes[bundle], precision, latent_format)
    uv, wi, wo, mips = random_queries(400, len(material.latents), seed=1)
    expected = pytorch_reference(material, uv, wi, wo, mips)
    assert (expected == 0).all(axis=1).sum() > 20 and (expected > 0).any(axis=1).sum() > 200  # both branches exercised
    if bundle == "bright":
        assert expected.max() > 3.0
    actual = run_shader(slang_device, written, written.slang.read_text(), uv, wi, wo, mips)
    assert_close(actual, expected, quantised=(precision, latent_format) != ("fp32", "fp16"))


@needs_slangpy
def test_hlsl_matches_pytorch_and_mips_past_the_last_clamp(tmp_path, bakes, slang_device):
    written = export_neural_material_shader(bakes["velvet"], tmp_path, precision="fp32", latent_format="u8", name="velvet_u8")
    assert written.hlsl.name == "velvet_u8.hlsl" and written.materials == ("velvet_u8",)
    material = reference_material(bakes["velvet"], "fp32", "u8")
    uv, wi, wo, mips = random_queries(200, len(material.latents), seed=2)
    expected = pytorch_reference(material, uv, wi, wo, mips)
    actual = run_shader(slang_device, written, written.hlsl.read_text(), uv, wi, wo, mips + len(material.latents) * (mips == len(material.latents) - 1))
    assert_close(actual, expected, quantised=True)


def test_slang_is_the_hlsl_plus_entry_point_attributes_and_the_tensor_kernel(tmp_path, bakes):
    written = export_neural_material_shader(bakes["copper"], tmp_path)
    slang, tensor = written.slang.read_text().replace("(slang)", "").split("\n// ---- tensor-core batch kernels")
    hlsl = written.hlsl.read_text().replace("(hlsl)", "").splitlines()
    assert [line for line in slang.splitlines() if line != '[shader("compute")]'] == hlsl
    assert "nb_antique_copper_tray_tensor_kernel" in tensor


def test_manifest_describes_the_buffers(tmp_path, bakes):
    written = export_neural_material_shader(bakes["copper"], tmp_path, precision="fp16", latent_format="u8")
    manifest = json.loads(written.manifest.read_text())
    assert manifest["module"] == written.module == "antique_copper_tray"
    assert manifest["files"]["weights"]["bytes"] == written.weights.stat().st_size
    entry = manifest["materials"][0]
    levels = load_file(str(bakes["copper"] / "latents.u8.safetensors"))
    latents = written.latents.read_bytes()
    for k, mip in enumerate(entry["mips"]):
        codes = levels[f"latent.mip{k}.codes"]
        assert (mip["height"], mip["width"]) == tuple(codes.shape[:2])
        assert latents[mip["offset"] : mip["offset"] + codes.numel()] == codes.numpy().tobytes()
        scale = np.frombuffer(latents, dtype="<f4", count=8, offset=mip["scale_offset"])
        assert np.array_equal(scale, levels[f"latent.mip{k}.scale"].numpy())
        assert f"NB_ANTIQUE_COPPER_TRAY_MIP_OFFSET[{len(entry['mips'])}]" in written.slang.read_text()
    stored = (bakes["copper"] / "network.fp16.bin").read_bytes()
    assert written.weights.read_bytes() == stored  # one decoder: the bundle's own device layout
    for index, layer in enumerate(entry["decoder_layers"]):
        assert f"NB_ANTIQUE_COPPER_TRAY_DECODER_L{index}_WEIGHT_OFFSET = {layer['weight_offset']};" in written.slang.read_text()


# -- packs ------------------------------------------------------------------------------------------


@needs_slangpy
def test_pack_of_two_materials_matches_each_material(tmp_path, bakes, slang_device):
    written = export_material_pack_shader([bakes["copper"], bakes["velvet"]], tmp_path, name="scene")
    assert written.materials == ("antique_copper_tray", "velvet")
    source = written.slang.read_text()
    assert "switch (material_id)" in source and "nb_velvet_eval" in source and "nb_rusty" not in source
    copper, velvet = (reference_material(bakes[name], "fp32", "fp16") for name in ("copper", "velvet"))
    uv, wi, wo, mips = random_queries(400, len(copper.latents), seed=3)
    ids = torch.randint(0, 3, (400,), generator=torch.Generator().manual_seed(4))  # id 2 is no material: black
    expected = np.zeros((400, 3), dtype=np.float32)
    for index, material in enumerate((copper, velvet)):
        rows = ids == index
        expected[rows.numpy()] = pytorch_reference(material, uv[rows], wi[rows], wo[rows], mips[rows])
    actual = run_shader(slang_device, written, source, uv, wi, wo, mips, material_ids=ids.numpy())
    assert_close(actual, expected, quantised=False)
    assert (actual[(ids == 2).numpy()] == 0).all()
    manifest = json.loads(written.manifest.read_text())
    assert manifest["weights"]["layers_stored"] == manifest["weights"]["layers_referenced"] == 8
    fp16_latents = sum((bakes[name] / "latents.fp16.safetensors").stat().st_size for name in ("copper", "velvet"))
    assert written.latents.stat().st_size < fp16_latents  # the raw halfs, without the safetensors headers


@needs_slangpy
def test_pack_stores_shared_layers_once(tmp_path, bakes, slang_device):
    written = export_material_pack_shader([bakes["copper"], bakes["shared"]], tmp_path, precision="fp16", latent_format="u8")
    manifest = json.loads(written.manifest.read_text())
    assert manifest["weights"]["layers_stored"] == 6 and manifest["weights"]["layers_referenced"] == 8
    first, second = (entry["decoder_layers"] for entry in manifest["materials"])
    assert [layer["weight_offset"] for layer in first[:2]] == [layer["weight_offset"] for layer in second[:2]]
    assert first[2]["weight_offset"] != second[2]["weight_offset"]
    separate = sum((bakes[name] / "network.fp16.bin").stat().st_size for name in ("copper", "shared"))
    assert written.weights.stat().st_size < separate
    materials = [reference_material(bakes[name], "fp16", "u8") for name in ("copper", "shared")]
    uv, wi, wo, mips = random_queries(300, 4, seed=5)
    ids = torch.arange(300) % 2
    expected = np.zeros((300, 3), dtype=np.float32)
    for index, material in enumerate(materials):
        rows = ids == index
        expected[rows.numpy()] = pytorch_reference(material, uv[rows], wi[rows], wo[rows], mips[rows])
    actual = run_shader(slang_device, written, written.hlsl.read_text(), uv, wi, wo, mips, material_ids=ids.numpy())
    assert_close(actual, expected, quantised=True)


@needs_slangpy
def test_pack_shares_only_whole_identical_layers(tmp_path, bakes, slang_device):
    written = export_material_pack_shader([bakes["copper"], bakes["tweaked"]], tmp_path)
    manifest = json.loads(written.manifest.read_text())
    assert manifest["weights"]["layers_stored"] == 6  # first layers differ in their weights only, last layers in their biases only
    uv, wi, wo, mips = random_queries(200, 4, seed=6)
    material = reference_material(bakes["tweaked"], "fp32", "fp16")
    actual = run_shader(slang_device, written, written.slang.read_text(), uv, wi, wo, mips, material_ids=np.ones(200))
    assert_close(actual, pytorch_reference(material, uv, wi, wo, mips), quantised=False)


# -- filtering: trilinear latents at a level of detail from uv derivatives ----------------------------

_FILTER_KERNEL = """
StructuredBuffer<float> nb_test_queries;   // u, v, wi.xyz, wo.xyz, du/dx, dv/dx, du/dy, dv/dy
RWStructuredBuffer<float> nb_test_out;     // f cos (3), then the lod
cbuffer nb_test_constants {{ uint nb_test_count; }};
[shader("compute")]
[numthreads(64, 1, 1)]
void nb_test_filtered(uint3 id : SV_DispatchThreadID)
{{
    uint p = id.x;
    if (p >= nb_test_count)
        return;
    uint b = p * 12u;
    float2 uv = float2(nb_test_queries[b], nb_test_queries[b + 1u]);
    float3 wi = float3(nb_test_queries[b + 2u], nb_test_queries[b + 3u], nb_test_queries[b + 4u]);
    float3 wo = float3(nb_test_queries[b + 5u], nb_test_queries[b + 6u], nb_test_queries[b + 7u]);
    float2 dx = float2(nb_test_queries[b + 8u], nb_test_queries[b + 9u]);
    float2 dy = float2(nb_test_queries[b + 10u], nb_test_queries[b + 11u]);
    float3 value = nb_{m}_eval_filtered(uv, dx, dy, wi, wo);
    nb_test_out[p * 4u] = value.x;
    nb_test_out[p * 4u + 1u] = value.y;
    nb_test_out[p * 4u + 2u] = value.z;
    nb_test_out[p * 4u + 3u] = nb_{m}_lod(dx, dy);
}}
"""


@needs_slangpy
def test_filtered_eval_matches_trilinear_pytorch_at_the_footprint_level(tmp_path, bakes, slang_device):
    """``nb_<m>_lod`` against lod_from_derivatives; ``nb_<m>_eval_filtered`` (anisotropic probes of trilinear latents) against latent_footprint."""
    from neuralbake.bakes.neural_material.model import footprint_probes, lod_from_derivatives

    written = export_neural_material_shader(bakes["bright"], tmp_path)
    m = written.module
    material = reference_material(bakes["bright"], "fp32", "fp16")
    n = 500
    uv, wi, wo, _ = random_queries(n, 1, seed=21)
    g = torch.Generator().manual_seed(22)
    # footprints from magnified (lod < 0) to past the last level, anisotropic, any orientation
    size = material.latents[0].shape[1], material.latents[0].shape[0]
    scale = torch.exp2(torch.rand(n, 1, generator=g) * (len(material.latents) + 3) - 2) / size[0]
    duv_dx = torch.randn(n, 2, generator=g) * scale
    duv_dy = torch.randn(n, 2, generator=g) * scale * torch.rand(n, 1, generator=g)
    duv_dy[:50] = torch.stack([-duv_dx[:50, 1], duv_dx[:50, 0]], dim=1)  # round footprints: one probe
    lod = lod_from_derivatives(duv_dx, duv_dy, size)
    assert (lod < 0).any() and (lod > len(material.latents) - 1).any()
    with torch.no_grad():
        expected = material.evaluate(material.latent_footprint(uv, duv_dx, duv_dy), wi, wo).numpy()
    probes = footprint_probes(duv_dx, duv_dy, size)[1]
    assert (probes == 1).any() and (probes == 8).any() and ((probes > 1) & (probes < 8)).any()
    queries = torch.cat([uv, wi, wo, duv_dx, duv_dy], dim=1).numpy()
    result = _run_test_kernel(slang_device, written, written.slang.read_text() + _FILTER_KERNEL.format(m=m), "nb_test_filtered", queries, n, outputs=4)
    assert np.abs(result[:, 3] - lod.numpy()).max() < 1e-4
    assert_close(result[:, :3], expected, quantised=False)
    # the filtering matters: level 0 alone differs where the footprint is large
    with torch.no_grad():
        unfiltered = material.evaluate(material.latent_at(uv, 0), wi, wo).numpy()
    assert np.abs(unfiltered - expected)[(lod > 2).numpy()].max() > 10 * FP32_TOLERANCE


def test_pack_switch_has_the_filtered_eval(tmp_path, bakes):
    written = export_material_pack_shader([bakes["copper"], bakes["velvet"]], tmp_path, name="scene")
    source = written.slang.read_text()
    assert "float3 nb_scene_eval_lod(uint material_id, float2 uv, float3 wi, float3 wo, float lod)" in source
    assert "case 1: return nb_velvet_eval_lod(uv, wi, wo, lod);" in source


# -- the tensor-core kernel -------------------------------------------------------------------------
# On slangpy's CPU device the kernel runs its loop form: the same tiles, the same fp16 weights and
# activations summed in fp32 as the CoopMat form on CUDA (which bench/neural_material_shader_cuda.py
# checks against the same model on an H100). Against tensor_kernel_reference (that arithmetic in
# PyTorch) only the summation order differs: TENSOR_MODEL_TOLERANCE. Against the fp32 material
# the difference is fp16 rounding of the inputs and activations: TENSOR_FP16_TOLERANCE, relative
# to max(|value|, 1) (measured: at most 0.012 on the copper tray at full size, values up to 168).
TENSOR_MODEL_TOLERANCE = (1e-5, 2e-3)
TENSOR_FP16_TOLERANCE = 0.03


def tensor_reference(material: NeuralMaterial, uv, wi, wo, mips) -> np.ndarray:
    expected = torch.zeros(len(uv), 3)
    with torch.no_grad():
        for level in mips.unique().tolist():
            rows = mips == level
            expected[rows] = tensor_kernel_reference(material, material.latent_at(uv[rows], level), wi[rows], wo[rows])
    return expected.numpy()


@needs_slangpy
@pytest.mark.parametrize(("bundle", "precision", "latent_format"), [
    ("bright", "fp32", "fp16"),  # 8 channels, fp16 latents: 8 channels per 128-bit load
    ("bright", "fp16", "u8"),
    ("old", "fp32", "fp16"),  # [latent, wi, wo]: 14 inputs
    ("latent4", "fp16", "fp16"),  # 4 channels: the per-channel fetch
    ("narrow", "fp32", "fp16"),  # 8-wide hidden layers, padded to 16
])
def test_tensor_kernel_matches_its_fp16_model_and_the_material(tmp_path, bakes, slang_device, bundle, precision, latent_format):
    source = bakes[bundle]
    if bundle == "narrow":  # its random decoder is black everywhere; raise its output bias so values show
        decoder = load_neural_material(source).decoder
        with torch.no_grad():
            decoder.layers[-1].bias.add_(1.0)
        source = derived_bundle(source, tmp_path / "narrow_lit", decoder=decoder)
    written = export_neural_material_shader(source, tmp_path / "out", precision=precision, latent_format=latent_format)
    name = written.module
    entry = json.loads(written.manifest.read_text())["tensor_kernels"][0]
    assert entry["entry"] == f"nb_{name}_tensor_kernel" and entry["points_per_group"] == TENSOR_POINTS_PER_GROUP
    assert entry["groupshared_bytes"] <= 48 * 1024
    material = reference_material(source, precision, latent_format)
    n = TENSOR_POINTS_PER_GROUP + 77  # a partial last group
    uv, wi, wo, mips = random_queries(n, len(material.latents), seed=11)
    actual = run_shader(slang_device, written, written.slang.read_text(), uv, wi, wo, mips, tensor=name)
    assert np.isfinite(actual).all()  # every point written (the buffer starts as NaN)
    model = tensor_reference(material, uv, wi, wo, mips)
    absolute, relative = TENSOR_MODEL_TOLERANCE
    assert (np.abs(actual - model) <= absolute + relative * np.abs(model)).all(), np.abs(actual - model).max()
    exact = pytorch_reference(material, uv, wi, wo, mips)
    assert (exact == 0).all(axis=1).sum() > 20 and (exact > 0).any(axis=1).sum() > n // 2
    assert (actual[(exact == 0).all(axis=1)] == 0).all()  # below the horizon
    assert (np.abs(actual - exact) / np.maximum(np.abs(exact), 1.0)).max() < TENSOR_FP16_TOLERANCE
    if bundle == "bright":
        assert exact.max() > 3.0


@needs_slangpy
def test_each_material_of_a_pack_has_a_tensor_kernel(tmp_path, bakes, slang_device):
    written = export_material_pack_shader([bakes["copper"], bakes["velvet"]], tmp_path, name="scene", precision="fp16")
    manifest = json.loads(written.manifest.read_text())
    assert [entry["entry"] for entry in manifest["tensor_kernels"]] == ["nb_antique_copper_tray_tensor_kernel", "nb_velvet_tensor_kernel"]
    uv, wi, wo, mips = random_queries(300, 4, seed=12)
    source = written.slang.read_text()
    for name, bundle in (("antique_copper_tray", "copper"), ("velvet", "velvet")):
        material = reference_material(bakes[bundle], "fp16", "fp16")
        actual = run_shader(slang_device, written, source, uv, wi, wo, mips, tensor=name)
        model = tensor_reference(material, uv, wi, wo, mips)
        absolute, relative = TENSOR_MODEL_TOLERANCE
        assert (np.abs(actual - model) <= absolute + relative * np.abs(model)).all()


def test_a_decoder_too_large_for_groupshared_memory_gets_no_tensor_kernel(tmp_path, bakes):
    config = load_neural_material(bakes["copper"]).decoder.config
    wide = MLP(MLPConfig(inputs=config.inputs, hidden=128, layers=3, outputs=3, hidden_activation="relu", output_activation="none"))
    written = export_neural_material_shader(derived_bundle(bakes["copper"], tmp_path / "wide", decoder=wide), tmp_path / "out")
    entry = json.loads(written.manifest.read_text())["tensor_kernels"][0]
    assert entry["entry"] is None and "KB of groupshared memory" in entry["reason"]
    source = written.slang.read_text()
    assert "_tensor_kernel" not in source and "No tensor kernel for" in source
    assert f"nb_{written.module}_kernel" in source  # the scalar kernel is still there
    shape, reason = tensor_kernel_shape([{"inputs": 17, "outputs": 64}, {"inputs": 64, "outputs": 3}])
    assert shape is not None and not reason
    assert shape.inputs == (32, 64) and shape.outputs == (64, 16) and shape.strides == (48, 80)  # strides: no bank conflicts


def test_the_hlsl_file_has_only_the_scalar_kernel(tmp_path, bakes):
    written = export_neural_material_shader(bakes["copper"], tmp_path)
    assert "_tensor_kernel" not in written.hlsl.read_text() and "CoopMat" not in written.hlsl.read_text()
    assert "nb_antique_copper_tray_tensor_kernel" in written.slang.read_text()


def test_pack_names_clashing_materials_apart(tmp_path, bakes):
    written = export_material_pack_shader([bakes["copper"], bakes["bright"]], tmp_path)
    assert written.materials == ("antique_copper_tray", "antique_copper_tray_2")
    assert "case 1: return nb_antique_copper_tray_2_eval(uv, wi, wo, mip);" in written.slang.read_text()


@pytest.mark.parametrize(("other", "field"), [("latent4", "latent.channels"), ("narrow", "architecture.hidden"), ("old", "architecture.direction_inputs")])
def test_pack_refuses_incompatible_bundles(tmp_path, bakes, other, field):
    with pytest.raises(BundleError) as caught:
        export_material_pack_shader([bakes["copper"], bakes[other]], tmp_path / "out")
    assert caught.value.field == field
    assert caught.value.path == str(bakes[other] / "network.json")
    assert not (tmp_path / "out").exists()  # nothing written


# -- errors -----------------------------------------------------------------------------------------


def test_missing_bundle_names_the_folder(tmp_path, bakes):
    with pytest.raises(BundleError) as caught:
        export_material_pack_shader([bakes["copper"], tmp_path / "nowhere"], tmp_path / "out")
    assert caught.value.path == str(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BundleError, match="network.json"):
        export_neural_material_shader(tmp_path / "empty", tmp_path / "out")


def test_a_bundle_of_another_kind_is_refused(tmp_path):
    torch.manual_seed(0)
    save_coordinate_network(tmp_path / "texture", CoordinateNetwork(CoordinateNetworkConfig(hidden=8, layers=1)), training_precision="fp32")
    with pytest.raises(BundleError) as caught:
        export_neural_material_shader(tmp_path / "texture", tmp_path / "out")
    assert caught.value.field == "kind"


def test_missing_or_mismatched_latents_name_the_file(tmp_path, bakes):
    broken = tmp_path / "broken"
    shutil.copytree(bakes["copper"], broken)
    (broken / "latents.u8.safetensors").unlink()
    with pytest.raises(BundleError) as caught:  # the bake manifest notices first
        export_neural_material_shader(broken, tmp_path / "out", latent_format="u8")
    assert caught.value.field == "bake.json: files.latents.u8.safetensors" and caught.value.path.endswith("latents.u8.safetensors")
    (broken / "bake.json").unlink()  # a folder from before bake.json (and the runner): the bundle's own checks name the file
    shutil.rmtree(broken / ".neuralbake", ignore_errors=True)
    with pytest.raises(BundleError) as caught:
        export_neural_material_shader(broken, tmp_path / "out", latent_format="u8")
    assert caught.value.field == "latent.u8" and caught.value.path.endswith("latents.u8.safetensors")
    shutil.copy(bakes["latent4"] / "latents.fp16.safetensors", broken / "latents.fp16.safetensors")
    with pytest.raises(BundleError) as caught:
        export_neural_material_shader(broken, tmp_path / "out")
    assert caught.value.field == "latent.mip0" and "[height, width, 8]" in str(caught.value)


@pytest.mark.parametrize(("options", "field"), [({"precision": "bf16"}, "precision"), ({"latent_format": "bc7"}, "latent_format"), ({"name": "2 bad"}, "name")])
def test_bad_options_name_the_field(tmp_path, bakes, options, field):
    with pytest.raises(ConfigError) as caught:
        export_neural_material_shader(bakes["copper"], tmp_path, **options)
    assert caught.value.field == field


def test_a_bundle_given_twice_or_none_is_refused(tmp_path, bakes):
    with pytest.raises(ConfigError, match="twice"):
        export_material_pack_shader([bakes["copper"], bakes["velvet"], bakes["copper"]], tmp_path)
    with pytest.raises(ConfigError) as caught:
        export_material_pack_shader([], tmp_path)
    assert caught.value.field == "bundle_dirs"


# -- command line -----------------------------------------------------------------------------------


@pytest.fixture
def cli() -> typer.Typer:
    """The main CLI: ``material export`` and ``material pack`` live in ``neuralbake.cli.material``."""
    return neuralbake_app


def test_cli_export_and_pack(tmp_path, bakes, cli):
    runner = CliRunner()
    result = runner.invoke(cli, ["material", "export", str(bakes["copper"]), "--out", str(tmp_path / "one"), "--latents", "u8"])
    assert result.exit_code == 0, result.output
    assert sorted(path.name for path in (tmp_path / "one").iterdir()) == [
        "antique_copper_tray.hlsl", "antique_copper_tray.json", "antique_copper_tray.latents.u8.bin",
        "antique_copper_tray.slang", "antique_copper_tray.weights.fp16.bin",
    ]
    result = runner.invoke(cli, ["material", "pack", str(bakes["copper"]), str(bakes["velvet"]), "--out", str(tmp_path / "scene")])
    assert result.exit_code == 0, result.output
    assert "id 1: velvet" in result.output and (tmp_path / "scene" / "shader" / "material_pack.slang").is_file()
    result = runner.invoke(cli, ["material", "pack", str(bakes["copper"]), str(bakes["latent4"]), "--out", str(tmp_path / "bad")])
    assert result.exit_code == 2 and "latent.channels" in result.output


# -- importance sampling: the sampling head and its proxy lobe ---------------------------------------

_LOBE_KERNEL = """
StructuredBuffer<float> nb_test_queries;   // weight, alpha, normal.xyz, wo.xyz, u.xy, wi.xyz
RWStructuredBuffer<float> nb_test_out;     // sampled wi.xyz, its pdf, the pdf of the given wi
cbuffer nb_test_constants {{ uint nb_test_count; }};
[shader("compute")]
[numthreads(64, 1, 1)]
void nb_test_lobe(uint3 id : SV_DispatchThreadID)
{{
    uint p = id.x;
    if (p >= nb_test_count)
        return;
    uint b = p * 13u;
    float weight = nb_test_queries[b];
    float alpha = nb_test_queries[b + 1u];
    float3 normal = float3(nb_test_queries[b + 2u], nb_test_queries[b + 3u], nb_test_queries[b + 4u]);
    float3 wo = float3(nb_test_queries[b + 5u], nb_test_queries[b + 6u], nb_test_queries[b + 7u]);
    float2 u = float2(nb_test_queries[b + 8u], nb_test_queries[b + 9u]);
    float3 wi = float3(nb_test_queries[b + 10u], nb_test_queries[b + 11u], nb_test_queries[b + 12u]);
    float pdf;
    float3 sampled = nb_{m}_sample_lobe(weight, alpha, normal, wo, u, pdf);
    nb_test_out[p * 5u] = sampled.x;
    nb_test_out[p * 5u + 1u] = sampled.y;
    nb_test_out[p * 5u + 2u] = sampled.z;
    nb_test_out[p * 5u + 3u] = pdf;
    nb_test_out[p * 5u + 4u] = nb_{m}_pdf_lobe(weight, alpha, normal, wi, wo);
}}
"""

_SAMPLE_KERNEL = """
StructuredBuffer<float> nb_test_queries;   // u, v, wo.xyz, u.xy, wi.xyz, lod
StructuredBuffer<uint> nb_test_ids;        // material id, mip
RWStructuredBuffer<float> nb_test_out;     // sampled wi.xyz, its pdf, the pdf of the given wi
cbuffer nb_test_constants {{ uint nb_test_count; }};
[shader("compute")]
[numthreads(64, 1, 1)]
void nb_test_sample(uint3 id : SV_DispatchThreadID)
{{
    uint p = id.x;
    if (p >= nb_test_count)
        return;
    uint b = p * 11u;
    float2 uv = float2(nb_test_queries[b], nb_test_queries[b + 1u]);
    float3 wo = float3(nb_test_queries[b + 2u], nb_test_queries[b + 3u], nb_test_queries[b + 4u]);
    float2 u = float2(nb_test_queries[b + 5u], nb_test_queries[b + 6u]);
    float3 wi = float3(nb_test_queries[b + 7u], nb_test_queries[b + 8u], nb_test_queries[b + 9u]);
    float lod = nb_test_queries[b + 10u];
    float pdf;
    float3 sampled = {sample};
    nb_test_out[p * 5u] = sampled.x;
    nb_test_out[p * 5u + 1u] = sampled.y;
    nb_test_out[p * 5u + 2u] = sampled.z;
    nb_test_out[p * 5u + 3u] = pdf;
    nb_test_out[p * 5u + 4u] = {pdf};
}}
"""
SAMPLE_TOLERANCE = 2e-4
"""Largest difference of a sampled direction's components, shader against PyTorch (fp32 both)."""
PDF_TOLERANCE = (1e-4, 2e-3)
"""(absolute, relative) bound on densities (up to ~1e3 for the narrowest lobe)."""


def _assert_samples_match(actual: np.ndarray, wi: torch.Tensor, pdf: torch.Tensor, given_pdf: torch.Tensor) -> None:
    assert np.isfinite(actual).all()
    assert np.abs(actual[:, :3] - wi.numpy()).max() < SAMPLE_TOLERANCE
    absolute, relative = PDF_TOLERANCE
    for column, expected in ((3, pdf.numpy()), (4, given_pdf.numpy())):
        error = np.abs(actual[:, column] - expected)
        assert (error <= absolute + relative * np.abs(expected)).all(), (column, error.max())


def _sampling_queries(n: int, seed: int) -> tuple[torch.Tensor, ...]:
    """wo mostly above the vertex plane (some below, some grazing), uniforms kept off the lobe-pick boundary by the caller."""
    g = torch.Generator().manual_seed(seed)
    wo = torch.nn.functional.normalize(torch.randn(n, 3, generator=g) + torch.tensor([0.0, 0.0, 0.8]), dim=1)
    wo[:20, 2] = -wo[:20, 2].abs()  # below the plane: pdf 0
    wo[20:40] = torch.nn.functional.normalize(wo[20:40] * torch.tensor([1.0, 1.0, 0.01]), dim=1)  # grazing
    u = torch.rand(n, 2, generator=g)
    wi = torch.nn.functional.normalize(torch.randn(n, 3, generator=g) + torch.tensor([0.0, 0.0, 0.5]), dim=1)
    return wo, u, wi


@needs_slangpy
def test_sampling_lobe_matches_proxy_sample_and_pdf(tmp_path, bakes, slang_device):
    """``nb_<m>_sample_lobe`` / ``nb_<m>_pdf_lobe`` against ``proxy_sample`` / ``proxy_pdf`` over the whole lobe parameter range."""
    from neuralbake.bakes.neural_material.sampling import MAX_W, MIN_ALPHA, proxy_pdf, proxy_sample

    written = export_neural_material_shader(bakes["head"], tmp_path)
    n = 2000
    g = torch.Generator().manual_seed(31)
    weight = torch.rand(n, generator=g) * MAX_W
    alpha = MIN_ALPHA + (1.0 - MIN_ALPHA) * torch.rand(n, generator=g) ** 3  # many narrow lobes
    normal = torch.nn.functional.normalize(torch.cat([torch.randn(n, 2, generator=g) * 0.5, torch.ones(n, 1)], dim=1), dim=1)
    wo, u, wi = _sampling_queries(n, seed=32)
    u[:, 0] = torch.where((u[:, 0] - weight).abs() < 1e-4, u[:, 0] + 2e-4, u[:, 0]).clamp(max=0.9999)
    expected_wi, expected_pdf = proxy_sample(weight, alpha, normal, wo, u)
    given_pdf = proxy_pdf(weight, alpha, normal, wi, wo)
    assert (expected_pdf == 0).any() and (expected_pdf > 100).any()  # invalid samples and narrow lobes are both tested
    queries = torch.cat([weight[:, None], alpha[:, None], normal, wo, u, wi], dim=1).numpy()
    actual = _run_test_kernel(slang_device, written, written.slang.read_text() + _LOBE_KERNEL.format(m=written.module), "nb_test_lobe", queries, n)
    _assert_samples_match(actual, expected_wi, expected_pdf, given_pdf)


@needs_slangpy
@pytest.mark.parametrize(("precision", "fetch"), [("fp32", "mip"), ("fp16", "mip"), ("fp32", "lod")])
def test_sample_and_pdf_use_the_sampling_head_at_the_texel(tmp_path, bakes, slang_device, precision, fetch):
    """``nb_<m>_sample`` / ``nb_<m>_pdf`` (a mip level) and their ``_lod`` forms (trilinear latents): the latent at uv, the
    head, the lobe: the PyTorch material's ``sample``/``pdf`` on the same latent."""
    from neuralbake.bakes.neural_material.sampling import proxy_pdf, proxy_sample

    written = export_neural_material_shader(bakes["head"], tmp_path, precision=precision)
    manifest = json.loads(written.manifest.read_text())
    assert manifest["materials"][0]["sampling"]["head_layers"][0]["inputs"] == 8
    material = reference_material(bakes["head"], precision, "fp16")
    assert material.sampler is not None
    if precision == "fp16":
        with torch.no_grad():
            for parameter in material.sampler.parameters():
                parameter.copy_(parameter.half().float())
    n = 600
    uv, _, _, mips = random_queries(n, len(material.latents), seed=33)
    wo, u, wi = _sampling_queries(n, seed=34)
    lod = torch.rand(n, generator=torch.Generator().manual_seed(37)) * (len(material.latents) + 1) - 0.5  # past both ends too
    with torch.no_grad():
        if fetch == "lod":
            lobes = list(material.sampler(material.latent_filtered(uv, lod).float()))
        else:
            lobes = [torch.zeros(n), torch.zeros(n), torch.zeros(n, 3)]
            for level in mips.unique().tolist():
                rows = mips == level
                for target, value in zip(lobes, material.sampler(material.latent_at(uv[rows], level).float()), strict=True):
                    target[rows] = value
        weight = lobes[0]
        u[:, 0] = torch.where((u[:, 0] - weight).abs() < 1e-4, u[:, 0] + 2e-4, u[:, 0]).clamp(max=0.9999)
        expected_wi, expected_pdf = proxy_sample(*lobes, wo, u)
        given_pdf = proxy_pdf(*lobes, wi, wo)
    queries = torch.cat([uv, wo, u, wi, lod[:, None]], dim=1).numpy()
    m = written.module
    level = "nb_test_ids[p]" if fetch == "mip" else "lod"
    suffix = "" if fetch == "mip" else "_lod"
    source = written.slang.read_text() + _SAMPLE_KERNEL.format(
        sample=f"nb_{m}_sample{suffix}(uv, wo, u, {level}, pdf)", pdf=f"nb_{m}_pdf{suffix}(uv, wi, wo, {level})"
    )
    actual = _run_test_kernel(slang_device, written, source, "nb_test_sample", queries, n, ids=mips.numpy())
    _assert_samples_match(actual, expected_wi, expected_pdf, given_pdf)


@needs_slangpy
def test_pack_sample_switch_gives_cosine_sampling_without_a_head(tmp_path, bakes, slang_device):
    """In a pack, the material with a head samples its lobe and the one without samples the cosine lobe (the PyTorch fallback)."""
    from neuralbake.bakes.neural_material.sampling import proxy_pdf, proxy_sample
    from neuralbake.material.frame import cosine_hemisphere_pdf, square_to_cosine_hemisphere

    written = export_material_pack_shader([bakes["head"], bakes["velvet"]], tmp_path, name="scene")
    manifest = json.loads(written.manifest.read_text())
    assert [entry["sampling"]["method"] for entry in manifest["materials"]][1] == "cosine"
    n = 400
    material = reference_material(bakes["head"], "fp32", "fp16")
    ids = np.zeros((n, 2), dtype=np.uint32)
    ids[n // 2 :, 0] = 1
    ids[-10:, 0] = 2  # not a material of the pack: pdf 0
    uv, _, _, mips = random_queries(n, len(material.latents), seed=35)
    ids[:, 1] = mips.numpy()
    wo, u, wi = _sampling_queries(n, seed=36)
    with torch.no_grad():
        lobe = [torch.zeros(n), torch.zeros(n), torch.zeros(n, 3)]
        for level in mips.unique().tolist():
            rows = mips == level
            for target, value in zip(lobe, material.sampler(material.latent_at(uv[rows], level).float()), strict=True):
                target[rows] = value
        u[:, 0] = torch.where((u[:, 0] - lobe[0]).abs() < 1e-4, u[:, 0] + 2e-4, u[:, 0]).clamp(max=0.9999)
        head_wi, head_pdf = proxy_sample(*lobe, wo, u)
        head_given = proxy_pdf(*lobe, wi, wo)
    above = (wo[:, 2] > 0).float()
    cosine_wi = square_to_cosine_hemisphere(u)
    expected_wi = torch.where(torch.from_numpy(ids[:, :1] == 1), cosine_wi, head_wi)
    expected_pdf = torch.where(torch.from_numpy(ids[:, 0] == 1), cosine_hemisphere_pdf(cosine_wi) * above, head_pdf)
    given_pdf = torch.where(torch.from_numpy(ids[:, 0] == 1), cosine_hemisphere_pdf(wi) * above, head_given)
    unknown = torch.from_numpy(ids[:, 0] == 2)
    expected_wi[unknown] = torch.tensor([0.0, 0.0, 1.0])
    expected_pdf[unknown], given_pdf[unknown] = 0.0, 0.0
    source = written.slang.read_text() + _SAMPLE_KERNEL.format(
        sample="nb_scene_sample(nb_test_ids[p * 2u], uv, wo, u, nb_test_ids[p * 2u + 1u], pdf)",
        pdf="nb_scene_pdf(nb_test_ids[p * 2u], uv, wi, wo, nb_test_ids[p * 2u + 1u])",
    )
    queries = torch.cat([uv, wo, u, wi, torch.zeros(n, 1)], dim=1).numpy()
    actual = _run_test_kernel(slang_device, written, source, "nb_test_sample", queries, n, ids=ids)
    _assert_samples_match(actual, expected_wi, expected_pdf, given_pdf)
    hlsl = written.hlsl.read_text()
    assert "float nb_scene_pdf(uint material_id, float2 uv, float3 wi, float3 wo, uint mip)" in hlsl
    assert "float3 nb_scene_sample_lod(uint material_id, float2 uv, float3 wo, float2 u, float lod, out float pdf)" in hlsl
    assert manifest["weights"]["sampling_head_layers"] == 2

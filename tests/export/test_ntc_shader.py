"""Exported NTC shaders against the PyTorch decode they came from, on slangpy's CPU device.

One small set per entry of the rate table (:data:`LATENT_SHAPES`, whatever it holds): 16x16 (one
32x8), six channels in three groups, a tiny decoder with random int8 weights, latents spread over
every code, the output layer scaled so that some outputs clamp. The sets are exported and their
modules concatenated into one, with a test kernel that switches on the set, so one compile checks
every shape: every texel of every level, and trilinear, bilinear and stochastic samples at uv
outside [0, 1] (repeat wrap) and lod below 0 and past the chain, against
:func:`~neuralbake.bakes.ntc.decode.decode_texels` / :func:`~neuralbake.bakes.ntc.decode.sample_filtered` /
:func:`~neuralbake.bakes.ntc.decode.sample_stochastic` on the same container. Both sides compute in
fp32 (the shader scales the int8 sums once, PyTorch multiplies dequantised weights), so they agree to
:data:`TOLERANCE` (measured: 2e-7), well inside 1e-3 of the [0, 1] scale. The tensor-core kernels run
their loop form and are checked against their fp16 arithmetic in PyTorch
(:func:`~neuralbake.bakes.ntc.export.tensor_decoder_reference`) and the fp32 decode.

A real compressed folder (32x32, a few training steps) goes through ``export_ntc`` and the CLI: its
own entry points are dispatched as an engine would (from the manifest), the HLSL file through Slang's
HLSL front end, and the stochastic filter's bias and noise measured on the shader match the manifest's.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from neuralbake.bakes.ntc import (
    LATENT_SHAPES,
    ChannelGroup,
    NTCLayout,
    NTCModel,
    compress_texture_set,
    decode_texels,
    open_container,
    pack_container,
    read_container,
)
from neuralbake.bakes.ntc.decode import filter_taps, sample_filtered, sample_stochastic, stochastic_tap
from neuralbake.bakes.ntc.export import error_statistics, export_ntc, shader_set, stochastic_queries, tensor_decoder_reference
from neuralbake.errors import BundleError, ConfigError, InputError
from neuralbake.export.ntc import export_ntc_shader
from neuralbake.export.ntc_codegen import FILTER_MODES, SAMPLE_FLOATS, TEXEL_UINTS
from neuralbake.nn.quantize import pack_codes

from ..bakes.test_ntc import _config, _save
from ..conftest import make_test_pattern

try:
    import slangpy
except ImportError:  # pragma: no cover - depends on the environment
    slangpy = None

needs_slangpy = pytest.mark.skipif(
    slangpy is None, reason="slangpy is not installed (pip install slangpy); it compiles and runs the shaders"
)

GROUPS = (
    ChannelGroup("base_color", ("R", "G", "B"), "color"),
    ChannelGroup("normal", ("X", "Y"), "normal_xy"),
    ChannelGroup("roughness", ("R",), "data"),
)
CHANNELS = 6
TOLERANCE = 1e-4
"""Absolute, on values in [0, 1]: shader (fp32) against the PyTorch decode (fp32)."""
TENSOR_MODEL_TOLERANCE = 1e-3
"""Tensor kernels against their arithmetic in PyTorch (fp16 weights and activations, fp32 sums): the sums' order differs, so a
hidden activation's fp16 rounding (2^-11 relative) can go the other way (measured: up to 1.3e-4)."""
TENSOR_FP32_TOLERANCE = 5e-3
"""Tensor kernels against the fp32 decode: fp16 rounding of the weights, inputs and activations (measured: 3e-4)."""
SAMPLES = 160
"""Sample queries per set and filter."""
_module_ids = itertools.count()


def random_set(index: int) -> tuple:
    """A container with LATENT_SHAPES[index]: 16x16 (32x8 for index 3), hidden (16,) or (16, 8), 2 or 3 octaves, leaky ReLU
    (clamped GELU for index 2, tanh for index 5); latents uniform over the codes, outputs around mid-grey, some clamped."""
    shape = LATENT_SHAPES[index]
    width, height = (32, 8) if index == 3 else (16, 16)
    activation = {2: "clamped_gelu", 5: "tanh"}.get(index, "leaky_relu")
    layout = NTCLayout(width, height, GROUPS, shape, (16, 8) if index % 4 == 1 else (16,), 3 if index % 2 else 2, activation=activation)
    generator = torch.Generator().manual_seed(100 + index)
    model = NTCModel(layout, generator=generator)
    with torch.no_grad():
        model.latents_high.uniform_(-1, 1, generator=generator)
        model.latents_low.uniform_(-1, 1, generator=generator)
        model.layers[-1].weight.mul_(4.0)
        model.layers[-1].bias.uniform_(0.3, 0.7, generator=generator)
    return read_container(pack_container(model))


def _test_kernel(names: list[str]) -> str:
    """``nb_test_decode``: query ``[set, kind, a0..a3]`` -> CHANNELS values + the stochastic tap; ``nb_test_tensor``: one set's tensor run."""
    lines = []
    for n in names:
        lines += [
            f"void nb_test_{n}(uint kind, float a0, float a1, float a2, float a3, out float values[{CHANNELS}], out float tap)",
            "{",
            "    tap = -1.0f;",
            f"    if (kind == 0u) ntc_{n}_texel_values(uint(a0), uint(a1), uint(a2), values);",
            f"    else if (kind == 1u) ntc_{n}_sample_values(float2(a0, a1), a2, values);",
            f"    else if (kind == 2u) ntc_{n}_sample_bilinear_values(float2(a0, a1), a2, values);",
            "    else if (kind == 3u)",
            "    {",
            f"        ntc_{n}_sample_stochastic_values(float2(a0, a1), a2, a3, values);",
            "        uint levels[8]; uint xs[8]; uint ys[8]; float weights[8];",
            f"        ntc_{n}_taps(float2(a0, a1), a2, false, levels, xs, ys, weights);",
            f"        tap = float(ntc_{n}_stochastic_tap(weights, a3));",
            "    }",
            "    else",
            "    {",
            f"        ntc_{n}_channels s = ntc_{n}_sample(float2(a0, a1), a2);",
            "        values = { s.base_color.x, s.base_color.y, s.base_color.z, s.normal.x, s.normal.y, s.roughness };",
            "    }",
            "}",
        ]
    cases = "\n".join(f"    case {k}u: nb_test_{n}(kind, q[0], q[1], q[2], q[3], values, tap); break;" for k, n in enumerate(names))
    tensor_cases = "\n".join(
        f"    case {k}u: ntc_{n}_tc_run(group_id.x, group_thread.x, nb_test_texels != 0u); break;" for k, n in enumerate(names)
    )
    return (
        "\n".join(lines)
        + f"""
StructuredBuffer<float> nb_test_queries;   // set, kind, a0, a1, a2, a3
RWStructuredBuffer<float> nb_test_out;     // {CHANNELS} values, then the stochastic tap
cbuffer nb_test_constants {{ uint nb_test_count; uint nb_test_set; uint nb_test_texels; }};
[shader("compute")]
[numthreads(64, 1, 1)]
void nb_test_decode(uint3 id : SV_DispatchThreadID)
{{
    uint p = id.x;
    if (p >= nb_test_count)
        return;
    uint b = p * 6u;
    uint kind = uint(nb_test_queries[b + 1u]);
    float q[4] = {{ nb_test_queries[b + 2u], nb_test_queries[b + 3u], nb_test_queries[b + 4u], nb_test_queries[b + 5u] }};
    float values[{CHANNELS}] = {{ 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f }};
    float tap = -1.0f;
    switch (uint(nb_test_queries[b]))
    {{
{cases}
    default: break;
    }}
    for (uint c = 0; c < {CHANNELS}u; ++c)
        nb_test_out[p * {CHANNELS + 1}u + c] = values[c];
    nb_test_out[p * {CHANNELS + 1}u + {CHANNELS}u] = tap;
}}
[shader("compute")]
[numthreads(128, 1, 1)]
void nb_test_tensor(uint3 group_id : SV_GroupID, uint3 group_thread : SV_GroupThreadID)
{{
    switch (nb_test_set)
    {{
{tensor_cases}
    default: break;
    }}
}}
"""
    )


@pytest.fixture(scope="module")
def slang_device():
    """slangpy's CPU device: Slang compiles to C++ and the host compiler builds the kernel."""
    return slangpy.create_device(type=slangpy.DeviceType.cpu)


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    """Every rate-table shape as a small random set, exported (names s0, s1, ...), and the module of them all."""
    root = tmp_path_factory.mktemp("ntc_shapes")
    containers, exports = [], []
    for index in range(len(LATENT_SHAPES)):
        container = random_set(index)
        containers.append(container)
        exports.append(export_ntc_shader(shader_set(container), root / f"s{index}", name=f"s{index}"))
    names = [written.name for written in exports]
    source = "\n".join(written.slang.read_text() for written in exports) + _test_kernel(names)
    return containers, exports, source


def _raw(device, path: Path):
    return device.create_buffer(data=np.frombuffer(path.read_bytes(), dtype=np.uint8).copy(), usage=slangpy.BufferUsage.shader_resource)


def _floats(device, array: np.ndarray, element=np.float32):
    return device.create_buffer(
        data=np.ascontiguousarray(array, dtype=element).reshape(-1), struct_size=4, usage=slangpy.BufferUsage.shader_resource
    )


def _output(device, count: int):
    return device.create_buffer(data=np.full(count, np.nan, dtype=np.float32), struct_size=4, usage=slangpy.BufferUsage.unordered_access)


def _kernel(device, source: str, entry: str):
    module = device.load_module_from_source(f"ntc_test_{next(_module_ids)}", source)
    return device.create_compute_kernel(device.link_program([module], [module.entry_point(entry)]))


def _texel_queries(container) -> torch.Tensor:
    """Every texel of every level: int64 ``[N, 3]`` (level, x, y)."""
    rows = [
        torch.stack(torch.meshgrid(torch.tensor([k]), torch.arange(h), torch.arange(w), indexing="ij"), -1).reshape(-1, 3)
        for k, (w, h) in enumerate(container.layout.level_sizes)
    ]
    texels = torch.cat(rows)
    return texels[:, [0, 2, 1]]  # level, x, y


def _sample_queries(container, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """uv in [-1.5, 2.5) (wrapping), lod from below 0 to past the last level (every fourth a whole level), random in [0, 1)."""
    generator = torch.Generator().manual_seed(seed)
    uv = torch.rand(SAMPLES, 2, generator=generator) * 4.0 - 1.5
    lod = torch.rand(SAMPLES, generator=generator) * (container.layout.levels + 1.0) - 1.0
    lod[::4] = torch.round(lod[::4])
    return uv, lod, torch.rand(SAMPLES, generator=generator)


def _explained_by_rounding(weights: torch.Tensor, random: torch.Tensor) -> torch.Tensor:
    """Where ``random`` lies within float rounding of a boundary of the running sum, so shader and PyTorch may pick neighbours."""
    return (weights.cumsum(dim=1) - random[:, None]).abs().min(dim=1).values < 1e-5


# -- every rate-table shape: texels and samples (one compile) ------------------------------------


@needs_slangpy
@pytest.mark.slow
def test_every_latent_shape_decodes_as_pytorch(shapes, slang_device):
    containers, exports, source = shapes
    queries, expected, expected_taps, explained = [], [], [], []
    for k, container in enumerate(containers):
        texels = _texel_queries(container)
        queries.append(
            torch.cat([torch.full((len(texels), 1), k), torch.zeros(len(texels), 1), texels, torch.zeros(len(texels), 1)], 1).float()
        )
        expected.append(decode_texels(container, texels[:, 0], texels[:, 1], texels[:, 2]))
        expected_taps.append(torch.full((len(texels),), -1))
        explained.append(torch.zeros(len(texels), dtype=torch.bool))
        uv, lod, random = _sample_queries(container, seed=k)
        weights = filter_taps(container.layout.level_sizes, uv, lod)[3]
        for kind in range(1, 5):
            queries.append(torch.cat([torch.full((SAMPLES, 1), k), torch.full((SAMPLES, 1), kind), uv, lod[:, None], random[:, None]], 1))
            if kind == 3:
                expected.append(sample_stochastic(container, uv, lod, random))
                expected_taps.append(stochastic_tap(weights, random))
                explained.append(_explained_by_rounding(weights, random))
            else:
                expected.append(sample_filtered(container, uv, lod, filter="bilinear" if kind == 2 else "trilinear"))
                expected_taps.append(torch.full((SAMPLES,), -1))
                explained.append(torch.zeros(SAMPLES, dtype=torch.bool))
    queries, expected = torch.cat(queries).numpy(), torch.cat(expected).numpy()
    expected_taps, explained = torch.cat(expected_taps).numpy(), torch.cat(explained).numpy()
    n = len(queries)
    out = _output(slang_device, n * (CHANNELS + 1))
    bindings = {f"ntc_{w.name}_{b}": _raw(slang_device, getattr(w, b)) for w in exports for b in ("weights", "latents")}
    kernel = _kernel(slang_device, source, "nb_test_decode")
    kernel.dispatch(
        thread_count=[n, 1, 1],
        vars={
            **bindings,
            "nb_test_queries": _floats(slang_device, queries),
            "nb_test_out": out,
            "nb_test_constants": {"nb_test_count": n, "nb_test_set": 0, "nb_test_texels": 0},
        },
    )
    result = out.to_numpy().view(np.float32).reshape(n, CHANNELS + 1)
    values, taps = result[:, :CHANNELS], result[:, CHANNELS]
    assert np.isfinite(values).all()
    same_tap = (taps == expected_taps) | explained
    assert same_tap.all(), f"{(~same_tap).sum()} stochastic samples picked another texel"
    error = np.abs(values - expected)[taps == expected_taps]
    worst = np.abs(values - expected).max(axis=1).argmax()
    assert error.max() < TOLERANCE, f"{error.max():.3g} at query (set, kind, a0..a3) {queries[worst].tolist()}"
    texel_rows = queries[:, 1] == 0
    assert ((expected[texel_rows] == 0) | (expected[texel_rows] == 1)).mean() > 0.01  # the clamp is exercised
    assert 0.2 < expected.mean() < 0.8 and expected.std() > 0.1


@needs_slangpy
@pytest.mark.slow
def test_tensor_kernels_match_their_fp16_model_for_every_shape(shapes, slang_device):
    containers, exports, source = shapes
    for written in exports:
        entries = [entry for entry in json.loads(written.manifest.read_text())["entry_points"] if entry["kind"] == "tensor"]
        assert [entry["threads_per_group"][0] for entry in entries] == [128, 128]  # the test entry point's group size
    kernel = _kernel(slang_device, source, "nb_test_tensor")
    queries_per_group = entries[1]["queries_per_group"] | {"texel": entries[0]["queries_per_group"]}
    for k, (container, written) in enumerate(zip(containers, exports, strict=True)):
        n = written.name
        texels = _texel_queries(container)
        uv, lod, random = _sample_queries(container, seed=50 + k)
        fp16 = lambda features, c=container: tensor_decoder_reference(c, features)
        for mode in ("texel", *FILTER_MODES):
            count = len(texels) if mode == "texel" else SAMPLES
            out = _output(slang_device, count * CHANNELS)
            kernel.dispatch(
                thread_count=[-(-count // queries_per_group[mode]) * 128, 1, 1],
                vars={
                    f"ntc_{n}_weights": _raw(slang_device, written.weights),
                    f"ntc_{n}_latents": _raw(slang_device, written.latents),
                    f"ntc_{n}_texel_queries": _floats(slang_device, texels.numpy(), np.uint32),
                    f"ntc_{n}_sample_queries": _floats(slang_device, torch.cat([uv, lod[:, None], random[:, None]], 1).numpy()),
                    f"ntc_{n}_values": out,
                    f"ntc_{n}_constants": {f"ntc_{n}_count": count, f"ntc_{n}_filter": FILTER_MODES.get(mode, 0)},
                    "nb_test_constants": {"nb_test_count": 0, "nb_test_set": k, "nb_test_texels": int(mode == "texel")},
                },
            )
            actual = out.to_numpy().view(np.float32).reshape(count, CHANNELS)
            assert np.isfinite(actual).all(), (n, mode)  # every query written
            if mode == "texel":
                model = decode_texels(container, *texels.T, decoder=fp16)
                exact = decode_texels(container, *texels.T)
            elif mode == "stochastic":
                weights = filter_taps(container.layout.level_sizes, uv, lod)[3]
                keep = ~_explained_by_rounding(weights, random)
                actual, model, exact = (
                    actual[keep.numpy()],
                    *(s[keep] for s in (_stochastic(container, uv, lod, random, fp16), sample_stochastic(container, uv, lod, random))),
                )
            else:
                model = _filtered(container, uv, lod, mode, fp16)
                exact = sample_filtered(container, uv, lod, filter=mode)
            assert np.abs(actual - model.numpy()).max() < TENSOR_MODEL_TOLERANCE, (n, mode)
            assert np.abs(actual - exact.numpy()).max() < TENSOR_FP32_TOLERANCE, (n, mode)


def _filtered(container, uv, lod, filter: str, decoder) -> torch.Tensor:
    level, x, y, weight = filter_taps(container.layout.level_sizes, uv, lod, filter=filter)
    values = decode_texels(container, level.reshape(-1), x.reshape(-1), y.reshape(-1), decoder=decoder).reshape(*weight.shape, -1)
    return (values * weight[..., None]).sum(dim=1)


def _stochastic(container, uv, lod, random, decoder) -> torch.Tensor:
    level, x, y, weight = filter_taps(container.layout.level_sizes, uv, lod)
    pick = stochastic_tap(weight, random)[:, None]
    return decode_texels(container, level.gather(1, pick)[:, 0], x.gather(1, pick)[:, 0], y.gather(1, pick)[:, 0], decoder=decoder)


def test_the_buffers_are_the_containers_bytes(shapes):
    """The latent buffer holds the container's code streams unchanged, the weight buffer its int8 codes, biases and scales."""
    containers, exports, _ = shapes
    for container, written in zip(containers, exports, strict=True):
        manifest = json.loads(written.manifest.read_text())
        layout, data = container.layout, pack_container_bytes(container)
        latents = written.latents.read_bytes()
        sections = layout.section_bytes()
        start = 8 + 2 + 4 + sections["header"]
        high = data[start : start + sections["latents_high"]]
        low = data[start + sections["latents_high"] : start + sections["latents_high"] + sections["latents_low"]]
        streams = manifest["latents"]
        assert latents[streams["high"]["offset"] : streams["high"]["offset"] + streams["high"]["bytes"]] == high
        assert latents[streams["low"]["offset"] : streams["low"]["offset"] + streams["low"]["bytes"]] == low
        assert len(latents) - len(high) - len(low) < 32  # alignment only
        weights = written.weights.read_bytes()
        for entry, codes, scale, bias in zip(
            manifest["decoder"]["layers"], container.weights_int8, container.scales, container.biases, strict=True
        ):
            assert weights[entry["weight_offset"] : entry["weight_offset"] + codes.numel()] == codes.numpy().tobytes()
            assert np.frombuffer(weights, "<f4", 1, entry["scale_offset"])[0] == np.float32(scale)
            assert np.array_equal(np.frombuffer(weights, "<f4", codes.shape[0], entry["bias_offset"]), bias.numpy())
        assert manifest["gpu_bytes"]["total"] == len(weights) + len(latents)
        assert manifest["latents"]["high"]["grids"][0]["width"] == layout.high_dims[0][0]


def pack_container_bytes(container) -> bytes:
    """The container's file bytes (repacked from its layout, codes and weights: the bytes ``ntc compress`` writes)."""
    model = NTCModel(container.layout)
    with torch.no_grad():
        model.latents_high.copy_(container.latents_high)
        model.latents_low.copy_(container.latents_low)
        for layer, codes, scale, bias in zip(model.layers, container.weights_int8, container.scales, container.biases, strict=True):
            layer.weight.copy_(codes.float() * scale)
            layer.bias.copy_(bias)
    data = pack_container(model)
    assert read_container(data).latents_high.equal(container.latents_high)
    return data


def test_codes_pack_as_documented():
    """Code i at bits i * bits ..., least significant first: 5-bit codes straddle bytes and words."""
    codes = np.array([1, 31, 0, 17, 8, 30, 3])
    data = pack_codes(codes, 5)
    bits = int.from_bytes(data, "little")
    assert [(bits >> (5 * i)) & 31 for i in range(len(codes))] == codes.tolist() and len(data) == 5


# -- a real compressed set: export_ntc, the manifest's entry points, HLSL, stochastic bias and noise ------


@pytest.fixture(scope="module")
def compressed(tmp_path_factory) -> Path:
    """A 32x32 set of base colour, normal and roughness, compressed in a few steps (ntc compress's own path)."""
    tmp = tmp_path_factory.mktemp("ntc_export")
    textures = tmp / "textures"
    textures.mkdir()
    normal = make_test_pattern(32, 32, 3, seed=2)
    normal[..., 2] = 1.0
    sources = [
        f"base_color={_save(textures / 'base.png', make_test_pattern(32, 32, 3, seed=1))}",
        f"normal={_save(textures / 'normal.png', normal)}",
        f"roughness={_save(textures / 'rough.png', make_test_pattern(32, 32, 1, seed=3))}",
    ]
    compress_texture_set(_config(sources, bpp=16.0, steps=30, finetune=5), tmp / "crate_set", progress=False)
    return tmp / "crate_set"


@pytest.fixture(scope="module")
def exported(compressed, tmp_path_factory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("ntc_shader") / "shader"
    return export_ntc(compressed, out, samples=1024), out


def _dispatch(
    device, kernel, manifest: dict, out_dir: Path, entry: dict, count: int, texels=None, samples=None, mode: str = "trilinear"
) -> np.ndarray:
    """Bind and dispatch one of the manifest's entry points as an engine would, from what the manifest says."""
    n, bindings = manifest["name"], manifest["bindings"]
    channels = manifest["set"]["channels"]
    out = _output(device, count * channels)
    values = {
        f"ntc_{n}_weights": _raw(device, out_dir / bindings[f"ntc_{n}_weights"]["file"]),
        f"ntc_{n}_latents": _raw(device, out_dir / bindings[f"ntc_{n}_latents"]["file"]),
        f"ntc_{n}_values": out,
        f"ntc_{n}_constants": {f"ntc_{n}_count": count, f"ntc_{n}_filter": FILTER_MODES[mode]},
    }
    if texels is not None:
        assert bindings[f"ntc_{n}_texel_queries"]["per_query"] == TEXEL_UINTS
        values[f"ntc_{n}_texel_queries"] = _floats(device, texels, np.uint32)
    if samples is not None:
        assert bindings[f"ntc_{n}_sample_queries"]["per_query"] == SAMPLE_FLOATS
        values[f"ntc_{n}_sample_queries"] = _floats(device, samples)
    per_group = entry.get("queries_per_group", entry["threads_per_group"][0])
    per_group = per_group[mode] if isinstance(per_group, dict) else per_group
    kernel.dispatch(thread_count=[-(-count // per_group) * entry["threads_per_group"][0], 1, 1], vars=values)
    return out.to_numpy().view(np.float32).reshape(count, channels)


@needs_slangpy
@pytest.mark.parametrize("language", ["slang", "hlsl"])
def test_the_manifests_entry_points_decode_the_set(exported, compressed, slang_device, language):
    summary, out_dir = exported
    manifest = json.loads((out_dir / f"{summary['name']}.json").read_text())
    assert summary["name"] == "crate_set" and manifest["name"] == "crate_set"
    container = open_container(compressed)
    texels = _texel_queries(container)
    uv, lod, random = _sample_queries(container, seed=7)
    samples = torch.cat([uv, lod[:, None], random[:, None]], 1).numpy()
    source = (out_dir / manifest["files"][language]["file"]).read_text()
    entries = [entry for entry in manifest["entry_points"] if language in entry.get("languages", [])]
    assert len(entries) == (2 if language == "hlsl" else 4)
    exact_texels = decode_texels(container, *texels.T).numpy()
    for entry in entries:
        kernel = _kernel(slang_device, source, entry["name"])
        tolerance = TOLERANCE if entry["kind"] == "scalar" else TENSOR_FP32_TOLERANCE
        if "texel" in entry["name"]:
            actual = _dispatch(slang_device, kernel, manifest, out_dir, entry, len(texels), texels=texels.numpy())
            assert np.abs(actual - exact_texels).max() < tolerance, entry["name"]
            continue
        weights = filter_taps(container.layout.level_sizes, uv, lod)[3]
        keep = ~_explained_by_rounding(weights, random).numpy()
        for mode in FILTER_MODES:
            actual = _dispatch(slang_device, kernel, manifest, out_dir, entry, SAMPLES, samples=samples, mode=mode)
            exact = (
                sample_stochastic(container, uv, lod, random) if mode == "stochastic" else sample_filtered(container, uv, lod, filter=mode)
            )
            rows = keep if mode == "stochastic" else slice(None)
            assert np.abs(actual[rows] - exact.numpy()[rows]).max() < tolerance, (entry["name"], mode)


@needs_slangpy
def test_the_shaders_stochastic_filter_has_the_manifests_bias_and_noise(exported, compressed, slang_device):
    """The shader's stochastic samples at the manifest's queries: unbiased (|bias| within 4 standard errors, and tiny), their noise
    the manifest's (measured in PyTorch on the same queries), and the mean of the draws closer to the filtered value."""
    summary, out_dir = exported
    manifest = json.loads((out_dir / f"{summary['name']}.json").read_text())
    measured = manifest["stochastic"]
    container = open_container(compressed)
    uv, lod, random = stochastic_queries(container.layout.levels, measured["samples"], measured["draws"], measured["seed"])
    entry = next(entry for entry in manifest["entry_points"] if entry["name"].endswith("_sample_kernel") and entry["kind"] == "scalar")
    kernel = _kernel(slang_device, (out_dir / manifest["files"]["slang"]["file"]).read_text(), entry["name"])
    groups = [(group["name"], slice(group["offset"], group["offset"] + len(group["channels"]))) for group in manifest["set"]["groups"]]
    for name, levels in (("trilinear", lod), ("bilinear", torch.floor(lod + 0.5))):

        def run(mode: str, r: torch.Tensor, levels: torch.Tensor = levels) -> np.ndarray:
            queries = torch.cat([uv, levels[:, None], r[:, None]], 1).numpy()
            return _dispatch(slang_device, kernel, manifest, out_dir, entry, len(uv), samples=queries, mode=mode)

        filtered = torch.from_numpy(run("trilinear", random[0]))
        stochastic = torch.stack([torch.from_numpy(run("stochastic", random[d])) for d in range(measured["draws"])])
        shader = error_statistics(stochastic, filtered, groups)
        expected = measured[name]
        assert abs(shader["bias"]) < 4 * shader["bias_standard_error"] and abs(shader["bias"]) < 2e-3, shader
        assert shader["max_channel_bias_in_standard_errors"] < 5, shader
        assert shader["noise_rmse"] == pytest.approx(expected["noise_rmse"], abs=1e-4) and shader["noise_rmse"] > 0.005
        assert shader["bias"] == pytest.approx(expected["bias"], abs=1e-5)
        assert shader["mean_of_draws_rmse"] < 0.8 * shader["noise_rmse"]
    assert (
        measured["trilinear"]["noise_rmse"] > 0 and summary["stochastic"]["trilinear"]["noise_rmse"] == measured["trilinear"]["noise_rmse"]
    )


def test_the_manifest_tells_how_to_bind(exported, compressed):
    summary, out_dir = exported
    manifest = json.loads((out_dir / "crate_set.json").read_text())
    assert (
        manifest["format"] == "neuralbake.ntc_shader"
        and manifest["source"]["container_bytes"] == (compressed / "texture.ntc").stat().st_size
    )
    for key in ("slang", "hlsl", "weights", "latents"):
        assert manifest["files"][key]["bytes"] == (out_dir / manifest["files"][key]["file"]).stat().st_size
    gpu = manifest["gpu_bytes"]["total"]
    container = manifest["source"]["container_bytes"]
    header = json.dumps(open_container(compressed).layout.header(), separators=(",", ":")).encode()
    assert container - len(header) - 14 <= gpu <= container + 64 * len(manifest["decoder"]["layers"]) + 32  # the file's payload, aligned
    assert summary["gpu_bytes"] == gpu
    assert [g["field"] for g in manifest["set"]["groups"]] == ["base_color", "normal", "roughness"]
    assert [g["offset"] for g in manifest["set"]["groups"]] == [0, 3, 5]
    names = [entry["name"] for entry in manifest["entry_points"]]
    assert names == [
        "ntc_crate_set_texel_kernel",
        "ntc_crate_set_sample_kernel",
        "ntc_crate_set_tensor_texel_kernel",
        "ntc_crate_set_tensor_sample_kernel",
    ]
    tensor = manifest["entry_points"][3]
    assert (
        tensor["queries_per_group"]["trilinear"] * 8 == manifest["entry_points"][2]["queries_per_group"]
        and tensor["groupshared_bytes"] <= 48 * 1024
    )
    slang, hlsl = ((out_dir / f"crate_set.{ext}").read_text() for ext in ("slang", "hlsl"))
    assert "ntc_crate_set_tensor_texel_kernel" in slang and "CoopMat" not in hlsl and "_tensor_" not in hlsl
    assert "ntc_crate_set_channels ntc_crate_set_sample(float2 uv, float lod)" in slang and "float3 base_color;" in hlsl


def test_a_decoder_too_large_for_groupshared_memory_gets_no_tensor_kernels(tmp_path):
    layout = NTCLayout(16, 16, GROUPS, LATENT_SHAPES[0], (256, 256))
    container = read_container(pack_container(NTCModel(layout, generator=torch.Generator().manual_seed(0))))
    written = export_ntc_shader(shader_set(container), tmp_path, name="wide")
    entries = json.loads(written.manifest.read_text())["entry_points"]
    assert entries[-1]["name"] is None and "KB of groupshared memory" in entries[-1]["reason"]
    assert (
        "_tensor_" not in written.slang.read_text().replace("// No tensor kernels", "")
        and "ntc_wide_sample_kernel" in written.slang.read_text()
    )


# -- refusals -----------------------------------------------------------------------------------------


def test_refusals_name_the_problem_and_write_nothing(compressed, tmp_path):
    target = tmp_path / "taken"
    target.write_bytes(b"keep")
    with pytest.raises(InputError, match="is a file"):
        export_ntc(compressed, target)
    assert target.read_bytes() == b"keep"
    with pytest.raises(InputError, match="holds a bake"):
        export_ntc(compressed, compressed)
    with pytest.raises(BundleError, match="does not exist"):
        export_ntc(tmp_path / "nowhere", tmp_path / "out")
    with pytest.raises(ConfigError) as caught:
        export_ntc(compressed, tmp_path / "out", name="2 bad")
    assert caught.value.field == "--name"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_cli_writes_the_files_and_a_summary(compressed, tmp_path):
    from ..bakes.test_ntc import _ntc_cli

    result = _ntc_cli(["export", str(compressed), "--out", str(tmp_path / "shader"), "--name", "crate"])
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    assert "done ntc_crate: Slang + HLSL, 4 entry points" in flat and "stochastic filter: bias" in flat and "noise RMSE" in flat, flat
    assert sorted(p.name for p in (tmp_path / "shader").iterdir()) == [
        "crate.hlsl",
        "crate.json",
        "crate.latents.bin",
        "crate.slang",
        "crate.weights.int8.bin",
    ]
    manifest = json.loads((tmp_path / "shader" / "crate.json").read_text())
    assert manifest["stochastic"]["samples"] == 4096 and manifest["name"] == "crate"

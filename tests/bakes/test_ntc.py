"""Neural texture compression: container bytes = reported bpp, random access = full decode, determinism, QAT maths, inputs."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from neuralbake.bakes.ntc import (
    BPP_RANGE,
    CONTAINER_NAME,
    LATENT_SHAPES,
    MAX_HIDDEN_LAYERS,
    MAX_HIDDEN_WIDTH,
    MAX_PE_FREQUENCIES,
    ChannelGroup,
    GridTables,
    LatentShape,
    NTCConfig,
    NTCLayout,
    NTCModel,
    TexelSampler,
    TextureSet,
    bc_baselines,
    choose_layout,
    compress_rate_distortion,
    compress_texture_set,
    decode_all_levels,
    decode_texel,
    decode_texels,
    decompress,
    load_texture_set,
    open_container,
    pack_container,
    read_container,
    sample_features,
    set_quality,
)
from neuralbake.errors import BundleError, ConfigError, InputError
from neuralbake.nn.quantize import fake_quantize_int8, fake_quantize_latents
from neuralbake.nn.trainer import TrainerConfig

from ..conftest import make_test_pattern

SIZE = 32


def _save(path: Path, image: np.ndarray) -> Path:
    data = (np.clip(image, 0, 1) * 255).round().astype(np.uint8)
    Image.fromarray(data if data.shape[2] > 1 else data[..., 0]).save(path)
    return path


@pytest.fixture
def tiny_set(tmp_path: Path) -> list[str]:
    """base colour RGB + normal (XY kept) + roughness grey, 32x32: 6 channels."""
    folder = tmp_path / "textures"
    folder.mkdir()
    base = _save(folder / "base.png", make_test_pattern(SIZE, SIZE, 3, seed=1))
    normal = make_test_pattern(SIZE, SIZE, 3, seed=2)
    normal[..., 2] = 1.0
    normal_path = _save(folder / "normal.png", normal)
    rough = _save(folder / "rough.png", make_test_pattern(SIZE, SIZE, 1, seed=3))
    return [f"base_color={base}", f"normal={normal_path}", f"roughness={rough}"]


def _config(sources: list[str], *, bpp: float = 16.0, steps: int = 40, finetune: int = 10, seed: int = 0) -> NTCConfig:
    return NTCConfig(
        sources=sources,
        bpp=[bpp],
        hidden=(16,),
        pe_frequencies=2,
        batch_size=512,
        finetune_steps=finetune,
        baselines=False,
        device="cpu",
        train=TrainerConfig(steps=steps, learning_rate=0.03, precision="fp32", eval_every=0, checkpoint_every=0, log_every=10, seed=seed),
    )


@pytest.fixture(scope="module")
def compressed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """One tiny compression shared by the read-only tests."""
    tmp = tmp_path_factory.mktemp("ntc")
    folder = tmp / "textures"
    folder.mkdir()
    sources = [
        f"base_color={_save(folder / 'base.png', make_test_pattern(SIZE, SIZE, 3, seed=1))}",
        f"roughness={_save(folder / 'rough.png', make_test_pattern(SIZE, SIZE, 1, seed=3))}",
    ]
    out = tmp / "out"
    report = compress_texture_set(_config(sources), out, progress=False)
    return out, report


# -- the file -----------------------------------------------------------------------------------


def test_measured_bpp_equals_reported(compressed: tuple[Path, dict]) -> None:
    out, report = compressed
    size = (out / CONTAINER_NAME).stat().st_size
    assert report["bytes"] == size
    assert report["bpp_measured"] == pytest.approx(8.0 * size / (SIZE * SIZE), rel=0, abs=1e-12)
    assert report["bpp_measured"] <= report["bpp_target"]
    assert sum(report["sections"].values()) == size
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["bytes"] == size
    saved = json.loads((out / "report.json").read_text())
    assert saved["bpp_measured"] == report["bpp_measured"]


def test_one_texel_equals_full_decode(compressed: tuple[Path, dict]) -> None:
    container = open_container(compressed[0])
    levels = decode_all_levels(container)
    rng = np.random.default_rng(0)
    for mip, level in enumerate(levels):
        height, width = level.shape[:2]
        for _ in range(3):
            x, y = int(rng.integers(width)), int(rng.integers(height))
            np.testing.assert_allclose(decode_texel(container, mip, x, y), level[y, x], rtol=0, atol=1e-6)


def test_decoded_file_matches_trained_model_quality(compressed: tuple[Path, dict]) -> None:
    """The report's PSNR comes from decoding the file; it must beat the flat mean-colour image."""
    out, report = compressed
    texture_set = load_texture_set(json.loads((out / "config.json").read_text())["sources"])
    reference = texture_set.mip_chain()
    flat = [np.broadcast_to(level.mean(axis=(0, 1), keepdims=True), level.shape).copy() for level in reference]
    trivial = set_quality(flat, reference, texture_set.groups)
    assert report["ntc"]["overall_db"] > trivial["overall_db"] + 3.0
    assert len(report["ntc"]["per_mip_db"]) == int(math.log2(SIZE)) + 1


def test_truncated_or_tampered_files_are_refused(compressed: tuple[Path, dict], tmp_path: Path) -> None:
    data = (compressed[0] / CONTAINER_NAME).read_bytes()
    with pytest.raises(BundleError, match="truncated or padded"):
        read_container(data[:-3])
    with pytest.raises(BundleError, match="magic"):
        read_container(b"XXXXXXXX" + data[8:])
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / CONTAINER_NAME).write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    (copy / "manifest.json").write_text((compressed[0] / "manifest.json").read_text())
    with pytest.raises(BundleError, match="sha256"):
        open_container(copy)
    with pytest.raises(BundleError, match="does not exist"):
        open_container(tmp_path / "nowhere")


def test_decompress_writes_every_group_and_mip(compressed: tuple[Path, dict], tmp_path: Path) -> None:
    written = decompress(compressed[0], tmp_path / "png", device="cpu")
    levels = int(math.log2(SIZE)) + 1
    assert len(written) == 2 * levels
    assert Image.open(tmp_path / "png" / "base_color_mip0.png").size == (SIZE, SIZE)
    assert Image.open(tmp_path / "png" / f"roughness_mip{levels - 1}.png").size == (1, 1)
    exr = decompress(compressed[0], tmp_path / "exr", image_format="exr", device="cpu")
    import OpenEXR

    with OpenEXR.File(str(exr[0]), separate_channels=True) as handle:
        assert sorted(handle.channels()) == ["B", "G", "R"]
    with pytest.raises(ConfigError, match="format"):
        decompress(compressed[0], tmp_path / "x", image_format="tga")


def test_decompress_through_the_fused_kernel_matches_pytorch(compressed: tuple[Path, dict], tmp_path: Path) -> None:
    """``--kernels triton`` decodes with the fused Triton kernel (the interpreter on a CPU); the EXRs agree with PyTorch's."""
    pytest.importorskip("triton")
    import os

    import OpenEXR

    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs a GPU or TRITON_INTERPRET=1")
    assert compressed[1]["kernels"] == {"train": "torch", "decode": "torch"}  # auto on a CPU
    fused = decompress(compressed[0], tmp_path / "fused", image_format="exr", device="cpu", kernels="triton")
    reference = decompress(compressed[0], tmp_path / "torch", image_format="exr", device="cpu", kernels="torch")
    assert [p.name for p in fused] == [p.name for p in reference]
    for a, b in zip(fused, reference):
        with OpenEXR.File(str(a), separate_channels=True) as fa, OpenEXR.File(str(b), separate_channels=True) as fb:
            for name, channel in fa.channels().items():
                assert np.abs(channel.pixels - fb.channels()[name].pixels).max() < 1e-5, (a.name, name)
    result = _ntc_cli(["decompress", str(compressed[0]), "--out", str(tmp_path / "bad"), "--device", "cpu", "--kernels", "warp"])
    assert result.exit_code != 0 and "unknown kernels" in result.output
    assert not (tmp_path / "bad").exists()


# -- determinism ----------------------------------------------------------------------------------


def test_quantisation_is_deterministic(tiny_set: list[str], tmp_path: Path) -> None:
    config = _config(tiny_set, steps=15, finetune=5)
    compress_texture_set(config, tmp_path / "a", progress=False)
    compress_texture_set(config, tmp_path / "b", progress=False)
    assert (tmp_path / "a" / CONTAINER_NAME).read_bytes() == (tmp_path / "b" / CONTAINER_NAME).read_bytes()


def test_pack_is_deterministic_and_round_trips() -> None:
    groups = (ChannelGroup("c", ("R", "G", "B")),)
    for shape in (LatentShape(4, 8, 2), LatentShape(4, 3, 5), LatentShape(2, 4, 8)):
        layout = NTCLayout(16, 16, groups, shape, hidden=(8,), pe_frequencies=1)
        model = NTCModel(layout, generator=torch.Generator().manual_seed(3))
        with torch.no_grad():
            model.latents_high.uniform_(-1.3, 1.3)  # some clamp
        first, second = pack_container(model), pack_container(model)
        assert first == second
        container = read_container(first)
        model.quant_mode = "round"
        grid = fake_quantize_latents(model.latents_high, shape.bits, "round").detach()
        torch.testing.assert_close(container.latents_high, grid, rtol=0, atol=1e-6)
        torch.testing.assert_close(container.weights()[0], fake_quantize_int8(model.layers[0].weight).detach(), rtol=0, atol=0)
        # the file decodes exactly what the hard-quantised model computes
        coords = torch.tensor([[0, 3, 5], [1, 7, 2], [4, 0, 0]], dtype=torch.float32)
        expected = model(coords).clamp(0, 1).detach()
        got = decode_texels(container, coords[:, 0].long(), coords[:, 1].long(), coords[:, 2].long())
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


# -- training -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_psnr_rises_over_training_and_beats_trivial_baseline(tiny_set: list[str], tmp_path: Path) -> None:
    config = _config(tiny_set, steps=300, finetune=50)
    config.train.eval_every = 100
    report = compress_texture_set(config, tmp_path / "out", progress=False)
    history = [json.loads(line) for line in (tmp_path / "out" / "events.jsonl").read_text().splitlines()]
    evals = [e["psnr_db"] for e in history if e["event"] == "eval"]
    assert evals[-1] > evals[0] + 6.0
    texture_set = load_texture_set(tiny_set)
    reference = texture_set.mip_chain()
    flat = [np.broadcast_to(level.mean(axis=(0, 1), keepdims=True), level.shape).copy() for level in reference]
    assert report["ntc"]["overall_db"] > set_quality(flat, reference, texture_set.groups)["overall_db"] + 6.0


def test_sampler_covers_every_level_and_targets_match(tiny_set: list[str]) -> None:
    texture_set = load_texture_set(tiny_set)
    layout = choose_layout(SIZE, SIZE, texture_set.groups, 16.0, hidden=(16,), pe_frequencies=2)
    reference = texture_set.mip_chain()
    sampler = TexelSampler(layout, reference, 4096, torch.device("cpu"))
    batch = sampler.sample(torch.Generator().manual_seed(0))
    coords = batch.inputs.long()
    assert set(coords[:, 0].tolist()) == set(range(layout.levels))
    for row, (level, x, y) in enumerate(coords[:50].tolist()):
        np.testing.assert_allclose(batch.targets[row].numpy(), reference[level][y, x])


def test_mip_chain_is_a_box_filter() -> None:
    image = make_test_pattern(8, 4, 3)
    chain = TextureSet([ChannelGroup("c", ("R", "G", "B"))], [image], ["pattern"]).mip_chain()
    assert [level.shape[:2] for level in chain] == [(4, 8), (2, 4), (1, 2), (1, 1)]
    np.testing.assert_allclose(chain[1][0, 0], image[:2, :2].mean(axis=(0, 1)), atol=1e-6)
    np.testing.assert_allclose(chain[3][0, 0], image.mean(axis=(0, 1)), atol=1e-6)


# -- rate control -----------------------------------------------------------------------------------


def test_rate_controller_fits_the_budget_and_grows_with_it() -> None:
    groups = (ChannelGroup("c", ("R", "G", "B")), ChannelGroup("n", ("X", "Y"), "normal_xy"))
    assert [s.nominal_bpp for s in LATENT_SHAPES] == sorted(s.nominal_bpp for s in LATENT_SHAPES)
    previous = 0.0
    for bpp in (0.5, 1, 2, 4, 8, 12, 20, 27, 33, 48):
        layout = choose_layout(1024, 1024, groups, bpp)
        assert layout.bpp() <= bpp
        assert layout.bpp() >= previous
        previous = layout.bpp()
    assert choose_layout(1024, 1024, groups, 20).bpp() > 15  # large textures use nearly all of it
    assert choose_layout(1024, 1024, groups, 48).shape == LatentShape(1, 8, 4)  # one cell per texel at the top


# -- differentiable ops ------------------------------------------------------------------------------


def _tiny_layout() -> NTCLayout:
    return NTCLayout(8, 8, (ChannelGroup("c", ("R", "G")),), LatentShape(2, 2, 4), hidden=(4,), pe_frequencies=1)


def test_gradcheck_sample_features() -> None:
    layout = _tiny_layout()
    tables = GridTables.from_layout(layout)
    high_cells, low_cells = layout.latent_cells()
    gen = torch.Generator().manual_seed(0)
    high = torch.rand(high_cells, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    low = torch.rand(low_cells, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    level = torch.tensor([0, 0, 1, 2, 3])
    x = torch.tensor([0, 5, 3, 1, 0])
    y = torch.tensor([7, 2, 1, 0, 0])
    assert torch.autograd.gradcheck(lambda h, lo: sample_features(h, lo, tables, level, x, y, 1), (high, low))


def test_sample_features_matches_a_per_texel_reference() -> None:
    """The batched gathers equal a texel-by-texel lookup written from the layout's definition."""
    layout = NTCLayout(16, 8, (ChannelGroup("c", ("R", "G", "B")),), LatentShape(2, 3, 4), hidden=(4,), pe_frequencies=1)
    tables = GridTables.from_layout(layout)
    high_cells, low_cells = layout.latent_cells()
    gen = torch.Generator().manual_seed(3)
    high = torch.rand(high_cells, 3, generator=gen, dtype=torch.float64)
    low = torch.rand(low_cells, 3, generator=gen, dtype=torch.float64)
    level = torch.tensor([0, 0, 0, 1, 1, 2, 3, 4])
    x = torch.tensor([0, 15, 6, 7, 2, 3, 1, 0])
    y = torch.tensor([0, 7, 3, 3, 0, 1, 0, 0])
    features = sample_features(high, low, tables, level, x, y, 1)

    def offset(dims: list[tuple[int, int]], pair: int) -> int:
        return sum(w * h for w, h in dims[:pair])

    def lookup(grid: torch.Tensor, dims: list[tuple[int, int]], pair: int, u: float, v: float):
        w, h = dims[pair]
        px, py = u * w - 0.5, v * h - 0.5
        x0, y0 = math.floor(px), math.floor(py)
        xs = [min(max(x0, 0), w - 1), min(max(x0 + 1, 0), w - 1)]
        ys = [min(max(y0, 0), h - 1), min(max(y0 + 1, 0), h - 1)]
        cell = lambda cx, cy: grid[offset(dims, pair) + cy * w + cx]
        return [cell(xs[0], ys[0]), cell(xs[1], ys[0]), cell(xs[0], ys[1]), cell(xs[1], ys[1])], px - x0, py - y0

    for i in range(len(level)):
        lv, pair = int(level[i]), int(level[i]) // 2
        w, h = layout.level_sizes[lv]
        u, v = (int(x[i]) + 0.5) / w, (int(y[i]) + 0.5) / h
        corners, _, _ = lookup(high, layout.high_dims, pair, u, v)
        torch.testing.assert_close(features[i, :12], torch.cat(corners))
        (c00, c10, c01, c11), fx, fy = lookup(low, layout.low_dims, pair, u, v)
        bilinear = (c00 * (1 - fx) + c10 * fx) * (1 - fy) + (c01 * (1 - fx) + c11 * fx) * fy
        torch.testing.assert_close(features[i, 12:15], bilinear)
        assert features[i, -1] == lv - 2 * pair


def test_gradcheck_noise_quantisation_and_whole_model() -> None:
    gen = torch.Generator().manual_seed(1)
    latents = (torch.rand(6, 3, generator=gen, dtype=torch.float64) * 1.6 - 0.8).requires_grad_()
    noise = torch.rand(6, 3, generator=gen, dtype=torch.float64) - 0.5
    assert torch.autograd.gradcheck(lambda t: fake_quantize_latents(t, 3, "noise", noise=noise), (latents,))
    model = NTCModel(_tiny_layout(), generator=gen).double()
    model.quant_mode, model.quantize_weights = "none", False
    coords = torch.tensor([[0, 1, 2], [1, 3, 0], [2, 1, 1]], dtype=torch.float64)
    names = [name for name, _ in model.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in model.parameters())

    def run(*tensors: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(model, dict(zip(names, tensors)), (coords,))

    assert torch.autograd.gradcheck(run, params)


def test_straight_through_gradients_are_identity() -> None:
    """Rounding has no useful derivative; its straight-through gradient is the identity (inside the clamp)."""
    latents = torch.tensor([-0.9, -0.2, 0.33, 0.7, 1.5], requires_grad=True)
    out = fake_quantize_latents(latents, 2, "round")
    assert set(torch.round((out.detach() + 1) * 1.5).tolist()) <= {0.0, 1.0, 2.0, 3.0}
    out.sum().backward()
    assert latents.grad.tolist() == [1.0, 1.0, 1.0, 1.0, 0.0]
    weight = torch.randn(4, 3, requires_grad=True)
    quantized = fake_quantize_int8(weight)
    assert torch.allclose(quantized, weight, atol=weight.abs().max().item() / 127)
    codes = quantized.detach() / (weight.detach().abs().max() / 127)
    torch.testing.assert_close(codes, codes.round())
    quantized.sum().backward()
    assert torch.equal(weight.grad, torch.ones_like(weight))


# -- baselines -----------------------------------------------------------------------------------


def test_bc_baselines_count_the_full_chain(tiny_set: list[str]) -> None:
    texture_set = load_texture_set(tiny_set)
    reference = texture_set.mip_chain()
    result = bc_baselines(reference, texture_set.groups, SIZE, SIZE)
    assert result["bc1"]["formats"] == {"base_color": "bc1", "normal": "bc5", "roughness": "bc1"}
    assert result["bc7"]["formats"] == {"base_color": "bc7", "normal": "bc5", "roughness": "bc7"}
    # 32, 16, 8, 4 are whole blocks; 2 and 1 are padded to one block each
    blocks = (64 + 16 + 4 + 1 + 1 + 1)
    assert result["bc1"]["bytes"] == blocks * (8 + 16 + 8)
    assert result["bc7"]["bpp"] == pytest.approx(8 * blocks * (16 + 16 + 16) / SIZE**2)
    assert result["bc7"]["quality"]["overall_db"] > result["bc1"]["quality"]["overall_db"] > 20


def test_a_lossless_bc5_round_trip_of_a_flat_normal_map_is_exact(tmp_path: Path) -> None:
    """A flat normal map whose values carry float rounding (a resample leaves some a float32 step off k/255) comes
    back from BC5 as exactly k/255: reported as 171.57 dB, it is inf in the report, "inf dB (exact)" in summaries."""
    from neuralbake.core.report import metric_text, write_report

    flat = np.full((64, 64, 2), np.float32(128 / 255), np.float32)
    flat[::9, ::7] = np.nextafter(flat[::9, ::7], np.float32(1))
    chain = [flat, flat[::2, ::2].copy(), flat[::4, ::4].copy()]
    result = bc_baselines(chain, (ChannelGroup("normal", ("X", "Y"), kind="normal_xy"),), 64, 64)
    decoded = result["bc7"]["levels"][0]
    assert np.array_equal(decoded, np.full_like(flat, np.float32(128 / 255)))  # what BC5 gives back is the 8-bit value
    assert 0 < float(((decoded.astype(np.float64) - flat) ** 2).mean()) < 1e-15  # float rounding, once 160-170 dB
    quality = result["bc7"]["quality"]
    assert quality["overall_db"] == quality["overall_all_mips_db"] == quality["groups"]["normal"]["mip0_db"] == math.inf
    report = write_report(tmp_path / "report.json", bake="ntc", device=torch.device("cpu"), metrics={"psnr_db": quality["overall_db"]})
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["psnr_db"] is None and saved["non_finite"]["psnr_db"].startswith("inf: the result equals the reference exactly")
    assert metric_text(saved, "psnr_db", unit=" dB") == metric_text(report, "psnr_db", unit=" dB") == "inf dB (exact)"
    off = [level.copy() for level in chain]
    off[0][5, 5, 0] = 129 / 255  # one texel a real 8-bit step off: finite, however large the rest
    assert set_quality(off, chain, (ChannelGroup("normal", ("X", "Y"), kind="normal_xy"),))["overall_db"] < math.inf


# -- bad inputs ----------------------------------------------------------------------------------


def test_mismatched_sizes(tmp_path: Path) -> None:
    a = _save(tmp_path / "a.png", make_test_pattern(32, 32, 3))
    b = _save(tmp_path / "b.png", make_test_pattern(16, 16, 3))
    with pytest.raises(InputError, match="same size") as info:
        load_texture_set([a, b])
    assert "b.png" in str(info.value) and "Fix:" in str(info.value)


def test_non_power_of_two(tmp_path: Path) -> None:
    a = _save(tmp_path / "a.png", make_test_pattern(24, 24, 3))
    with pytest.raises(InputError, match="power-of-two"):
        load_texture_set([a])


def test_more_than_16_channels(tmp_path: Path) -> None:
    paths = [f"t{i}={_save(tmp_path / f't{i}.png', make_test_pattern(16, 16, 4, seed=i))}" for i in range(5)]
    with pytest.raises(InputError, match="20 channels"):
        load_texture_set(paths)


@pytest.mark.parametrize("bpp", [0.1, 0.49, 48.5, 64.0, float("nan")])
def test_bpp_out_of_range(tiny_set: list[str], tmp_path: Path, bpp: float) -> None:
    with pytest.raises(ConfigError, match="bpp") as info:
        compress_texture_set(_config(tiny_set, bpp=bpp), tmp_path / "out", progress=False)
    assert f"{BPP_RANGE[0]:g} to {BPP_RANGE[1]:g}" in str(info.value)
    assert not (tmp_path / "out").exists()


def test_bpp_too_low_for_small_texture_names_the_decoder(tiny_set: list[str], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="decoder's weights"):
        compress_texture_set(_config(tiny_set, bpp=1.0), tmp_path / "out", progress=False)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist") as info:
        load_texture_set([tmp_path / "nope.png"])
    assert "nope.png" in str(info.value)
    with pytest.raises(InputError, match="does not exist"):
        load_texture_set([tmp_path / "nope.gltf"])


def test_gltf_material_channels(tmp_path: Path) -> None:
    """A hand-made glTF: base colour, normal XY, occlusion R + roughness G + metallic B, emissive."""
    images = {name: make_test_pattern(16, 16, 3, seed=i) for i, name in enumerate(["albedo", "mr", "ao", "nrm", "emit"])}
    for name, image in images.items():
        _save(tmp_path / f"{name}.png", image)
    names = list(images)
    gltf = {
        "asset": {"version": "2.0"},
        "images": [{"uri": f"{n}.png"} for n in names],
        "textures": [{"source": i} for i in range(len(names))],
        "materials": [
            {
                "name": "mat",
                "pbrMetallicRoughness": {"baseColorTexture": {"index": 0}, "metallicRoughnessTexture": {"index": 1}},
                "occlusionTexture": {"index": 2},
                "normalTexture": {"index": 3},
                "emissiveTexture": {"index": 4},
            }
        ],
    }
    path = tmp_path / "m.gltf"
    path.write_text(json.dumps(gltf))
    texture_set = load_texture_set([path], material="mat")
    assert [g.name for g in texture_set.groups] == ["base_color", "normal", "orm", "emissive"]
    assert texture_set.channels == 11
    loaded = {name: np.asarray(Image.open(tmp_path / f"{name}.png"), dtype=np.float32) / 255 for name in names}
    orm = texture_set.images[2]
    np.testing.assert_allclose(orm[..., 0], loaded["ao"][..., 0])
    np.testing.assert_allclose(orm[..., 1:], loaded["mr"][..., 1:])
    np.testing.assert_allclose(texture_set.images[1], loaded["nrm"][..., :2])
    with pytest.raises(InputError, match="material 'other'"):
        load_texture_set([path], material="other")


# -- CLI and the rate-distortion run ------------------------------------------------------------------


_CLI_COMMON = ["--steps", "20", "--finetune-steps", "5", "--batch-size", "256", "--hidden", "16", "--pe-frequencies", "2", "--device", "cpu", "--quiet"]


def _ntc_cli(args: list[str]):
    from typer.testing import CliRunner

    from neuralbake.cli.ntc import ntc_app

    return CliRunner().invoke(ntc_app, args, env={"COLUMNS": "400"})


@pytest.mark.slow
def test_cli_compress_rd_and_decompress(tiny_set: list[str], tmp_path: Path) -> None:
    result = _ntc_cli(["compress", *tiny_set, "--bpp", "12", "--bpp", "18", "--out", str(tmp_path / "rd"), *_CLI_COMMON])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "rd" / "rd.json").read_text())
    assert [p["bpp_target"] for p in summary["ntc"]] == [12.0, 18.0]
    assert set(summary["bcn"]) == {"bc1", "bc7"}
    assert (tmp_path / "rd" / "rd.png").is_file()
    report = json.loads((tmp_path / "rd" / "report.json").read_text())
    assert report["rates"] == ["bpp_12", "bpp_18"] and report["rd"] == summary
    for rate in ("bpp_12", "bpp_18"):
        assert json.loads((tmp_path / "rd" / rate / "report.json").read_text())["bpp_target"] in (12.0, 18.0)
        assert (tmp_path / "rd" / ".neuralbake" / "checkpoints" / f"{rate}_noise.pt").is_file()
    result = _ntc_cli(["decompress", str(tmp_path / "rd" / "bpp_12"), "--out", str(tmp_path / "dec"), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "dec" / "normal_mip0.png").is_file()
    result = _ntc_cli(["compress", *tiny_set, "--bpp", "60", "--out", str(tmp_path / "bad"), *_CLI_COMMON])
    assert result.exit_code == 2
    assert "bpp" in result.output


def test_decompress_of_a_multi_rate_folder_names_the_rate_folders(compressed: tuple[Path, dict], tmp_path: Path) -> None:
    """`--bpp 2,4` writes bpp_2/ and bpp_4/ beside rd.json and no texture.ntc: decompress said only that
    manifest.json or texture.ntc was missing; it names the folders to pass."""
    import shutil

    from neuralbake.io.manifest import write_bake_manifest

    parent = tmp_path / "rd"
    parent.mkdir()
    for name in ("bpp_4", "bpp_2"):
        shutil.copytree(compressed[0], parent / name, ignore=shutil.ignore_patterns(".neuralbake"))
    (parent / "rd.json").write_text("{}")
    write_bake_manifest(parent, bake="ntc")
    for command in ("decompress", "transcode"):
        result = _ntc_cli([command, str(parent), "--out", str(tmp_path / "out"), "--device", "cpu"])
        flat = " ".join(result.output.split())
        assert result.exit_code == 2 and "several rates (bpp_2/, bpp_4/)" in flat, result.output
        assert f"pass one rate's folder: {parent / 'bpp_2'}/, {parent / 'bpp_4'}/" in flat
        assert not (tmp_path / "out").exists()
    result = _ntc_cli(["decompress", str(parent / "bpp_2"), "--out", str(tmp_path / "out"), "--device", "cpu"])
    assert result.exit_code == 0, result.output


def test_a_stopped_multi_rate_run_names_its_finished_rates_and_they_are_usable(tiny_set: list[str], tmp_path: Path) -> None:
    """The finished rates of a stopped `--bpp 12,18` run were hidden in .neuralbake/staging until --resume: the stop
    names them and their folders, each complete (its bake.json checks; ntc decompress reads it)."""
    from dataclasses import replace

    from neuralbake.io.manifest import verify_bake_folder
    from neuralbake.nn.trainer import TrainingInterrupted

    config = replace(_config(tiny_set, steps=12, finetune=2), bpp=[12.0, 18.0])
    calls = {"n": 0}

    def stop_in_the_second_rate(trainer, step) -> None:
        calls["n"] += 1
        if calls["n"] == 12 + 2 + 5:
            trainer.request_stop()

    out = tmp_path / "rd"
    with pytest.raises(TrainingInterrupted) as caught:
        compress_texture_set(config, out, progress=False, on_step=stop_in_the_second_rate)
    message = str(caught.value)
    assert "bpp_12 in " in message and "bpp_18 in" not in message and "--resume" in message
    folder = Path(message.split("bpp_12 in ", 1)[1].split(". Fix:", 1)[0])
    assert folder.name == "bpp_12" and folder.is_relative_to(out.absolute() / ".neuralbake")
    assert {"texture.ntc", "manifest.json", "report.json", "bake.json"} <= {p.name for p in folder.iterdir()}
    verify_bake_folder(folder)
    assert len(decompress(folder, tmp_path / "png")) > 0
    report = compress_texture_set(config, out, progress=False, resume=True)
    assert report["rates"] == ["bpp_12", "bpp_18"] and (out / "bpp_18" / "texture.ntc").is_file()


def test_bpp_flag_takes_a_list_or_repeats() -> None:
    from neuralbake.cli.ntc import _join_repeated

    args = ["compress", "a.png", "--bpp", "1", "--out", "o", "--bpp=2", "--bpp", "4"]
    assert _join_repeated(args, "--bpp") == ["compress", "a.png", "--bpp", "1,2,4", "--out", "o"]
    assert _join_repeated(["compress", "a.png", "--bpp", "1,3"], "--bpp") == ["compress", "a.png", "--bpp", "1,3"]


def test_a_flipped_byte_in_any_file_is_refused_naming_it(compressed: tuple[Path, dict], tmp_path: Path) -> None:
    import shutil

    names = sorted(p.name for p in compressed[0].iterdir() if p.is_file() and p.name != "bake.json")
    assert {"texture.ntc", "manifest.json", "preview.png", "report.json", "config.json", "events.jsonl"} <= set(names)
    for name in names:
        folder = tmp_path / name
        shutil.copytree(compressed[0], folder, ignore=shutil.ignore_patterns(".neuralbake"))
        data = bytearray((folder / name).read_bytes())
        data[len(data) // 2] ^= 0x10
        (folder / name).write_bytes(bytes(data))
        with pytest.raises(BundleError, match="sha256") as info:
            decompress(folder, tmp_path / f"{name}_out", device="cpu")
        assert name in str(info.value)
        if name == "texture.ntc":
            result = _ntc_cli(["decompress", str(folder), "--out", str(tmp_path / "cli_out"), "--device", "cpu", "--quiet"])
            assert result.exit_code == 2, result.output
            assert "texture.ntc" in result.output and "sha256" in result.output


@pytest.mark.slow
def test_a_killed_compression_resumes_to_a_valid_file(tiny_set: list[str], tmp_path: Path, kill_and_resume) -> None:
    args = ["--bpp", "16", "--steps", "300", "--finetune-steps", "100", "--batch-size", "256", "--hidden", "16", "--pe-frequencies", "2"]
    args += ["--eval-every", "0", "--checkpoint-every", "2", "--precision", "fp32", "--no-baselines", "--device", "cpu"]
    report = kill_and_resume(["ntc", "compress", *tiny_set, *args], tmp_path / "killed")
    assert report["steps"] == {"noise": 300, "round": 100} and report["phases"] == ["noise", "round"]
    levels = decode_all_levels(open_container(tmp_path / "killed"))
    assert len(levels) == int(math.log2(SIZE)) + 1
    assert report["ntc"]["overall_db"] > 15.0
    # Byte-identical to an uninterrupted run: the checkpoint also restores the global generator
    # that the noise phase draws its quantisation noise from.
    straight = tmp_path / "straight"
    subprocess.run([sys.executable, "-m", "neuralbake", "ntc", "compress", *tiny_set, *args, "--out", str(straight), "--quiet"], check=True, timeout=600)
    assert (straight / "texture.ntc").read_bytes() == (tmp_path / "killed" / "texture.ntc").read_bytes()


def test_rate_distortion_rejects_an_impossible_rate_before_training(tiny_set: list[str], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="decoder's weights"):
        compress_rate_distortion(_config(tiny_set), [16.0, 1.0], tmp_path / "rd", progress=False)
    assert not (tmp_path / "rd" / "report.json").exists()
    assert not list((tmp_path / "rd").rglob("*.pt"))  # refused before any training


# -- the real asset ----------------------------------------------------------------------------------


@pytest.mark.needs_shared
@pytest.mark.slow
def test_damaged_helmet_at_64(shared_dir: Path, tmp_path: Path) -> None:
    gltf = shared_dir / "assets" / "DamagedHelmet" / "DamagedHelmet.gltf"
    if not gltf.is_file():
        pytest.skip(f"{gltf} is absent")
    config = _config([str(gltf)], bpp=20.0, steps=150, finetune=30)
    config.texture_size = 64
    config.baselines = True
    report = compress_texture_set(config, tmp_path / "helmet", progress=False)
    assert [g["name"] for g in report["groups"]] == ["base_color", "normal", "orm", "emissive"]
    assert report["size"] == [64, 64]
    assert report["bpp_measured"] == pytest.approx(8 * (tmp_path / "helmet" / CONTAINER_NAME).stat().st_size / 64**2)
    assert report["ntc"]["overall_db"] > 18.0
    assert report["bcn"]["bc7"]["formats"]["normal"] == "bc5"
    container = open_container(tmp_path / "helmet")
    levels = decode_all_levels(container)
    np.testing.assert_allclose(decode_texel(container, 2, 5, 9), levels[2][9, 5], atol=1e-6)


def test_resume_without_checkpoint_is_an_error(tiny_set: list[str], tmp_path: Path) -> None:
    from neuralbake.errors import TrainingError

    with pytest.raises(TrainingError, match="no checkpoint"):
        compress_texture_set(_config(tiny_set), tmp_path / "out", resume=True, progress=False)


# -- header types and compress/decompress bounds ------------------------------------------------


def _tiny_container(**decoder: object) -> bytes:
    torch.manual_seed(0)
    layout = NTCLayout(8, 8, (ChannelGroup("base_color", ("R", "G", "B"), "color"),), LATENT_SHAPES[0], **{"hidden": (8,), **decoder})
    return pack_container(NTCModel(layout))


def _with_header(data: bytes, change) -> bytes:
    import struct

    prefix = struct.Struct("<8sHI")
    magic, version, header_len = prefix.unpack_from(data)
    header = json.loads(data[prefix.size : prefix.size + header_len])
    change(header)
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    return prefix.pack(magic, version, len(text)) + text + data[prefix.size + header_len :]


def _container_folder(folder: Path, data: bytes) -> Path:
    import hashlib

    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONTAINER_NAME).write_bytes(data)
    manifest = {"file": CONTAINER_NAME, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "format": "neuralbake.ntc", "version": 1}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


_WRONG_TYPES = {
    "activation a list": lambda h: h["decoder"].__setitem__("activation", ["relu"]),
    "activation a dict": lambda h: h["decoder"].__setitem__("activation", {"relu": 1}),
    "activation null": lambda h: h["decoder"].__setitem__("activation", None),
    "group kind a list": lambda h: h["groups"][0].__setitem__("kind", ["color"]),
    "group kind a dict": lambda h: h["groups"][0].__setitem__("kind", {"color": 1}),
    "pe_frequencies a list": lambda h: h["decoder"].__setitem__("pe_frequencies", [3]),
    "hidden width a list": lambda h: h["decoder"].__setitem__("hidden", [[8]]),
    "leak a list": lambda h: h["decoder"].__setitem__("leak", [0.01]),
    "decoder a list": lambda h: h.__setitem__("decoder", ["relu"]),
    "group name a list": lambda h: h["groups"][0].__setitem__("name", ["base"]),
}


@pytest.mark.parametrize("case", list(_WRONG_TYPES))
def test_header_fields_of_the_wrong_type_are_refused(case: str, tmp_path: Path) -> None:
    data = _with_header(_tiny_container(), _WRONG_TYPES[case])
    with pytest.raises(BundleError):
        read_container(data)
    folder = _container_folder(tmp_path / "ntc", data)
    with pytest.raises(BundleError):
        decompress(folder, tmp_path / "out", device="cpu")


def test_cli_decompress_refuses_a_list_activation(tmp_path: Path) -> None:
    folder = _container_folder(tmp_path / "ntc", _with_header(_tiny_container(), _WRONG_TYPES["activation a list"]))
    result = _ntc_cli(["decompress", str(folder), "--out", str(tmp_path / "out"), "--device", "cpu"])
    assert result.exit_code not in (0, 1), result.output
    assert not isinstance(result.exception, TypeError), result.output
    assert "activation" in result.output


@pytest.mark.parametrize(
    ("decoder", "field"),
    [
        ({"hidden": (MAX_HIDDEN_WIDTH * 2,)}, "hidden"),
        ({"hidden": (8,) * (MAX_HIDDEN_LAYERS + 1)}, "hidden"),
        ({"pe_frequencies": MAX_PE_FREQUENCIES + 4}, "pe_frequencies"),
    ],
)
def test_compress_refuses_what_decompress_would_refuse(decoder: dict, field: str) -> None:
    # the header check refuses a container written with these settings ...
    with pytest.raises(BundleError):
        read_container(_tiny_container(**decoder))
    # ... so compress must refuse them before training
    config = NTCConfig(sources=["a.png"], device="cpu", **decoder)
    with pytest.raises(ConfigError) as info:
        config.validate()
    assert info.value.field == field


def test_decoder_at_the_bounds_round_trips() -> None:
    decoder = {"hidden": (MAX_HIDDEN_WIDTH,) + (8,) * (MAX_HIDDEN_LAYERS - 1), "pe_frequencies": MAX_PE_FREQUENCIES}
    NTCConfig(sources=["a.png"], device="cpu", **decoder).validate()
    layout = read_container(_tiny_container(**decoder)).layout
    assert layout.hidden == decoder["hidden"] and layout.pe_frequencies == MAX_PE_FREQUENCIES


def test_a_gltf_source_takes_no_name(tmp_path: Path) -> None:
    """The path the service checks is the one opened: ``NAME=`` before a glTF is refused, not opened as a path."""
    from neuralbake.bakes.ntc.texture_set import load_texture_set
    from neuralbake.errors import InputError

    crate = Path(__file__).resolve().parents[2] / "examples" / "crate" / "crate.gltf"
    with pytest.raises(InputError, match="takes no NAME="):
        load_texture_set([f"../../x={crate}"])


def test_a_see_through_gltf_material_keeps_its_alpha_as_a_fourth_base_colour_channel(tmp_path: Path) -> None:
    """examples/cards/foliage.gltf (alphaMode MASK): the base colour group is RGBA, compressed and decompressed with its
    alpha; where the source cuts out, the decompressed alpha does too (at the material's cutoff, on most texels)."""
    card = Path(__file__).resolve().parents[2] / "examples" / "cards" / "foliage.gltf"
    texture_set = load_texture_set([str(card)])
    assert texture_set.groups[0].name == "base_color" and texture_set.groups[0].channels == ("R", "G", "B", "A")
    source_alpha = texture_set.images[0][..., 3]
    assert source_alpha.min() == 0.0 and source_alpha.max() == 1.0
    config = _config([str(card)], bpp=8.0, steps=150, finetune=10)
    config.batch_size = 2048
    compress_texture_set(config, tmp_path / "ntc", progress=False)
    decompress(tmp_path / "ntc", tmp_path / "png", device="cpu")
    decoded = np.asarray(Image.open(tmp_path / "png" / "base_color_mip0.png"), dtype=np.float32) / 255
    assert decoded.shape == (*source_alpha.shape, 4)
    agree = float(((decoded[..., 3] >= 0.5) == (source_alpha >= 0.5)).mean())
    assert agree > 0.8, agree

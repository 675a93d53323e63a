import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.func import functional_call
from typer.testing import CliRunner

from neuralbake.bakes.mipmap import (
    METHODS,
    LearnedMipChain,
    LearnedMipLevel,
    MaterialMaps,
    MipmapConfig,
    MipReferenceSampler,
    bake_mipmap,
    _decode_8bit,
    box_mip_chain,
    level_slices,
    load_material_maps,
    mirror_directions,
    orthonormal_basis,
    reference_chain,
    renormalised,
    sample_directions,
    shade_maps,
    shade_texels,
    toksvig_chain,
    toksvig_roughness,
    tone_mapped_loss,
)
from neuralbake.cli_mipmap import app
from neuralbake.errors import ConfigError, InputError
from neuralbake.material.gltf import gltf_eval
from neuralbake.nn.trainer import Trainer
from neuralbake.render.tonemap import tone_map_reinhard

runner = CliRunner()


def bumpy_normals(size: int, seed: int = 0, amplitude: float = 0.6) -> np.ndarray:
    """Unit normals of a sum of sines with periods of a few texels, encoded 0.5 n + 0.5."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size, 0:size].astype(np.float64)
    height = np.zeros((size, size))
    for _ in range(6):
        fx, fy = rng.integers(1, size // 4, 2)
        height += np.sin(2 * np.pi * (fx * x + fy * y) / size + rng.uniform(0, 2 * np.pi))
    n = np.stack((-amplitude * np.gradient(height, axis=1), -amplitude * np.gradient(height, axis=0), np.ones_like(height)), -1)
    n /= np.linalg.norm(n, axis=-1, keepdims=True)
    return 0.5 * n + 0.5


def write_maps(folder: Path, size: int = 32, *, normal_size: int | None = None, grey_normal: bool = False) -> tuple[Path, Path]:
    y, x = np.mgrid[0:size, 0:size] / size
    colour = np.stack((0.6 + 0.3 * x, 0.5 + 0.2 * y, 0.4 + 0 * x), -1)
    base = folder / "base.png"
    Image.fromarray(np.round(colour * 255).astype(np.uint8)).save(base)
    normal = folder / "normal.png"
    encoded = bumpy_normals(normal_size or size)
    if grey_normal:
        Image.fromarray(np.round(encoded[..., 0] * 255).astype(np.uint8), mode="L").save(normal)
    else:
        Image.fromarray(np.round(encoded * 255).astype(np.uint8)).save(normal)
    return base, normal


def small_config(base: Path, normal: Path, **overrides) -> MipmapConfig:
    config = MipmapConfig(base_color=str(base), normal=str(normal), device="cpu", held_out_directions=24)
    steps = overrides.pop("steps", 150)
    for key, value in overrides.items():
        setattr(config, key, value)
    config.train.steps = steps
    config.train.eval_every = 0
    return config


# -- shading --------------------------------------------------------------------------------------


def test_orthonormal_basis_is_a_right_handed_frame():
    n = torch.nn.functional.normalize(torch.randn(200, 3, dtype=torch.float64), dim=-1)
    n = torch.cat((n, torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0], [1.0, 0.0, 0.0]], dtype=torch.float64)))
    t, b = orthonormal_basis(n)
    frame = torch.stack((t, b, n), dim=1)
    assert torch.allclose(frame @ frame.transpose(1, 2), torch.eye(3, dtype=torch.float64).expand(len(n), 3, 3), atol=1e-12)
    assert torch.allclose(torch.linalg.det(frame), torch.ones(len(n), dtype=torch.float64), atol=1e-12)


def test_flat_normal_shading_is_the_brdf(device):
    generator = torch.Generator().manual_seed(3)
    directions = sample_directions(64, generator, torch.device("cpu"), specular_fraction=0.5).to(device)
    wi, wo = directions[:, :3], directions[:, 3:]
    normal = torch.tensor([[0.0, 0.0, 1.0]], device=device)
    base = torch.tensor([[0.7, 0.4, 0.2]], device=device)
    radiance = shade_texels(
        base, normal, torch.tensor([0.3], device=device), torch.tensor([0.5], device=device), wi, wo, light_intensity=2.0
    )
    expected = 2.0 * gltf_eval(wi, wo, base_color=base, metallic=0.5, roughness=0.3)
    expected = expected * ((wi[:, 2] > 0) & (wo[:, 2] > 0)).float()[:, None]
    assert radiance.shape == (64, 1, 3)
    assert torch.allclose(radiance[:, 0], expected, rtol=1e-5, atol=1e-6)


def test_tilted_normal_matches_the_brdf_in_the_tilted_frame():
    # Shading is rotation invariant: tilting the normal and both directions together changes nothing.
    angle = 0.4
    rot = torch.tensor(
        [[math.cos(angle), 0.0, math.sin(angle)], [0.0, 1.0, 0.0], [-math.sin(angle), 0.0, math.cos(angle)]], dtype=torch.float64
    )
    wi = torch.tensor([[0.3, 0.2, 0.93]], dtype=torch.float64)
    wo = torch.tensor([[-0.2, 0.1, 0.97]], dtype=torch.float64)
    wi, wo = torch.nn.functional.normalize(wi, dim=-1), torch.nn.functional.normalize(wo, dim=-1)
    normal = (rot @ torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64))[None]
    args = (
        torch.full((1, 3), 0.5, dtype=torch.float64),
        normal,
        torch.tensor([0.4], dtype=torch.float64),
        torch.tensor([0.0], dtype=torch.float64),
    )
    tilted = shade_texels(*args, wi @ rot.T, wo @ rot.T, light_intensity=1.0)
    flat = gltf_eval(wi, wo, base_color=0.5, metallic=0.0, roughness=0.4)
    assert torch.allclose(tilted[0], flat, rtol=1e-10)


def test_gradcheck_shade_texels():
    generator = torch.Generator().manual_seed(0)
    directions = sample_directions(3, generator, torch.device("cpu"), specular_fraction=0.5).double()
    directions[:, 2] = directions[:, 2].abs() + 0.2  # keep the lights above the surface for a smooth check
    directions[:, :3] = torch.nn.functional.normalize(directions[:, :3], dim=-1)
    base = torch.tensor([[0.6, 0.3, 0.2], [0.2, 0.5, 0.8]], dtype=torch.float64, requires_grad=True)
    normal = torch.nn.functional.normalize(torch.tensor([[0.2, -0.1, 1.0], [-0.3, 0.2, 1.0]], dtype=torch.float64), dim=-1).requires_grad_()
    roughness = torch.tensor([0.35, 0.6], dtype=torch.float64, requires_grad=True)
    metallic = torch.tensor([0.2, 0.9], dtype=torch.float64, requires_grad=True)

    def f(b, n, r, m):
        return shade_texels(b, n, r, m, directions[:, :3], directions[:, 3:], light_intensity=3.0)

    assert torch.autograd.gradcheck(f, (base, normal, roughness, metallic))


def test_gradcheck_shading_of_a_learned_mip_level():
    # The whole shading-of-mip path: texel parameters -> maps -> shading -> tone-mapped loss.
    rng = np.random.default_rng(1)
    init = MaterialMaps(
        torch.tensor(rng.uniform(0.2, 0.8, (2, 2, 3))),
        torch.nn.functional.normalize(torch.tensor(rng.normal([0, 0, 1], 0.2, (2, 2, 3))), dim=-1),
        torch.tensor(rng.uniform(0.3, 0.7, (2, 2, 1))),
        torch.tensor(rng.uniform(0.1, 0.9, (2, 2, 1))),
    )
    level = LearnedMipLevel(init, learn_metallic=True).double()
    chain = LearnedMipChain([init], light_intensity=4.0, learn_metallic=True).double()
    chain.levels[0] = level
    directions = torch.tensor([[0.3, 0.1, 0.95, -0.25, 0.05, 0.97], [-0.5, 0.3, 0.81, 0.1, -0.6, 0.79]], dtype=torch.float64)
    directions = torch.cat(
        (torch.nn.functional.normalize(directions[:, :3], dim=-1), torch.nn.functional.normalize(directions[:, 3:], dim=-1)), dim=1
    )
    target = torch.rand(2, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    loss = tone_mapped_loss([slice(0, 12)])
    names = [name for name, _ in chain.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in chain.parameters())
    assert names == ["levels.0.base_logit", "levels.0.slope", "levels.0.roughness_logit", "levels.0.metallic_logit"]

    def f(*values):
        shading = functional_call(chain, dict(zip(names, values)), (directions,))
        return shading, loss(shading, target)

    assert torch.autograd.gradcheck(f, params)


# -- filtering ------------------------------------------------------------------------------------


def test_box_chain_and_reference_are_footprint_averages():
    rng = np.random.default_rng(0)
    maps = MaterialMaps(*(torch.tensor(rng.uniform(0, 1, (8, 8, c)), dtype=torch.float32) for c in (3, 3, 1, 1)))
    chain = box_mip_chain(maps, 3)
    assert [lv.side for lv in chain] == [4, 2, 1]
    assert torch.allclose(chain[0].base_color[1, 2], maps.base_color[2:4, 4:6].mean(dim=(0, 1)))
    assert torch.allclose(chain[2].roughness[0, 0], maps.roughness.mean(dim=(0, 1)))
    full = torch.tensor(rng.uniform(0, 1, (2, 8, 8, 3)), dtype=torch.float32)
    ref = reference_chain(full, 3)
    slices = level_slices(8, 3)
    assert ref.shape == (2, (16 + 4 + 1) * 3)
    assert torch.allclose(ref[:, slices[2]], full.mean(dim=(1, 2)))


def test_toksvig_roughness():
    r = torch.tensor([0.2, 0.2, 0.5, 1.0])
    unit = torch.ones(4)
    assert torch.allclose(toksvig_roughness(r, unit), r)
    assert torch.allclose(toksvig_roughness(r, unit, variant="phong"), r, atol=1e-5)
    length = torch.tensor([0.9, 0.99, 0.95, 0.5])
    widened = toksvig_roughness(r, length)
    sigma2 = (1 - length) / length
    assert torch.allclose(widened**4, torch.clamp(r**4 + sigma2, max=1.0))
    assert torch.all(widened[:3] > r[:3]) and widened[3] == 1.0
    # For a sharp lobe Toksvig's Phong form adds about twice the variance.
    phong = toksvig_roughness(torch.tensor([0.1]), torch.tensor([0.9999]), variant="phong")
    assert abs(float(phong**4) - (0.1**4 + 2 * 1e-4 / 0.9999)) < 5e-6


def test_toksvig_chain_renormalises_and_widens():
    normals = torch.nn.functional.normalize(
        torch.tensor([[[0.5, 0.0, 1.0], [-0.5, 0.0, 1.0]], [[0.0, 0.5, 1.0], [0.0, -0.5, 1.0]]]), dim=-1
    )
    maps = MaterialMaps(torch.full((2, 2, 3), 0.5), normals, torch.full((2, 2, 1), 0.2), torch.zeros(2, 2, 1))
    (level,) = toksvig_chain(box_mip_chain(maps, 1))
    assert torch.allclose(level.normal[0, 0], torch.tensor([0.0, 0.0, 1.0]))
    assert float(level.roughness) > 0.2


def test_trainer_steps_every_parameter_downhill():
    # The trainer's first Adam step is -lr * sign(grad) for every texel; a gradient whose strides
    # differ from its parameter's would make fused Adam step texels at random.
    maps = MaterialMaps(
        torch.full((8, 8, 3), 0.5),
        torch.tensor(bumpy_normals(8) * 2 - 1, dtype=torch.float32),
        torch.full((8, 8, 1), 0.3),
        torch.zeros(8, 8, 1),
    )
    config = MipmapConfig(base_color="x", normal="y", device="cpu")
    config.train.steps = 1
    chain = LearnedMipChain(box_mip_chain(maps, 2), light_intensity=5.0, learn_metallic=True)
    sampler = MipReferenceSampler(maps, 2, config)
    loss = tone_mapped_loss(level_slices(8, 2))
    before = [p.detach().clone() for p in chain.parameters()]
    batch = sampler.sample(torch.Generator().manual_seed(config.train.seed))
    grads = torch.autograd.grad(loss(chain(batch.inputs), batch.targets), list(chain.parameters()))
    Trainer(chain, sampler, loss, config.train, device=torch.device("cpu")).train_step()
    for old, new, grad in zip(before, chain.parameters(), grads):
        moved = (new.detach() - old)[grad.abs() > 1e-9]
        assert torch.all(moved * grad[grad.abs() > 1e-9] < 0)


# -- the bake -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_learned_mips_beat_box_and_toksvig_on_bumps(tmp_path):
    base, normal = write_maps(tmp_path, 32)
    report = bake_mipmap(small_config(base, normal, steps=150), tmp_path / "out", progress=False)
    for row in report["per_level"]:
        for baseline in ("box", "toksvig", "toksvig_phong"):
            assert row["learned"]["psnr_db"] > row[baseline]["psnr_db"] + 0.5, (row["level"], baseline)
            assert row["learned_8bit"]["psnr_db"] > row[baseline]["psnr_db"], (row["level"], baseline)
        assert row["learned"]["rmse_linear"] < row["box"]["rmse_linear"]
    assert report["learned_beats_box_every_level"] and report["learned_beats_toksvig_every_level"]


def test_mirror_like_texels_do_not_turn_black(tmp_path):
    # A shiny metal (roughness 0.05, GGX alpha 0.0025) with faint high-frequency bumps: every
    # texel's highlight is a narrow peak that the 16 random directions of a step seldom hit. With
    # raw slopes as parameters, one such hit moved a texel's normal ~10 Adam steps (~0.2) off,
    # far past its lobe, and it shaded black on the mirror pairs where the reference is bright.
    size = 32
    y, x = np.mgrid[0:size, 0:size] / size
    Image.fromarray(np.round(np.stack((0.8 + 0.1 * x, 0.6 + 0.2 * y, 0.4 + 0 * x), -1) * 255).astype(np.uint8)).save(tmp_path / "base.png")
    Image.fromarray(np.round(bumpy_normals(size, amplitude=0.02) * 255).astype(np.uint8)).save(tmp_path / "normal.png")
    mr = np.zeros((size, size, 3), np.uint8)
    mr[..., 1], mr[..., 2] = round(0.05 * 255), 255
    Image.fromarray(mr).save(tmp_path / "mr.png")
    config = small_config(tmp_path / "base.png", tmp_path / "normal.png", steps=300, roughness_map=str(tmp_path / "mr.png"))
    out = tmp_path / "out"
    report = bake_mipmap(config, out, progress=False)
    for row, mirror in zip(report["per_level"], report["per_level_mirror"]):
        assert row["learned"]["psnr_db"] > row["box"]["psnr_db"] - 0.5, (row["level"], row["learned"], row["box"])
        assert mirror["learned"]["psnr_db"] > mirror["box"]["psnr_db"] - 0.5, (row["level"], mirror["learned"], mirror["box"])
    # The shipped (8-bit) chain has no black holes the box chain lacks.
    maps, _ = load_material_maps(config)
    box = box_mip_chain(maps, report["levels"])
    directions = mirror_directions(torch.device("cpu"))
    wi, wo = directions[:, :3], directions[:, 3:]
    for k in range(1, 4):
        images = {}
        for name in ("base_color", "normal", "roughness", "metallic"):
            image = np.asarray(Image.open(out / "mips" / f"{name}_L{k}.png"), dtype=np.float32) / 255.0
            images[name] = image[..., :3] if name in ("base_color", "normal") else image.reshape(*image.shape[:2], 1)
        learned = _decode_8bit(images, torch.device("cpu"))
        reference = torch.nn.functional.avg_pool2d(
            shade_maps(maps, wi, wo, light_intensity=config.light_intensity).permute(0, 3, 1, 2), 2**k
        ).permute(0, 2, 3, 1)
        level_box = renormalised([box[k - 1]])[0]

        def black(radiance: torch.Tensor) -> float:
            return float((tone_map_reinhard(radiance).mean(dim=-1) < 0.02).float().mean())

        shaded = {name: shade_maps(m, wi, wo, light_intensity=config.light_intensity) for name, m in (("box", level_box), ("learned", learned))}
        assert black(shaded["learned"]) <= black(shaded["box"]) + 0.02, (k, black(shaded["learned"]), black(shaded["box"]), black(reference))


def test_bake_writes_chain_comparison_and_report(tmp_path):
    base, normal = write_maps(tmp_path, 16)
    out = tmp_path / "out"
    report = bake_mipmap(small_config(base, normal, steps=4, levels=2), out, progress=False)
    assert report["levels"] == 2 and [row["side"] for row in report["per_level"]] == [8, 4]
    for k in range(3):
        for name in ("base_color", "normal", "roughness"):
            assert (out / "mips" / f"{name}_L{k}.png").is_file()
    assert not list((out / "mips").glob("metallic_*"))  # constant metallic: nothing learned, nothing written
    assert Image.open(out / "mips" / "normal_L2.png").size == (4, 4)
    comparison = Image.open(out / "comparison.png")
    assert comparison.size == (2 * (4 * 128 + 3 * 4) + 16, 2 * 128 + 4)
    assert len(report["per_level_mirror"]) == 2 and "mean_mirror_psnr_learned_db" in report
    saved = json.loads((out / "report.json").read_text())
    assert saved["bake"] == "mipmap" and set(saved["per_level"][0]) == {"level", "side", *METHODS}
    assert json.loads((out / "config.json").read_text())["levels"] == 2
    assert (out / "loss.png").is_file()


def test_metallic_roughness_map_channels(tmp_path):
    base, normal = write_maps(tmp_path, 8)
    mr = np.zeros((8, 8, 3), np.uint8)
    mr[..., 1], mr[..., 2] = 128, 255
    Image.fromarray(mr).save(tmp_path / "mr.png")
    maps, facts = load_material_maps(MipmapConfig(base_color=str(base), normal=str(normal), roughness_map=str(tmp_path / "mr.png")))
    assert torch.allclose(maps.roughness, torch.full((8, 8, 1), 128 / 255)) and torch.all(maps.metallic == 1.0)
    assert facts["metallic_from_map"]
    maps, facts = load_material_maps(
        MipmapConfig(base_color=str(base), normal=str(normal), roughness_map=str(tmp_path / "mr.png"), metallic=0.25)
    )
    assert torch.all(maps.metallic == 0.25) and not facts["metallic_from_map"]
    Image.fromarray(np.full((8, 8), 51, np.uint8), mode="L").save(tmp_path / "r.png")
    maps, _ = load_material_maps(MipmapConfig(base_color=str(base), normal=str(normal), roughness_map=str(tmp_path / "r.png")))
    assert torch.allclose(maps.roughness, torch.full((8, 8, 1), 0.2))
    assert torch.allclose(torch.linalg.vector_norm(maps.normal, dim=-1), torch.ones(8, 8))


def test_bad_inputs_name_file_and_fix(tmp_path):
    base, normal = write_maps(tmp_path, 16, normal_size=32)
    with pytest.raises(InputError, match=r"normal\.png: normal: the map is 32x32 but the base colour map .* is 16x16"):
        load_material_maps(MipmapConfig(base_color=str(base), normal=str(normal)))
    odd = tmp_path / "odd"
    odd.mkdir()
    base, normal = write_maps(odd, 24)
    with pytest.raises(InputError, match="power-of-two side") as info:
        load_material_maps(MipmapConfig(base_color=str(base), normal=str(normal)))
    assert "Fix:" in str(info.value)
    grey = tmp_path / "grey"
    grey.mkdir()
    base, normal = write_maps(grey, 16, grey_normal=True)
    with pytest.raises(InputError, match="normal map has 1 channel"):
        load_material_maps(MipmapConfig(base_color=str(base), normal=str(normal)))
    with pytest.raises(InputError, match="does not exist"):
        load_material_maps(MipmapConfig(base_color=str(tmp_path / "missing.png"), normal=str(normal)))
    rect = tmp_path / "rect.png"
    Image.fromarray(np.zeros((16, 32, 3), np.uint8)).save(rect)
    with pytest.raises(InputError, match="32x16; mipmaps need a square"):
        load_material_maps(MipmapConfig(base_color=str(rect), normal=str(rect)))


def test_bad_config_values(tmp_path):
    base, normal = write_maps(tmp_path, 8)
    for overrides, field in [
        ({"size": 48}, "size"),
        ({"levels": 0}, "levels"),
        ({"roughness": 1.5}, "roughness"),
        ({"init": "lanczos"}, "init"),
        ({"directions_per_step": 0}, "directions_per_step"),
    ]:
        with pytest.raises(ConfigError) as info:
            small_config(base, normal, **overrides).validate()
        assert info.value.field == field
    config = small_config(base, normal)
    config.train.precision = "fp16"
    with pytest.raises(ConfigError, match="fp32"):
        config.validate()
    with pytest.raises(ConfigError, match="3 levels below it, 4 were asked"):
        bake_mipmap(small_config(base, normal, levels=4), tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()  # checked before anything is written


def test_cli_runs_and_reports_errors(tmp_path):
    base, normal = write_maps(tmp_path, 8)
    out = tmp_path / "cli"
    result = runner.invoke(app, [str(base), str(normal), "--out", str(out), "--steps", "3", "--device", "cpu", "--levels", "2", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "mean shaded PSNR" in result.output and (out / "report.json").is_file()
    result = runner.invoke(app, [str(base), "--out", str(out), "--quiet"])
    assert result.exit_code == 2 and "expected 2 or 3 maps" in result.output
    result = runner.invoke(app, [str(base), str(tmp_path / "nope.png"), "--out", str(out), "--quiet"])
    assert result.exit_code == 2 and "nope.png" in result.output


@pytest.mark.slow
@pytest.mark.needs_shared
def test_damaged_helmet_downscaled(shared_dir, tmp_path):
    helmet = shared_dir / "assets" / "DamagedHelmet"
    config = MipmapConfig(
        base_color=str(helmet / "Default_albedo.jpg"),
        normal=str(helmet / "Default_normal.jpg"),
        roughness_map=str(helmet / "Default_metalRoughness.jpg"),
        size=64,
        levels=4,
        device="cpu",
        held_out_directions=16,
        directions_per_step=8,
    )
    config.train.steps = 60
    config.train.eval_every = 0
    report = bake_mipmap(config, tmp_path / "helmet", progress=False)
    assert report["maps"]["source_size"] == [2048, 2048] and report["maps"]["metallic_from_map"]
    assert (tmp_path / "helmet" / "mips" / "metallic_L4.png").is_file()
    for baseline in ("box", "toksvig"):
        assert report["mean_psnr_learned_db"] > report[f"mean_psnr_{baseline}_db"] + 1.0


def test_size_is_capped_and_memory_checked_before_work(tmp_path, monkeypatch):
    import neuralbake.io.limits as limits
    from neuralbake.bakes.mipmap import MAX_SIZE, estimated_bake_bytes

    base, normal = write_maps(tmp_path, 8)
    for size in (65536, MAX_SIZE * 2, True):
        with pytest.raises(ConfigError) as info:
            small_config(base, normal, size=size).validate()
        assert info.value.field == "size"
    small_config(base, normal, size=MAX_SIZE).validate()
    result = runner.invoke(app, [str(base), str(normal), "--size", "65536", "--out", str(tmp_path / "cli"), "--device", "cpu", "--quiet"])
    assert result.exit_code == 2 and "16384" in result.output, result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "cli").exists()
    # the estimate grows with the texels and the directions, and a 16K bake is far beyond a usual machine
    config = small_config(base, normal)
    assert estimated_bake_bytes(MAX_SIZE, config) > 4 * estimated_bake_bytes(MAX_SIZE // 2, config) * 0.9 > 100 * 2**30
    monkeypatch.setattr(limits, "available_memory_bytes", lambda: 2**20)
    with pytest.raises(InputError) as info:
        bake_mipmap(small_config(base, normal, steps=2, size=16), tmp_path / "out", progress=False)
    assert info.value.field == "size" and "GiB" in str(info.value)
    assert not (tmp_path / "out").exists()  # refused before anything is written
    monkeypatch.setattr(limits, "available_memory_bytes", lambda: 2**40)
    bake_mipmap(small_config(base, normal, steps=2, levels=1), tmp_path / "ok", progress=False)


def test_resume_refuses_a_checkpoint_of_absolute_slopes(tmp_path):
    from neuralbake.errors import TrainingError

    base, normal = write_maps(tmp_path, 8)
    out = tmp_path / "out"
    config = small_config(base, normal, steps=2, levels=1)
    config.train.checkpoint_every = 1
    bake_mipmap(config, out, progress=False)
    state = torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=True)
    assert state["compatibility"]["slope_parameterisation"] == "offset_in_alpha_units"
    bake_mipmap(config, out, resume=True, progress=False)  # a checkpoint of this version resumes
    del state["compatibility"]["slope_parameterisation"]  # as written before slopes became offsets
    torch.save(state, out / "checkpoint.pt")
    with pytest.raises(TrainingError, match="older neuralbake that stored absolute normal slopes") as info:
        bake_mipmap(config, out, resume=True, progress=False)
    assert info.value.field == "slope_parameterisation" and "without --resume" in str(info.value)

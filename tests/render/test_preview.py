"""Tests of the material preview renderer: furnace and closed-form checks that prove the estimator
unbiased, a chi-square test of the environment sampler, file output, determinism and errors."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import OpenEXR
import pytest
import torch
from PIL import Image
from scipy import stats

from neuralbake.errors import InputError
from neuralbake.material import layer
from neuralbake.render import (
    EnvironmentLight,
    default_environment,
    direction_to_equirect,
    equirect_to_direction,
    load_environment,
    render_preview,
    write_preview,
)


def lambert(albedo: tuple[float, float, float]):
    colour = torch.tensor(albedo)

    def material(uv: torch.Tensor, normal: torch.Tensor):
        return layer("lambert", {"albedo": colour.to(uv.device).expand(uv.shape[0], 3)})

    return material


def lumpy_environment() -> torch.Tensor:
    """The default sky at 32x16 with a multiplicative pattern, so no two rows weigh the same."""
    env = default_environment(32, 16)
    v, u = torch.meshgrid(torch.linspace(0, 1, 16), torch.linspace(0, 1, 32), indexing="ij")
    return env * (1.2 + torch.sin(7.0 * u + 3.0 * v))[..., None]


def test_equirect_mapping_round_trip() -> None:
    d = torch.nn.functional.normalize(torch.randn(100, 3, generator=torch.Generator().manual_seed(0)), dim=-1)
    u, v = direction_to_equirect(d)
    assert torch.allclose(equirect_to_direction(u, v), d, atol=1e-5)
    u0, v0 = direction_to_equirect(torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, -1.0]]))
    assert v0[0] == 0.0 and u0[1] == pytest.approx(0.5) and v0[1] == pytest.approx(0.5)


@pytest.mark.parametrize("scene", ["sphere", "tile"])
def test_white_furnace(scene: str, device: torch.device) -> None:
    # A white Lambert surface under radiance 1 from everywhere reflects exactly 1 in every direction.
    images = render_preview(
        lambert((1.0, 1.0, 1.0)), size=16, spp=16, light="environment", environment=torch.ones(8, 16, 3), scenes=(scene,), device=device
    )
    covered = images.coverage[scene] > 0.0
    assert covered.sum() > 100
    values = images[scene][covered]
    error = (values - 1.0).abs()
    # Per-pixel Monte Carlo error at 16 spp is a few percent; the mean over ~3000 samples is tight.
    assert abs(float(values.mean()) - 1.0) < 0.01
    assert float(error.max()) < 0.15


def test_mis_is_unbiased_under_a_non_uniform_sky() -> None:
    # Every fully covered tile pixel sees the tile's one normal (+y), so a white Lambert tile has
    # radiance E / pi with E the map's cosine-weighted integral, computed here by brute force.
    env = lumpy_environment()
    h, w, _ = env.shape
    sub = 16
    v = (torch.arange(h * sub, dtype=torch.float64) + 0.5) / (h * sub)
    u = (torch.arange(w * sub, dtype=torch.float64) + 0.5) / (w * sub)
    vv, uu = torch.meshgrid(v, u, indexing="ij")
    d = equirect_to_direction(uu.reshape(-1), vv.reshape(-1))
    radiance = env.double().repeat_interleave(sub, 0).repeat_interleave(sub, 1).reshape(-1, 3)
    solid_angle = (2 * math.pi / (w * sub)) * (math.pi / (h * sub)) * torch.sin(math.pi * vv.reshape(-1))
    expected = (radiance * (torch.clamp(d[:, 1], min=0.0) * solid_angle)[:, None]).sum(0) / math.pi
    images = render_preview(lambert((1.0, 1.0, 1.0)), size=16, spp=32, light="environment", environment=env, scenes=("tile",))
    full = images.coverage["tile"] == 1.0
    assert full.sum() > 50
    mean = images["tile"][full].double().mean(0)
    assert torch.allclose(mean, expected, rtol=0.01), (mean, expected)


def test_environment_pdf_integrates_to_one_and_matches_sample() -> None:
    light = EnvironmentLight.from_map(lumpy_environment())
    # Midpoint rule on a grid 4x finer than the map: pdf sin(theta) is constant per map pixel.
    n_v, n_u = 64, 128
    v = (torch.arange(n_v) + 0.5) / n_v
    u = (torch.arange(n_u) + 0.5) / n_u
    vv, uu = torch.meshgrid(v, u, indexing="ij")
    d = equirect_to_direction(uu.reshape(-1), vv.reshape(-1))
    d_omega = (2 * math.pi / n_u) * (math.pi / n_v) * torch.sin(math.pi * vv.reshape(-1))
    assert float((light.pdf(d) * d_omega).sum()) == pytest.approx(1.0, abs=1e-4)
    samples, pdf = light.sample(torch.rand(4096, 2, generator=torch.Generator().manual_seed(1)))
    assert torch.allclose(torch.linalg.vector_norm(samples, dim=-1), torch.ones(4096), atol=1e-5)
    assert torch.allclose(pdf, light.pdf(samples), rtol=1e-4)


def test_environment_sampler_chi_square() -> None:
    light = EnvironmentLight.from_map(lumpy_environment())
    n = 40_000
    d, _ = light.sample(torch.rand(n, 2, generator=torch.Generator().manual_seed(2)))
    u, v = direction_to_equirect(d)
    # Coarse 8 x 8 bins (2 x 4 map pixels each): observed against the pmf's mass per bin.
    col = torch.clamp((u * 8).long(), 0, 7)
    row = torch.clamp((v * 8).long(), 0, 7)
    observed = torch.bincount(row * 8 + col, minlength=64).double()
    expected = light.pmf.double().reshape(8, 2, 8, 4).sum(dim=(1, 3)).reshape(-1) * n
    keep = expected > 5.0
    rest = (~keep).any()
    obs = torch.cat((observed[keep], observed[~keep].sum()[None])) if rest else observed[keep]
    exp = torch.cat((expected[keep], expected[~keep].sum()[None])) if rest else expected[keep]
    p_value = stats.chisquare(obs.numpy(), exp.numpy() * obs.sum().item() / exp.sum().item()).pvalue
    assert p_value > 0.01


def test_environment_samples_find_the_sun() -> None:
    env = default_environment(64, 32)
    light = EnvironmentLight.from_map(env)
    sun = env.sum(-1) > 20.0  # the disc is hundreds of times brighter than the sky
    d, _ = light.sample(torch.rand(20_000, 2, generator=torch.Generator().manual_seed(3)))
    u, v = direction_to_equirect(d)
    hit_sun = sun[torch.clamp((v * 32).long(), max=31), torch.clamp((u * 64).long(), max=63)].double().mean()
    assert 0.3 < float(hit_sun) == pytest.approx(float(light.pmf[sun].sum()), abs=0.02)


def test_directional_light_closed_form() -> None:
    albedo, irradiance = (0.8, 0.5, 0.2), (2.0, 1.0, 0.5)
    direction = torch.tensor([0.3, 0.8, 0.2])
    images = render_preview(lambert(albedo), size=16, spp=4, light="directional", light_direction=direction, light_irradiance=irradiance)
    cos = float(direction[1] / direction.norm())
    expected = torch.tensor(albedo) * torch.tensor(irradiance) * cos / math.pi
    full = images.coverage["tile"] == 1.0
    assert full.sum() > 50
    assert torch.allclose(images["tile"][full], expected.expand(int(full.sum()), 3), rtol=1e-5)
    # On the sphere the centre pixel's normal is close to +z: cos is about the light's z.
    centre = images["sphere"][8, 8]
    assert torch.all(centre > 0.0) and torch.all(images["sphere"][images.coverage["sphere"] == 0.0] == 0.18)


def test_write_preview_exr_round_trip(tmp_path: Path) -> None:
    images = render_preview(lambert((0.7, 0.6, 0.5)), size=8, spp=4)
    written = write_preview(images, tmp_path / "out")
    for scene in ("sphere", "tile"):
        with OpenEXR.File(str(written[f"{scene}.exr"])) as exr:
            pixels = exr.channels()["RGB"].pixels
        assert pixels.dtype == np.float32
        np.testing.assert_array_equal(pixels, images[scene].numpy())
        assert Image.open(written[f"{scene}.png"]).size == (8, 8)
    assert Image.open(written["preview.png"]).size == (8 + 4 + 8, 8)
    assert not list((tmp_path / "out").glob("*.partial")) and not list((tmp_path / "out").glob(".*"))


def test_deterministic_for_a_seed() -> None:
    kwargs = {"size": 8, "spp": 4, "environment": lumpy_environment(), "chunk_size": 64}
    a = render_preview(lambert((0.5, 0.5, 0.5)), seed=7, **kwargs)
    b = render_preview(lambert((0.5, 0.5, 0.5)), seed=7, **kwargs)
    c = render_preview(lambert((0.5, 0.5, 0.5)), seed=8, **kwargs)
    assert all(torch.equal(a[s], b[s]) for s in ("sphere", "tile"))
    assert not torch.equal(a["sphere"], c["sphere"])
    d = render_preview(lambert((0.5, 0.5, 0.5)), seed=7, **{**kwargs, "chunk_size": 1 << 16})
    assert all(torch.equal(a[s], d[s]) for s in ("sphere", "tile"))  # chunking does not change the image
    assert a.stats["bsdf_evaluations"] > 0 and a.stats["bsdf_evaluations_per_second"] > 0


def _write_hdr(path: Path, rgbe: np.ndarray) -> None:
    h, w, _ = rgbe.shape
    path.write_bytes(b"#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n" + f"-Y {h} +X {w}\n".encode() + rgbe.astype(np.uint8).tobytes())


def _write_hdr_rle(path: Path, rgbe: np.ndarray) -> None:
    """New-style run-length scanlines: constant channels as runs, the others as literal bytes."""
    h, w, _ = rgbe.shape
    body = bytearray()
    for row in rgbe.astype(np.uint8):
        body += bytes((2, 2, w >> 8, w & 255))
        for channel in row.T:
            if np.all(channel == channel[0]):
                body += bytes((128 + w, channel[0]))
            else:
                body += bytes((w,)) + channel.tobytes()
    path.write_bytes(b"#?RADIANCE\n\n" + f"-Y {h} +X {w}\n".encode() + bytes(body))


def test_load_environment_formats(tmp_path: Path) -> None:
    rle = np.random.default_rng(1).integers(1, 255, size=(2, 9, 4)).astype(np.uint8)
    rle[..., 3] = 130
    _write_hdr_rle(tmp_path / "rle.hdr", rle)
    assert np.array_equal(load_environment(tmp_path / "rle.hdr").numpy(), rle[..., :3].astype(np.float32) * 2.0 ** (130 - 136))
    rgbe = np.zeros((3, 4, 4), dtype=np.uint8)
    rgbe[..., 0], rgbe[..., 3] = 128, 129  # 128 * 2^(129 - 136) = 1 in red
    _write_hdr(tmp_path / "sky.hdr", rgbe)
    hdr = load_environment(tmp_path / "sky.hdr")
    assert hdr.shape == (3, 4, 3) and torch.allclose(hdr[..., 0], torch.ones(3, 4)) and torch.all(hdr[..., 1:] == 0.0)
    data = np.random.default_rng(0).random((4, 8, 3), dtype=np.float32) * 5.0
    OpenEXR.File({}, {"RGB": data}).write(str(tmp_path / "sky.exr"))
    assert np.array_equal(load_environment(tmp_path / "sky.exr").numpy(), data)
    OpenEXR.File({}, {"Y": np.ascontiguousarray(data[..., 0])}).write(str(tmp_path / "grey.exr"))
    assert np.array_equal(load_environment(tmp_path / "grey.exr").numpy(), np.repeat(data[..., :1], 3, axis=2))
    OpenEXR.File({}, {"Z": np.ascontiguousarray(data[..., 0])}).write(str(tmp_path / "depth.exr"))
    with pytest.raises(InputError, match="depth.exr.*no R, G, B"):
        load_environment(tmp_path / "depth.exr")
    Image.fromarray(np.full((4, 8, 3), 255, dtype=np.uint8)).save(tmp_path / "sky.png")
    assert torch.allclose(load_environment(tmp_path / "sky.png"), torch.ones(4, 8, 3))


@pytest.mark.parametrize(
    "name, content", [("bad.exr", b"not an exr at all"), ("bad.hdr", b"#?RADIANCE\n\n-Y 4 +X 4\n\x01"), ("bad.png", b"nope")]
)
def test_bad_environment_file_is_an_input_error(tmp_path: Path, name: str, content: bytes) -> None:
    (tmp_path / name).write_bytes(content)
    with pytest.raises(InputError, match=name):
        render_preview(lambert((0.5, 0.5, 0.5)), size=4, spp=1, environment=tmp_path / name)
    with pytest.raises(InputError, match="does not exist"):
        render_preview(lambert((0.5, 0.5, 0.5)), size=4, spp=1, environment=tmp_path / "missing.exr")


def test_bad_arguments_are_input_errors() -> None:
    with pytest.raises(InputError, match="light"):
        render_preview(lambert((0.5, 0.5, 0.5)), size=4, spp=1, light="sun")
    with pytest.raises(InputError, match="layer"):
        render_preview(lambda uv, n: 0.5, size=4, spp=1, light="directional")
    with pytest.raises(InputError, match="negative"):
        render_preview(lambert((0.5, 0.5, 0.5)), size=4, spp=1, environment=-torch.ones(4, 8, 3))

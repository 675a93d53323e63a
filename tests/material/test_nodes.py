"""Texture and procedural nodes: bilinear sampling and wrap modes, the sRGB transfer function,
texture loading, normal maps and height-to-normal, noise determinism/range/continuity, ramps and
math nodes, and autograd checks of the differentiable ones."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.autograd import gradcheck

from neuralbake.errors import ConfigError, InputError
from neuralbake.io.images import load_image
from neuralbake.material import (
    decode_normal_map,
    fbm,
    height_to_normal,
    lerp,
    linear_to_srgb,
    load_texture,
    math_node,
    perlin_noise,
    power,
    ramp,
    sample_texture,
    smoothstep,
    srgb_to_linear,
    up_facing,
    value_noise,
    worley_noise,
)

F64 = torch.float64


def _texture(h: int = 4, w: int = 5, c: int = 3, seed: int = 0) -> torch.Tensor:
    return torch.rand(h, w, c, generator=torch.Generator().manual_seed(seed), dtype=F64)


def _centre(i: int, j: int, h: int, w: int) -> list[float]:
    return [(j + 0.5) / w, (i + 0.5) / h]


# --- bilinear sampling --------------------------------------------------------------------------


@pytest.mark.parametrize("wrap", ["repeat", "clamp", "mirror"])
def test_exact_at_texel_centres(wrap: str) -> None:
    tex = _texture()
    h, w, _ = tex.shape
    uv = torch.tensor([_centre(i, j, h, w) for i in range(h) for j in range(w)], dtype=F64)
    torch.testing.assert_close(sample_texture(tex, uv, wrap=wrap), tex.reshape(h * w, -1), rtol=0.0, atol=1e-12)


def test_linear_between_texel_centres() -> None:
    tex = _texture()
    h, w, _ = tex.shape
    for t in (0.25, 0.5, 0.8):
        a, b = _centre(1, 2, h, w), _centre(1, 3, h, w)
        along_u = sample_texture(tex, torch.tensor([[a[0] + t / w, a[1]]], dtype=F64))
        torch.testing.assert_close(along_u[0], (1 - t) * tex[1, 2] + t * tex[1, 3])
        along_v = sample_texture(tex, torch.tensor([[a[0], a[1] + t / h]], dtype=F64))
        torch.testing.assert_close(along_v[0], (1 - t) * tex[1, 2] + t * tex[2, 2])
        assert b[0] > a[0]
    # The middle of four centres is their mean.
    mid = sample_texture(tex, torch.tensor([[3.0 / w, 2.0 / h]], dtype=F64))
    torch.testing.assert_close(mid[0], tex[1:3, 2:4].reshape(4, -1).mean(dim=0))


def test_fp16_textures_are_sampled_with_fp32_coordinates() -> None:
    """u x 1024 in fp16 keeps half a texel: the weights must come from fp32 coordinates, only the taps are fp16."""
    g = torch.Generator().manual_seed(3)
    tex = torch.randn(1024, 1024, 4, generator=g)
    uv = torch.rand(500, 2, generator=g)
    half = sample_texture(tex.half(), uv)
    assert half.dtype == torch.float16
    exact = sample_texture(tex.half().float(), uv)  # the same fp16 texels, sampled in fp32
    assert float((half.float() - exact).abs().max()) <= 4e-3  # fp16 rounding of the result (|values| < 5)


def test_wrap_modes() -> None:
    tex = _texture()
    h, w, _ = tex.shape
    uv = torch.rand(64, 2, generator=torch.Generator().manual_seed(1), dtype=F64)
    inside = sample_texture(tex, uv, wrap="repeat")
    # repeat: period 1.
    torch.testing.assert_close(sample_texture(tex, uv + torch.tensor([1.0, -2.0], dtype=F64), wrap="repeat"), inside)
    # mirror: symmetric about 0 and about 1, period 2.
    mirror = sample_texture(tex, uv, wrap="mirror")
    torch.testing.assert_close(sample_texture(tex, -uv, wrap="mirror"), mirror)
    torch.testing.assert_close(sample_texture(tex, 2.0 - uv, wrap="mirror"), mirror)
    torch.testing.assert_close(sample_texture(tex, uv + 2.0, wrap="mirror"), mirror)
    # clamp: beyond the edge centres the edge texel repeats.
    far = torch.tensor([[-3.0, -3.0], [5.0, 0.5 / h], [0.5 / w, 7.0]], dtype=F64)
    torch.testing.assert_close(sample_texture(tex, far, wrap="clamp"), torch.stack((tex[0, 0], tex[0, w - 1], tex[h - 1, 0])))
    # repeat blends the last and first texels across the seam, clamp does not.
    seam = torch.tensor([[0.0, 0.5 / h]], dtype=F64)
    torch.testing.assert_close(sample_texture(tex, seam, wrap="repeat")[0], 0.5 * (tex[0, 0] + tex[0, w - 1]))
    torch.testing.assert_close(sample_texture(tex, seam, wrap="clamp")[0], tex[0, 0])
    torch.testing.assert_close(sample_texture(tex, seam, wrap="mirror")[0], tex[0, 0])


def test_sampling_errors_name_the_field() -> None:
    with pytest.raises(ConfigError, match="wrap.*unknown wrap mode"):
        sample_texture(_texture(), torch.zeros(1, 2, dtype=F64), wrap="border")
    with pytest.raises(InputError, match="uv"):
        sample_texture(_texture(), torch.zeros(3, dtype=F64))
    with pytest.raises(InputError, match="texture"):
        sample_texture(torch.zeros(4, 4, dtype=F64), torch.zeros(1, 2, dtype=F64))


def test_bilinear_gradcheck_texels_and_uv() -> None:
    tex = _texture(3, 4, 2).requires_grad_(True)
    # Away from texel-centre lines, where the uv gradient jumps.
    uv = torch.tensor([[0.31, 0.27], [0.93, 0.61], [-0.2, 1.3]], dtype=F64, requires_grad=True)
    for wrap in ("repeat", "clamp", "mirror"):
        assert gradcheck(lambda t, c, mode=wrap: sample_texture(t, c, wrap=mode), (tex, uv))


# --- colour -------------------------------------------------------------------------------------


def test_srgb_decode_known_values() -> None:
    encoded = torch.tensor([0.0, 0.04045, 0.5, 1.0, 188.0 / 255.0], dtype=F64)
    # 0.5 -> 0.214041 and 188/255 -> 0.502886 from the IEC 61966-2-1 formula; the knee maps
    # 0.04045 to 0.04045 / 12.92 = 0.0031308 from both sides.
    expected = torch.tensor([0.0, 0.04045 / 12.92, 0.21404114, 1.0, 0.50288646], dtype=F64)
    torch.testing.assert_close(srgb_to_linear(encoded), expected, rtol=0.0, atol=1e-7)
    x = torch.linspace(0.0, 1.0, 1001, dtype=F64)
    torch.testing.assert_close(linear_to_srgb(srgb_to_linear(x)), x)
    assert (srgb_to_linear(x)[1:] > srgb_to_linear(x)[:-1]).all()


def test_load_texture_decodes_srgb(tiny_png: Path) -> None:
    array, _ = load_image(tiny_png)
    raw = load_texture(tiny_png, srgb=False, dtype=F64)
    torch.testing.assert_close(raw, torch.from_numpy(array).double())
    torch.testing.assert_close(load_texture(tiny_png, dtype=F64), srgb_to_linear(raw))


def test_load_texture_keeps_alpha_linear(tmp_path: Path) -> None:
    from PIL import Image

    path = tmp_path / "rgba.png"
    rgba = np.full((4, 4, 4), 128, dtype=np.uint8)
    Image.fromarray(rgba, mode="RGBA").save(path)
    tex = load_texture(path, dtype=F64)
    torch.testing.assert_close(tex[..., 3], torch.full((4, 4), 128.0 / 255.0, dtype=F64))
    torch.testing.assert_close(tex[..., 0], srgb_to_linear(torch.full((4, 4), 128.0 / 255.0, dtype=F64)))


def test_load_texture_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="missing.png.*does not exist"):
        load_texture(tmp_path / "missing.png")


# --- normals ------------------------------------------------------------------------------------


def test_normal_map_decode() -> None:
    texels = torch.rand(256, 3, generator=torch.Generator().manual_seed(2), dtype=F64) * 0.5 + torch.tensor([0.25, 0.25, 0.5], dtype=F64)
    n = decode_normal_map(texels)
    torch.testing.assert_close(n.norm(dim=-1), torch.ones(256, dtype=F64))
    flat = decode_normal_map(torch.tensor([[0.5, 0.5, 1.0]], dtype=F64))
    torch.testing.assert_close(flat, torch.tensor([[0.0, 0.0, 1.0]], dtype=F64))
    torch.testing.assert_close(decode_normal_map(texels, strength=0.0), torch.tensor([[0.0, 0.0, 1.0]], dtype=F64).expand(256, 3))
    # Strength tilts the normal further from +z, keeping its azimuth.
    strong = decode_normal_map(texels, strength=2.0)
    assert (strong[:, 2] <= n[:, 2] + 1e-12).all()
    torch.testing.assert_close(torch.atan2(strong[:, 1], strong[:, 0]), torch.atan2(n[:, 1], n[:, 0]))


def test_height_to_normal_of_plane_and_slope() -> None:
    uv = torch.rand(32, 2, generator=torch.Generator().manual_seed(3), dtype=F64)
    plane = height_to_normal(lambda p: torch.full_like(p[:, 0], 0.7), uv, scale=5.0)
    torch.testing.assert_close(plane, torch.tensor([[0.0, 0.0, 1.0]], dtype=F64).expand(32, 3))
    # z = 2 (0.5 u + 0.25 v): normal along (-1, -0.5, 1).
    slope = height_to_normal(lambda p: 0.5 * p[:, 0] + 0.25 * p[:, 1], uv, scale=2.0)
    expected = torch.tensor([[-1.0, -0.5, 1.0]], dtype=F64) / 1.5
    torch.testing.assert_close(slope, expected.expand(32, 3))
    # A height texture at one-texel steps: a ramp along u in a 8-wide texture rises 1/8 per texel.
    ramp_tex = (torch.arange(8, dtype=F64) / 8.0).reshape(1, 8, 1).expand(4, 8, 1).contiguous()
    inner = torch.tensor([[0.5, 0.5], [0.4, 0.2]], dtype=F64)
    n = height_to_normal(lambda p: sample_texture(ramp_tex, p, wrap="clamp")[:, 0], inner, step=1.0 / 8.0)
    torch.testing.assert_close(n, (torch.tensor([[-1.0, 0.0, 1.0]], dtype=F64) / math.sqrt(2.0)).expand(2, 3))


# --- noise --------------------------------------------------------------------------------------

NOISES = {
    "value": (value_noise, 0.0, 1.0),
    "perlin": (perlin_noise, -1.0, 1.0),
    "worley": (worley_noise, 0.0, math.sqrt(2.0)),
    "fbm": (lambda p, seed=0: fbm(p, octaves=4, seed=seed), -1.0, 1.0),
}


@pytest.mark.parametrize("name", list(NOISES))
def test_noise_is_deterministic_and_in_range(name: str) -> None:
    noise, lo, hi = NOISES[name]
    p = (torch.rand(4096, 2, generator=torch.Generator().manual_seed(4), dtype=F64) - 0.5) * 40.0
    a, b = noise(p, seed=3), noise(p.clone(), seed=3)
    assert torch.equal(a, b)
    assert not torch.allclose(a, noise(p, seed=4))
    assert lo <= a.min().item() and a.max().item() <= hi
    assert a.std() > 0.05  # not constant
    # The lattice randomness is integer arithmetic: float32 sees the same noise.
    torch.testing.assert_close(noise(p.float(), seed=3).double(), a, rtol=0.0, atol=2e-4)


@pytest.mark.parametrize("name", list(NOISES))
def test_noise_is_continuous(name: str) -> None:
    noise, _, _ = NOISES[name]
    p = (torch.rand(2048, 2, generator=torch.Generator().manual_seed(5), dtype=F64) - 0.5) * 20.0
    step = torch.tensor([1e-4, -0.7e-4], dtype=F64)
    # Lipschitz: a small step gives a proportionally small change (fBm's octaves raise the bound).
    assert (noise(p + step, seed=1) - noise(p, seed=1)).abs().max() < 30.0 * step.norm()


def test_perlin_is_zero_on_the_lattice_and_3d_works() -> None:
    cells = torch.randint(-50, 50, (100, 3), generator=torch.Generator().manual_seed(6)).double()
    assert perlin_noise(cells).abs().max() < 1e-12
    p = torch.rand(2048, 3, generator=torch.Generator().manual_seed(7), dtype=F64) * 10.0
    for values, lo, hi in ((perlin_noise(p), -1.0, 1.0), (value_noise(p), 0.0, 1.0), (worley_noise(p), 0.0, math.sqrt(3.0))):
        assert lo <= values.min() and values.max() <= hi and values.std() > 0.05


def test_noise_errors_name_the_field() -> None:
    with pytest.raises(InputError, match="p: noise points"):
        value_noise(torch.zeros(4, dtype=F64))
    with pytest.raises(InputError, match="jitter"):
        worley_noise(torch.zeros(4, 2, dtype=F64), jitter=1.5)
    with pytest.raises(InputError, match="octaves"):
        fbm(torch.zeros(4, 2, dtype=F64), octaves=0)


def test_noise_gradcheck() -> None:
    p = torch.tensor([[0.3, 1.7], [2.2, -0.4], [5.1, 3.3]], dtype=F64, requires_grad=True)
    gain = torch.tensor(0.55, dtype=F64, requires_grad=True)
    assert gradcheck(lambda x, g: fbm(x, octaves=3, gain=g), (p, gain))
    assert gradcheck(lambda x: value_noise(x) + worley_noise(x, seed=2), (p,))


# --- ramps, mix, math ---------------------------------------------------------------------------


def test_ramp_is_piecewise_linear_and_constant_outside() -> None:
    positions = [0.2, 0.5, 0.9]
    colours = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.5, 0.0], [1.0, 1.0, 1.0]], dtype=F64)
    x = torch.tensor([-1.0, 0.2, 0.35, 0.5, 0.7, 0.9, 3.0], dtype=F64)
    expected = torch.tensor([[0, 0, 0], [0, 0, 0], [0.5, 0.25, 0], [1, 0.5, 0], [1, 0.75, 0.5], [1, 1, 1], [1, 1, 1]], dtype=F64)
    torch.testing.assert_close(ramp(x, positions, colours), expected)
    torch.testing.assert_close(ramp(x, [0.0, 1.0], [2.0, 4.0]), torch.tensor([2.0, 2.4, 2.7, 3.0, 3.4, 3.8, 4.0], dtype=F64))
    with pytest.raises(InputError, match="positions"):
        ramp(x, [0.5, 0.2], colours[:2])


def test_math_nodes() -> None:
    x = torch.linspace(-0.5, 1.5, 21, dtype=F64)
    s = smoothstep(0.0, 1.0, x)
    assert s[0] == 0.0 and s[-1] == 1.0 and abs(smoothstep(0.0, 1.0, torch.tensor(0.5)).item() - 0.5) < 1e-12
    assert (s[1:] >= s[:-1]).all()
    torch.testing.assert_close(math_node("add", x, 1.0), x + 1.0)
    torch.testing.assert_close(math_node("invert", x), 1.0 - x)
    torch.testing.assert_close(math_node("clamp", x), x.clamp(0.0, 1.0))
    assert torch.isfinite(power(x, 0.5)).all()
    torch.testing.assert_close(lerp(2.0, 4.0, torch.tensor([0.0, 0.25, 1.0])), torch.tensor([2.0, 2.5, 4.0]))
    normals = torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]], dtype=F64)
    torch.testing.assert_close(up_facing(normals), torch.tensor([1.0, 0.0, 0.0], dtype=F64))
    with pytest.raises(ConfigError, match="op.*unknown math node 'divide'"):
        math_node("divide", x, x)


def test_ramp_mix_math_chain_gradcheck() -> None:
    x = torch.tensor([0.1, 0.37, 0.62, 0.88], dtype=F64, requires_grad=True)
    colours = torch.tensor([[0.2, 0.1, 0.0], [0.9, 0.5, 0.3], [0.3, 0.7, 0.6]], dtype=F64, requires_grad=True)
    positions = torch.tensor([0.0, 0.45, 1.0], dtype=F64, requires_grad=True)
    other = torch.tensor([0.5, 0.5, 0.5], dtype=F64, requires_grad=True)

    def chain(x_: torch.Tensor, c: torch.Tensor, pos: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        mask = smoothstep(0.05, 0.95, power(x_, 1.5))
        tinted = ramp(x_, pos, c)
        return math_node("multiply", lerp(tinted, o, mask[:, None]), 1.0 - 0.5 * mask[:, None])

    assert gradcheck(chain, (x, colours, positions, other))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_nodes_dtype_and_device(dtype: torch.dtype, device: torch.device) -> None:
    uv = torch.rand(16, 2, dtype=dtype, device=device)
    tex = torch.rand(4, 4, 3, dtype=dtype, device=device)
    outputs = [
        sample_texture(tex, uv, wrap="mirror"),
        srgb_to_linear(tex),
        decode_normal_map(tex.reshape(-1, 3)),
        height_to_normal(lambda p: fbm(p, octaves=2), uv),
        ramp(value_noise(uv * 4.0), [0.0, 1.0], torch.eye(3, dtype=dtype, device=device)[:2]),
        worley_noise(uv * 4.0),
        perlin_noise(uv * 4.0),
    ]
    for out in outputs:
        assert out.dtype == dtype and out.device.type == device.type and torch.isfinite(out).all()

"""Filtered sampling of an NTC set (the PyTorch reference of the exported shader): bilinear and trilinear blends of
decoded texels with repeat wrap, checked against the renderer's own bilinear sampler on the decoded levels, and the
stochastic filter's tap choice and expectation."""

from __future__ import annotations

import pytest
import torch

from neuralbake.bakes.ntc import (
    LATENT_SHAPES,
    ChannelGroup,
    NTCLayout,
    NTCModel,
    decode_all_levels,
    decode_texels,
    pack_container,
    read_container,
)
from neuralbake.bakes.ntc.decode import filter_taps, sample_filtered, sample_levels, sample_stochastic, stochastic_tap
from neuralbake.errors import ConfigError
from neuralbake.render.mip import sample_bilinear


@pytest.fixture(scope="module")
def container():
    """A 32x16 random set (4 channels), so width and height differ at every level."""
    groups = (ChannelGroup("base_color", ("R", "G", "B"), "color"), ChannelGroup("mask", ("R",), "data"))
    layout = NTCLayout(32, 16, groups, LATENT_SHAPES[len(LATENT_SHAPES) // 2], (16,), 2)
    generator = torch.Generator().manual_seed(3)
    model = NTCModel(layout, generator=generator)
    with torch.no_grad():
        model.latents_high.uniform_(-1, 1, generator=generator)
        model.latents_low.uniform_(-1, 1, generator=generator)
        model.layers[-1].bias.fill_(0.5)
    return read_container(pack_container(model))


def _queries(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(count, 2, generator=generator) * 4.0 - 1.5, torch.rand(count, generator=generator) * 8.0 - 1.0


def test_bilinear_is_the_renderers_bilinear_on_the_decoded_level(container):
    levels = [torch.from_numpy(level) for level in decode_all_levels(container)]
    uv, _ = _queries(400, seed=0)
    for k, level in enumerate(levels):
        expected = sample_bilinear(level, uv, wrap_s="repeat", wrap_t="repeat")
        for lod in (k - 0.4, k, k + 0.49):  # bilinear takes the nearest level
            actual = sample_filtered(container, uv, torch.full((len(uv),), float(lod)), filter="bilinear")
            torch.testing.assert_close(actual, expected, rtol=0, atol=2e-6)


def test_trilinear_blends_the_two_levels_around_lod_clamped_to_the_chain(container):
    levels = [torch.from_numpy(level) for level in decode_all_levels(container)]
    uv, lod = _queries(600, seed=1)
    last = len(levels) - 1
    clamped = lod.clamp(0, last)
    below = clamped.floor().long()
    t = (clamped - below)[:, None]
    expected = torch.zeros(len(uv), 4)
    for k in range(len(levels)):
        rows = below == k
        lower = sample_bilinear(levels[k], uv[rows])
        upper = sample_bilinear(levels[min(k + 1, last)], uv[rows])
        expected[rows] = lower * (1 - t[rows]) + upper * t[rows]
    assert (lod < 0).any() and (lod > last).any()
    torch.testing.assert_close(sample_filtered(container, uv, lod), expected, rtol=0, atol=2e-6)
    torch.testing.assert_close(sample_levels(levels, uv, lod), expected, rtol=0, atol=2e-6)


def test_texel_centres_at_a_whole_lod_are_the_texels(container):
    level, x, y = 2, torch.arange(8), torch.arange(8) % 4
    width, height = container.layout.level_sizes[level]
    uv = torch.stack(((x + 0.5) / width, (y + 0.5) / height), 1)
    expected = decode_texels(container, torch.full((8,), level), x, y)
    torch.testing.assert_close(sample_filtered(container, uv, torch.full((8,), 2.0)), expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(sample_filtered(container, uv + 1.0, torch.full((8,), 2.0)), expected, rtol=0, atol=1e-6)  # repeat


def test_taps_weigh_one_in_all_and_follow_the_documented_order(container):
    uv, lod = _queries(300, seed=2)
    level, x, y, weight = filter_taps(container.layout.level_sizes, uv, lod)
    torch.testing.assert_close(weight.sum(dim=1), torch.ones(300), rtol=0, atol=1e-6)
    assert (weight >= 0).all() and (level[:, :4] <= level[:, 4:]).all()
    sizes = torch.tensor(container.layout.level_sizes)
    assert (x < sizes[level, 0]).all() and (y < sizes[level, 1]).all() and (x >= 0).all() and (y >= 0).all()
    whole = filter_taps(container.layout.level_sizes, uv, torch.floor(lod))[3]
    assert (whole[:, 4:] == 0).all()  # a whole lod: only the level itself


def test_stochastic_taps_follow_the_weights(container):
    uv, lod = _queries(64, seed=3)
    weight = filter_taps(container.layout.level_sizes, uv, lod)[3]
    draws = 4000
    u = torch.rand(draws, 64, generator=torch.Generator().manual_seed(4))
    taps = torch.stack([stochastic_tap(weight, u[d]) for d in range(draws)])
    frequency = torch.stack([(taps == i).float().mean(dim=0) for i in range(8)], dim=1)
    assert (frequency[weight == 0] == 0).all()  # a tap of weight 0 is never decoded
    assert (frequency - weight).abs().max() < 4.5 * (0.25 / draws) ** 0.5
    edge = stochastic_tap(weight, torch.full((64,), 0.99999999))
    assert (weight.gather(1, edge[:, None]) > 0).all()


def test_the_stochastic_samples_expectation_is_the_filtered_sample(container):
    uv, lod = _queries(200, seed=5)
    level, x, y, weight = filter_taps(container.layout.level_sizes, uv, lod)
    texels = decode_texels(container, level.reshape(-1), x.reshape(-1), y.reshape(-1)).reshape(200, 8, -1)
    filtered = sample_filtered(container, uv, lod)
    torch.testing.assert_close((texels * weight[..., None]).sum(dim=1), filtered, rtol=0, atol=1e-6)
    generator = torch.Generator().manual_seed(6)
    mean = torch.stack([sample_stochastic(container, uv, lod, torch.rand(200, generator=generator)) for _ in range(150)]).mean(dim=0)
    spread = (texels - filtered[:, None]).abs().amax(dim=1)
    assert ((mean - filtered).abs() <= 5 * spread / 150**0.5 + 1e-6).all()
    assert (mean - filtered).mean().abs() < 2e-3


def test_an_unknown_filter_is_refused(container):
    with pytest.raises(ConfigError) as caught:
        sample_filtered(container, torch.zeros(1, 2), torch.zeros(1), filter="anisotropic")
    assert caught.value.field == "filter"

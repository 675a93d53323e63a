"""The decoder's input layout is one description: the PyTorch inputs and both generated shaders follow it."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from neuralbake.bakes.neural_material import model as nm_model
from neuralbake.bakes.neural_material.model import assemble_inputs, decoder_inputs
from neuralbake.export import neural_material_codegen, neural_material_tensor
from neuralbake.export.slang import SHADER_ACTIVATIONS
from neuralbake.io import neural_material_bundle
from neuralbake.io.neural_material_bundle import DecoderInputLayout, InputSegment, decoder_input_layout
from neuralbake.nn.activations import ACTIVATIONS, DEFAULT_LEAK

CHANNELS = 4
_STORE = re.compile(r"input(?:s)?\[(?:row \+ )?(\d+)u?\] = (?:half\()?(\w+)\.([xyz])\)?;")
_LATENT = re.compile(r"input(?:s)?\[(?:row \+ )?(\d+)u \+ (?:g \* 8u \+ )?c\] = (?:half\()?(?:latent|sums)\[c\]")


def _shader_inputs(lines: list[str], latent: torch.Tensor, wi: torch.Tensor, wo: torch.Tensor, width: int) -> torch.Tensor:
    """Run the generated input assignments on one point: the vector the shader hands its decoder."""
    values = {"wi": wi, "wo": wo, "half_feature": F.normalize(wi + wo, dim=0, eps=1e-8)}
    out = torch.full((width,), float("nan"))
    text = "\n".join(lines)
    for first in _LATENT.findall(text):
        out[int(first) : int(first) + latent.numel()] = latent
    for index, vector, component in _STORE.findall(text):
        out[int(index)] = values[vector]["xyz".index(component)]
    return out


def _layouts() -> list[DecoderInputLayout]:
    reordered = DecoderInputLayout(
        (
            InputSegment("wo", 0, 3, "direction", "identity"),
            InputSegment("latent", 3, CHANNELS, "latent", "identity"),
            InputSegment("half", 3 + CHANNELS, 3, "direction", "halfway"),
        )
    )
    return [decoder_input_layout(CHANNELS, ("wi", "wo")), decoder_input_layout(CHANNELS, ("half", "wo", "wi")), reordered]


@pytest.mark.parametrize("layout", _layouts(), ids=["wi-wo", "half-wo-wi", "directions-first"])
def test_pytorch_and_both_shaders_build_the_same_inputs(layout: DecoderInputLayout) -> None:
    generator = torch.Generator().manual_seed(3)
    latent = torch.randn(CHANNELS, generator=generator)
    wi, wo = F.normalize(torch.rand(2, 3, generator=generator) + 0.1, dim=1)
    expected = assemble_inputs(layout, latent[None], wi[None], wo[None])[0]
    material = SimpleNamespace(name="m", inputs=layout)
    scalar = neural_material_codegen._eval_code(material, "mod")
    for latent_format in ("fp16", "u8"):
        tensor = neural_material_tensor._inputs(material, "m", "mod", latent_format)
        assert torch.allclose(_shader_inputs(tensor, latent, wi, wo, layout.width), expected)
    assert torch.allclose(_shader_inputs(scalar, latent, wi, wo, layout.width), expected)


def test_decoder_inputs_follow_the_layout_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """``decoder_inputs`` reads the io description: a layout placing the directions first moves them there."""
    latent, wi, wo = torch.randn(2, CHANNELS), torch.randn(2, 3), torch.randn(2, 3)
    assert torch.equal(decoder_inputs(latent, wi, wo, ("wi", "wo")), torch.cat([latent, wi, wo], dim=1))
    monkeypatch.setattr(nm_model, "decoder_input_layout", lambda channels, names: _layouts()[2])
    assert torch.equal(decoder_inputs(latent, wi, wo, ("wo", "half"))[:, :3], wo)


def test_export_material_reads_the_manifest_layout() -> None:
    fields = {"latent.channels": CHANNELS, "architecture.direction_inputs": ["half", "wi"]}
    material = neural_material_bundle.ExportMaterial("m", None, None, fields, [], b"", [])  # type: ignore[arg-type]
    assert material.inputs == decoder_input_layout(CHANNELS, ("half", "wi"))
    assert [s.offset for s in material.inputs.segments] == [0, CHANNELS, CHANNELS + 3]


def test_unknown_direction_input_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown direction inputs"):
        decoder_input_layout(CHANNELS, ("wi", "normal"))


def test_manifest_vocabulary_agrees_with_nn_and_shaders() -> None:
    assert set(neural_material_bundle.MANIFEST_ACTIVATIONS) == set(ACTIVATIONS) == set(SHADER_ACTIVATIONS)
    assert neural_material_bundle.DEFAULT_LEAK == DEFAULT_LEAK

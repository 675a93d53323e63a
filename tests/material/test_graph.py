import copy
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from neuralbake.errors import InputError
from neuralbake.material.graph import MaterialGraph, compile_material

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "materials"
JSON_EXAMPLES = sorted(EXAMPLES.glob("*.json"))


def points(n: int, seed: int = 0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    uv = torch.rand(n, 2, generator=g, dtype=dtype)
    normal = torch.nn.functional.normalize(torch.randn(n, 3, generator=g, dtype=dtype), dim=1)
    wo = torch.nn.functional.normalize(torch.rand(n, 3, generator=g, dtype=dtype) + torch.tensor([0.0, 0.0, 0.3], dtype=dtype), dim=1)
    return uv, normal, wo, torch.rand(n, 2, generator=g, dtype=dtype)


def compile_dict(tmp_path: Path, document: dict) -> MaterialGraph:
    path = tmp_path / "m.json"
    path.write_text(json.dumps(document))
    return compile_material(path)


BASE = {"format": "neuralbake.material", "version": 1, "nodes": {}, "surface": {"lobe": "lambert", "params": {"albedo": [0.5, 0.5, 0.5]}}}


def test_examples_exist():
    assert {p.stem for p in JSON_EXAMPLES} >= {"antique_copper_tray", "rusty_iron_nail", "velvet"}


@pytest.mark.parametrize("path", JSON_EXAMPLES, ids=lambda p: p.stem)
def test_example_materials_evaluate_and_conserve_energy(path):
    material = compile_material(path)
    uv, normal, wo, u = points(8192)
    bsdf = material(uv, normal)
    wi, pdf = bsdf.sample(wo, u)
    value = bsdf.eval(wi, wo)
    assert value.shape == (8192, 3) and torch.isfinite(value).all() and (value >= 0).all()
    valid = pdf > 0
    albedo = (value[valid] / pdf[valid, None]).sum(0) / len(pdf)
    assert (albedo <= 1.02).all(), albedo
    torch.testing.assert_close(bsdf.pdf(wi, wo)[valid], pdf[valid], rtol=1e-4, atol=1e-6)
    features = material.texel_inputs(uv, normal)
    assert features.shape[0] == 8192 and torch.isfinite(features).all()


def test_copper_tray_masks_vary_over_the_surface():
    material = compile_material(EXAMPLES / "antique_copper_tray.json")
    uv, normal, wo, _ = points(4096)
    features = material.texel_inputs(uv, normal)
    varying = (features.std(0) > 1e-3).sum()
    assert varying >= 4  # patina colour, patina mask, dust mask, scratch mask at least
    # dust needs up-facing normals: facing down, the dust mask is zero
    up = material.texel_inputs(uv, torch.tensor([[0.0, 1.0, 0.0]]).expand(4096, 3))
    down = material.texel_inputs(uv, torch.tensor([[0.0, -1.0, 0.0]]).expand(4096, 3))
    assert not torch.equal(up, down)


def test_gradients_reach_document_constants():
    material = compile_material(EXAMPLES / "antique_copper_tray.json").requires_grad_()
    uv, normal, wo, u = points(512)
    wi = torch.nn.functional.normalize(torch.rand(512, 3) + torch.tensor([0.0, 0.0, 0.3]), dim=1)
    total = material(uv, normal).eval(wi, wo).sum()
    key = "surface.mix[0].mix[0].coat.mix[0].params.roughness"
    grads = torch.autograd.grad(total, [material.parameters[key], material.parameters["nodes.cavity.scale"]])
    assert all(torch.isfinite(g).all() and g.abs().sum() > 0 for g in grads)


def test_gradcheck_through_nodes_and_layers(tmp_path):
    document = copy.deepcopy(BASE)
    document["nodes"] = {
        "n": {"op": "noise", "type": "value", "scale": 3.0, "octaves": 2},
        "m": {"op": "smoothstep", "edge0": 0.2, "edge1": 0.8, "x": "@n"},
    }
    document["surface"] = {
        "mix": [{"lobe": "conductor", "params": {"metal": "Au", "roughness": 0.4}}, {"lobe": "lambert", "params": {"albedo": [0.3, 0.5, 0.2]}}],
        "mask": "@m",
    }
    path = tmp_path / "g.json"
    path.write_text(json.dumps(document))
    material = MaterialGraph(json.loads(path.read_text()), source=path, device="cpu", dtype=torch.float64)
    uv, normal, wo, _ = points(6, dtype=torch.float64)
    wi = torch.nn.functional.normalize(torch.rand(6, 3, dtype=torch.float64) + torch.tensor([0, 0, 0.3], dtype=torch.float64), dim=1)
    keys = ["nodes.m.edge1", "surface.mix[0].params.roughness", "surface.mix[1].params.albedo"]

    def f(*values):
        material.parameters.update(zip(keys, values))
        return material(uv, normal).eval(wi, wo)

    inputs = tuple(material.parameters[k].detach().clone().requires_grad_(True) for k in keys)
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-6)


def test_texture_node(tmp_path):
    data = np.zeros((2, 2, 3), dtype=np.uint8)
    data[0, 0] = [255, 0, 0]
    Image.fromarray(data).save(tmp_path / "t.png")
    document = copy.deepcopy(BASE)
    document["nodes"] = {"tex": {"op": "texture", "file": "t.png", "srgb": False, "wrap": "clamp"}}
    document["surface"]["params"]["albedo"] = "@tex"
    material = compile_dict(tmp_path, document)
    uv = torch.tensor([[0.25, 0.25], [0.75, 0.75]])
    features = material.texel_inputs(uv, torch.tensor([[0.0, 1.0, 0.0]] * 2))
    torch.testing.assert_close(features, torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]))


@pytest.mark.parametrize(
    "mutate, message, field",
    [
        (lambda d: d["nodes"].update(a={"op": "swirl"}, b={"op": "vortex"}), "'swirl', 'vortex'", "nodes.a.op"),
        (lambda d: d["nodes"].update(a={"op": "noise", "colour": 1}), "no input 'colour'", "nodes.a.colour"),
        (lambda d: d["nodes"].update(a={"op": "invert", "x": "@ghost"}), "names no node", "nodes.a"),
        (lambda d: d["nodes"].update(a={"op": "invert", "x": "@b"}, b={"op": "invert", "x": "@a"}), "cycle", "nodes."),
        (lambda d: d["surface"]["params"].update(albedo=[0.5, float("nan"), 0.5]), "not finite", "surface.params.albedo"),
        (lambda d: d["surface"].update(lobe="conductor", params={"metal": "Cu", "roughness": 1.7}), "outside [0, 1]", "surface.params.roughness"),
        (lambda d: d["surface"].update(lobe="conductor", params={"metal": "Unobtainium"}), "unknown metal", "surface.params.metal"),
        (lambda d: d["surface"]["params"].update(shininess=3), "no parameter 'shininess'", "surface.params.shininess"),
        (lambda d: d.pop("surface"), "no layers", "surface"),
        (lambda d: d.update(surface={"mix": [{"lobe": "lambert", "params": {"albedo": 0.5}}, {"lobe": "lambert", "params": {"albedo": 0.2}}]}), "needs a mask", "surface.mask"),
        (lambda d: d["nodes"].update(t={"op": "texture", "file": "missing.png"}), "does not exist", None),
        (lambda d: d["nodes"].update(a={"op": "noise", "octaves": 40}), "octaves", "nodes.a.octaves"),
    ],
)
def test_bad_documents_are_clear_errors(tmp_path, mutate, message, field):
    document = copy.deepcopy(BASE)
    mutate(document)
    with pytest.raises(InputError, match=re.escape(message)) as info:
        compile_dict(tmp_path, document)
    text = str(info.value)
    assert "Fix:" in text
    if field:
        assert field in text and "m.json" in text


def test_bad_json_and_format(tmp_path):
    (tmp_path / "bad.json").write_text("{ nope")
    with pytest.raises(InputError, match="not valid JSON"):
        compile_material(tmp_path / "bad.json")
    with pytest.raises(InputError, match="does not exist"):
        compile_material(tmp_path / "none.json")
    document = dict(BASE, format="something.else")
    with pytest.raises(InputError, match="format"):
        compile_dict(tmp_path, document)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.mtlx")), ids=lambda p: p.stem)
def test_example_mtlx_materials_compile_through_the_loader(path):
    from neuralbake.material.loader import load_material

    material = load_material(path)
    uv, normal, wo, u = points(4096)
    bsdf = material(uv, normal)
    wi, pdf = bsdf.sample(wo, u)
    value = bsdf.eval(wi, wo)
    assert torch.isfinite(value).all() and (value >= 0).all()
    valid = pdf > 0
    assert ((value[valid] / pdf[valid, None]).sum(0) / len(pdf) <= 1.03).all()


def test_loader_rejects_unknown_suffix(tmp_path):
    from neuralbake.material.loader import load_material

    (tmp_path / "m.yaml").write_text("x: 1")
    with pytest.raises(InputError, match="unknown material file type"):
        load_material(tmp_path / "m.yaml")


def test_examples_include_two_mtlx_and_five_in_all():
    assert len(list(EXAMPLES.glob("*.mtlx"))) >= 2 and len(list(EXAMPLES.glob("*.json")) + list(EXAMPLES.glob("*.mtlx"))) >= 5

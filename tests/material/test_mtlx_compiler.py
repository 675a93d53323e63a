"""MaterialX compiler: the 11 shared documents, gradients, node semantics, errors."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from neuralbake.errors import InputError
from neuralbake.material.mtlx_compiler import compile_materialx
from neuralbake.material.noise import perlin_noise, worley_noise

from ._support import hemisphere_directions

MATERIALX_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "materialx"

# Every shared document: None if it compiles, else the input its InputError must name.
SHARED_OUTCOMES = {
    "open_pbr_carpaint": None,
    "open_pbr_glass": None,
    "open_pbr_velvet": None,
    "standard_surface_carpaint": None,
    "standard_surface_chrome": None,
    "standard_surface_copper": None,
    "standard_surface_default": None,
    "standard_surface_gold": None,
    "standard_surface_marble_solid": None,
    "standard_surface_plastic": None,
    "standard_surface_velvet": None,
}


@pytest.fixture
def materialx_dir() -> Path:
    if not MATERIALX_DIR.is_dir():
        pytest.skip(f"{MATERIALX_DIR} is absent (the team's shared MaterialX examples; not shipped with neuralbake)")
    return MATERIALX_DIR


def _points(n: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    uv = torch.rand(n, 2, generator=g, dtype=torch.float64).to(dtype)
    normal = torch.tensor([[0.0, 0.0, 1.0]], dtype=dtype).expand(n, 3)
    position = (torch.rand(n, 3, generator=g, dtype=torch.float64) * 2.0 - 1.0).to(dtype)
    return uv, normal, position


def _write(tmp_path: Path, body: str, name: str = "doc.mtlx") -> Path:
    path = tmp_path / name
    path.write_text(f'<?xml version="1.0"?>\n<materialx version="1.39">\n{body}\n</materialx>\n')
    return path


def _surface(shader_inputs: str = "", extra: str = "", category: str = "standard_surface") -> str:
    return f"""{extra}
  <{category} name="SR_test" type="surfaceshader">{shader_inputs}</{category}>
  <surfacematerial name="M_test" type="material">
    <input name="surfaceshader" type="surfaceshader" nodename="SR_test" />
  </surfacematerial>"""


def _graph_colour(tmp_path: Path, nodes: str, last: str, last_type: str, uv, normal, position) -> torch.Tensor:
    """Compile a graph whose node ``last`` feeds base_color; return base_color at the points, [N, 3]."""
    if last_type == "float":
        nodes += f"""
    <convert name="as_colour" type="color3"><input name="in" type="float" nodename="{last}" /></convert>"""
        last = "as_colour"
    elif last_type == "vector3":
        nodes += f"""
    <convert name="as_colour" type="color3"><input name="in" type="vector3" nodename="{last}" /></convert>"""
        last = "as_colour"
    graph = f"""
  <nodegraph name="NG">{nodes}
    <output name="out" type="color3" nodename="{last}" />
  </nodegraph>"""
    shader = '<input name="base_color" type="color3" nodegraph="NG" output="out" />'
    material = compile_materialx(_write(tmp_path, _surface(shader, graph)), dtype=torch.float64)
    return material.shader_inputs(uv, normal, position)["base_color"]


# --- the shared documents -----------------------------------------------------------------------


@pytest.mark.needs_shared
@pytest.mark.parametrize("name", sorted(SHARED_OUTCOMES))
def test_shared_document_compiles_or_is_refused(materialx_dir: Path, name: str) -> None:
    path = materialx_dir / f"{name}.mtlx"
    refused = SHARED_OUTCOMES[name]
    if refused is not None:
        with pytest.raises(InputError, match=refused) as info:
            compile_materialx(path)
        assert "not supported" in str(info.value) and str(path) in str(info.value)
        return
    material = compile_materialx(path)
    assert material.source == str(path) and material.parameters
    assert all(t.is_leaf and not t.requires_grad for t in material.parameters.values())
    g = torch.Generator().manual_seed(1)
    n = 512
    uv, normal, position = _points(n)
    bsdf = material(uv, normal, position)
    value = bsdf.eval(hemisphere_directions(n, generator=g, dtype=torch.float32), hemisphere_directions(n, generator=g, dtype=torch.float32))
    assert value.shape == (n, 3) and torch.isfinite(value).all() and (value >= 0.0).all()
    # Directional albedo by importance sampling, at one shading point and three view angles.
    m = 2048
    uv1, normal1, position1 = uv[:1].expand(m, 2), normal[:1].expand(m, 3), position[:1].expand(m, 3)
    bsdf = material(uv1, normal1, position1)
    for cos_o in (0.95, 0.6, 0.2):
        wo = torch.tensor([[math.sqrt(1.0 - cos_o**2), 0.0, cos_o]]).expand(m, 3)
        wi, pdf = bsdf.sample(wo, torch.rand(m, 2, generator=g))
        ok = pdf > 0.0
        weight = torch.where(ok[:, None], bsdf.eval(wi, wo) / torch.where(ok, pdf, 1.0)[:, None], 0.0)
        albedo = weight.mean(dim=0)
        assert torch.isfinite(albedo).all() and (albedo >= 0.0).all()
        assert (albedo <= 1.03).all(), (name, cos_o, albedo)


@pytest.mark.needs_shared
def test_gradient_wrt_constant_and_graph_input(materialx_dir: Path) -> None:
    g = torch.Generator().manual_seed(2)
    n = 64
    uv, normal, position = _points(n)
    wi, wo = hemisphere_directions(n, generator=g, dtype=torch.float32), hemisphere_directions(n, generator=g, dtype=torch.float32)
    copper = compile_materialx(materialx_dir / "standard_surface_copper.mtlx")
    roughness = copper.parameters["SR_copper/specular_roughness"].requires_grad_()
    (grad,) = torch.autograd.grad(copper(uv, normal, position).eval(wi, wo).sum(), roughness)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0.0
    marble = compile_materialx(materialx_dir / "standard_surface_marble_solid.mtlx")
    scale = marble.parameters["NG_marble1/noise_scale_1"].requires_grad_()
    bias = marble.parameters["NG_marble1/bias/in2"].requires_grad_()
    grads = torch.autograd.grad(marble(uv, normal, position).eval(wi, wo).sum(), (scale, bias))
    assert all(torch.isfinite(gr).all() and gr.abs().sum() > 0.0 for gr in grads)


@pytest.mark.needs_shared
def test_gradcheck_float64(materialx_dir: Path) -> None:
    g = torch.Generator().manual_seed(3)
    n = 4
    uv, normal, position = _points(n, dtype=torch.float64)
    wi, wo = hemisphere_directions(n, generator=g, dtype=torch.float64), hemisphere_directions(n, generator=g, dtype=torch.float64)
    marble = compile_materialx(materialx_dir / "standard_surface_marble_solid.mtlx", dtype=torch.float64)
    keys = ("SR_marble1/specular_roughness", "NG_marble1/base_color_2", "NG_marble1/noise_power")
    start = tuple(marble.parameters[key].clone().requires_grad_() for key in keys)

    def render(*values: torch.Tensor) -> torch.Tensor:
        return marble(uv, normal, position, parameters=dict(zip(keys, values, strict=True))).eval(wi, wo)

    assert torch.autograd.gradcheck(render, start, eps=1e-6, atol=1e-6, rtol=1e-4)


# --- node semantics -----------------------------------------------------------------------------


def _geometry(n: int = 16) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    uv, _, position = _points(n, seed=5, dtype=torch.float64)
    normal = torch.nn.functional.normalize(position + torch.tensor([0.0, 0.0, 2.0], dtype=torch.float64), dim=-1)
    return uv, normal, position


def _scalar_node(body: str, category: str, out_type: str = "float") -> str:
    return f"""
    <{category} name="n" type="{out_type}">{body}</{category}>"""


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        (_scalar_node('<input name="in1" type="float" value="0.25" /><input name="in2" type="float" value="1.5" />', "add"), lambda uv, n, p: 1.75),
        (_scalar_node('<input name="in1" type="float" value="0.25" /><input name="in2" type="float" value="1.5" />', "subtract"), lambda uv, n, p: -1.25),
        (_scalar_node('<input name="in1" type="float" value="0.6" /><input name="in2" type="float" value="1.5" />', "divide"), lambda uv, n, p: 0.4),
        (_scalar_node('<input name="in1" type="float" value="0.5" /><input name="in2" type="float" value="3.0" />', "power"), lambda uv, n, p: 0.125),
        (_scalar_node('<input name="in" type="float" value="0.7" />', "sin"), lambda uv, n, p: math.sin(0.7)),
        (_scalar_node('<input name="in" type="float" value="0.7" />', "cos"), lambda uv, n, p: math.cos(0.7)),
        (_scalar_node('<input name="in" type="float" value="1.7" /><input name="high" type="float" value="0.9" />', "clamp"), lambda uv, n, p: 0.9),
        (
            _scalar_node('<input name="in" type="float" value="0.3" /><input name="low" type="float" value="0.2" /><input name="high" type="float" value="0.6" />', "smoothstep"),
            lambda uv, n, p: 0.25**2 * (3.0 - 2.0 * 0.25),
        ),
        (_scalar_node('<input name="value" type="float" value="0.3" />', "constant"), lambda uv, n, p: 0.3),
        (
            _scalar_node('<input name="in1" type="vector3" value="1, 2, 3" /><input name="in2" type="vector3" value="0.5, -1, 2" />', "dotproduct"),
            lambda uv, n, p: 0.5 - 2.0 + 6.0,
        ),
        (
            """
    <position name="p" type="vector3" />
    <dotproduct name="n" type="float"><input name="in1" type="vector3" nodename="p" /><input name="in2" type="vector3" value="1, 1, 1" /></dotproduct>""",
            lambda uv, n, p: p.sum(dim=-1, keepdim=True),
        ),
        (
            """
    <normal name="nrm" type="vector3" space="world" />
    <extract name="n" type="float"><input name="in" type="vector3" nodename="nrm" /><input name="index" type="integer" value="2" /></extract>""",
            lambda uv, n, p: n[:, 2:3],
        ),
        (
            """
    <texcoord name="t" type="vector2" />
    <extract name="n" type="float"><input name="in" type="vector2" nodename="t" /><input name="index" type="integer" value="1" /></extract>""",
            lambda uv, n, p: uv[:, 1:2],
        ),
        (
            """
    <texcoord name="t" type="vector2" />
    <ramplr name="n" type="float"><input name="valuel" type="float" value="0.2" /><input name="valuer" type="float" value="0.6" /><input name="texcoord" type="vector2" nodename="t" /></ramplr>""",
            lambda uv, n, p: 0.2 + 0.4 * uv[:, :1],
        ),
        (
            _scalar_node('<input name="valuet" type="float" value="0.9" /><input name="valueb" type="float" value="0.1" />', "ramptb"),
            lambda uv, n, p: 0.1 + 0.8 * uv[:, 1:2],
        ),
        (
            _scalar_node('<input name="amplitude" type="float" value="0.5" /><input name="pivot" type="float" value="0.25" />', "noise3d"),
            lambda uv, n, p: 0.5 * perlin_noise(p)[:, None] + 0.25,
        ),
        (
            _scalar_node('<input name="amplitude" type="float" value="2.0" /><input name="octaves" type="integer" value="2" /><input name="lacunarity" type="float" value="3.0" /><input name="diminish" type="float" value="0.25" />', "fractal3d"),
            lambda uv, n, p: 2.0 * (perlin_noise(p) + 0.25 * perlin_noise(3.0 * p))[:, None],
        ),
        (
            _scalar_node('<input name="amplitude" type="float" value="0.5" /><input name="pivot" type="float" value="0.5" />', "noise2d"),
            lambda uv, n, p: 0.5 * perlin_noise(uv)[:, None] + 0.5,
        ),
        (_scalar_node("", "worleynoise3d"), lambda uv, n, p: worley_noise(p)[:, None]),
        (
            _scalar_node('<input name="in" type="float" value="0.5" /><input name="low" type="float" value="0.5" /><input name="high" type="float" value="0.5" />', "smoothstep"),
            lambda uv, n, p: 1.0,
        ),
    ],
    ids=[
        "add", "subtract", "divide", "power", "sin", "cos", "clamp", "smoothstep", "constant", "dotproduct", "position",
        "normal-extract", "texcoord", "ramplr", "ramptb", "noise3d", "fractal3d", "noise2d", "worleynoise3d", "smoothstep-step",
    ],
)  # fmt: skip
def test_float_nodes(tmp_path: Path, nodes: str, expected) -> None:
    uv, normal, position = _geometry()
    got = _graph_colour(tmp_path, nodes, "n", "float", uv, normal, position)
    want = torch.as_tensor(expected(uv, normal, position), dtype=torch.float64).expand(len(uv), 1).expand(-1, 3)
    assert torch.allclose(got, want, atol=1e-12)


def test_colour_nodes(tmp_path: Path) -> None:
    uv, normal, position = _geometry()
    mixed = _graph_colour(
        tmp_path,
        """
    <mix name="m" type="color3">
      <input name="fg" type="color3" value="1, 0, 0.5" /><input name="bg" type="color3" value="0, 1, 0.5" />
      <input name="mix" type="float" value="0.25" />
    </mix>""",
        "m",
        "color3",
        uv,
        normal,
        position,
    )
    assert torch.allclose(mixed, torch.tensor([[0.25, 0.75, 0.5]], dtype=torch.float64).expand(len(uv), 3))
    combined = _graph_colour(
        tmp_path,
        """
    <texcoord name="t" type="vector2" />
    <extract name="u" type="float"><input name="in" type="vector2" nodename="t" /><input name="index" type="integer" value="0" /></extract>
    <multiply name="twice" type="float"><input name="in1" type="float" nodename="u" /><input name="in2" type="float" value="2" /></multiply>
    <combine3 name="c" type="color3">
      <input name="in1" type="float" nodename="u" /><input name="in2" type="float" nodename="twice" /><input name="in3" type="float" value="0.5" />
    </combine3>""",
        "c",
        "color3",
        uv,
        normal,
        position,
    )
    assert torch.allclose(combined, torch.stack((uv[:, 0], 2.0 * uv[:, 0], torch.full_like(uv[:, 0], 0.5)), dim=-1))


def test_fractal3d_deterministic_and_bounded(tmp_path: Path) -> None:
    n = 256
    uv, normal, position = _points(n, seed=9, dtype=torch.float64)
    nodes = """
    <position name="pos" type="vector3" />
    <multiply name="p" type="vector3"><input name="in1" type="vector3" nodename="pos" /><input name="in2" type="float" value="5" /></multiply>
    <fractal3d name="n" type="float"><input name="position" type="vector3" nodename="p" /><input name="octaves" type="integer" value="4" /></fractal3d>"""
    first = _graph_colour(tmp_path, nodes, "n", "float", uv, normal, position)
    second = _graph_colour(tmp_path, nodes, "n", "float", uv, normal, position)
    assert torch.equal(first, second)
    bound = sum(0.5**i for i in range(4))  # amplitude 1, diminish 0.5, |perlin| <= 1
    assert first.abs().max() <= bound and first.std() > 0.05


def test_cell_and_worley_noise_ranges(tmp_path: Path) -> None:
    uv, normal, position = _points(128, seed=4, dtype=torch.float64)
    cells = _graph_colour(tmp_path, _scalar_node("", "cellnoise3d"), "n", "float", uv, normal, 4.0 * position)
    assert (cells >= 0.0).all() and (cells < 1.0).all() and cells.std() > 0.05
    worley = _graph_colour(tmp_path, _scalar_node("", "worleynoise2d"), "n", "float", 4.0 * uv, normal, position)
    assert (worley >= 0.0).all() and (worley <= math.sqrt(2.0)).all()


def test_image_and_tiledimage(tmp_path: Path) -> None:
    texels = np.zeros((2, 4, 3), dtype=np.uint8)
    texels[0, :, 0] = 255  # top row red, bottom row green
    texels[1, :, 1] = 255
    Image.fromarray(texels).save(tmp_path / "rows.png")
    uv = torch.tensor([[0.375, 0.75], [0.375, 0.25], [1.5, 0.25]], dtype=torch.float64)
    normal = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64).expand(3, 3)
    image = """
    <image name="img" type="color3">
      <input name="file" type="filename" value="rows.png" colorspace="lin_rec709" />
      <input name="uaddressmode" type="string" value="constant" /><input name="vaddressmode" type="string" value="clamp" />
      <input name="default" type="color3" value="0, 0, 1" />
    </image>"""
    got = _graph_colour(tmp_path, image, "img", "color3", uv, normal, None)
    # MaterialX v points up: v = 0.75 is the top row. u = 1.5 is outside: the default colour.
    assert torch.allclose(got, torch.tensor([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0]], dtype=torch.float64))
    tiled = """
    <tiledimage name="img" type="color3">
      <input name="file" type="filename" value="rows.png" colorspace="lin_rec709" />
      <input name="uvtiling" type="vector2" value="2, 2" />
    </tiledimage>"""
    got = _graph_colour(tmp_path, tiled, "img", "color3", uv * 0.5, normal, None)
    assert torch.allclose(got[:2], torch.tensor([[1.0, 0, 0], [0, 1.0, 0]], dtype=torch.float64))


# --- errors -------------------------------------------------------------------------------------


def test_unsupported_nodes_are_all_listed(tmp_path: Path) -> None:
    graph = """
  <nodegraph name="NG">
    <checkerboard name="check" type="color3" />
    <hsvtorgb name="hsv" type="color3"><input name="in" type="color3" nodename="check" /></hsvtorgb>
    <output name="out" type="color3" nodename="hsv" />
  </nodegraph>"""
    path = _write(tmp_path, _surface('<input name="base_color" type="color3" nodegraph="NG" output="out" />', graph))
    with pytest.raises(InputError) as info:
        compile_materialx(path)
    message = str(info.value)
    assert "checkerboard (NG/check)" in message and "hsvtorgb (NG/hsv)" in message


def test_missing_image_names_node_and_file(tmp_path: Path) -> None:
    graph = """
  <nodegraph name="NG">
    <image name="albedo_map" type="color3"><input name="file" type="filename" value="no_such_texture.png" /></image>
    <output name="out" type="color3" nodename="albedo_map" />
  </nodegraph>"""
    path = _write(tmp_path, _surface('<input name="base_color" type="color3" nodegraph="NG" output="out" />', graph))
    with pytest.raises(InputError, match="no_such_texture.png") as info:
        compile_materialx(path)
    assert "NG/albedo_map" in str(info.value)


@pytest.mark.parametrize(
    ("shader", "refused"),
    [
        ('<input name="transmission" type="float" value="1" /><input name="transmission_depth" type="float" value="0.5" />', "transmission_depth"),
        ('<input name="transmission" type="float" value="1" /><input name="transmission_scatter" type="color3" value="0.2, 0.1, 0" />',
         "transmission_scatter"),
        ('<input name="emission" type="float" value="1" />', "emission"),
        ('<input name="opacity" type="color3" value="1, 0.5, 1" />', "opacity"),
        ('<input name="specular_color" type="color3" value="1, 0.5, 1" />', "specular_color"),
    ],
)
def test_refused_inputs_are_named(tmp_path: Path, shader: str, refused: str) -> None:
    with pytest.raises(InputError, match=f"SR_test/{refused}.*not supported"):
        compile_materialx(_write(tmp_path, _surface(shader)))


@pytest.mark.parametrize(("category", "inputs"), [
    ("standard_surface", '<input name="thin_film_thickness" type="float" value="300" /><input name="thin_film_IOR" type="float" value="1.4" />'),
    ("open_pbr_surface", '<input name="thin_film_weight" type="float" value="1" /><input name="thin_film_thickness" type="float" value="0.3" />'),
])
def test_thin_film_tints_the_specular_and_its_thickness_is_learnable(tmp_path: Path, category: str, inputs: str) -> None:
    """A film colours the reflection (``thin_film_*`` read, no longer refused; MaterialX's own code agrees, see
    test_materialx_oracle.py), and its thickness is a leaf parameter the gradient reaches."""
    plain = compile_materialx(_write(tmp_path, _surface("", category=category), "plain.mtlx"))
    filmed = compile_materialx(_write(tmp_path, _surface(inputs, category=category), "film.mtlx"))
    g = torch.Generator().manual_seed(5)
    n = 256
    wi, wo = hemisphere_directions(n, generator=g, dtype=torch.float32), hemisphere_directions(n, generator=g, dtype=torch.float32)
    uv, normal, position = torch.rand(n, 2, generator=g), torch.tensor([[0.0, 0.0, 1.0]]).expand(n, 3), torch.zeros(n, 3)
    thickness = filmed.parameters["SR_test/thin_film_thickness"].requires_grad_()
    value = filmed(uv, normal, position).eval(wi, wo)
    reference = plain(uv, normal, position).eval(wi, wo)
    assert float((value - reference).detach().abs().max()) > 1e-3
    (grad,) = torch.autograd.grad(value.sum(), thickness)
    assert bool(torch.isfinite(grad).all()) and float(grad.abs().sum()) > 0


def test_transmission_from_a_graph_compiles_and_marks_the_material(tmp_path: Path) -> None:
    graph = """
  <nodegraph name="NG">
    <constant name="c" type="float"><input name="value" type="float" value="0" /></constant>
    <output name="out" type="float" nodename="c" />
  </nodegraph>"""
    material = compile_materialx(_write(tmp_path, _surface('<input name="transmission" type="float" nodegraph="NG" output="out" />', graph)))
    assert material.transmissive
    assert not compile_materialx(_write(tmp_path, _surface(""), "opaque.mtlx")).transmissive


def _glass(tmp_path: Path, extra: str = "", name: str = "glass.mtlx") -> object:
    inputs = ('<input name="transmission_weight" type="float" value="1" /><input name="specular_roughness" type="float" value="0.3" />'
              '<input name="specular_ior" type="float" value="1.52" /><input name="transmission_color" type="color3" value="0.9, 1, 0.8" />' + extra)
    return compile_materialx(_write(tmp_path, _surface(inputs, category="open_pbr_surface"), name))


def test_glass_is_the_rough_dielectric_boundary(tmp_path: Path) -> None:
    """OpenPBR with transmission_weight 1 (no coat) is exactly the dielectric lobe: reflection above, refraction
    below tinted by transmission_color; light from below reaches the viewer."""
    from neuralbake.material.dielectric import dielectric_eval
    from neuralbake.material.microfacet import roughness_anisotropy

    material = _glass(tmp_path)
    assert material.transmissive
    g = torch.Generator().manual_seed(2)
    n = 128
    wo = hemisphere_directions(n, generator=g, dtype=torch.float32)
    wi = hemisphere_directions(n, generator=g, dtype=torch.float32) * torch.tensor([1.0, 1.0, -1.0])
    uv, normal, position = torch.rand(n, 2, generator=g), torch.tensor([[0.0, 0.0, 1.0]]).expand(n, 3), torch.zeros(n, 3)
    bsdf = material(uv, normal, position)
    alpha, _ = roughness_anisotropy(torch.full((n,), 0.3), torch.zeros(n))
    expected = dielectric_eval(wi, wo, alpha_x=alpha, ior=1.52, color=torch.tensor([0.9, 1.0, 0.8]))
    torch.testing.assert_close(bsdf.eval(wi, wo), expected)
    assert float(expected.sum()) > 0
    # sampling reaches below the surface, with the density pdf reports
    wi_s, pdf = bsdf.sample(wo, torch.rand(n, 2, generator=g))
    assert bool((wi_s[pdf > 0, 2] < 0).any())
    torch.testing.assert_close(pdf, bsdf.pdf(wi_s, wo))


def test_a_coat_over_glass_lets_less_through(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(3)
    n = 64
    wo = hemisphere_directions(n, generator=g, dtype=torch.float32)
    wi = hemisphere_directions(n, generator=g, dtype=torch.float32) * torch.tensor([1.0, 1.0, -1.0])
    uv, normal, position = torch.rand(n, 2, generator=g), torch.tensor([[0.0, 0.0, 1.0]]).expand(n, 3), torch.zeros(n, 3)
    bare = _glass(tmp_path)(uv, normal, position).eval(wi, wo).sum()
    coated = _glass(tmp_path, '<input name="coat_weight" type="float" value="1" /><input name="coat_roughness" type="float" value="0.1" />'
                    '<input name="coat_color" type="color3" value="0.8, 0.8, 1" />', "coated.mtlx")(uv, normal, position).eval(wi, wo).sum()
    assert 0.0 < float(coated) < float(bare)


def test_the_neural_material_bake_refuses_glass(tmp_path: Path) -> None:
    from neuralbake.bakes.neural_material.bake import load_reference
    from neuralbake.bakes.neural_material.config import NeuralMaterialConfig

    _glass(tmp_path)
    with pytest.raises(InputError, match="transmission.*reflection only") as info:
        load_reference(NeuralMaterialConfig(material=str(tmp_path / "glass.mtlx")), torch.device("cpu"))
    assert info.value.field == "transmission"

def test_open_pbr_defaults_and_call_checks(tmp_path: Path, device: torch.device) -> None:
    material = compile_materialx(_write(tmp_path, _surface(category="open_pbr_surface")), device=device)
    assert material.shader == "open_pbr_surface" and "SR_test/coat_ior" in material.parameters
    uv, normal, _ = _points(8)
    wi = torch.nn.functional.normalize(torch.tensor([[0.3, 0.2, 0.9]]), dim=-1).expand(8, 3)
    value = material(uv.to(device), normal.to(device)).eval(wi.to(device), wi.to(device))
    assert value.device.type == device.type and torch.isfinite(value).all() and (value > 0.0).all()
    with pytest.raises(InputError, match="uv"):
        material(torch.zeros(4, 3), torch.zeros(4, 3))
    with pytest.raises(InputError, match="unknown parameters"):
        material(torch.zeros(4, 2), torch.zeros(4, 3), parameters={"nope": torch.zeros(1)})


def test_top_level_nodes_interfaces_material_choice_and_srgb(tmp_path: Path) -> None:
    body = """
  <constant name="top_value" type="float"><input name="value" type="float" value="0.5" /></constant>
  <nodegraph name="NG">
    <input name="gain" type="float" nodename="top_value" />
    <input name="tint" type="color3" value="0.5, 0.5, 0.5" colorspace="srgb_texture" />
    <multiply name="scaled" type="color3"><input name="in1" type="color3" interfacename="tint" /><input name="in2" type="float" interfacename="gain" /></multiply>
    <output name="out" type="color3" nodename="scaled" />
  </nodegraph>
  <multiply name="top_rough" type="float"><input name="in1" type="float" nodename="top_value" /><input name="in2" type="float" value="0.5" /></multiply>
  <standard_surface name="SR_a" type="surfaceshader">
    <input name="base_color" type="color3" nodegraph="NG" output="out" />
    <input name="specular_roughness" type="float" nodename="top_rough" />
  </standard_surface>
  <open_pbr_surface name="SR_b" type="surfaceshader" />
  <surfacematerial name="M_a" type="material"><input name="surfaceshader" type="surfaceshader" nodename="SR_a" /></surfacematerial>
  <surfacematerial name="M_b" type="material"><input name="surfaceshader" type="surfaceshader" nodename="SR_b" /></surfacematerial>"""
    path = _write(tmp_path, body)
    first = compile_materialx(path, dtype=torch.float64)
    assert first.name == "M_a" and compile_materialx(path, material="M_b").shader == "open_pbr_surface"
    with pytest.raises(InputError, match="M_c"):
        compile_materialx(path, material="M_c")
    uv, normal, _ = _points(3, dtype=torch.float64)
    inputs = first.shader_inputs(uv, normal)
    srgb_half = ((0.5 + 0.055) / 1.055) ** 2.4
    assert torch.allclose(inputs["base_color"], torch.full((3, 3), 0.5 * srgb_half, dtype=torch.float64))
    assert torch.allclose(inputs["specular_roughness"], torch.full((3,), 0.25, dtype=torch.float64))
    assert {"top_value/value", "top_rough/in2", "NG/tint"} <= set(first.parameters)
    # Changing a leaf changes the material: the parameters are read at every call.
    with torch.no_grad():
        first.parameters["top_rough/in2"].fill_(1.0)
    assert torch.allclose(first.shader_inputs(uv, normal)["specular_roughness"], torch.full((3,), 0.5, dtype=torch.float64))


def test_specular_rotation_turns_the_anisotropy(tmp_path: Path) -> None:
    shader = """<input name="metalness" type="float" value="1" /><input name="specular_roughness" type="float" value="0.5" />
    <input name="specular_anisotropy" type="float" value="0.8" /><input name="specular_rotation" type="float" value="{}" />"""
    straight = compile_materialx(_write(tmp_path, _surface(shader.format(0.0)), "a.mtlx"), dtype=torch.float64)
    turned = compile_materialx(_write(tmp_path, _surface(shader.format(0.25)), "b.mtlx"), dtype=torch.float64)
    g = torch.Generator().manual_seed(10)
    n = 32
    uv, normal, _ = _points(n, dtype=torch.float64)
    wi, wo = hemisphere_directions(n, generator=g, dtype=torch.float64), hemisphere_directions(n, generator=g, dtype=torch.float64)

    def quarter(w: torch.Tensor) -> torch.Tensor:  # a direction in the tangent frame turned by 90 degrees
        return torch.stack((w[:, 1], -w[:, 0], w[:, 2]), dim=-1)

    a, b = turned(uv, normal).eval(wi, wo), straight(uv, normal).eval(quarter(wi), quarter(wo))
    assert torch.allclose(a, b, atol=1e-12) and not torch.allclose(a, straight(uv, normal).eval(wi, wo), atol=1e-3)
    sampled, pdf = turned(uv, normal).sample(wo, torch.rand(n, 2, generator=g, dtype=torch.float64))
    assert torch.allclose(pdf, turned(uv, normal).pdf(sampled, wo))


def test_thin_walled_glass_passes_light_straight(tmp_path: Path) -> None:
    """``thin_walled`` transmission is the thin slab: a smooth one sends light from behind on along its own direction."""
    from neuralbake.material.dielectric import thin_dielectric_eval
    from neuralbake.material.microfacet import roughness_anisotropy

    inputs = ('<input name="transmission" type="float" value="1" /><input name="thin_walled" type="boolean" value="true" />'
              '<input name="specular_roughness" type="float" value="0.25" />')
    material = compile_materialx(_write(tmp_path, _surface(inputs)))
    assert material.thin_walled and material.transmissive
    g = torch.Generator().manual_seed(4)
    n = 64
    wo = hemisphere_directions(n, generator=g, dtype=torch.float32)
    wi = hemisphere_directions(n, generator=g, dtype=torch.float32) * torch.tensor([1.0, 1.0, -1.0])
    uv, normal, position = torch.rand(n, 2, generator=g), torch.tensor([[0.0, 0.0, 1.0]]).expand(n, 3), torch.zeros(n, 3)
    alpha, _ = roughness_anisotropy(torch.full((n,), 0.25), torch.zeros(n))
    torch.testing.assert_close(material(uv, normal, position).eval(wi, wo), thin_dielectric_eval(wi, wo, alpha_x=alpha, ior=1.5))
    graph = """
  <nodegraph name="NG">
    <constant name="c" type="boolean"><input name="value" type="boolean" value="true" /></constant>
    <output name="out" type="boolean" nodename="c" />
  </nodegraph>"""
    with pytest.raises(InputError, match="thin_walled.*driven by a node graph"):
        compile_materialx(_write(tmp_path, _surface('<input name="thin_walled" type="boolean" nodegraph="NG" output="out" />', graph), "tw.mtlx"))

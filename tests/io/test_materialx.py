"""MaterialX reading: the 11 shared example documents, parameter defaults, node graphs, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuralbake.errors import InputError
from neuralbake.io.materialx import (
    DefaultGeomProp,
    MaterialXConnection,
    load_materialx,
    require_supported,
    surface_parameters,
    unsupported_nodes,
)

MATERIALX_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "materialx"

SHARED_DOCUMENTS = {
    "open_pbr_carpaint": "open_pbr_surface",
    "open_pbr_glass": "open_pbr_surface",
    "open_pbr_velvet": "open_pbr_surface",
    "standard_surface_carpaint": "standard_surface",
    "standard_surface_chrome": "standard_surface",
    "standard_surface_copper": "standard_surface",
    "standard_surface_default": "standard_surface",
    "standard_surface_gold": "standard_surface",
    "standard_surface_marble_solid": "standard_surface",
    "standard_surface_plastic": "standard_surface",
    "standard_surface_velvet": "standard_surface",
}

MARBLE_CATEGORIES = {"position", "dotproduct", "multiply", "fractal3d", "add", "sin", "power", "mix"}

needs_shared = pytest.mark.needs_shared


@pytest.fixture
def materialx_dir() -> Path:
    if not MATERIALX_DIR.is_dir():
        pytest.skip(f"{MATERIALX_DIR} is absent (the team's shared MaterialX examples; not shipped with neuralbake)")
    return MATERIALX_DIR


def _write(tmp_path: Path, body: str, name: str = "doc.mtlx") -> Path:
    path = tmp_path / name
    path.write_text(f'<?xml version="1.0"?>\n<materialx version="1.39">\n{body}\n</materialx>\n')
    return path


def _material(shader_category: str = "standard_surface", shader_body: str = "", extra: str = "") -> str:
    return f"""{extra}
  <{shader_category} name="SR_test" type="surfaceshader">{shader_body}</{shader_category}>
  <surfacematerial name="M_test" type="material">
    <input name="surfaceshader" type="surfaceshader" nodename="SR_test" />
  </surfacematerial>"""


@needs_shared
@pytest.mark.parametrize("stem", sorted(SHARED_DOCUMENTS))
def test_every_shared_document_loads(materialx_dir, stem):
    document = load_materialx(materialx_dir / f"{stem}.mtlx")
    assert document.version == "1.39"  # 1.36-1.38 files are upgraded on load
    assert len(document.materials) == 1
    shader = document.materials[0].shader
    assert shader.category == SHARED_DOCUMENTS[stem]
    assert shader.nodedef == f"ND_{SHARED_DOCUMENTS[stem]}_surfaceshader"
    assert {"surfacematerial", SHARED_DOCUMENTS[stem]} <= document.node_categories
    parameters = surface_parameters(document.materials[0])
    assert {port.name for port in shader.inputs} <= set(parameters)
    assert len(parameters) == len(shader.nodedef_inputs)


@needs_shared
def test_copper_values_as_stored_in_the_file(materialx_dir):
    document = load_materialx(materialx_dir / "standard_surface_copper.mtlx")
    material = document.materials[0]
    assert (material.name, material.shader.name, document.colorspace) == ("Copper", "SR_copper", "lin_rec709")
    set_here = {port.name: port for port in material.shader.inputs}
    assert set_here["base_color"].value == (1.0, 1.0, 1.0)
    assert set_here["base_color"].type == "color3"
    assert set_here["metalness"].value == 1.0
    assert set_here["specular_roughness"].value == 0.25
    assert set_here["specular"].value == 0.0
    # Decimal values are kept as written, not rounded through MaterialX's 32-bit floats.
    assert set_here["coat_color"].value == (0.96467984, 0.37626296, 0.25818297)
    assert set_here["coat_roughness"].value == 0.20000000298023224
    assert "specular_color" not in set_here  # copper leaves it unset ...
    parameters = surface_parameters(material)
    assert parameters["specular_color"] == (1.0, 1.0, 1.0)  # ... so the nodedef default fills it


@needs_shared
def test_defaults_fill_every_unset_parameter(materialx_dir):
    material = load_materialx(materialx_dir / "standard_surface_gold.mtlx").materials[0]
    parameters = surface_parameters(material)
    assert len(parameters) == 42  # every input of ND_standard_surface_surfaceshader
    assert parameters["specular_color"] == (0.998, 0.981, 0.751)  # set by the (upgraded 1.37) file
    assert parameters["specular_IOR"] == 1.5
    assert parameters["coat"] == 0.0
    assert parameters["sheen_roughness"] == 0.3
    assert parameters["thin_walled"] is False
    assert parameters["normal"] == DefaultGeomProp("Nworld")
    assert parameters["tangent"] == DefaultGeomProp("Tworld")

    open_pbr = surface_parameters(load_materialx(materialx_dir / "open_pbr_glass.mtlx").materials[0])
    assert open_pbr["transmission_weight"] == 1.0 and open_pbr["specular_ior"] == 1.52
    assert open_pbr["base_weight"] == 1.0 and open_pbr["base_color"] == (0.8, 0.8, 0.8)
    assert open_pbr["geometry_normal"] == DefaultGeomProp("Nworld")


@needs_shared
def test_marble_node_graph(materialx_dir):
    document = load_materialx(materialx_dir / "standard_surface_marble_solid.mtlx")
    (graph,) = document.node_graphs
    assert graph.name == "NG_marble1"
    assert {node.category for node in graph.nodes} == MARBLE_CATEGORIES
    assert document.node_categories == MARBLE_CATEGORIES | {"standard_surface", "surfacematerial"}
    assert len(graph.nodes) == 12 and document.nodes == ()

    position = {node.name: index for index, node in enumerate(graph.nodes)}
    edges = 0
    for node in graph.nodes:
        for port in node.inputs:
            if port.connection is not None and port.connection.nodename is not None:
                assert position[port.connection.nodename] < position[node.name], f"{port.connection.nodename} -> {node.name}"
                edges += 1
    assert edges == 12

    noise = graph.nodes[position["noise"]]
    assert (noise.category, noise.path, noise.type) == ("fractal3d", "NG_marble1/noise", "float")
    octaves = next(port for port in noise.inputs if port.name == "octaves")
    assert octaves.connection == MaterialXConnection(interfacename="noise_octaves")
    assert {port.name: port.value for port in graph.inputs}["noise_octaves"] == 3
    (output,) = graph.outputs
    assert output.connection == MaterialXConnection(nodename="color_mix")

    parameters = surface_parameters(document.materials[0])
    assert parameters["base_color"] == MaterialXConnection(nodegraph="NG_marble1", output="out")
    assert parameters["subsurface"] == 0.4

    missing = unsupported_nodes(document, MARBLE_CATEGORIES - {"fractal3d", "sin"})
    assert missing == {"fractal3d": ["NG_marble1/noise"], "sin": ["NG_marble1/sin"]}
    require_supported(document, MARBLE_CATEGORIES)


def test_unsupported_node_categories_are_all_listed(tmp_path):
    graph = """
  <nodegraph name="NG_pattern">
    <position name="pos" type="vector3" />
    <noise3d name="grain" type="float"><input name="position" type="vector3" nodename="pos" /></noise3d>
    <noise3d name="grain2" type="float"><input name="position" type="vector3" nodename="pos" /></noise3d>
    <cellnoise3d name="cells" type="float"><input name="position" type="vector3" nodename="pos" /></cellnoise3d>
    <add name="sum" type="float">
      <input name="in1" type="float" nodename="grain" /><input name="in2" type="float" nodename="cells" />
    </add>
    <add name="sum2" type="float">
      <input name="in1" type="float" nodename="sum" /><input name="in2" type="float" nodename="grain2" />
    </add>
    <output name="out" type="float" nodename="sum2" />
  </nodegraph>"""
    body = _material(shader_body='<input name="base" type="float" nodegraph="NG_pattern" output="out" />', extra=graph)
    path = _write(tmp_path, body)
    document = load_materialx(path)
    assert unsupported_nodes(document, {"position", "add"}) == {
        "cellnoise3d": ["NG_pattern/cells"],
        "noise3d": ["NG_pattern/grain", "NG_pattern/grain2"],
    }
    with pytest.raises(InputError) as caught:
        load_materialx(path, supported={"position", "add"})
    message = str(caught.value)
    assert str(path) in message and "2 node categories" in message
    assert "cellnoise3d (NG_pattern/cells)" in message and "noise3d (NG_pattern/grain, NG_pattern/grain2)" in message


def test_node_without_a_nodedef_is_reported_not_dropped(tmp_path):
    # MaterialX's validate() accepts a node it has no definition for; the caller must still hear of it.
    graph = """
  <nodegraph name="NG_custom">
    <frobnicate name="mystery" type="float" />
    <output name="out" type="float" nodename="mystery" />
  </nodegraph>"""
    path = _write(tmp_path, _material(shader_body='<input name="base" type="float" nodegraph="NG_custom" output="out" />', extra=graph))
    document = load_materialx(path)
    assert document.node_graphs[0].nodes[0].nodedef is None
    with pytest.raises(InputError, match=r"frobnicate \(NG_custom/mystery\)"):
        require_supported(document, {"add"})


def test_top_level_pattern_nodes_are_kept_in_topological_order(tmp_path):
    nodes = """
  <multiply name="scaled" type="float">
    <input name="in1" type="float" nodename="source" /><input name="in2" type="float" value="0.5" />
  </multiply>
  <constant name="source" type="float"><input name="value" type="float" value="2" /></constant>"""
    path = _write(tmp_path, _material(shader_body='<input name="base" type="float" nodename="scaled" />', extra=nodes))
    document = load_materialx(path)
    assert [node.name for node in document.nodes] == ["source", "scaled"]
    assert unsupported_nodes(document, {"multiply"}) == {"constant": ["source"]}
    assert surface_parameters(document.materials[0])["base"] == MaterialXConnection(nodename="scaled")


def test_malformed_xml(tmp_path):
    path = tmp_path / "broken.mtlx"
    path.write_text('<?xml version="1.0"?>\n<materialx version="1.39">\n  <surfacematerial name="M">\n</materialx>\n')
    with pytest.raises(InputError, match="not well-formed") as caught:
        load_materialx(path)
    assert str(path) in str(caught.value) and "Fix:" in str(caught.value)


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="does not exist") as caught:
        load_materialx(tmp_path / "absent.mtlx")
    assert "absent.mtlx" in str(caught.value)
    with pytest.raises(InputError, match="is a folder"):
        load_materialx(tmp_path)


def test_unknown_shader_category(tmp_path):
    path = _write(tmp_path, _material(shader_category="gltf_pbr"))
    with pytest.raises(InputError, match="'gltf_pbr'") as caught:
        load_materialx(path)
    message = str(caught.value)
    assert "SR_test" in message and "M_test" in message and "standard_surface" in message and "open_pbr_surface" in message


def test_no_material(tmp_path):
    path = _write(tmp_path, '  <standard_surface name="SR_lonely" type="surfaceshader" />')
    with pytest.raises(InputError, match="no material") as caught:
        load_materialx(path)
    assert "<surfacematerial>" in str(caught.value)


def test_document_that_fails_validation(tmp_path):
    # A float input fed by a color3 graph output: MaterialX reports the mismatched connection.
    graph = """
  <nodegraph name="NG_colour">
    <constant name="c" type="color3"><input name="value" type="color3" value="1, 0, 0" /></constant>
    <output name="out" type="color3" nodename="c" />
  </nodegraph>"""
    path = _write(tmp_path, _material(shader_body='<input name="base" type="float" nodegraph="NG_colour" output="out" />', extra=graph))
    with pytest.raises(InputError, match="fails MaterialX validation: .*Mismatched types") as caught:
        load_materialx(path)
    assert str(path) in str(caught.value)


def test_connection_cycle(tmp_path):
    # Not reachable from an output, so validate() passes; the topological sort must still refuse it.
    graph = """
  <nodegraph name="NG_loop">
    <add name="a" type="float"><input name="in1" type="float" nodename="b" /></add>
    <add name="b" type="float"><input name="in1" type="float" nodename="a" /></add>
    <constant name="c" type="float" />
    <output name="out" type="float" nodename="c" />
  </nodegraph>"""
    path = _write(tmp_path, _material(shader_body='<input name="base" type="float" nodegraph="NG_loop" output="out" />', extra=graph))
    with pytest.raises(InputError, match="cycle") as caught:
        load_materialx(path)
    assert "NG_loop/a" in str(caught.value) and "NG_loop/b" in str(caught.value)


def test_displacement_and_nested_shaders_are_refused_not_dropped(tmp_path):
    displaced = """
  <standard_surface name="SR_test" type="surfaceshader" />
  <displacement name="D_test" type="displacementshader"><input name="displacement" type="float" value="0.1" /></displacement>
  <surfacematerial name="M_test" type="material">
    <input name="surfaceshader" type="surfaceshader" nodename="SR_test" />
    <input name="displacementshader" type="displacementshader" nodename="D_test" />
  </surfacematerial>"""
    with pytest.raises(InputError, match="M_test/displacementshader: .*only 'surfaceshader' is supported"):
        load_materialx(_write(tmp_path, displaced, "displaced.mtlx"))
    nested = """
  <nodegraph name="NG_shader">
    <standard_surface name="SR_inner" type="surfaceshader" />
    <output name="out" type="surfaceshader" nodename="SR_inner" />
  </nodegraph>
  <surfacematerial name="M_test" type="material">
    <input name="surfaceshader" type="surfaceshader" nodegraph="NG_shader" output="out" />
  </surfacematerial>"""
    with pytest.raises(InputError, match="'NG_shader/SR_inner' sits inside a node graph"):
        load_materialx(_write(tmp_path, nested, "nested.mtlx"))

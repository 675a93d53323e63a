"""Read MaterialX documents into a plain, validated description for the material compiler.

The official MaterialX library reads the ``.mtlx`` file (upgrading the older 1.36-1.38 layouts,
e.g. ``<material><shaderref>``, to 1.39 ``surfacematerial`` nodes on the way), loads the standard
data libraries so that ``validate()`` can check every node against its ``nodedef``, and is then
dropped: what comes back is frozen dataclasses holding names, types, constant values (floats, ints,
bools, strings, tuples) and connections. Each material's surface shader must be
``standard_surface`` or ``open_pbr_surface``; node graphs come with their nodes in topological
order, and :func:`unsupported_nodes` / :func:`require_supported` report every node whose category
the caller cannot compile, so that no node is ever dropped silently. Every node carries its
``nodedef``'s inputs, so :func:`surface_parameters` can list every shader parameter with the
standard library's default filled in where the document sets none.

Reading the file itself (the XML checked before MaterialX sees it, includes confined to the
document's folder, validation against the standard libraries) is :mod:`neuralbake.io.materialx_xml`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

import MaterialX as mx

from neuralbake.io.materialx_xml import materialx_error, read_materialx_xml

__all__ = [
    "SURFACE_SHADER_CATEGORIES",
    "DefaultGeomProp",
    "MaterialXConnection",
    "MaterialXDocument",
    "MaterialXInput",
    "MaterialXNode",
    "MaterialXNodeGraph",
    "MaterialXOutput",
    "MaterialXValue",
    "SurfaceMaterial",
    "load_materialx",
    "node_parameters",
    "require_supported",
    "surface_parameters",
    "unsupported_nodes",
]

SURFACE_SHADER_CATEGORIES = frozenset({"standard_surface", "open_pbr_surface"})
"""Surface shader node categories a material may use."""

MaterialXValue: TypeAlias = float | int | bool | str | tuple[float, ...] | tuple[tuple[float, ...], ...]
"""A constant: ``float``/``integer``/``boolean``/``string``/``filename`` as Python scalars,
``color3``/``vector3``/... as tuples of floats, matrices as tuples of rows, arrays as tuples."""


@dataclass(frozen=True)
class MaterialXConnection:
    """Where an input or output takes its value from, named by MaterialX's own attributes.

    Exactly one of ``nodename``, ``nodegraph`` and ``interfacename`` is set.
    """

    nodename: str | None = None
    """A node in the same scope (the document's top level, or the same node graph)."""
    nodegraph: str | None = None
    """A top-level node graph; ``output`` names which of its outputs."""
    interfacename: str | None = None
    """An input of the enclosing node graph's interface (only inside node graphs)."""
    output: str | None = None
    """The output of the node graph or multi-output node, when one is named."""


@dataclass(frozen=True)
class DefaultGeomProp:
    """A ``nodedef`` default that is a geometric property rather than a constant, e.g. ``Nworld``."""

    name: str
    """The geometric property: ``Nworld``, ``Tworld``, ``Pobject``, ``UV0``, ..."""


@dataclass(frozen=True)
class MaterialXInput:
    """One input of a node, node graph interface or ``nodedef``."""

    name: str
    """The input's name, e.g. ``base_color``."""
    type: str
    """MaterialX type: ``float``, ``color3``, ``vector3``, ``integer``, ``boolean``, ``filename``, ..."""
    value: MaterialXValue | None = None
    """The constant value, or ``None`` when the input is connected or has no value."""
    connection: MaterialXConnection | None = None
    """What feeds the input, or ``None`` for a constant."""
    colorspace: str | None = None
    """The colour space the value is stated in (``color3``/``color4``/``filename`` inputs only)."""
    defaultgeomprop: str | None = None
    """``nodedef`` inputs only: the geometric property used when the document sets nothing."""


@dataclass(frozen=True)
class MaterialXOutput:
    """One output of a node graph."""

    name: str
    """The output's name, e.g. ``out``."""
    type: str
    """MaterialX type of the output."""
    connection: MaterialXConnection | None
    """The node (inside the graph) or interface input the output reads."""


@dataclass(frozen=True)
class MaterialXNode:
    """One node: a surface shader or a pattern node (``position``, ``fractal3d``, ``mix``, ...)."""

    name: str
    """The node's name, unique in its scope."""
    path: str
    """Its path in the document, e.g. ``NG_marble1/noise``; error messages use it."""
    category: str
    """What the node computes, e.g. ``standard_surface``, ``multiply``."""
    type: str
    """The output type, e.g. ``float``, ``color3``, ``surfaceshader``."""
    inputs: tuple[MaterialXInput, ...]
    """The inputs the document sets, in document order."""
    nodedef: str | None = None
    """The standard library's (or the document's) ``nodedef`` name, ``None`` when there is none."""
    nodedef_inputs: tuple[MaterialXInput, ...] = field(default=(), repr=False)
    """Every input the ``nodedef`` declares, with its default value or ``defaultgeomprop``."""


@dataclass(frozen=True)
class MaterialXNodeGraph:
    """A node graph: interface inputs, nodes in topological order, outputs."""

    name: str
    """The graph's name, e.g. ``NG_marble1``."""
    path: str
    """Its path in the document."""
    inputs: tuple[MaterialXInput, ...]
    """The graph's interface inputs (what nodes reach through ``interfacename``)."""
    nodes: tuple[MaterialXNode, ...]
    """Its nodes, each after every node it reads from (ties kept in document order)."""
    outputs: tuple[MaterialXOutput, ...]
    """What the graph exposes to shaders."""
    nodedef: str | None = None
    """Set when the graph implements a custom ``nodedef`` declared in the document."""


@dataclass(frozen=True)
class SurfaceMaterial:
    """A ``surfacematerial`` node with the surface shader node it binds."""

    name: str
    """The material's name, e.g. ``Copper``."""
    path: str
    """Its path in the document."""
    shader: MaterialXNode
    """The ``standard_surface`` or ``open_pbr_surface`` node on its ``surfaceshader`` input."""


@dataclass(frozen=True)
class MaterialXDocument:
    """Everything the material compiler needs from one ``.mtlx`` file; no MaterialX objects."""

    path: str
    """The file it was read from."""
    version: str
    """The MaterialX version after the library's upgrade on load (``1.39``)."""
    colorspace: str | None
    """The document's working colour space, e.g. ``lin_rec709``; ``None`` when unstated."""
    materials: tuple[SurfaceMaterial, ...]
    """The surface materials, in document order (at least one)."""
    node_graphs: tuple[MaterialXNodeGraph, ...]
    """Every top-level node graph, in document order."""
    nodes: tuple[MaterialXNode, ...]
    """Top-level nodes other than the materials and their surface shaders, in topological order."""
    node_categories: frozenset[str]
    """Every node category in the document: materials, shaders, graph and top-level nodes."""



_VECTOR_TYPES = {"color3", "color4", "vector2", "vector3", "vector4", "floatarray"}
_MATRIX_SIDES = {"matrix33": 3, "matrix44": 4}


def _parse_value(type_name: str, text: str) -> MaterialXValue:
    """The value as written in the file (MaterialX's own parser rounds floats to 32 bits)."""
    if type_name == "float":
        return float(text)
    if type_name == "integer":
        return int(text)
    if type_name == "boolean":
        if text.strip() not in ("true", "false"):
            raise ValueError(text)
        return text.strip() == "true"
    if type_name == "integerarray":
        return tuple(int(part) for part in text.split(",") if part.strip())
    if type_name in _VECTOR_TYPES:
        return tuple(float(part) for part in text.split(",") if part.strip())
    if type_name in _MATRIX_SIDES:
        side = _MATRIX_SIDES[type_name]
        entries = [float(part) for part in text.split(",")]
        if len(entries) != side * side:
            raise ValueError(text)
        return tuple(tuple(entries[row * side : (row + 1) * side]) for row in range(side))
    if type_name == "stringarray":
        return tuple(part.strip() for part in text.split(","))
    return text  # string, filename and anything else stays the text the file holds


def _connection(port: Any) -> MaterialXConnection | None:
    nodename = port.getNodeName() or None
    nodegraph = port.getNodeGraphString() or None
    interfacename = port.getInterfaceName() if port.isA(mx.Input) else None
    if not (nodename or nodegraph or interfacename):
        return None
    return MaterialXConnection(
        nodename=nodename,
        nodegraph=nodegraph,
        interfacename=interfacename or None,
        output=port.getOutputString() or None,
    )


def _input(port: Any) -> MaterialXInput:
    connection = _connection(port)
    value = None
    if port.hasValueString():
        # filename values get the document's fileprefix applied, as a renderer would see them.
        text = port.getResolvedValueString() if port.getType() == "filename" else port.getValueString()
        try:
            value = _parse_value(port.getType(), text)
        except ValueError as error:
            raise materialx_error(
                port.getActiveSourceUri() or "MaterialX document",
                port.getNamePath(),
                f"the value '{text}' is not a valid {port.getType()}.",
                f"write a {port.getType()} value (components separated by commas).",
            ) from error
    colour_like = port.getType() in ("color3", "color4", "filename")
    return MaterialXInput(
        name=port.getName(),
        type=port.getType(),
        value=value,
        connection=connection,
        colorspace=(port.getActiveColorSpace() or None) if colour_like else None,
        defaultgeomprop=port.getDefaultGeomPropString() or None,
    )


def _node(node: Any) -> MaterialXNode:
    nodedef = node.getNodeDef()
    return MaterialXNode(
        name=node.getName(),
        path=node.getNamePath(),
        category=node.getCategory(),
        type=node.getType(),
        inputs=tuple(_input(port) for port in node.getInputs()),
        nodedef=nodedef.getName() if nodedef is not None else None,
        nodedef_inputs=tuple(_input(port) for port in nodedef.getActiveInputs()) if nodedef is not None else (),
    )


def _topological_order(nodes: list[MaterialXNode], path: Path, scope: str) -> tuple[MaterialXNode, ...]:
    """Kahn's algorithm over ``nodename`` connections; the smallest document index goes first."""
    index = {node.name: position for position, node in enumerate(nodes)}
    readers: list[list[int]] = [[] for _ in nodes]
    waiting = [0] * len(nodes)
    for position, node in enumerate(nodes):
        sources = {index[port.connection.nodename] for port in node.inputs if port.connection and port.connection.nodename in index}
        waiting[position] = len(sources)
        for source in sources:
            readers[source].append(position)
    ready = [position for position, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order: list[MaterialXNode] = []
    while ready:
        position = heapq.heappop(ready)
        order.append(nodes[position])
        for reader in readers[position]:
            waiting[reader] -= 1
            if waiting[reader] == 0:
                heapq.heappush(ready, reader)
    if len(order) < len(nodes):
        stuck = ", ".join(node.path for position, node in enumerate(nodes) if waiting[position] > 0)
        raise materialx_error(
            path,
            scope,
            f"the nodes {stuck} lie on (or downstream of) a connection cycle, so they have no evaluation order.",
            "break the cycle: a node must not read, directly or indirectly, its own output.",
        )
    return tuple(order)


def _node_graph(graph: Any, path: Path) -> MaterialXNodeGraph:
    nodes = []
    for child in graph.getChildren():
        if child.isA(mx.NodeGraph):
            raise materialx_error(
                path,
                child.getNamePath(),
                "node graphs nested inside node graphs are not supported.",
                "flatten the inner graph into its parent (or move it to the top level).",
            )
        if child.isA(mx.Node):
            nodes.append(_node(child))
    nodedef = graph.getNodeDef()
    return MaterialXNodeGraph(
        name=graph.getName(),
        path=graph.getNamePath(),
        inputs=tuple(_input(port) for port in graph.getInputs()),
        nodes=_topological_order(nodes, path, graph.getNamePath()),
        outputs=tuple(MaterialXOutput(port.getName(), port.getType(), _connection(port)) for port in graph.getOutputs()),
        nodedef=nodedef.getName() if nodedef is not None else None,
    )


def _surface_material(material: Any, path: Path) -> tuple[SurfaceMaterial, Any]:
    where = material.getNamePath()
    if material.getCategory() != "surfacematerial":
        raise materialx_error(
            path,
            where,
            f"the material is a '{material.getCategory()}'; only 'surfacematerial' is supported.",
            "bind the shader through a <surfacematerial> node.",
        )
    for port in material.getInputs():
        if port.getName() != "surfaceshader" and _connection(port) is not None:
            raise materialx_error(
                path,
                f"{where}/{port.getName()}",
                f"the material's '{port.getName()}' input is connected; only 'surfaceshader' is supported.",
                f"disconnect '{port.getName()}' (back-face and displacement shaders are not compiled yet).",
            )
    port = material.getInput("surfaceshader")
    shader = port.getConnectedNode() if port is not None else None
    if shader is None:
        raise materialx_error(path, where, "the material has no surface shader connected.", "connect its 'surfaceshader' input to a shader node.")
    if shader.getParent() != material.getDocument():
        raise materialx_error(
            path,
            f"{where}/surfaceshader",
            f"the surface shader '{shader.getNamePath()}' sits inside a node graph.",
            "place the standard_surface or open_pbr_surface node at the document's top level.",
        )
    if shader.getCategory() not in SURFACE_SHADER_CATEGORIES:
        raise materialx_error(
            path,
            shader.getNamePath(),
            f"the surface shader of material '{material.getName()}' is a '{shader.getCategory()}'; "
            f"only {' and '.join(sorted(SURFACE_SHADER_CATEGORIES))} are supported.",
            "rebuild the material with a standard_surface or open_pbr_surface shader.",
        )
    return SurfaceMaterial(material.getName(), where, _node(shader)), shader



def load_materialx(path: str | Path, supported: Iterable[str] | None = None) -> MaterialXDocument:
    """Read, upgrade and validate a ``.mtlx`` file and describe it with plain dataclasses.

    Parameters
    ----------
    path:
        The MaterialX document.
    supported:
        Optional node categories the caller can compile; when given, :func:`require_supported`
        runs on the result (the surface shader categories are checked in any case).

    Raises
    ------
    InputError
        The file is missing or malformed, fails ``validate()``, holds no ``surfacematerial``, binds
        a shader other than standard_surface / open_pbr_surface, has a connection cycle, or (with
        ``supported``) uses node categories outside it.
    """
    path = Path(path)
    document = read_materialx_xml(path)
    # Only the document's own children: with the data library attached, getNodeGraphs() and
    # friends also return the standard library's ~270 implementation graphs.
    children = document.getChildren()
    material_nodes = [child for child in children if child.isA(mx.Node) and child.getType() == "material"]
    if not material_nodes:
        raise materialx_error(
            path,
            None,
            "the document holds no material (no <surfacematerial> node).",
            "add a <surfacematerial> whose 'surfaceshader' input connects a standard_surface or open_pbr_surface node.",
        )
    materials, shader_paths = [], set()
    for material_node in material_nodes:
        material, shader = _surface_material(material_node, path)
        materials.append(material)
        shader_paths.add(shader.getNamePath())
    node_graphs = tuple(_node_graph(graph, path) for graph in children if graph.isA(mx.NodeGraph))
    top_level = [
        _node(node) for node in children if node.isA(mx.Node) and node.getType() != "material" and node.getNamePath() not in shader_paths
    ]
    nodes = _topological_order(top_level, path, "top level")
    categories = {node.getCategory() for node in material_nodes}
    categories |= {material.shader.category for material in materials}
    categories |= {node.category for node in nodes}
    categories |= {node.category for graph in node_graphs for node in graph.nodes}
    result = MaterialXDocument(
        path=str(path),
        version=document.getVersionString(),
        colorspace=document.getColorSpace() or None,
        materials=tuple(materials),
        node_graphs=node_graphs,
        nodes=nodes,
        node_categories=frozenset(categories),
    )
    if supported is not None:
        require_supported(result, supported)
    return result


def unsupported_nodes(document: MaterialXDocument, supported: Iterable[str]) -> dict[str, list[str]]:
    """Every node category outside ``supported``, mapped to the paths of the nodes using it.

    Covers the nodes of every node graph and the top-level nodes; the materials and their surface
    shaders are checked by :func:`load_materialx` itself and need not be listed in ``supported``.
    Categories come sorted; node paths in topological order within each graph.
    """
    supported = set(supported)
    found: dict[str, list[str]] = {}
    for node in (*document.nodes, *(node for graph in document.node_graphs for node in graph.nodes)):
        if node.category not in supported:
            found.setdefault(node.category, []).append(node.path)
    return dict(sorted(found.items()))


def require_supported(document: MaterialXDocument, supported: Iterable[str]) -> None:
    """Raise :class:`InputError` naming every unsupported node category and the nodes using it."""
    missing = unsupported_nodes(document, supported)
    if not missing:
        return
    listing = "; ".join(f"{category} ({', '.join(paths)})" for category, paths in missing.items())
    count = f"{len(missing)} node categor{'y is' if len(missing) == 1 else 'ies are'}"
    raise materialx_error(
        document.path,
        None,
        f"{count} not supported by the material compiler: {listing}.",
        "rebuild those nodes from supported categories, or bake their output into a texture and read it with an image node.",
    )


def node_parameters(node: MaterialXNode) -> dict[str, MaterialXValue | MaterialXConnection | DefaultGeomProp | None]:
    """Every input of ``node``: the document's value or connection, else the ``nodedef`` default.

    Keys follow the ``nodedef``'s order, then any input the ``nodedef`` does not declare. A default
    that is a geometric property (e.g. ``normal`` -> ``Nworld``) comes back as :class:`DefaultGeomProp`;
    ``None`` means the ``nodedef`` gives neither a value nor a geometric property.
    """
    set_here = {port.name: port for port in node.inputs}
    parameters: dict[str, MaterialXValue | MaterialXConnection | DefaultGeomProp | None] = {}
    for default in node.nodedef_inputs:
        port = set_here.pop(default.name, None)
        if port is not None and (port.connection is not None or port.value is not None):
            parameters[default.name] = port.connection if port.connection is not None else port.value
        elif default.defaultgeomprop is not None:
            parameters[default.name] = DefaultGeomProp(default.defaultgeomprop)
        else:
            parameters[default.name] = default.value
    for name, port in set_here.items():
        parameters[name] = port.connection if port.connection is not None else port.value
    return parameters


def surface_parameters(material: SurfaceMaterial) -> dict[str, MaterialXValue | MaterialXConnection | DefaultGeomProp | None]:
    """Every parameter of the material's standard_surface / open_pbr_surface, defaults filled in.

    See :func:`node_parameters`; e.g. the copper document sets 8 of standard_surface's 42 inputs
    and the other 34 come from ``ND_standard_surface_surfaceshader``.
    """
    return node_parameters(material.shader)

"""Compile a MaterialX document into a differentiable PyTorch material: a function from shading
points (uv, normal, position) to a :class:`~neuralbake.material.layering.Layer` tree, whose every
constant is a leaf tensor an optimiser can move.

:func:`compile_materialx` reads the document with :func:`~neuralbake.io.materialx.load_materialx`,
refuses node categories it cannot evaluate (listing all of them with their node paths), turns
every numeric constant (shader inputs with the library defaults filled in, node-graph interface
inputs, node inputs, image texels) into a leaf tensor in :attr:`CompiledMaterial.parameters`, and
returns a :class:`CompiledMaterial`. Calling it evaluates the node graphs feeding the shader
(:mod:`~neuralbake.material.mtlx_nodes`, batched over the N points, in dependency order) and
builds the layers below.

The layer tree itself (Standard Surface and OpenPBR built from the lobes, with the approximations
they make) is :mod:`~neuralbake.material.surfaces`; which shader inputs are read and which are
refused is :mod:`~neuralbake.material.mtlx_shaders`. This module is the MaterialX-node to PyTorch
translation: constants to leaf tensors, connections to sources, node graphs to batched evaluation.
Colour constants in ``srgb_texture`` are decoded to linear; other colour spaces than
``lin_rec709`` are refused.

Refused with an :class:`~neuralbake.errors.InputError` naming the input: the features listed in
:mod:`~neuralbake.material.mtlx_shaders` (transmission, emission, cut-outs, ...). A
refused input that is connected to a node graph is refused too (its value is unknown until
evaluation). Inputs that only matter for refused features are not read and not in
:attr:`CompiledMaterial.parameters`.

Also refused, because the document is untrusted input: a chain of connections longer than
:data:`MAX_NODE_DEPTH` (compiling and evaluating recurse along it), non-finite constants, and
image files outside the document's folder (see :func:`~neuralbake.material.mtlx_nodes.load_image_node`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from neuralbake.errors import InputError
from neuralbake.io.materialx import (
    DefaultGeomProp,
    MaterialXConnection,
    MaterialXDocument,
    MaterialXNode,
    MaterialXNodeGraph,
    load_materialx,
    node_parameters,
    require_supported,
    surface_parameters,
)
from neuralbake.material.layering import Layer
from neuralbake.material.mtlx_nodes import CHANNELS, SUPPORTED_NODES, Geometry, evaluate_node, load_image_node
from neuralbake.material.mtlx_shaders import SHADERS, refuse_unsupported_inputs
from neuralbake.material.texture import srgb_to_linear

__all__ = ["MAX_NODE_DEPTH", "CompiledMaterial", "compile_materialx"]

MAX_NODE_DEPTH = 128
"""Longest chain of connections from a shader input back to a constant (nodes, graph outputs,
interface inputs). Compiling and evaluating recurse once per link; real graphs are a few dozen
deep, and a chain of a thousand exhausts Python's stack."""

_Source = Callable[["_Frame"], Any]
_GEOMETRY = {"UV0": "uv", "Pobject": "position", "Pworld": "position", "Nobject": "normal", "Nworld": "normal"}


# --- evaluation ---------------------------------------------------------------------------------


class _Frame:
    """One evaluation: the geometry, the parameter values in use and a cache of node outputs."""

    def __init__(self, program: _Program, geometry: Geometry, parameters: Mapping[str, torch.Tensor]) -> None:
        self.program = program
        self.geometry = geometry
        self.parameters = parameters
        self._outputs: dict[str, torch.Tensor] = {}

    def node(self, path: str) -> torch.Tensor:
        if path not in self._outputs:
            node, sources = self.program.nodes[path]
            args = {name: source(self) for name, source in sources.items()}
            self._outputs[path] = evaluate_node(node, args, self.geometry)
        return self._outputs[path]


@dataclass
class _Program:
    document: MaterialXDocument
    dtype: torch.dtype
    device: torch.device
    parameters: dict[str, torch.Tensor] = field(default_factory=dict)
    nodes: dict[str, tuple[MaterialXNode, dict[str, _Source]]] = field(default_factory=dict)

    def fail(self, where: str, problem: str, fix: str) -> InputError:
        return InputError(problem, path=self.document.path, field=where, fix=fix)

    def constant(self, key: str, type_name: str, value: Any, colorspace: str | None) -> _Source:
        """A leaf tensor for a numeric constant (``[1, C]`` when read), or the Python value for others."""
        if type_name not in CHANNELS:
            return lambda frame: value
        if key not in self.parameters:
            values = (value,) if isinstance(value, (int, float)) else tuple(value)
            try:
                tensor = torch.tensor(values, dtype=self.dtype, device=self.device)
            except (TypeError, ValueError, OverflowError, RuntimeError) as error:
                raise self.fail(key, f"the value {values!r:.80} is not a list of numbers ({error}).", f"write a {type_name} value.") from error
            if tensor.numel() not in (1, CHANNELS[type_name]):
                raise self.fail(key, f"a {type_name} needs {CHANNELS[type_name]} components, got {tensor.numel()}.", f"write a {type_name} value.")
            if not torch.isfinite(tensor).all():
                raise self.fail(key, f"the value {values!r:.80} is not finite (NaN or infinity).", "write finite numbers.")
            self.parameters[key] = tensor
        if colorspace not in (None, "", "lin_rec709", "srgb_texture") and type_name.startswith("color"):
            raise self.fail(key, f"the colour space '{colorspace}' is not supported.", "state colours in lin_rec709 or srgb_texture.")
        decode = colorspace == "srgb_texture" and type_name.startswith("color")

        def read(frame: _Frame) -> torch.Tensor:
            v = frame.parameters[key].reshape(1, -1)
            return torch.cat((srgb_to_linear(v[:, :3]), v[:, 3:]), dim=-1) if decode else v

        return read

    def geometric(self, where: str, prop: str) -> _Source:
        if prop not in _GEOMETRY:
            raise self.fail(
                where, f"the geometric property '{prop}' is not available to compiled materials.", "connect the input explicitly."
            )
        attribute = _GEOMETRY[prop]
        return lambda frame: getattr(frame.geometry, attribute)

    def connection(self, where: str, connection: MaterialXConnection, graph: MaterialXNodeGraph | None, depth: int = 0) -> _Source:
        if depth > MAX_NODE_DEPTH:
            raise self.fail(
                where,
                f"the chain of connections feeding this input is more than {MAX_NODE_DEPTH} links long.",
                f"shorten the graph (at most {MAX_NODE_DEPTH} nodes in a row), or bake part of it into a texture.",
            )
        if connection.nodegraph is not None:
            target = next((g for g in self.document.node_graphs if g.name == connection.nodegraph), None)
            if target is None:
                raise self.fail(where, f"the node graph '{connection.nodegraph}' does not exist.", "connect an existing node graph.")
            outputs = {o.name: o for o in target.outputs}
            name = connection.output or (target.outputs[0].name if len(target.outputs) == 1 else None)
            if name not in outputs or outputs[name].connection is None:
                raise self.fail(where, f"the node graph '{target.name}' has no connected output '{name}'.", "name one of its outputs.")
            return self.connection(f"{target.path}/{name}", outputs[name].connection, target, depth + 1)
        if connection.interfacename is not None:
            port = next((p for p in graph.inputs if p.name == connection.interfacename), None) if graph else None
            if port is None:
                raise self.fail(where, f"the interface input '{connection.interfacename}' does not exist.", "declare it on the node graph.")
            if port.connection is not None:
                return self.connection(f"{graph.path}/{port.name}", port.connection, None, depth + 1)
            return self.constant(f"{graph.name}/{port.name}", port.type, port.value, port.colorspace)
        if connection.output is not None:
            raise self.fail(where, "connections to named outputs of multi-output nodes are not supported.", "connect a single-output node.")
        scope = graph.nodes if graph is not None else self.document.nodes
        node = next((n for n in scope if n.name == connection.nodename), None)
        if node is None:
            raise self.fail(where, f"the node '{connection.nodename}' does not exist here.", "connect a node of the same scope.")
        self.add_node(node, graph, depth + 1)
        return lambda frame: frame.node(node.path)

    def add_node(self, node: MaterialXNode, graph: MaterialXNodeGraph | None, depth: int = 0) -> None:
        if node.path in self.nodes:
            return
        types = {p.name: p for p in node.nodedef_inputs} | {p.name: p for p in node.inputs}
        sources: dict[str, _Source] = {}
        self.nodes[node.path] = (node, sources)
        for name, value in node_parameters(node).items():
            where = f"{node.path}/{name}"
            port = types[name]
            if node.category in ("image", "tiledimage") and name == "file":
                sources[name] = self.texture(node, port, graph)
            elif isinstance(value, MaterialXConnection):
                sources[name] = self.connection(where, value, graph, depth)
            elif isinstance(value, DefaultGeomProp):
                sources[name] = self.geometric(where, value.name)
            elif value is None:
                raise self.fail(where, "the input has neither a value nor a connection.", "set a value.")
            else:
                sources[name] = self.constant(where, port.type, value, port.colorspace)

    def texture(self, node: MaterialXNode, port: Any, graph: MaterialXNodeGraph | None) -> _Source:
        if port.connection is not None and port.connection.interfacename is not None and graph is not None:
            port = next((p for p in graph.inputs if p.name == port.connection.interfacename), port)
        if port.connection is not None:
            raise self.fail(f"{node.path}/file", "an image file name driven by a node is not supported.", "give the file name as a value.")
        key = f"{node.path}/file"
        texels = load_image_node(node, port.value or "", port.colorspace, document=self.document.path, dtype=self.dtype, device=self.device)
        self.parameters[key] = texels
        return lambda frame: frame.parameters[key]


@dataclass(eq=False)
class CompiledMaterial:
    """A MaterialX material as a differentiable function of the shading point.

    ``material(uv, normal, position=None) -> Layer`` (see :meth:`__call__`). Every numeric
    constant the material reads is a leaf tensor in :attr:`parameters`; call ``requires_grad_()``
    on any of them to differentiate renders with respect to what the artist set.
    """

    name: str
    """The material's name in the document, e.g. ``Copper``."""
    source: str
    """The ``.mtlx`` file it was compiled from."""
    shader: str
    """``standard_surface`` or ``open_pbr_surface``."""
    parameters: dict[str, torch.Tensor]
    """Leaf tensors, ``[C]`` each (``[H, W, C]`` for image texels), keyed ``"<shader>/<input>"``
    for shader inputs, ``"<graph>/<input>"`` for node-graph interface inputs and
    ``"<node path>/<input>"`` for node inputs (``.../file`` holds an image node's texels).
    Integer, boolean and string inputs (e.g. ``fractal3d``'s ``octaves``) stay Python values,
    fixed at compile time; so do the shader inputs checked by the refusals."""
    _program: _Program = field(repr=False)
    _inputs: dict[str, _Source] = field(repr=False)
    thin_walled: bool = False
    """The shader's ``thin_walled`` / ``geometry_thin_walled``: its transmission is a thin slab (light passes straight)."""
    transmissive: bool = False
    """Whether light passes through the surface somewhere (a transmission weight above 0, or one a node drives): its
    layers then have values for light directions below the surface, which a reflection-only bake cannot learn."""

    def __call__(
        self,
        uv: torch.Tensor,
        normal: torch.Tensor,
        position: torch.Tensor | None = None,
        *,
        parameters: Mapping[str, torch.Tensor] | None = None,
    ) -> Layer:
        """The material's layer tree at N shading points.

        Parameters
        ----------
        uv:
            ``[N, 2]`` texture coordinates (UV0), MaterialX convention: ``v`` points up the image.
        normal:
            ``[N, 3]`` geometric normal in world space (what the ``normal`` node returns).
        position:
            ``[N, 3]`` object-space position (what ``position`` and 3D noise read); ``None`` uses
            ``(u, v, 0)``, so 3D patterns lie flat in the uv plane.
        parameters:
            Replacements for entries of :attr:`parameters` in this call only (e.g. for
            ``torch.autograd.gradcheck``).

        Returns
        -------
        A :class:`~neuralbake.material.layering.Layer` whose ``eval``/``sample``/``pdf`` take
        ``[N, 3]`` directions in the local shading frame (normal +z, tangent +x).
        """
        return SHADERS[self.shader].build(self.shader_inputs(uv, normal, position, parameters=parameters), thin_walled=self.thin_walled)

    def layer_and_inputs(self, uv: torch.Tensor, normal: torch.Tensor, position: torch.Tensor | None = None) -> tuple[Layer, torch.Tensor]:
        """The layer tree and every shader input at the N points (sorted by name, ``[N, K]``), from one
        evaluation of the node graph: what a neural material's sampler and encoder read."""
        inputs = self.shader_inputs(uv, normal, position)
        n = uv.shape[0]
        features = torch.cat([value.reshape(n, -1) for _, value in sorted(inputs.items())], dim=1)
        return SHADERS[self.shader].build(inputs, thin_walled=self.thin_walled), features

    def shader_inputs(
        self,
        uv: torch.Tensor,
        normal: torch.Tensor,
        position: torch.Tensor | None = None,
        *,
        parameters: Mapping[str, torch.Tensor] | None = None,
    ) -> dict[str, torch.Tensor]:
        """The shader inputs the layers are built from, evaluated at the N points (arguments as :meth:`__call__`).

        Colours are ``[N, 3]``, scalars ``[N]``, keyed by the shader's input names (e.g.
        ``base_color``, ``specular_roughness``); useful to bake or inspect a node graph's output.
        """
        uv, normal, position = self._check(uv, normal, position)
        values = dict(self.parameters)
        if parameters:
            unknown = sorted(set(parameters) - set(values))
            if unknown:
                raise InputError(f"unknown parameters {unknown}.", path=self.source, field="parameters", fix="use keys of .parameters.")
            values.update(parameters)
        frame = _Frame(self._program, Geometry(uv, normal, position), values)
        n = uv.shape[0]
        model = SHADERS[self.shader]
        shading: dict[str, torch.Tensor] = {}
        for name in model.colours:
            value = self._inputs[name](frame)
            value = value.expand(n, -1) if value.shape[-1] >= 3 else value[:, :1].expand(n, 3)
            shading[name] = value[:, :3]
        for name in model.scalars:
            shading[name] = self._inputs[name](frame)[:, 0].expand(n)
        return shading

    def _check(
        self, uv: torch.Tensor, normal: torch.Tensor, position: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        def bad(name: str, t: Any, channels: int) -> bool:
            return not isinstance(t, torch.Tensor) or t.dim() != 2 or t.shape[1] != channels or not t.is_floating_point()

        if bad("uv", uv, 2):
            raise InputError("uv must be a float tensor [N, 2].", path=self.source, field="uv", fix="pass one (u, v) per shading point.")
        if bad("normal", normal, 3) or normal.shape[0] != uv.shape[0]:
            raise InputError(
                "normal must be a float tensor [N, 3] with N of uv.", path=self.source, field="normal", fix="pass one normal per point."
            )
        if position is None:
            position = torch.cat((uv, torch.zeros_like(uv[:, :1])), dim=-1)
        elif bad("position", position, 3) or position.shape[0] != uv.shape[0]:
            raise InputError(
                "position must be a float tensor [N, 3] with N of uv.",
                path=self.source,
                field="position",
                fix="pass one position per point.",
            )
        to = {"dtype": self._program.dtype, "device": self._program.device}
        return uv.to(**to), normal.to(**to), position.to(**to)


def compile_materialx(
    path_or_document: str | Path | MaterialXDocument,
    *,
    material: str | None = None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> CompiledMaterial:
    """Compile one material of a MaterialX document into a :class:`CompiledMaterial`.

    Parameters
    ----------
    path_or_document:
        A ``.mtlx`` file or a document already read with :func:`~neuralbake.io.materialx.load_materialx`.
    material:
        The name of the ``surfacematerial`` to compile; ``None`` takes the first in document order.
    device, dtype:
        Where the parameters live and the precision of evaluation (float32 or float64).

    Raises
    ------
    InputError
        The document cannot be read; it uses node categories outside
        :data:`~neuralbake.material.mtlx_nodes.SUPPORTED_NODES` (all listed with their node
        paths); a shader input is refused (see the module docstring); an image file is missing.
    """
    document = path_or_document if isinstance(path_or_document, MaterialXDocument) else load_materialx(path_or_document)
    require_supported(document, SUPPORTED_NODES)
    if material is None:
        chosen = document.materials[0]
    else:
        chosen = next((m for m in document.materials if m.name == material), None)
        if chosen is None:
            names = ", ".join(m.name for m in document.materials)
            raise InputError(
                f"the document has no material '{material}'.", path=document.path, field="material", fix=f"use one of: {names}."
            )
    shader = chosen.shader
    model = SHADERS[shader.category]
    program = _Program(document, dtype, torch.device(device))
    params = surface_parameters(chosen)
    refuse_unsupported_inputs(program.fail, shader, model, params)
    ports = {p.name: p for p in shader.nodedef_inputs} | {p.name: p for p in shader.inputs}
    inputs: dict[str, _Source] = {}
    for name in (*model.colours, *model.scalars):
        value, where = params.get(name), f"{shader.path}/{name}"
        if isinstance(value, MaterialXConnection):
            inputs[name] = program.connection(where, value, None)
        elif value is None or isinstance(value, DefaultGeomProp):
            raise program.fail(where, "the shader input has no value.", "set a value or connect a node graph.")
        else:
            inputs[name] = program.constant(f"{shader.name}/{name}", ports[name].type, value, ports[name].colorspace)
    weight = params.get("transmission" if shader.category == "standard_surface" else "transmission_weight")
    transmissive = isinstance(weight, MaterialXConnection) or (isinstance(weight, (int, float)) and weight > 0.0)
    thin = params.get(model.thin_walled)
    if isinstance(thin, MaterialXConnection):
        raise program.fail(f"{shader.path}/{model.thin_walled}", f"'{model.thin_walled}' is driven by a node graph; it is read once, when compiling.",
                           f"set {model.thin_walled} to true or false.")
    return CompiledMaterial(chosen.name, document.path, shader.category, program.parameters, program, inputs, transmissive=transmissive,
                            thin_walled=bool(thin))

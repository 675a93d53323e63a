"""neuralbake's JSON material format, compiled into a differentiable PyTorch material.

A material document (``docs/material-format.md``) names a few *nodes* (textures, noise, ramps,
math) and one *surface*: a tree of layers (a lobe with parameters, a coat over a layer, a mask
blend of two layers). :func:`compile_material` checks the whole document up front (unknown ops
and fields, missing references, cycles, NaN or out-of-range constants: each an error naming the
file, the node and the field) and returns a :class:`MaterialGraph`, which is called per batch of
shading points: ``material(uv, normal, position=None) -> Layer`` with the layer's ``eval``,
``sample`` and ``pdf`` from :mod:`neuralbake.material.layering`. Every constant of the document is
a tensor in :attr:`MaterialGraph.parameters`, so a material is differentiable with respect to
what the artist set, and :meth:`MaterialGraph.texel_inputs` returns every layer parameter and mask
at ``uv`` as one feature vector (the encoder input of a neural material).

Written here rather than taken from a library: the ecosystem's material language is MaterialX,
which neuralbake reads too (``neuralbake.io.materialx``); this small JSON form exists because it
is quick to write by hand and maps one to one onto the layering operations.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from neuralbake.errors import InputError
from neuralbake.material.fresnel import CONDUCTOR_IOR
from neuralbake.material.layering import Layer, coat, layer, mix
from neuralbake.material.lobes import LOBES
from neuralbake.material.noise import fbm, perlin_noise, value_noise, worley_noise
from neuralbake.material.nodes import clamp, invert, lerp, power, ramp, remap, smoothstep, up_facing
from neuralbake.material.texture import WRAP_MODES, load_texture, sample_texture

__all__ = ["MATERIAL_FORMAT", "NODE_OPS", "MaterialGraph", "compile_material", "load_material_document"]

MATERIAL_FORMAT = "neuralbake.material"
MATERIAL_VERSION = 1
_REQUIRED = object()

# Allowed range of each constant lobe/coat parameter: (low, high), inclusive.
_RANGES = {
    "albedo": (0.0, 1.0),
    "base_color": (0.0, 1.0),
    "color": (0.0, 1.0),
    "metallic": (0.0, 1.0),
    "roughness": (0.0, 1.0),
    "alpha_x": (0.0, 1.0),
    "alpha_y": (0.0, 1.0),
    "ior": (1.0, 3.0),
    "eta": (0.0, 100.0),
    "k": (0.0, 100.0),
    "absorption": (0.0, 1e4),
    "thickness": (0.0, 1e4),
    "mask": (0.0, 1.0),
}


@dataclass(frozen=True)
class _Param:
    """A document constant, looked up in :attr:`MaterialGraph.parameters` at evaluation time."""

    key: str


@dataclass(frozen=True)
class NodeOp:
    """One node type: its inputs (name -> (kind, default)) and the function that evaluates it."""

    inputs: Mapping[str, tuple[str, Any]]
    fn: Callable[..., torch.Tensor]


def _noise(ctx: _Context, *, type: str, point: torch.Tensor, scale: torch.Tensor, seed: int, octaves: int, lacunarity: float, gain: torch.Tensor) -> torch.Tensor:
    base = {"value": value_noise, "perlin": perlin_noise, "worley": worley_noise}[type]
    out = fbm(point * scale, octaves=octaves, lacunarity=lacunarity, gain=gain, seed=seed, noise=base)
    return 0.5 + 0.5 * out if type == "perlin" else out


def _texture(ctx: _Context, *, file: str, srgb: bool, wrap: str, point: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return sample_texture(ctx.texture(file, srgb), point * scale, wrap=wrap)


NODE_OPS: dict[str, NodeOp] = {
    "uv": NodeOp({}, lambda ctx: ctx.uv),
    "position": NodeOp({}, lambda ctx: ctx.position),
    "normal": NodeOp({}, lambda ctx: ctx.normal),
    "noise": NodeOp(
        {
            "type": ("str", "perlin"),
            "point": ("value", "@uv"),
            "scale": ("value", 1.0),
            "seed": ("int", 0),
            "octaves": ("int", 1),
            "lacunarity": ("const", 2.0),
            "gain": ("value", 0.5),
        },
        _noise,
    ),
    "texture": NodeOp(
        {"file": ("str", _REQUIRED), "srgb": ("bool", True), "wrap": ("str", "repeat"), "point": ("value", "@uv"), "scale": ("value", 1.0)},
        _texture,
    ),
    "ramp": NodeOp({"x": ("value", _REQUIRED), "positions": ("value", _REQUIRED), "colors": ("value", _REQUIRED)}, lambda ctx, x, positions, colors: ramp(x, positions, colors)),
    "mix": NodeOp({"a": ("value", _REQUIRED), "b": ("value", _REQUIRED), "t": ("value", _REQUIRED)}, lambda ctx, a, b, t: lerp(a, b, _match(t, a, b))),
    "add": NodeOp({"a": ("value", _REQUIRED), "b": ("value", _REQUIRED)}, lambda ctx, a, b: a + b),
    "subtract": NodeOp({"a": ("value", _REQUIRED), "b": ("value", _REQUIRED)}, lambda ctx, a, b: a - b),
    "multiply": NodeOp({"a": ("value", _REQUIRED), "b": ("value", _REQUIRED)}, lambda ctx, a, b: _match(a, b) * _match(b, a)),
    "maximum": NodeOp({"a": ("value", _REQUIRED), "b": ("value", _REQUIRED)}, lambda ctx, a, b: torch.maximum(a, b)),
    "minimum": NodeOp({"a": ("value", _REQUIRED), "b": ("value", _REQUIRED)}, lambda ctx, a, b: torch.minimum(a, b)),
    "power": NodeOp({"x": ("value", _REQUIRED), "exponent": ("value", _REQUIRED)}, lambda ctx, x, exponent: power(x, exponent)),
    "clamp": NodeOp({"x": ("value", _REQUIRED), "min": ("const", 0.0), "max": ("const", 1.0)}, lambda ctx, x, min, max: clamp(x, min, max)),
    "invert": NodeOp({"x": ("value", _REQUIRED)}, lambda ctx, x: invert(x)),
    "absolute": NodeOp({"x": ("value", _REQUIRED)}, lambda ctx, x: torch.abs(x)),
    "smoothstep": NodeOp(
        {"edge0": ("value", _REQUIRED), "edge1": ("value", _REQUIRED), "x": ("value", _REQUIRED)}, lambda ctx, edge0, edge1, x: smoothstep(edge0, edge1, x)
    ),
    "remap": NodeOp(
        {"x": ("value", _REQUIRED), "in_low": ("value", 0.0), "in_high": ("value", 1.0), "out_low": ("value", 0.0), "out_high": ("value", 1.0)},
        lambda ctx, x, in_low, in_high, out_low, out_high: remap(x, in_low, in_high, out_low, out_high),
    ),
    "up_facing": NodeOp(
        {"threshold": ("value", 0.5), "softness": ("value", 0.2), "axis": ("int", 1)},
        lambda ctx, threshold, softness, axis: up_facing(ctx.normal, threshold=threshold, softness=softness, up=axis),
    ),
    "component": NodeOp({"x": ("value", _REQUIRED), "index": ("int", 0)}, lambda ctx, x, index: x[..., index]),
}
"""Every node type of the format by ``op`` name (see ``docs/material-format.md``)."""

_STR_CHOICES = {("noise", "type"): ("value", "perlin", "worley"), ("texture", "wrap"): tuple(WRAP_MODES)}


def _match(t: torch.Tensor, *others: torch.Tensor) -> torch.Tensor:
    """Give a per-point scalar ``[N]`` a trailing axis when it meets colours ``[N, C]``."""
    if t.dim() == 1 and any(o.dim() == 2 for o in others):
        return t[:, None]
    return t


class _Context:
    """One evaluation: the shading points and the node outputs computed so far."""

    def __init__(self, graph: MaterialGraph, uv: torch.Tensor, normal: torch.Tensor, position: torch.Tensor) -> None:
        self.graph, self.uv, self.normal, self.position = graph, uv, normal, position
        self.values: dict[str, torch.Tensor] = {}

    def texture(self, file: str, srgb: bool) -> torch.Tensor:
        return self.graph._texture(file, srgb)


class MaterialGraph:
    """A compiled material: call it on shading points to get a :class:`~neuralbake.material.layering.Layer`.

    ``material(uv [N, 2], normal [N, 3] world-space normal, position [N, 3] | None) -> Layer``;
    without ``position``, ``(u, v, 0)`` stands in. World up is +y (the ``up_facing`` default).
    """

    def __init__(self, document: Mapping[str, Any], *, source: Path, device: torch.device | str, dtype: torch.dtype) -> None:
        self.name = str(document.get("name", source.stem))
        self.source = source
        self.device = torch.device(device)
        self.dtype = dtype
        self.parameters: dict[str, torch.Tensor] = {}
        self._nodes: dict[str, dict[str, Any]] = {}
        self._order: list[str] = []
        self._textures: dict[tuple[str, bool], torch.Tensor] = {}
        self._compile(document)

    # -- compilation ----------------------------------------------------------------------------
    def _error(self, problem: str, field: str, fix: str) -> InputError:
        return InputError(problem, path=self.source, field=field, fix=fix)

    def _constant(self, value: Any, where: str, bounds: tuple[float, float] | None = None) -> _Param:
        try:
            tensor = torch.tensor(value, dtype=self.dtype, device=self.device)
        except (TypeError, ValueError) as exc:
            raise self._error(f"{value!r} is not a number or a list of numbers.", where, "write a number, a list of numbers or an @node reference.") from exc
        if not torch.isfinite(tensor).all():
            raise self._error(f"{value!r} is not finite (NaN or infinity).", where, "write a finite number.")
        if bounds is not None and (tensor.min() < bounds[0] or tensor.max() > bounds[1]):
            raise self._error(f"{value!r} is outside [{bounds[0]:g}, {bounds[1]:g}].", where, f"use values in [{bounds[0]:g}, {bounds[1]:g}].")
        self.parameters[where] = tensor
        return _Param(where)

    def _value(self, value: Any, where: str, bounds: tuple[float, float] | None = None) -> Any:
        """A constant becomes a parameter tensor; ``"@node"`` stays a reference."""
        if isinstance(value, str):
            if not value.startswith("@"):
                raise self._error(f"{value!r} is neither a number nor an @node reference.", where, "write a number, a list or '@name' of a node.")
            return value
        return self._constant(value, where, bounds)

    def _compile(self, document: Mapping[str, Any]) -> None:
        if document.get("format") != MATERIAL_FORMAT:
            raise self._error(f"format is {document.get('format')!r}, expected {MATERIAL_FORMAT!r}.", "format", f'add "format": "{MATERIAL_FORMAT}".')
        if document.get("version") != MATERIAL_VERSION:
            raise self._error(f"version {document.get('version')!r} is not supported.", "version", f"use version {MATERIAL_VERSION}.")
        unknown_top = sorted(set(document) - {"format", "version", "name", "description", "nodes", "surface"})
        if unknown_top:
            raise self._error(f"unknown top-level keys {unknown_top}.", unknown_top[0], "use format, version, name, description, nodes, surface.")
        nodes = document.get("nodes", {})
        if not isinstance(nodes, Mapping):
            raise self._error("nodes must be an object mapping names to nodes.", "nodes", 'write "nodes": {"name": {"op": ...}}.')
        unknown_ops = sorted({(spec or {}).get("op", "?") for spec in nodes.values() if not isinstance(spec, Mapping) or spec.get("op") not in NODE_OPS})
        if unknown_ops:
            users = [name for name, spec in nodes.items() if not isinstance(spec, Mapping) or spec.get("op") not in NODE_OPS]
            raise self._error(
                f"unsupported node op(s) {unknown_ops} (nodes {users}).", f"nodes.{users[0]}.op", f"use one of {', '.join(sorted(NODE_OPS))}."
            )
        for name, spec in nodes.items():
            self._nodes[name] = self._compile_node(name, spec)
        self._order = self._topological_order()
        if "surface" not in document:
            raise self._error("the material has no layers (no 'surface').", "surface", 'add "surface": {"lobe": ..., "params": {...}}.')
        self._surface = self._compile_layer(document["surface"], "surface")

    def _compile_node(self, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        op = NODE_OPS[spec["op"]]
        where = f"nodes.{name}"
        unknown = sorted(set(spec) - {"op"} - set(op.inputs))
        if unknown:
            raise self._error(f"node op {spec['op']!r} has no input {unknown[0]!r}.", f"{where}.{unknown[0]}", f"its inputs are: {', '.join(op.inputs) or 'none'}.")
        resolved: dict[str, Any] = {}
        for key, (kind, default) in op.inputs.items():
            value = spec.get(key, default)
            field = f"{where}.{key}"
            if value is _REQUIRED:
                raise self._error(f"node op {spec['op']!r} needs input {key!r}.", field, f"add {key!r} to the node.")
            if kind == "value":
                resolved[key] = self._value(value, field)
            elif kind == "int":
                if isinstance(value, bool) or not isinstance(value, int):
                    raise self._error(f"expected a whole number, got {value!r}.", field, "write an integer.")
                if key == "octaves" and not 1 <= value <= 16:
                    raise self._error(f"octaves {value} is outside [1, 16].", field, "use 1 to 16 octaves.")
                resolved[key] = value
            elif kind == "const":
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise self._error(f"expected a finite number, got {value!r}.", field, "write a number.")
                resolved[key] = float(value)
            elif kind == "bool":
                if not isinstance(value, bool):
                    raise self._error(f"expected true or false, got {value!r}.", field, "write true or false.")
                resolved[key] = value
            else:  # str
                choices = _STR_CHOICES.get((spec["op"], key))
                if not isinstance(value, str) or (choices and value not in choices):
                    raise self._error(f"{value!r} is not valid here.", field, f"use one of {', '.join(choices)}." if choices else "write a string.")
                resolved[key] = value
        if spec["op"] == "texture":
            self._texture(resolved["file"], resolved["srgb"])  # load now: a missing file fails at compile time
        return {"op": spec["op"], "inputs": resolved}

    def _references(self, name: str) -> list[str]:
        return [v[1:] for v in self._nodes[name]["inputs"].values() if isinstance(v, str) and v.startswith("@")]

    def _topological_order(self) -> list[str]:
        builtin = {"uv", "position", "normal"}
        order: list[str] = []
        state: dict[str, int] = {}

        def visit(name: str, trail: list[str]) -> None:
            if state.get(name) == 2:
                return
            if state.get(name) == 1:
                raise self._error(f"the nodes form a cycle: {' -> '.join(trail + [name])}.", f"nodes.{name}", "break the cycle.")
            state[name] = 1
            for ref in self._references(name):
                if ref not in self._nodes and ref not in builtin:
                    raise self._error(f"reference @{ref} names no node.", f"nodes.{name}", f"define a node {ref!r} or use one of {sorted(self._nodes)}.")
                if ref in self._nodes:
                    visit(ref, trail + [name])
            state[name] = 2
            order.append(name)

        for name in self._nodes:
            visit(name, [])
        return order

    def _compile_layer(self, spec: Any, where: str) -> dict[str, Any]:
        if not isinstance(spec, Mapping):
            raise self._error("a layer must be an object.", where, 'write {"lobe": ...}, {"coat": ...} or {"mix": [...]}.')
        kinds = [key for key in ("lobe", "coat", "mix") if key in spec]
        if len(kinds) != 1:
            raise self._error("a layer needs exactly one of lobe, coat, mix.", where, 'write {"lobe": ...}, {"coat": ...} or {"mix": [...]}.')
        kind = kinds[0]
        if kind == "lobe":
            return self._compile_lobe(spec, where)
        if kind == "coat":
            allowed = {"coat", "roughness", "anisotropy", "ior", "absorption", "thickness"}
            self._check_keys(spec, allowed, where)
            params = {key: self._param(spec.get(key, default), f"{where}.{key}", key) for key, default in
                      (("roughness", 0.05), ("ior", 1.5), ("absorption", 0.0), ("thickness", 0.0))}
            return {"kind": "coat", "base": self._compile_layer(spec["coat"], f"{where}.coat"), "params": params}
        self._check_keys(spec, {"mix", "mask"}, where)
        pair = spec["mix"]
        if not isinstance(pair, list) or len(pair) != 2:
            raise self._error("mix takes a list of two layers.", f"{where}.mix", 'write "mix": [layer_a, layer_b], "mask": ...')
        if "mask" not in spec:
            raise self._error("mix needs a mask.", f"{where}.mask", 'add "mask": a number in [0, 1] or an @node.')
        return {
            "kind": "mix",
            "a": self._compile_layer(pair[0], f"{where}.mix[0]"),
            "b": self._compile_layer(pair[1], f"{where}.mix[1]"),
            "mask": self._param(spec["mask"], f"{where}.mask", "mask"),
        }

    def _check_keys(self, spec: Mapping[str, Any], allowed: set[str], where: str) -> None:
        unknown = sorted(set(spec) - allowed)
        if unknown:
            raise self._error(f"unknown key {unknown[0]!r}.", f"{where}.{unknown[0]}", f"valid keys here: {', '.join(sorted(allowed))}.")

    def _param(self, value: Any, where: str, name: str) -> Any:
        resolved = self._value(value, where, _RANGES.get(name))
        if isinstance(resolved, str) and resolved[1:] not in self._nodes and resolved[1:] not in ("uv", "position", "normal"):
            raise self._error(f"reference {resolved} names no node.", where, f"define a node {resolved[1:]!r}.")
        return resolved

    def _compile_lobe(self, spec: Mapping[str, Any], where: str) -> dict[str, Any]:
        self._check_keys(spec, {"lobe", "params"}, where)
        name = spec["lobe"]
        if name not in LOBES:
            raise self._error(f"unknown lobe {name!r}.", f"{where}.lobe", f"use one of {', '.join(LOBES)}.")
        raw = dict(spec.get("params", {}))
        if name == "conductor" and "metal" in raw:
            metal = raw.pop("metal")
            if metal not in CONDUCTOR_IOR:
                raise self._error(f"unknown metal {metal!r}.", f"{where}.params.metal", f"use one of {', '.join(sorted(CONDUCTOR_IOR))}, or give eta and k.")
            raw.setdefault("eta", list(CONDUCTOR_IOR[metal][0]))
            raw.setdefault("k", list(CONDUCTOR_IOR[metal][1]))
        if name in ("conductor", "coating") and "roughness" in raw:
            raw["_roughness"] = raw.pop("roughness")  # artist roughness; alpha = roughness^2
        accepted = set(LOBES[name].parameters) | ({"_roughness"} if name in ("conductor", "coating") else set())
        for key in raw:
            if key not in accepted:
                shown = sorted(k for k in accepted if not k.startswith("_")) + (["roughness", "metal"] if name == "conductor" else ["roughness"] if name == "coating" else [])
                raise self._error(f"the {name} lobe has no parameter {key!r}.", f"{where}.params.{key}", f"use {', '.join(shown)}.")
        params = {key: self._param(value, f"{where}.params.{key.lstrip('_')}", key.lstrip("_")) for key, value in raw.items()}
        return {"kind": "lobe", "lobe": name, "params": params}

    def _texture(self, file: str, srgb: bool) -> torch.Tensor:
        key = (file, srgb)
        if key not in self._textures:
            path = Path(file) if Path(file).is_absolute() else self.source.parent / file
            self._textures[key] = load_texture(path, srgb=srgb, dtype=self.dtype, device=self.device)
        return self._textures[key]

    # -- evaluation -----------------------------------------------------------------------------
    def requires_grad_(self, requires_grad: bool = True) -> MaterialGraph:
        """Make every constant of the document a differentiable parameter."""
        for tensor in self.parameters.values():
            tensor.requires_grad_(requires_grad)
        return self

    def _context(self, uv: torch.Tensor, normal: torch.Tensor, position: torch.Tensor | None) -> _Context:
        if uv.dim() != 2 or uv.shape[1] != 2:
            raise ValueError(f"uv must have shape [N, 2], got {tuple(uv.shape)}")
        if normal.shape != (uv.shape[0], 3):
            raise ValueError(f"normal must have shape [{uv.shape[0]}, 3], got {tuple(normal.shape)}")
        if position is None:
            position = torch.cat([uv, torch.zeros_like(uv[:, :1])], dim=1)
        ctx = _Context(self, uv, normal, position)
        for name in self._order:
            node = self._nodes[name]
            inputs = {key: self._resolve(value, ctx) for key, value in node["inputs"].items()}
            ctx.values[name] = NODE_OPS[node["op"]].fn(ctx, **inputs)
        return ctx

    def _resolve(self, value: Any, ctx: _Context) -> Any:
        if isinstance(value, _Param):
            return self.parameters[value.key]
        if isinstance(value, str) and value.startswith("@"):
            ref = value[1:]
            if ref in ctx.values:
                return ctx.values[ref]
            return {"uv": ctx.uv, "position": ctx.position, "normal": ctx.normal}[ref]
        return value

    def _build(self, spec: dict[str, Any], ctx: _Context, record: list[tuple[torch.Tensor, bool]] | None) -> Layer:
        def get(value: Any) -> Any:
            resolved = self._resolve(value, ctx)
            if record is not None:
                record.append((resolved, isinstance(value, _Param)))  # (value, is a document constant)
            return resolved

        if spec["kind"] == "lobe":
            params = {key: get(value) for key, value in spec["params"].items()}
            if "_roughness" in params:
                alpha = params.pop("_roughness") ** 2
                params["alpha_x"] = alpha
            return layer(spec["lobe"], params)
        if spec["kind"] == "coat":
            p = {key: get(value) for key, value in spec["params"].items()}
            base = self._build(spec["base"], ctx, record)
            return coat(base, alpha_x=p["roughness"] ** 2, ior=p["ior"], absorption=p["absorption"], thickness=p["thickness"])
        mask = get(spec["mask"])
        return mix(self._build(spec["a"], ctx, record), self._build(spec["b"], ctx, record), mask)

    def __call__(self, uv: torch.Tensor, normal: torch.Tensor, position: torch.Tensor | None = None) -> Layer:
        return self._build(self._surface, self._context(uv, normal, position), None)

    def texel_inputs(self, uv: torch.Tensor, normal: torch.Tensor, position: torch.Tensor | None = None) -> torch.Tensor:
        """Every layer parameter and mask at the shading points, concatenated: ``[N, K]``.

        Constants appear as constant columns; this is what a neural material's encoder reads.
        """
        return self.layer_and_inputs(uv, normal, position)[1]

    def layer_and_inputs(self, uv: torch.Tensor, normal: torch.Tensor, position: torch.Tensor | None = None) -> tuple[Layer, torch.Tensor]:
        """``(self(uv, normal), self.texel_inputs(uv, normal))`` from one evaluation of the node graph."""
        record: list[tuple[torch.Tensor, bool]] = []
        built = self._build(self._surface, self._context(uv, normal, position), record)
        n = uv.shape[0]
        columns = [value.reshape(1, -1).expand(n, -1) if constant else value.reshape(n, -1) for value, constant in record]
        return built, torch.cat(columns, dim=1)


def load_material_document(path: str | Path) -> dict[str, Any]:
    """Read a material JSON file (errors name the file and the fix)."""
    path = Path(path)
    if not path.is_file():
        raise InputError("the material file does not exist.", path=path, fix="check the path.")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"the material is not valid JSON ({exc}).", path=path, fix="correct the JSON syntax.") from exc
    if not isinstance(document, dict):
        raise InputError("the material must be a JSON object.", path=path, fix='start the file with {"format": "neuralbake.material", ...}.')
    return document


def compile_material(path: str | Path, *, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> MaterialGraph:
    """Load and compile a ``.json`` material document into a :class:`MaterialGraph`."""
    path = Path(path)
    return MaterialGraph(load_material_document(path), source=path, device=device, dtype=dtype)

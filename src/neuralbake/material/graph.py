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

The node types are :mod:`~neuralbake.material.graph_nodes`; reading the file and checking its
header is :mod:`~neuralbake.material.graph_document`. This module compiles and validates the
nodes and layers and evaluates them.

The document is untrusted input: it is read with the shared JSON limits
(:func:`neuralbake.io.limits.load_json_file`), layers may nest at most :data:`MAX_LAYER_DEPTH`
deep, texture files are resolved with :func:`neuralbake.io.refs.resolve_reference` (only inside
the document's folder), every value is type-checked, and the compiled material is evaluated once
on a few sample points so that a shape that cannot broadcast fails at compile time, naming its
field, instead of in the middle of a bake.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from neuralbake.errors import InputError, short_repr
from neuralbake.io.refs import resolve_reference
from neuralbake.material.fresnel import CONDUCTOR_IOR
from neuralbake.material.graph_document import check_document_header, load_material_document
from neuralbake.material.graph_nodes import INT_RANGES, NODE_OPS, REQUIRED, STR_CHOICES
from neuralbake.material.layering import MAX_LAYER_DEPTH, Layer, coat, layer, mix
from neuralbake.material.lobes import LOBES
from neuralbake.material.texture import load_texture

__all__ = ["MaterialGraph", "compile_material"]



# What evaluating a mis-shaped graph can raise (torch broadcasting errors are RuntimeErrors).
_EVAL_ERRORS = (RuntimeError, ValueError, IndexError, TypeError, ZeroDivisionError, OverflowError)

# Allowed range of each constant lobe/coat parameter: (low, high), inclusive.
_RANGES = {
    "albedo": (0.0, 1.0),
    "base_color": (0.0, 1.0),
    "color": (0.0, 1.0),
    "metallic": (0.0, 1.0),
    "f0": (0.0, 1.0),
    "f90": (0.0, 1.0),
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




def _is_numbers(value: Any, depth: int = 0) -> bool:
    """A number (not a bool) or a list (of lists) of numbers, at most two levels deep."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    return isinstance(value, list) and depth < 2 and all(_is_numbers(item, depth + 1) for item in value)


_show = short_repr


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(type(value), "a number")


def _known_op(op: Any) -> bool:
    return isinstance(op, str) and op in NODE_OPS


def _reason(exc: BaseException) -> str:
    text = exc.problem if isinstance(exc, InputError) else f"{type(exc).__name__}: {exc}"
    text = " ".join(text.split())
    return text if len(text) <= 200 else text[:197] + "..."


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
        fix = "write a number, a list of numbers or an @node reference."
        if not _is_numbers(value):
            raise self._error(f"{_show(value)} is not a number or a list of numbers.", where, fix)
        try:
            tensor = torch.tensor(value, dtype=self.dtype, device=self.device)
        except (TypeError, ValueError, OverflowError, RuntimeError) as exc:
            raise self._error(f"{_show(value)} is not a number or a (rectangular) list of numbers ({exc}).", where, fix) from exc
        if tensor.numel() == 0:
            raise self._error("the list is empty.", where, fix)
        if not torch.isfinite(tensor).all():
            raise self._error(f"{_show(value)} is not finite (NaN or infinity).", where, "write a finite number.")
        if bounds is not None and (tensor.min() < bounds[0] or tensor.max() > bounds[1]):
            raise self._error(f"{_show(value)} is outside [{bounds[0]:g}, {bounds[1]:g}].", where, f"use values in [{bounds[0]:g}, {bounds[1]:g}].")
        self.parameters[where] = tensor
        return _Param(where)

    def _value(self, value: Any, where: str, bounds: tuple[float, float] | None = None) -> Any:
        """A constant becomes a parameter tensor; ``"@node"`` stays a reference."""
        if isinstance(value, str):
            if not value.startswith("@"):
                raise self._error(f"{_show(value)} is neither a number nor an @node reference.", where, "write a number, a list or '@name' of a node.")
            return value
        return self._constant(value, where, bounds)

    def _compile(self, document: Mapping[str, Any]) -> None:
        check_document_header(document, self.source)
        nodes = document.get("nodes", {})
        if not isinstance(nodes, Mapping):
            raise self._error("nodes must be an object mapping names to nodes.", "nodes", 'write "nodes": {"name": {"op": ...}}.')
        for name, spec in nodes.items():
            if not isinstance(spec, Mapping):
                raise self._error(f"a node must be an object, got {_kind(spec)}.", f"nodes.{name}", 'write {"op": ..., <input>: <value>}.')
        unknown_ops = sorted({_show(spec.get("op", "?")) for spec in nodes.values() if not _known_op(spec.get("op"))})
        if unknown_ops:
            users = [name for name, spec in nodes.items() if not _known_op(spec.get("op"))]
            raise self._error(
                f"unsupported node op(s) [{', '.join(unknown_ops)}] (nodes {users}).", f"nodes.{users[0]}.op", f"use one of {', '.join(sorted(NODE_OPS))}."
            )
        for name, spec in nodes.items():
            self._nodes[name] = self._compile_node(name, spec)
        self._order = self._topological_order()
        if "surface" not in document:
            raise self._error("the material has no layers (no 'surface').", "surface", 'add "surface": {"lobe": ..., "params": {...}}.')
        self._surface = self._compile_layer(document["surface"], "surface", 1)
        self._trial()

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
            if value is REQUIRED:
                raise self._error(f"node op {spec['op']!r} needs input {key!r}.", field, f"add {key!r} to the node.")
            if kind == "value":
                resolved[key] = self._value(value, field)
            elif kind == "int":
                if isinstance(value, bool) or not isinstance(value, int):
                    raise self._error(f"expected a whole number, got {_show(value)}.", field, "write an integer.")
                low, high = INT_RANGES.get(key, (-(2**31), 2**31 - 1))
                if not low <= value <= high:
                    raise self._error(f"{key} {_show(value)} is outside [{low}, {high}].", field, f"use {low} to {high}.")
                resolved[key] = value
            elif kind == "const":
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise self._error(f"expected a finite number, got {_show(value)}.", field, "write a number.")
                resolved[key] = float(value)
            elif kind == "bool":
                if not isinstance(value, bool):
                    raise self._error(f"expected true or false, got {_show(value)}.", field, "write true or false.")
                resolved[key] = value
            else:  # str
                choices = STR_CHOICES.get((spec["op"], key))
                if not isinstance(value, str) or (choices and value not in choices):
                    raise self._error(f"{_show(value)} is not valid here.", field, f"use one of {', '.join(choices)}." if choices else "write a string.")
                resolved[key] = value
        if spec["op"] == "texture":
            self._texture(resolved["file"], resolved["srgb"], f"{where}.file")  # load now: a missing file fails at compile time
        return {"op": spec["op"], "inputs": resolved}

    def _references(self, name: str) -> list[str]:
        return [v[1:] for v in self._nodes[name]["inputs"].values() if isinstance(v, str) and v.startswith("@")]

    def _topological_order(self) -> list[str]:
        builtin = {"uv", "position", "normal"}
        order: list[str] = []
        state: dict[str, int] = {}

        # Depth-first with an explicit stack: a chain of thousands of nodes is legal JSON (the
        # nodes are flat) and must not exhaust Python's recursion limit.
        for root in self._nodes:
            if state.get(root) == 2:
                continue
            trail: list[str] = [root]
            stack = [iter(self._references(root))]
            state[root] = 1
            while stack:
                name = trail[-1]
                ref = next(stack[-1], None)
                if ref is None:
                    stack.pop()
                    trail.pop()
                    state[name] = 2
                    order.append(name)
                    continue
                if ref not in self._nodes and ref not in builtin:
                    raise self._error(f"reference @{ref} names no node.", f"nodes.{name}", f"define a node {ref!r} or use one of {sorted(self._nodes)}.")
                if ref not in self._nodes or state.get(ref) == 2:
                    continue
                if state.get(ref) == 1:
                    cycle = trail[trail.index(ref):] + [ref]
                    raise self._error(f"the nodes form a cycle: {' -> '.join(cycle)}.", f"nodes.{ref}", "break the cycle.")
                state[ref] = 1
                trail.append(ref)
                stack.append(iter(self._references(ref)))
        return order

    def _compile_layer(self, spec: Any, where: str, depth: int) -> dict[str, Any]:
        if depth > MAX_LAYER_DEPTH:
            raise self._error(
                f"layers nest more than {MAX_LAYER_DEPTH} deep here.",
                where,
                f"flatten the layer tree (at most {MAX_LAYER_DEPTH} nested coat/mix layers; real materials need a handful).",
            )
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
            base = self._compile_layer(spec["coat"], f"{where}.coat", depth + 1)
            return {"kind": "coat", "where": where, "base": base, "params": params, "fields": {key: f"{where}.{key}" for key in params}}
        self._check_keys(spec, {"mix", "mask"}, where)
        pair = spec["mix"]
        if not isinstance(pair, list) or len(pair) != 2:
            raise self._error("mix takes a list of two layers.", f"{where}.mix", 'write "mix": [layer_a, layer_b], "mask": ...')
        if "mask" not in spec:
            raise self._error("mix needs a mask.", f"{where}.mask", 'add "mask": a number in [0, 1] or an @node.')
        return {
            "kind": "mix",
            "where": where,
            "a": self._compile_layer(pair[0], f"{where}.mix[0]", depth + 1),
            "b": self._compile_layer(pair[1], f"{where}.mix[1]", depth + 1),
            "mask": self._param(spec["mask"], f"{where}.mask", "mask"),
            "fields": {"mask": f"{where}.mask"},
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
        if not isinstance(name, str) or name not in LOBES:
            raise self._error(f"unknown lobe {_show(name)}.", f"{where}.lobe", f"use one of {', '.join(LOBES)}.")
        params_spec = spec.get("params", {})
        if not isinstance(params_spec, Mapping):
            raise self._error(f"params must be an object, got {_kind(params_spec)}.", f"{where}.params", 'write "params": {"name": value, ...}.')
        raw = dict(params_spec)
        if name == "conductor" and "metal" in raw:
            metal = raw.pop("metal")
            if not isinstance(metal, str) or metal not in CONDUCTOR_IOR:
                raise self._error(f"unknown metal {_show(metal)}.", f"{where}.params.metal", f"use one of {', '.join(sorted(CONDUCTOR_IOR))}, or give eta and k.")
            raw.setdefault("eta", list(CONDUCTOR_IOR[metal][0]))
            raw.setdefault("k", list(CONDUCTOR_IOR[metal][1]))
        if name in ("conductor", "coating") and "roughness" in raw:
            raw["_roughness"] = raw.pop("roughness")  # artist roughness; alpha = roughness^2
        accepted = set(LOBES[name].parameters) | ({"_roughness"} if name in ("conductor", "coating") else set())
        for key in raw:
            if key not in accepted:
                shown = sorted(k for k in accepted if not k.startswith("_")) + (["roughness", "metal"] if name == "conductor" else ["roughness"] if name == "coating" else [])
                raise self._error(f"the {name} lobe has no parameter {key!r}.", f"{where}.params.{key}", f"use {', '.join(shown)}.")
        fields = {key: f"{where}.params.{key.lstrip('_')}" for key in raw}
        params = {key: self._param(value, fields[key], key.lstrip("_")) for key, value in raw.items()}
        return {"kind": "lobe", "where": where, "lobe": name, "params": params, "fields": fields}

    def _texture(self, file: str, srgb: bool, field: str = "texture") -> torch.Tensor:
        key = (file, srgb)
        if key not in self._textures:
            # Only inside the document's folder (unless the CLI's --allow-outside-refs is in force):
            # a material must not be able to read /etc/passwd into a texture or probe for files.
            path = resolve_reference(self.source, file, field=field, what="texture image")
            try:
                self._textures[key] = load_texture(path, srgb=srgb, dtype=self.dtype, device=self.device)
            except InputError as exc:
                raise self._error(f"the texture image {file!r} cannot be used: {exc.problem}", field, exc.fix or "check the file.") from exc
        return self._textures[key]

    def _trial(self) -> None:
        """Evaluate the compiled material once on a few points; any failure names its node or layer.

        Shapes are only known once values meet (a two-element colour, a per-point node feeding a
        per-material parameter, a component index past the channels): this turns what would be a
        torch error in the middle of a bake into a compile-time error that names the field.
        """
        kw = {"dtype": self.dtype, "device": self.device}
        uv = torch.tensor([[0.1, 0.2], [0.7, 0.35], [0.3, 0.8], [0.9, 0.6], [0.45, 0.05]], **kw)
        normal = torch.nn.functional.normalize(torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.2, 0.0], [0.3, 0.8, 0.5], [-0.5, 0.5, 0.7]], **kw), dim=1)
        wo = torch.nn.functional.normalize(torch.tensor([[0.0, 0.0, 1.0], [0.6, 0.0, 0.8], [0.0, 0.6, 0.8], [0.5, 0.6, 0.6], [-0.7, 0.1, 0.3]], **kw), dim=1)
        wi = torch.nn.functional.normalize(torch.tensor([[0.3, 0.1, 0.9], [-0.6, 0.2, 0.7], [0.1, -0.5, 0.8], [0.0, 0.0, 1.0], [0.7, 0.3, 0.2]], **kw), dim=1)
        u = torch.tensor([[0.1, 0.9], [0.5, 0.5], [0.9, 0.2], [0.3, 0.7], [0.7, 0.05]], **kw)
        n = uv.shape[0]
        with torch.no_grad():
            ctx = _Context(self, uv, normal, torch.cat([uv, torch.zeros_like(uv[:, :1])], dim=1))
            for name in self._order:
                node = self._nodes[name]
                try:
                    inputs = {key: self._resolve(value, ctx) for key, value in node["inputs"].items()}
                    out = NODE_OPS[node["op"]].fn(ctx, **inputs)
                except (InputError, *_EVAL_ERRORS) as exc:
                    raise self._error(
                        f"the {node['op']} node cannot be evaluated with these inputs ({_reason(exc)}).",
                        f"nodes.{name}",
                        "check that its inputs have matching shapes (numbers, colours of 3, lists of the same length).",
                    ) from exc
                ctx.values[name] = out

            def visit(spec: dict[str, Any]) -> None:
                children = [spec["base"]] if spec["kind"] == "coat" else [spec["a"], spec["b"]] if spec["kind"] == "mix" else []
                for child in children:
                    visit(child)  # the deepest failing layer is the one named
                for key, value in spec["params"].items() if spec["kind"] != "mix" else (("mask", spec["mask"]),):
                    resolved = self._resolve(value, ctx)
                    if not isinstance(value, _Param) and (resolved.dim() == 0 or resolved.shape[0] != n):
                        raise self._error(
                            f"{value} gives one value for all points (shape {tuple(resolved.shape)}), not one per point.",
                            spec["fields"][key],
                            "write the constant here directly, or feed the node from @uv, @position, @normal or a noise/texture.",
                        )
                try:
                    built = self._build(spec, ctx, None)
                    built.eval(wi, wo)
                    built.sample(wo, u)
                    built.pdf(wi, wo)
                except InputError as exc:
                    field = spec["fields"].get(exc.field or "", spec["where"]) if spec["kind"] != "lobe" else (
                        spec["fields"].get(exc.field or "") or spec["fields"].get("_" + (exc.field or "")) or spec["where"]
                    )
                    raise self._error(f"the layer cannot be evaluated: {exc.problem}", field, exc.fix or "check the layer's parameters.") from exc
                except _EVAL_ERRORS as exc:
                    raise self._error(
                        f"the layer cannot be evaluated ({_reason(exc)}).",
                        spec["where"],
                        "check that its parameters have the right shapes (a number, or a colour of 3 numbers).",
                    ) from exc

            visit(self._surface)
            try:
                self.layer_and_inputs(uv, normal)
            except (InputError, *_EVAL_ERRORS) as exc:
                raise self._error(
                    f"the layer parameters cannot be gathered per point ({_reason(exc)}).", "surface", "check the shapes of the layer parameters."
                ) from exc

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



def compile_material(path: str | Path, *, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> MaterialGraph:
    """Load and compile a ``.json`` material document into a :class:`MaterialGraph`."""
    path = Path(path)
    return MaterialGraph(load_material_document(path), source=path, device=device, dtype=dtype)

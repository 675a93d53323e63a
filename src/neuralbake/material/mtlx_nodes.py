"""MaterialX pattern nodes as batched PyTorch ops, for :mod:`~neuralbake.material.mtlx_compiler`.

Each supported node category (:data:`SUPPORTED_NODES`) is one function
``(node, args, geometry) -> [B, C]``: ``args`` maps the node's input names to resolved values
(``[B, C]`` tensors with ``B`` 1 or N for the numeric types, Python ints / bools / strings for
``integer`` / ``boolean`` / ``string`` inputs), and the result is the node's output as a ``[B, C]``
tensor (``C`` = 1 for ``float``, 2 for ``vector2``, 3 for ``color3`` / ``vector3``, 4 for
``color4`` / ``vector4``). Semantics follow the MaterialX 1.39 standard library
(``stdlib_defs.mtlx`` and its GLSL reference implementations), with these differences:

* Noise (``noise2d/3d``, ``fractal3d``, ``cellnoise2d/3d``, ``worleynoise2d/3d``) uses
  neuralbake's own hashed lattice (:mod:`~neuralbake.material.noise`), so it has MaterialX's range,
  frequency and octave structure but not its exact pattern. ``fractal3d`` is MaterialX's
  ``amplitude * sum_{i < octaves} diminish^i perlin(lacunarity^i p)`` (not normalised);
  multi-channel noise draws each channel with its own seed.
* ``image`` / ``tiledimage`` filter bilinearly whatever ``filtertype`` says; ``layer`` and the
  frame inputs are ignored. Texture coordinates follow MaterialX (``v`` up, image row 0 at
  ``v = 1``), so the lookup flips ``v`` for :func:`~neuralbake.material.texture.sample_texture`.
* ``position`` and ``normal`` return the caller's position and normal for every ``space``
  (object = world: the compiled material has no object transform).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from neuralbake.errors import InputError
from neuralbake.io.materialx import MaterialXNode
from neuralbake.io.refs import resolve_reference
from neuralbake.material.noise import hash_uniform, perlin_noise, worley_noise
from neuralbake.material.texture import load_texture, sample_texture

__all__ = ["CHANNELS", "NODES", "SUPPORTED_NODES", "Geometry", "evaluate_node", "load_image_node"]

CHANNELS = {"float": 1, "vector2": 2, "vector3": 3, "color3": 3, "vector4": 4, "color4": 4}
"""Channel count of each numeric MaterialX type (the last axis of a value tensor)."""


@dataclass(frozen=True)
class Geometry:
    """The shading points a graph is evaluated at: ``uv`` ``[N, 2]``, ``normal`` and ``position`` ``[N, 3]``."""

    uv: torch.Tensor
    normal: torch.Tensor
    position: torch.Tensor


def _fail(node: MaterialXNode, problem: str, fix: str, field: str | None = None) -> InputError:
    return InputError(problem, field=field or node.path, fix=fix)


def _channels(node: MaterialXNode) -> int:
    if node.type not in CHANNELS:
        raise _fail(
            node, f"the node's output type '{node.type}' is not supported by the compiler.", "use a float, vector or colour output."
        )
    return CHANNELS[node.type]


def _scalar(x: torch.Tensor) -> torch.Tensor:
    """The first channel as ``[B, 1]`` (MaterialX float inputs)."""
    return x[:, :1]


# --- math ---------------------------------------------------------------------------------------


def _add(node, a, g):
    return a["in1"] + a["in2"]


def _subtract(node, a, g):
    return a["in1"] - a["in2"]


def _multiply(node, a, g):
    return a["in1"] * a["in2"]


def _divide(node, a, g):
    return a["in1"] / a["in2"]


def _power(node, a, g):
    # GLSL's pow is undefined for negative bases; MaterialX renderers differ there, so they give 0.
    return torch.clamp(a["in1"], min=0.0) ** a["in2"]


def _sin(node, a, g):
    return torch.sin(a["in"])


def _cos(node, a, g):
    return torch.cos(a["in"])


def _dotproduct(node, a, g):
    return (a["in1"] * a["in2"]).sum(dim=-1, keepdim=True)


def _clamp(node, a, g):
    return torch.minimum(torch.maximum(a["in"], a["low"]), a["high"])


def _mix(node, a, g):
    # MaterialX: out = fg * mix + bg * (1 - mix); mix 0 gives the background.
    return a["bg"] + a["mix"] * (a["fg"] - a["bg"])


def _smoothstep(node, a, g):
    x, low, high = a["in"], a["low"], a["high"]
    width = high - low
    t = torch.clamp((x - low) / torch.where(width > 0.0, width, torch.ones_like(width)), 0.0, 1.0)
    smooth = t * t * (3.0 - 2.0 * t)
    # As mx_smoothstep: 1 at and above high, 0 at and below low (also when low == high).
    return torch.where(x >= high, torch.ones_like(smooth), torch.where(x <= low, torch.zeros_like(smooth), smooth))


def _constant(node, a, g):
    return a["value"]


# --- channels -----------------------------------------------------------------------------------


def _convert(node, a, g):
    value = a["in"]
    if isinstance(value, (bool, int)):
        value = torch.tensor([[float(value)]], dtype=g.uv.dtype, device=g.uv.device)
    c_out = _channels(node)
    c_in = value.shape[-1]
    if c_in == 1:
        return value.expand(-1, c_out)
    if c_in >= c_out:
        return value[:, :c_out]
    pad = torch.zeros(value.shape[0], c_out - c_in, dtype=value.dtype, device=value.device)
    if node.type == "color4":
        pad[:, -1] = 1.0  # a colour gains an opaque alpha
    return torch.cat((value, pad), dim=-1)


def _extract(node, a, g):
    index = a["index"]
    value = a["in"]
    if not 0 <= index < value.shape[-1]:
        raise _fail(node, f"extract index {index} is outside the input's {value.shape[-1]} channels.", "use an index within the input.")
    return value[:, index : index + 1]


def _combine(node, a, g):
    names = [f"in{k}" for k in range(1, 5) if f"in{k}" in a]
    return torch.cat(torch.broadcast_tensors(*[a[name] for name in names])[: len(names)], dim=-1)


# --- geometry -----------------------------------------------------------------------------------


def _position(node, a, g):
    return g.position


def _normal(node, a, g):
    return g.normal


def _texcoord(node, a, g):
    if a.get("index", 0) != 0:
        raise _fail(node, f"texcoord index {a['index']} asks for a second uv set; only UV0 is passed in.", "use index 0.")
    uv = g.uv
    if node.type == "vector3":
        return torch.cat((uv, torch.zeros_like(uv[:, :1])), dim=-1)
    return uv


# --- procedural ---------------------------------------------------------------------------------


def _points(p: torch.Tensor, n: int) -> torch.Tensor:
    return p.expand(n, -1) if p.shape[0] == 1 else p


def _per_channel(node, fn: Callable[[int], torch.Tensor]) -> torch.Tensor:
    return torch.stack([fn(channel) for channel in range(_channels(node))], dim=-1)


def _noise(node, a, g, key):
    p = _points(a[key], g.uv.shape[0])
    value = _per_channel(node, lambda c: perlin_noise(p, seed=c))
    return value * a["amplitude"] + a["pivot"]


def _noise2d(node, a, g):
    return _noise(node, a, g, "texcoord")


def _noise3d(node, a, g):
    return _noise(node, a, g, "position")


def _fractal3d(node, a, g):
    octaves, lacunarity, diminish = a["octaves"], a["lacunarity"], a["diminish"]
    p = _points(a["position"], g.uv.shape[0])

    def channel(c: int) -> torch.Tensor:
        total = torch.zeros_like(p[:, 0])
        amplitude: torch.Tensor | float = 1.0
        point = p
        for _ in range(octaves):
            total = total + amplitude * perlin_noise(point, seed=c)
            amplitude = amplitude * diminish[:, 0]
            point = point * lacunarity
        return total

    return _per_channel(node, channel) * a["amplitude"]


def _cellnoise(node, a, g, key):
    p = _points(a[key], g.uv.shape[0])
    return hash_uniform(torch.floor(p.detach()).long(), seed=7, dtype=p.dtype)[:, None]


def _cellnoise2d(node, a, g):
    return _cellnoise(node, a, g, "texcoord")


def _cellnoise3d(node, a, g):
    return _cellnoise(node, a, g, "position")


def _worley(node, a, g, key):
    if node.type != "float" or a.get("style", 0) != 0:
        raise _fail(node, "only float worley noise with style 0 (distance) is supported.", "use a float output and style 0.")
    jitter = a["jitter"]
    if jitter.numel() != 1:
        raise _fail(node, "a varying worley jitter is not supported.", "give jitter a constant value.", f"{node.path}/jitter")
    p = _points(a[key], g.uv.shape[0])
    return worley_noise(p, jitter=min(max(float(jitter), 0.0), 1.0))[:, None]


def _worleynoise2d(node, a, g):
    return _worley(node, a, g, "texcoord")


def _worleynoise3d(node, a, g):
    return _worley(node, a, g, "position")


def _ramplr(node, a, g):
    t = torch.clamp(_scalar(a["texcoord"]), 0.0, 1.0)
    return a["valuel"] + t * (a["valuer"] - a["valuel"])


def _ramptb(node, a, g):
    t = torch.clamp(a["texcoord"][:, 1:2], 0.0, 1.0)
    return a["valueb"] + t * (a["valuet"] - a["valueb"])


# --- images -------------------------------------------------------------------------------------

_ADDRESS_MODES = {"periodic": "repeat", "clamp": "clamp", "mirror": "mirror", "constant": "constant"}


def load_image_node(
    node: MaterialXNode, file: str, colorspace: str | None, *, document: str, dtype: torch.dtype, device: torch.device | str
) -> torch.Tensor:
    """Read the texture of an ``image`` / ``tiledimage`` node as ``[H, W, C]`` linear values.

    ``file`` is resolved against the document's folder and must stay inside it (see
    :func:`neuralbake.io.refs.resolve_reference`; ``--allow-outside-refs`` lifts that). ``colorspace``:
    ``srgb_texture`` is decoded, ``lin_rec709`` / none / ``raw`` are read as stored; others raise.
    """
    field = f"{node.path}/file"
    if not file:
        raise InputError("the image node names no file.", path=document, field=field, fix="set its 'file' input.")
    # Confinement before any look at the file: not even whether an outside path exists is told.
    path = resolve_reference(document, file, field=field, what="texture image")
    if not path.is_file():
        raise InputError(
            f"the image node '{node.path}' reads '{file}', which does not exist.",
            path=document,
            field=field,
            fix="put the texture beside the document or correct the file name.",
        )
    if colorspace not in (None, "", "lin_rec709", "raw", "srgb_texture"):
        raise InputError(
            f"the texture colour space '{colorspace}' is not supported.",
            path=document,
            field=field,
            fix="use srgb_texture or lin_rec709 (or convert the image).",
        )
    try:
        return load_texture(path, srgb=colorspace == "srgb_texture", dtype=dtype, device=device)
    except InputError as error:
        raise InputError(
            f"the texture '{file}' cannot be used: {error.problem}", path=document, field=field, fix=error.fix or "check the image."
        ) from error


def _lookup(node, texture: torch.Tensor, uv: torch.Tensor, umode: str, vmode: str, default: torch.Tensor) -> torch.Tensor:
    c = _channels(node)
    for mode in (umode, vmode):
        if mode not in _ADDRESS_MODES:
            raise _fail(node, f"unknown address mode '{mode}'.", f"use one of {', '.join(_ADDRESS_MODES)}.")
    if umode != vmode and "constant" not in (umode, vmode):
        raise _fail(node, "different u and v address modes are not supported.", "use the same address mode for u and v.")
    wrap = _ADDRESS_MODES[umode if umode != "constant" else vmode]
    wrap = "clamp" if wrap == "constant" else wrap
    lookup_uv = torch.stack((uv[:, 0], 1.0 - uv[:, 1]), dim=-1)  # MaterialX v points up the image
    texels = sample_texture(texture, lookup_uv, wrap=wrap)
    if texels.shape[-1] == 1:
        texels = texels.expand(-1, c)
    elif texels.shape[-1] < c:
        pad = torch.ones(texels.shape[0], c - texels.shape[-1], dtype=texels.dtype, device=texels.device)
        texels = torch.cat((texels, pad), dim=-1)
    texels = texels[:, :c]
    outside = torch.zeros_like(uv[:, 0], dtype=torch.bool)
    if umode == "constant":
        outside = outside | (uv[:, 0] < 0.0) | (uv[:, 0] > 1.0)
    if vmode == "constant":
        outside = outside | (uv[:, 1] < 0.0) | (uv[:, 1] > 1.0)
    return torch.where(outside[:, None], default.expand_as(texels), texels)


def _image(node, a, g):
    uv = _points(a["texcoord"], g.uv.shape[0])
    return _lookup(node, a["file"], uv, a["uaddressmode"], a["vaddressmode"], a["default"])


def _tiledimage(node, a, g):
    uv = _points(a["texcoord"], g.uv.shape[0])
    uv = (uv * a["uvtiling"] - a["uvoffset"]) / a["realworldimagesize"] * a["realworldtilesize"]
    return _lookup(node, a["file"], uv, "periodic", "periodic", a["default"])


NODES: dict[str, Callable[[MaterialXNode, dict[str, Any], Geometry], torch.Tensor]] = {
    "add": _add,
    "cellnoise2d": _cellnoise2d,
    "cellnoise3d": _cellnoise3d,
    "clamp": _clamp,
    "combine2": _combine,
    "combine3": _combine,
    "combine4": _combine,
    "constant": _constant,
    "convert": _convert,
    "cos": _cos,
    "divide": _divide,
    "dotproduct": _dotproduct,
    "extract": _extract,
    "fractal3d": _fractal3d,
    "image": _image,
    "mix": _mix,
    "multiply": _multiply,
    "noise2d": _noise2d,
    "noise3d": _noise3d,
    "normal": _normal,
    "position": _position,
    "power": _power,
    "ramplr": _ramplr,
    "ramptb": _ramptb,
    "sin": _sin,
    "smoothstep": _smoothstep,
    "subtract": _subtract,
    "texcoord": _texcoord,
    "tiledimage": _tiledimage,
    "worleynoise2d": _worleynoise2d,
    "worleynoise3d": _worleynoise3d,
}

SUPPORTED_NODES = frozenset(NODES)
"""Every node category the compiler evaluates."""


def evaluate_node(node: MaterialXNode, args: dict[str, Any], geometry: Geometry) -> torch.Tensor:
    """The output of ``node`` for resolved inputs ``args``, ``[B, C]`` (see the module docstring)."""
    if node.category not in NODES:
        raise _fail(node, f"the node category '{node.category}' is not supported.", f"use one of {', '.join(sorted(NODES))}.")
    out = NODES[node.category](node, args, geometry)
    c = _channels(node)
    if out.shape[-1] == 1 and c > 1:
        out = out.expand(-1, c)
    if out.shape[-1] != c:
        raise _fail(node, f"computed {out.shape[-1]} channels for a {node.type} output.", "check the node's input types.")
    return out

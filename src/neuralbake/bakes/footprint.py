"""Arithmetic the bakes' footprints share (:class:`neuralbake.bakes.run.Footprint`).

Each bake estimates, from its config alone (device defaults filled in, no file read), the peak
memory of its device: a fixed base for the process, and terms that grow with its settings, each
counted in bytes from what the code allocates (batch x layer widths x bytes, parameters x the bytes
Adam keeps per parameter, grids, G-buffers and views). ``bench/footprints.py`` runs every bake on
small inputs and prints the estimate beside the measured peak.

The figures are upper-side estimates of the *sum* of what a bake holds: a bake's phases (training,
then baking a texture, then scoring) do not all peak at once, so a real peak is often below it.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from neuralbake.bakes.run import Footprint, get_field, set_field

__all__ = [
    "ASSUMED_ASSET_BYTES",
    "GIB",
    "MIB",
    "PROCESS_BYTES",
    "RENDERER_BASE_BYTES",
    "TRAINED_PARAMETER_BYTES",
    "dominant_field",
    "footprint",
    "mlp_parameters",
    "mlp_training_bytes",
    "precision_bytes",
]

MIB = 1 << 20
GIB = 1 << 30

PROCESS_BYTES = 448 * MIB
"""What a bake's process holds before its settings count: PyTorch and the libraries every bake
imports, the allocator's arenas and thread pools. Measured on a 2-core CPU: 232 MiB after ``import
torch`` and the bake's module, 497-529 MiB peak for a neural texture bake of a 256 x 256 image with
the default network and batch (whose own terms come to ~40 MiB). On a GPU it stands for the CUDA
context and the caching allocator's slack (about 0.5 GiB on an H100). Bakes that import more
(renderers, BVHs, diffusers) add their own share."""

RENDERER_BASE_BYTES = PROCESS_BYTES + 64 * MIB
"""The process's base with the deferred renderer, warp-lang's BVH and the glTF readers loaded (fit,
simplify, skin, lod): their small runs on the example crate and arm peaked at 550-640 MiB on a 2-core
CPU, most of it this base."""

TRAINED_PARAMETER_BYTES = 16
"""Per trained parameter: the fp32 master, its fp32 gradient and Adam's two fp32 moments."""

ASSUMED_TRIANGLES = 100_000
"""Triangles of a glTF asset, assumed (its size is known only once it is read; the readers refuse
more than ``max_triangles`` before decoding): DamagedHelmet has 46 k, the example crate 3 k."""
BYTES_PER_TRIANGLE = 1024
"""Per triangle of a loaded asset: its vertices' positions, normals, tangents, uvs, joints and weights
(numpy and the render scene's tensors), the faces and the BVH's nodes."""
ASSUMED_MAP_TEXELS = 5 * 2048 * 2048
"""Texels of an asset's maps, assumed: five 2K maps (base colour, metal/rough, normal, occlusion,
emission), as DamagedHelmet has."""
ASSUMED_ASSET_BYTES = ASSUMED_TRIANGLES * BYTES_PER_TRIANGLE + ASSUMED_MAP_TEXELS * 4 * 4
"""One loaded glTF asset, assumed: :data:`ASSUMED_TRIANGLES` and its maps decoded to float32 RGBA
(about 0.4 GiB). The glTF reader refuses an asset over its triangle budget and the image reader an
over-large map, each before decoding it."""


def precision_bytes(precision: str) -> int:
    """Bytes per value of a training precision (``fp32``, ``fp16``, ``bf16``)."""
    return 4 if precision == "fp32" else 2


def mlp_parameters(widths: Sequence[int]) -> int:
    """Weights and biases of a fully connected network with layer ``widths`` (inputs first)."""
    return sum(a * b + b for a, b in itertools.pairwise(widths))


def mlp_training_bytes(batch: int, widths: Sequence[int], compute_bytes: int) -> int:
    """Activations of one training step of an MLP through autograd: every layer's output before and
    after its activation is kept for the backward pass (2 values), and the backward pass holds a
    gradient of the same width while it runs (1 more), in the compute dtype; the inputs and the
    fp32 loss terms of the outputs on top."""
    hidden_and_out = sum(widths[1:])
    return batch * (3 * hidden_and_out * compute_bytes + 4 * widths[0] + 16 * widths[-1])


def footprint(
    terms: Mapping[str, float], *, steps: int, steps_field: str, base: int = PROCESS_BYTES, field: str | None = None
) -> Footprint:
    """A :class:`Footprint` from ``terms`` (``{setting: bytes it drives}``) on top of ``base``.

    ``field`` names the setting in the error (see :func:`dominant_field`); without it, the setting
    of the largest term.
    """
    memory = base + sum(max(0.0, float(v)) for v in terms.values())
    name = field if field is not None else max(terms, key=lambda k: terms[k])
    return Footprint(memory_bytes=int(min(memory, 2**62)), steps=int(min(steps, 2**62)), field=name, steps_field=steps_field)


def dominant_field(
    memory: Callable[[Any, torch.device], float], config: Any, device: torch.device, knobs: Mapping[str, Any], fallback: str
) -> str:
    """The setting that drives most of ``memory(config, device)``: the knob whose default value
    (``knobs``: ``{dotted.field: default}``) would save the most memory. Memory is often a product of
    settings (batch x width, views x pixels), so the knob that is furthest above its default is the
    one to name; ``fallback`` when no knob is above its default."""
    full = memory(config, device)
    best, saved = fallback, 0.0
    for name, default in knobs.items():
        trial = copy.deepcopy(config)
        try:
            if get_field(trial, name) == default:
                continue
            set_field(trial, name, default)
        except AttributeError:
            continue
        gain = full - memory(trial, device)
        if gain > saved:
            best, saved = name, gain
    return best

"""Shader statements that fill a neural material decoder's direction inputs, from its input layout.

Both generated shaders (the scalar Slang/HLSL functions of :mod:`neuralbake.export.neural_material_codegen`
and the tensor-core kernel of :mod:`neuralbake.export.neural_material_tensor`) write the decoder's
inputs through these, reading the one :class:`~neuralbake.io.neural_material_bundle.DecoderInputLayout`
that the PyTorch model (``neuralbake.bakes.neural_material.model.assemble_inputs``) reads too.
"""

from __future__ import annotations

from collections.abc import Callable

from neuralbake.io.neural_material_bundle import DecoderInputLayout

__all__ = ["direction_input_lines"]


def direction_input_lines(layout: DecoderInputLayout, module: str, store: Callable[[int, str], str], indent: str) -> list[str]:
    """Statements computing each direction feature from the local ``wi``, ``wo`` and storing its
    components: ``store(input_index, value)`` gives the assignment of one decoder input."""
    lines = []
    for segment in layout.directions:
        if segment.encoding == "identity":
            vector = segment.name
        elif segment.encoding == "halfway":
            vector = f"{segment.name}_feature"
            lines.append(f"{indent}float3 {vector} = nb_{module}_halfway(wi, wo);")
        else:
            raise ValueError(f"no shader encoding {segment.encoding!r} for direction input {segment.name!r}")
        lines += [f"{indent}{store(segment.offset + axis, f'{vector}.{component}')}" for axis, component in enumerate("xyz"[: segment.width])]
    return lines

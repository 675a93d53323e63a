"""Shader source that evaluates a bundle's MLP straight from its packed device layout.

Engines bind the bundle's ``network.fp32.bin`` / ``network.fp16.bin`` (see ``docs/bundle-format.md``)
as one ``ByteAddressBuffer`` and call the generated function; nothing is repacked. The generator
emits a Slang module and an HLSL file from one template, so the two are the same code apart from
the ``[shader("compute")]`` attribute Slang wants on entry points:

- ``static const uint`` constants per layer (inputs, outputs, ``weight_offset``, ``bias_offset``,
  all in bytes, copied from the manifest's layer table);
- ``<name>(ByteAddressBuffer weights, float inputs[C], out float outputs[O])``, a plain function
  (no ``[numthreads]``) that applies the frequency encoding (if any), every layer and the
  activations;
- a compute entry point ``<name>_kernel`` (64 threads per group) that reads point ``p``'s inputs
  from ``StructuredBuffer<float> <name>_inputs[p * C + c]``, writes
  ``RWStructuredBuffer<float> <name>_outputs[p * O + o]`` and takes the point count from
  ``cbuffer <name>_constants { uint <name>_point_count; }``; the weights are bound to
  ``ByteAddressBuffer <name>_weights``.

A ``ByteAddressBuffer`` is used because the manifest's offsets are byte offsets and because both
precisions can then share one binding type: fp32 values are ``asfloat(Load(offset))``, fp16 values
are unpacked from the enclosing 32-bit word with ``f16tof32``, which needs neither 16-bit types nor
shader model 6.2, and which slangpy's CPU device runs too. Arithmetic is fp32 in every precision;
``precision`` only selects how the weights are stored. ``int8`` (the int8 device layout of
:mod:`neuralbake.io.device_layout`: signed byte codes, a float32 scale per layer at the layer's
``scale_offset``, float32 biases) sums ``codes * inputs`` in fp32 and scales the sum once:
``scale * sum + bias``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from neuralbake.errors import BundleError, ConfigError
from neuralbake.io.bundle import read_bundle, read_device_layout
from neuralbake.io.bundle_manifest import manifest_float, manifest_object, manifest_str
from neuralbake.io.files import atomic_write_bytes, atomic_write_text
from neuralbake.nn.activations import DEFAULT_LEAK
from neuralbake.nn.serialize import COORDINATE_NETWORK_KIND, coordinate_network_config

__all__ = [
    "SHADER_ACTIVATIONS",
    "THREADS_PER_GROUP",
    "ShaderExport",
    "export_bundle_shader",
    "float_literal",
    "generate_mlp_hlsl",
    "generate_mlp_slang",
    "zeros_initializer",
]

THREADS_PER_GROUP = 64
"""Threads per group of the generated compute entry point."""

SHADER_ACTIVATIONS: dict[str, str] = {
    "none": "x",
    "relu": "max(x, 0.0f)",
    "leaky_relu": "x >= 0.0f ? x : {leak} * x",
    "tanh": "tanh(x)",
    "exp": "exp(x)",
    "sigmoid": "1.0f / (1.0f + exp(-x))",
    "clamped_gelu": "min(x, 3.0f) * clamp(x / 3.0f + 0.5f, 0.0f, 1.0f)",
}
"""Shader expression of each activation of ``neuralbake.nn.activations`` in terms of ``x``."""

_ELEMENT_BYTES = {"fp32": 4, "fp16": 2, "int8": 1}
_LOADS = {
    "fp32": "    return asfloat(weights.Load(byte_offset));",
    # Little-endian: the half at the lower address is the word's low 16 bits.
    "fp16": "    uint word = weights.Load(byte_offset & ~3u);\n    return f16tof32((byte_offset & 2u) != 0u ? word >> 16 : word);",
    # The byte moved to the top of the word, then an arithmetic shift back: its sign extended.
    "int8": "    uint word = weights.Load(byte_offset & ~3u);\n    return float(int(word << (24u - 8u * (byte_offset & 3u))) >> 24);",
}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def float_literal(value: float) -> str:
    """Shortest decimal that reads back as the same float32, with an ``f`` suffix."""
    return np.format_float_positional(np.float32(value), unique=True, trim="0") + "f"


def _check_options(layers: Sequence[Mapping[str, Any]], hidden_activation: str, output_activation: str, precision: str, function_name: str) -> None:
    if precision not in _ELEMENT_BYTES:
        raise ConfigError(f"unknown precision {precision!r}.", field="precision", fix=f"use one of {sorted(_ELEMENT_BYTES)}.")
    for field, name in (("hidden_activation", hidden_activation), ("output_activation", output_activation)):
        if name not in SHADER_ACTIVATIONS:
            raise ConfigError(f"unknown activation {name!r}.", field=field, fix=f"use one of {sorted(SHADER_ACTIVATIONS)}.")
    if not _IDENTIFIER.fullmatch(function_name):
        raise ConfigError(f"{function_name!r} is not a shader identifier.", field="function_name", fix="use letters, digits and underscores.")
    if not layers:
        raise ConfigError("the layer table is empty.", field="layers", fix="pass the manifest's device_layouts[precision].layers.")
    element = _ELEMENT_BYTES[precision]
    for index, layer in enumerate(layers):
        name = f"layers[{index}]"
        keys = ("inputs", "outputs", "weight_offset", "bias_offset", *(("scale_offset",) if precision == "int8" else ()))
        missing = [key for key in keys if key not in layer]
        if missing:
            raise ConfigError(f"layer entry lacks {missing}.", field=name, fix="pass the manifest's device-layout layer table unchanged.")
        if layer["inputs"] < 1 or layer["outputs"] < 1:
            raise ConfigError("a layer needs at least one input and one output.", field=name, fix="re-export the bundle.")
        if layer["weight_offset"] % element or layer["bias_offset"] % (4 if precision == "int8" else element) or layer.get("scale_offset", 0) % 4:
            raise ConfigError(
                f"offsets are not multiples of the {precision} element size ({element} bytes; 4 for int8's biases and scale).",
                field=name,
                fix="pass the layer table of the same precision as `precision`.",
            )
        if index and layer["inputs"] != layers[index - 1]["outputs"]:
            raise ConfigError(
                f"takes {layer['inputs']} inputs but the layer before it has {layers[index - 1]['outputs']} outputs.",
                field=name,
                fix="pass the layers in evaluation order, all from one network.",
            )


def _encoding_shape(encoding: Mapping[str, Any] | None, first_inputs: int) -> tuple[int, int]:
    """``(coordinates, frequencies)``; ``frequencies`` is 0 when there is no encoding."""
    if encoding is None:
        return first_inputs, 0
    if encoding.get("type") != "frequency":
        raise ConfigError(f"encoding type {encoding.get('type')!r} has no shader form.", field="encoding.type", fix="use the frequency encoding, or none.")
    if not isinstance(encoding.get("coordinates"), int) or not isinstance(encoding.get("frequencies"), int):
        raise ConfigError("the frequency encoding needs integer 'coordinates' and 'frequencies'.", field="encoding", fix="pass the manifest's encoding unchanged.")
    coordinates, frequencies = encoding["coordinates"], encoding["frequencies"]
    if coordinates < 1 or frequencies < 1 or coordinates * 2 * frequencies != first_inputs:
        raise ConfigError(
            f"{coordinates} coordinates x 2 x {frequencies} frequencies does not give the first layer's {first_inputs} inputs.",
            field="encoding",
            fix="pass the encoding of the same manifest as the layer table.",
        )
    return coordinates, frequencies


def _generate(
    language: str,
    layers: Sequence[Mapping[str, Any]],
    *,
    hidden_activation: str,
    output_activation: str,
    leak: float,
    precision: str,
    function_name: str,
    encoding: Mapping[str, Any] | None,
    function_only: bool = False,
) -> str:
    _check_options(layers, hidden_activation, output_activation, precision, function_name)
    coordinates, frequencies = _encoding_shape(encoding, int(layers[0]["inputs"]))
    fn, const = function_name, function_name.upper()
    outputs = int(layers[-1]["outputs"])
    element = _ELEMENT_BYTES[precision]
    widths = " -> ".join([str(layers[0]["inputs"])] + [str(layer["outputs"]) for layer in layers])
    lines = [
        f"// Generated by neuralbake ({language}): MLP {widths}, hidden {hidden_activation}, output {output_activation},",
        f"// weights {precision} in the neuralbake device layout (row-major [outputs, inputs] matrices, then bias vectors"
        + ("; int8: codes, fp32 biases, then each layer's fp32 scale)." if precision == "int8" else ")."),
        *([] if function_only else [f"// Bind the bundle's network.{precision}.bin as the ByteAddressBuffer; offsets below are in bytes."]),
        "",
        f"static const uint {const}_INPUTS = {coordinates};",
        f"static const uint {const}_OUTPUTS = {outputs};",
        f"static const uint {const}_ELEMENT_BYTES = {element};",
    ]
    if frequencies:
        scales = ", ".join(float_literal(2.0**k) for k in range(frequencies))  # octaves in half-turns: exact products
        lines += [f"static const uint {const}_FREQUENCIES = {frequencies};", f"static const float {const}_FREQUENCY_SCALES[{frequencies}] = {{ {scales} }};"]
    for index, layer in enumerate(layers):
        for key in ("inputs", "outputs", "weight_offset", "bias_offset", *(("scale_offset",) if precision == "int8" else ())):
            lines.append(f"static const uint {const}_L{index}_{key.upper()} = {int(layer[key])};")
    leak_literal = float_literal(leak)
    lines += [
        "",
        f"float {fn}_load(ByteAddressBuffer weights, uint byte_offset)",
        "{",
        _LOADS[precision],
        "}",
        "",
        f"float {fn}_hidden_activation(float x) {{ return {SHADER_ACTIVATIONS[hidden_activation].format(leak=leak_literal)}; }}",
        f"float {fn}_output_activation(float x) {{ return {SHADER_ACTIVATIONS[output_activation].format(leak=leak_literal)}; }}",
        "",
        f"// inputs: {coordinates} {'coordinates (frequency-encoded first)' if frequencies else 'network inputs'}; outputs: {outputs} values.",
        f"void {fn}(ByteAddressBuffer weights, float inputs[{coordinates}], out float outputs[{outputs}])",
        "{",
    ]
    lines += _body(layers, fn, const, frequencies, precision == "int8")
    lines += ["}", ""]
    if not function_only:
        lines += _kernel(language, fn, coordinates, outputs)
    return "\n".join(lines) + "\n"


def zeros_initializer(count: int) -> str:
    """``{ 0.0f, ... }`` for a float array of ``count`` elements."""
    # Explicit initialisers: Slang cannot see that the constant-bound loops fill the arrays and warns.
    return "{ " + ", ".join(["0.0f"] * count) + " }"


def _body(layers: Sequence[Mapping[str, Any]], fn: str, const: str, frequencies: int, int8: bool) -> list[str]:
    lines = []
    source = "inputs"
    if frequencies:
        lines += [
            f"    float x0[{int(layers[0]['inputs'])}] = {zeros_initializer(int(layers[0]['inputs']))};",
            f"    for (uint c = 0; c < {const}_INPUTS; ++c)",
            f"        for (uint k = 0; k < {const}_FREQUENCIES; ++k)",
            "        {",
            f"            float turns = inputs[c] * {const}_FREQUENCY_SCALES[k];",
            "            float phase = 3.14159265358979f * (turns - 2.0f * floor(0.5f * turns));  // reduced exactly, as frequency_encode",
            f"            x0[(c * {const}_FREQUENCIES + k) * 2] = sin(phase);",
            f"            x0[(c * {const}_FREQUENCIES + k) * 2 + 1] = cos(phase);",
            "        }",
        ]
        source = "x0"
    for index in range(len(layers)):
        last = index == len(layers) - 1
        target = "outputs" if last else f"x{index + 1}"
        activation = f"{fn}_output_activation" if last else f"{fn}_hidden_activation"
        layer = f"{const}_L{index}"
        if not last:
            lines.append(f"    float {target}[{int(layers[index]['outputs'])}] = {zeros_initializer(int(layers[index]['outputs']))};")
        # Per-layer loop variables: FXC warns when a later loop redeclares an earlier one's.
        o, i = f"o{index}", f"i{index}"
        if int8:  # codes times inputs summed, then scaled once: scale * sum + bias
            start = "0.0f"
            result = f"asfloat(weights.Load({layer}_SCALE_OFFSET)) * sum + asfloat(weights.Load({layer}_BIAS_OFFSET + {o} * 4u))"
        else:
            start = f"{fn}_load(weights, {layer}_BIAS_OFFSET + {o} * {const}_ELEMENT_BYTES)"
            result = "sum"
        lines += [
            f"    for (uint {o} = 0; {o} < {layer}_OUTPUTS; ++{o})",
            "    {",
            f"        float sum = {start};",
            f"        uint row = {layer}_WEIGHT_OFFSET + {o} * {layer}_INPUTS * {const}_ELEMENT_BYTES;",
            f"        for (uint {i} = 0; {i} < {layer}_INPUTS; ++{i})",
            f"            sum += {fn}_load(weights, row + {i} * {const}_ELEMENT_BYTES) * {source}[{i}];",
            f"        {target}[{o}] = {activation}({result});",
            "    }",
        ]
        source = target
    return lines


def _kernel(language: str, fn: str, coordinates: int, outputs: int) -> list[str]:
    const = fn.upper()
    attribute = ['[shader("compute")]'] if language == "slang" else []
    return [
        f"ByteAddressBuffer {fn}_weights;",
        f"StructuredBuffer<float> {fn}_inputs;    // point p's input c at [p * {const}_INPUTS + c]",
        f"RWStructuredBuffer<float> {fn}_outputs; // point p's output o at [p * {const}_OUTPUTS + o]",
        f"cbuffer {fn}_constants",
        "{",
        f"    uint {fn}_point_count;",
        "};",
        "",
        *attribute,
        f"[numthreads({THREADS_PER_GROUP}, 1, 1)]",
        f"void {fn}_kernel(uint3 thread_id : SV_DispatchThreadID)",
        "{",
        "    uint point_index = thread_id.x;",
        f"    if (point_index >= {fn}_point_count)",
        "        return;",
        f"    float inputs[{coordinates}] = {zeros_initializer(coordinates)};",
        f"    for (uint c = 0; c < {const}_INPUTS; ++c)",
        f"        inputs[c] = {fn}_inputs[point_index * {const}_INPUTS + c];",
        f"    float outputs[{outputs}];",
        f"    {fn}({fn}_weights, inputs, outputs);",
        f"    for (uint o = 0; o < {const}_OUTPUTS; ++o)",
        f"        {fn}_outputs[point_index * {const}_OUTPUTS + o] = outputs[o];",
        "}",
    ]


def generate_mlp_slang(
    layers: Sequence[Mapping[str, Any]],
    *,
    hidden_activation: str,
    output_activation: str,
    leak: float,
    precision: str = "fp32",
    function_name: str = "nb_mlp_eval",
    encoding: Mapping[str, Any] | None = None,
    function_only: bool = False,
) -> str:
    """Slang module evaluating an MLP from its packed device-layout buffer.

    Parameters
    ----------
    layers:
        The manifest's ``device_layouts[precision]["layers"]``: per layer ``inputs``, ``outputs``,
        ``weight_offset`` and ``bias_offset`` (bytes), in evaluation order.
    hidden_activation, output_activation:
        Names from :data:`SHADER_ACTIVATIONS` (those of ``neuralbake.nn.activations``).
    leak:
        Negative slope of ``leaky_relu``.
    precision:
        ``"fp32"``, ``"fp16"`` or ``"int8"``: how the bound buffer stores the weights (maths is fp32;
        int8 layer tables also give each layer's ``scale_offset``).
    function_name:
        Name of the plain function; every other generated name starts with it.
    encoding:
        The manifest's ``encoding`` (``{"type": "frequency", "coordinates": C, "frequencies": F}``),
        or ``None`` when the inputs go straight into the first layer.
    function_only:
        Only the constants and functions, for a module that embeds the network: no buffer
        bindings, no compute kernel (the module binds the weights and passes them in).

    Returns
    -------
    str
        The module source (see the module docstring for its bindings).

    Raises
    ------
    ConfigError
        On an unknown activation or precision, a bad name, or a layer table or encoding that does
        not chain.
    """
    return _generate(
        "slang",
        layers,
        hidden_activation=hidden_activation,
        output_activation=output_activation,
        leak=leak,
        precision=precision,
        function_name=function_name,
        encoding=encoding,
        function_only=function_only,
    )


def generate_mlp_hlsl(
    layers: Sequence[Mapping[str, Any]],
    *,
    hidden_activation: str,
    output_activation: str,
    leak: float,
    precision: str = "fp32",
    function_name: str = "nb_mlp_eval",
    encoding: Mapping[str, Any] | None = None,
    function_only: bool = False,
) -> str:
    """HLSL (shader model 5 compatible) form of :func:`generate_mlp_slang`; same parameters, same code."""
    return _generate(
        "hlsl",
        layers,
        hidden_activation=hidden_activation,
        output_activation=output_activation,
        leak=leak,
        precision=precision,
        function_name=function_name,
        encoding=encoding,
        function_only=function_only,
    )


@dataclass(frozen=True)
class ShaderExport:
    """The files :func:`export_bundle_shader` wrote."""

    slang: Path
    """``network.slang``."""
    hlsl: Path
    """``network.hlsl``."""
    weights: Path
    """``network.<precision>.bin``, the device-layout buffer the shaders bind."""


def export_bundle_shader(
    bundle_dir: str | Path,
    out_dir: str | Path,
    *,
    precision: str = "fp32",
    function_name: str = "nb_mlp_eval",
) -> ShaderExport:
    """Write ``network.slang``, ``network.hlsl`` and the ``precision`` weight buffer into ``out_dir``.

    The bundle is read and verified with :func:`neuralbake.io.bundle.read_bundle` (sizes and
    sha256), so a shader is never generated for a corrupt buffer. Every file is written
    atomically; ``out_dir`` may be the bundle folder itself.

    Raises
    ------
    BundleError
        When the bundle is unreadable or lacks the device layout, architecture or encoding the
        shader needs (the message names the manifest field).
    """
    bundle = read_bundle(bundle_dir)
    manifest_path = bundle.manifest_path
    if bundle.manifest["kind"] == COORDINATE_NETWORK_KIND:
        coordinate_network_config(bundle)  # the architecture the shader is generated from must be the network's
    buffer, _ = read_device_layout(bundle, precision)
    layout = bundle.manifest["device_layouts"][precision]  # checked by read_bundle: plain file name, aligned in-bounds layer table
    architecture = bundle.manifest.get("architecture")
    if not isinstance(architecture, dict) or "hidden_activation" not in architecture or "output_activation" not in architecture:
        raise BundleError(
            "the manifest's architecture does not name the hidden and output activations.",
            path=manifest_path,
            field="architecture",
            fix="re-export the bundle with neuralbake.",
        )
    encoding = bundle.manifest.get("encoding")
    if encoding is not None:
        encoding = manifest_object(encoding, path=manifest_path, field="encoding")
    options = {
        "hidden_activation": manifest_str(architecture["hidden_activation"], path=manifest_path, field="architecture.hidden_activation"),
        "output_activation": manifest_str(architecture["output_activation"], path=manifest_path, field="architecture.output_activation"),
        "leak": manifest_float(architecture.get("leak", DEFAULT_LEAK), path=manifest_path, field="architecture.leak"),
        "precision": precision,
        "function_name": function_name,
        "encoding": encoding,
    }
    try:
        slang = generate_mlp_slang(layout["layers"], **options)
        hlsl = generate_mlp_hlsl(layout["layers"], **options)
    except ConfigError as exc:
        raise BundleError(f"no shader can be generated: {exc.problem}", path=manifest_path, field=exc.field, fix=exc.fix) from exc
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = ShaderExport(slang=out_dir / "network.slang", hlsl=out_dir / "network.hlsl", weights=out_dir / layout["file"])
    atomic_write_bytes(written.weights, buffer)
    atomic_write_text(written.slang, slang)
    atomic_write_text(written.hlsl, hlsl)
    return written

"""The neural-material part of a bundle's manifest, checked once, and the latent textures it names.

:func:`read_neural_material_manifest` checks ``architecture``, ``latent`` and ``material`` of a
bundle read with :func:`neuralbake.io.bundle.read_bundle` (types, ranges, agreement with the
decoder's weights) and :func:`read_latent_levels` reads one of its latent files through
:func:`neuralbake.io.bundle.read_latent_textures` (confined, shape-checked and verified against the
manifest's sha256). The shader export and :func:`neuralbake.bakes.neural_material.load_neural_material`
both read neural material bundles through these.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuralbake.errors import BundleError
from neuralbake.export.slang import SHADER_ACTIVATIONS
from neuralbake.io.bundle import LATENT_FORMATS, Bundle, LatentLevel, check_mlp_tensors, read_latent_textures
from neuralbake.io.bundle_manifest import (
    bundle_file_path,
    manifest_float,
    manifest_int,
    manifest_key,
    manifest_list,
    manifest_object,
    manifest_sha256,
    manifest_str,
)
from neuralbake.nn.activations import DEFAULT_LEAK

__all__ = [
    "DIRECTION_INPUTS",
    "MAX_DECODER_LAYERS",
    "MAX_MIP_LEVELS",
    "PACK_COMPATIBILITY_FIELDS",
    "NeuralMaterialManifest",
    "read_latent_levels",
    "read_neural_material_manifest",
]

DIRECTION_INPUTS = ("wi", "wo", "half")
"""Direction features a decoder may read after its latent (manifest ``architecture.direction_inputs``)."""
PACK_COMPATIBILITY_FIELDS = (
    "latent.channels",
    "architecture.direction_inputs",
    "architecture.inputs",
    "architecture.hidden",
    "architecture.layers",
    "architecture.outputs",
    "architecture.hidden_activation",
    "architecture.output_activation",
    "architecture.leak",
)
"""Manifest fields every material of a pack must share: one decoder shape and one latent size per
scene keep the switch's branches the same cost and let engines keep the latents in one array."""
_REBAKE = "re-run `neuralbake material bake` for this material."


def _bundle_error(problem: str, path: Path, field: str, fix: str = _REBAKE) -> BundleError:
    return BundleError(problem, path=path, field=field, fix=fix)


MAX_DECODER_LAYERS = 64
"""Most hidden layers a neural material decoder may state (the paper's is 3)."""
MAX_MIP_LEVELS = 32
"""Most latent mip levels (a 2^31-texel side)."""


@dataclass(frozen=True)
class NeuralMaterialManifest:
    """The neural-material fields of a bundle's manifest, checked (types, ranges, agreement with the weights)."""

    fields: dict[str, Any]
    """The values of :data:`PACK_COMPATIBILITY_FIELDS` (``architecture.*``, ``latent.channels``)."""
    mip_levels: int | None
    """``latent.mip_levels``, or ``None`` where an older manifest does not record it."""
    latent_files: dict[str, str]
    """Latent format (``fp16``, ``u8``) -> the file name the manifest gives (checked to be a plain name)."""
    source: str | None
    """``material.source``: the path of the material the bundle was baked from, as recorded."""
    source_sha256: str | None
    """``material.sha256``: its sha256 at bake time (bundles from before it was recorded: ``None``)."""
    baked_normal: tuple[float, float, float] | None
    """``material.baked_normal``: the world normal the orientation masks were baked for."""
    name: str | None = None
    """``material.name``: the glTF material's name where the bundle was baked from an asset (names its shader functions)."""


def read_neural_material_manifest(bundle: Bundle) -> NeuralMaterialManifest:
    """Check the neural-material part of a bundle's manifest once, before anything uses it.

    ``architecture`` (integer sizes, known activations and direction inputs, RGB output, no
    encoding), ``latent`` (channels agreeing with the decoder's inputs, mip count, plain file
    names) and ``material`` (source path, sha256, baked normal); then that the decoder's weights
    and device layouts have the shape the architecture states. Every problem is a BundleError
    naming the manifest and the field. :func:`neuralbake.bakes.neural_material.load_neural_material`
    and the shader export both read bundles through this.
    """
    path = bundle.manifest_path
    manifest = bundle.manifest
    architecture = manifest_object(manifest_key(manifest, "architecture", path=path, field=None), path=path, field="architecture")

    def integer(key: str, minimum: int, maximum: int | None = None) -> int:
        value = manifest_key(architecture, key, path=path, field="architecture")
        return manifest_int(value, path=path, field=f"architecture.{key}", minimum=minimum, maximum=maximum)

    inputs, hidden, layers, outputs = integer("inputs", 1), integer("hidden", 1), integer("layers", 0, MAX_DECODER_LAYERS), integer("outputs", 1)
    if outputs != 3:
        raise _bundle_error(f"the decoder has {outputs} outputs; a neural material decodes RGB (3).", path, "architecture.outputs")
    activations = {
        key: manifest_str(manifest_key(architecture, key, path=path, field="architecture"), path=path, field=f"architecture.{key}", choices=sorted(SHADER_ACTIVATIONS))
        for key in ("hidden_activation", "output_activation")
    }
    leak = manifest_float(architecture.get("leak", DEFAULT_LEAK), path=path, field="architecture.leak")
    directions = manifest_list(architecture.get("direction_inputs", ["wi", "wo"]), path=path, field="architecture.direction_inputs")
    if not directions or any(not isinstance(name, str) or name not in DIRECTION_INPUTS for name in directions):
        raise _bundle_error(
            f"unknown or no direction inputs {directions!r:.80}.", path, "architecture.direction_inputs", fix=f"use some of {list(DIRECTION_INPUTS)}."
        )
    if manifest.get("encoding") is not None:
        raise _bundle_error("a neural material decoder takes its inputs unencoded, but the manifest names an encoding.", path, "encoding")
    latent = manifest_object(manifest.get("latent", {}), path=path, field="latent")
    channels = inputs - 3 * len(directions)
    declared = manifest_int(latent.get("channels", channels), path=path, field="latent.channels", minimum=1)
    if declared != channels or channels < 1:
        raise _bundle_error(
            f"the decoder takes {inputs} inputs, which with {len(directions)} direction features leaves {channels} latent "
            f"channels, but the manifest records {declared}.",
            path,
            "latent.channels",
        )
    mip_levels = None
    if "mip_levels" in latent:
        mip_levels = manifest_int(latent["mip_levels"], path=path, field="latent.mip_levels", minimum=1, maximum=MAX_MIP_LEVELS)
    latent_files = {}
    for latent_format in LATENT_FORMATS:
        name = latent.get(latent_format, f"latents.{latent_format}.safetensors")
        bundle_file_path(path, name, field=f"latent.{latent_format}")  # a plain name inside the folder, or a BundleError
        latent_files[latent_format] = name
    material = manifest_object(manifest.get("material", {}), path=path, field="material")
    source = manifest_str(material["source"], path=path, field="material.source") if material.get("source") is not None else None
    source_sha256 = manifest_sha256(material["sha256"], path=path, field="material.sha256") if material.get("sha256") is not None else None
    name = manifest_str(material["name"], path=path, field="material.name") if material.get("name") is not None else None
    baked_normal = None
    if "baked_normal" in material:
        normal = manifest_list(material["baked_normal"], path=path, field="material.baked_normal")
        values = tuple(manifest_float(value, path=path, field=f"material.baked_normal[{index}]") for index, value in enumerate(normal))
        if len(values) != 3 or not any(values):
            raise _bundle_error(f"must be a non-zero 3-vector, not {normal!r:.80}.", path, "material.baked_normal")
        baked_normal = values  # type: ignore[assignment]
    check_mlp_tensors(bundle, prefix="decoder.", inputs=inputs, hidden=hidden, layers=layers, outputs=outputs, field="architecture")
    unexpected = sorted(key for key in bundle.tensors if not key.startswith("decoder.layers."))
    if unexpected:
        raise _bundle_error(f"the weights hold tensors that are no part of the decoder: {unexpected[:5]}.", path, "tensors")
    fields = {"architecture.inputs": inputs, "architecture.hidden": hidden, "architecture.layers": layers, "architecture.outputs": outputs, **{f"architecture.{k}": v for k, v in activations.items()}}
    fields["architecture.leak"] = leak
    fields["architecture.direction_inputs"] = list(directions)
    fields["latent.channels"] = channels
    return NeuralMaterialManifest(fields, mip_levels, latent_files, source, source_sha256, baked_normal, name)



def read_latent_levels(bundle: Bundle, manifest: NeuralMaterialManifest, latent_format: str) -> list[LatentLevel]:
    """Read and check one of a neural material's latent files (``fp16`` or ``u8``).

    :func:`neuralbake.io.bundle.read_latent_textures` with the channels, mip count and file name
    the manifest states: the file must lie in the bundle folder and parse as safetensors; every
    level must be there with shape ``[height, width, channels]`` and the format's dtype, each level
    at most the size of the one above; then the file's size and sha256 are checked against the
    manifest. Every problem is a BundleError naming the file and the field or tensor.
    """
    return read_latent_textures(  # an unknown latent_format is a ConfigError there, before any file is read
        bundle,
        manifest.latent_files.get(latent_format),
        latent_format=latent_format,
        channels=manifest.fields["latent.channels"],
        mip_levels=manifest.mip_levels,
        field=f"latent.{latent_format}",
        fix=_REBAKE,
    )

"""``neuralbake material render``: a baked neural material beside its reference on the preview scenes.

The bundle is read through :func:`neuralbake.io.bundle.read_bundle`, which first checks every file
of the bake folder against its ``bake.json``; the reference is the material the bundle was baked
from, checked against the sha256 it recorded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F

from neuralbake.bakes.neural_material.asset import ASSET_SUFFIXES, is_asset, load_asset_material
from neuralbake.bakes.neural_material.comparison import as_baked
from neuralbake.bakes.neural_material.latents import BUNDLE_KIND, load_neural_material
from neuralbake.core.device import resolve_device
from neuralbake.core.events import progress_task
from neuralbake.core.report import write_report
from neuralbake.errors import BundleError, InputError
from neuralbake.io.bundle import read_bundle
from neuralbake.io.files import prepare_output_dir, sha256_file
from neuralbake.io.neural_material_bundle import read_neural_material_manifest
from neuralbake.io.refs import outside_refs_allowed
from neuralbake.material.loader import load_material
from neuralbake.render.compare import compare_materials
from neuralbake.render.preview import SCENES

__all__ = ["render_neural_material"]


def _reference_material(manifest_path: Path, info: Any, material: str | Path | None, allow_other: bool) -> Path:
    """The reference material to compare against, after checking it is the one the bundle was baked from."""
    recorded = Path(info.source) if info.source else None
    if material is None and recorded is None:
        raise InputError(
            "the bundle does not record the material it was baked from.",
            path=manifest_path,
            field="material.source",
            fix="pass --material with the .json or .mtlx file it was baked from.",
        )
    if material is None and info.source_sha256 is None and not outside_refs_allowed():
        # material.source is an absolute path outside the bundle's folder: follow it only when the
        # bundle also pins its content (bundles since 2026-11-23 do), so a crafted manifest cannot
        # make `material render` open or probe any file on the machine.
        raise InputError(
            "the bundle names its source material by path but records no sha256 of it (written before 2026-11-23, or edited).",
            path=manifest_path,
            field="material.sha256",
            fix="pass --material with the .json or .mtlx file it was baked from, or run with --allow-outside-refs if you trust this bundle.",
        )
    source = Path(material) if material is not None else recorded
    assert source is not None
    if not source.is_file() or source.suffix.lower() not in (".json", ".mtlx", *ASSET_SUFFIXES):
        problem = "is not a .json, .mtlx, .gltf or .glb file" if source.is_file() else "is not there"
        raise InputError(
            f"the reference material {'the bundle was baked from ' if material is None else ''}{problem}.",
            path=source,
            field="material.source" if material is None else "material",
            fix="pass --material with the .json, .mtlx or glTF file it was baked from.",
        )
    if allow_other:
        return source
    if info.source_sha256 is not None:
        expected, how = info.source_sha256, "its sha256 differs from the one recorded at bake time (material.sha256)"
    elif recorded is not None and recorded.is_file() and source.resolve() != recorded.resolve():
        expected, how = sha256_file(recorded), f"its content differs from {recorded}, which the bundle was baked from"
    else:
        expected, how = None, ""
    if expected is not None:
        mismatch = sha256_file(source) != expected
    else:  # an older bundle whose material is gone: the file name is all there is to compare
        mismatch = recorded is not None and source.name != recorded.name
        how = f"the bundle was baked from {recorded.name if recorded else '?'}"
    if mismatch:
        changed = material is None or (recorded is not None and source.resolve() == recorded.resolve())
        raise InputError(
            ("the material was changed since the bake" if changed else "this is not the material the bundle was baked from")
            + f": {how}. Comparing against it would score the bake against the wrong reference.",
            path=source,
            field="material.sha256" if info.source_sha256 is not None else "material.source",
            fix="pass the material the bundle was baked from (--material), or re-run the bake; to compare against another material "
            "on purpose, use allow_other_material=True (CLI: --allow-other-material).",
        )
    return source


def render_neural_material(
    bundle_dir: str | Path,
    out_dir: str | Path,
    *,
    material: str | Path | None = None,
    size: int = 256,
    spp: int = 64,
    precision: Literal["fp32", "fp16"] = "fp16",
    quantized: bool = False,
    device: str = "auto",
    seed: int = 7,
    allow_other_material: bool = False,
    filter_latents: bool = False,
    progress: bool = False,
) -> dict[str, Any]:
    """Render a baked neural material and its reference on the preview scenes, side by side.

    ``filter_latents``: fetch the latents trilinearly at each sample's pixel footprint
    (:attr:`NeuralMaterial.filtering`) instead of from level 0, and add the receding ``plane``
    scene, where minification shows.

    Writes ``comparison.png`` (per scene: reference | neural | FLIP error), linear EXRs and
    ``report.json`` (tone-mapped PSNR and HDR FLIP per scene). The reference is the material the
    bundle was baked from (its manifest records the path) unless ``material`` names another copy;
    it is evaluated for the baked normal, as the neural material was. ``precision`` and
    ``quantized`` choose what the shipped shader would run: fp16 decoder and latents by default,
    8-bit latents with ``quantized``.

    The reference must be the material the bundle was baked from: where the manifest records
    its sha256 (``material.sha256``) the file's must match; for older bundles, the recorded file
    if it is still there, else its file name. A different material (or one edited since the
    bake) is refused with an InputError unless ``allow_other_material``, since the comparison
    would silently score the bake against the wrong reference.
    """
    torch_device = resolve_device(device)
    bundle = read_bundle(bundle_dir, kind=BUNDLE_KIND)
    info = read_neural_material_manifest(bundle)
    if info.baked_normal is None:
        raise BundleError("the manifest does not record the normal the material was baked for.", path=bundle.manifest_path,
                          field="material.baked_normal", fix="re-run `neuralbake material bake`.")
    neural = load_neural_material(bundle_dir, device=torch_device, quantized=quantized)
    source = _reference_material(bundle.manifest_path, info, material, allow_other_material)
    if is_asset(source):  # a glTF asset's material, by the name the bundle records
        reference = load_asset_material(source, info.name or "", device=torch_device)
    else:
        reference = load_material(source, device=torch_device)
    if precision == "fp16":
        neural = neural.to(torch.float16)
    neural.filtering = filter_latents
    scenes = SCENES + (("plane",) if filter_latents else ())
    normal = F.normalize(torch.tensor(info.baked_normal, dtype=torch.float32, device=torch_device), dim=0)[None]
    out = prepare_output_dir(out_dir)
    with progress_task("rendering", 2 * len(scenes) * size * size, enabled=progress, unit="pixels") as advance:
        result = compare_materials(
            as_baked(reference, normal), neural, out, size=size, spp=spp, device=torch_device, seed=seed,
            labels=("reference", "neural"), progress=advance, scenes=scenes,
        )
    return write_report(
        out / "report.json",
        bake="neural_material_render",
        device=torch_device,
        metrics={"psnr_db": result["psnr_db"], "flip": result["flip"]},
        bundle=str(bundle_dir),
        reference=str(source),
        precision=precision,
        latents="u8" if quantized else "fp16",
        latent_filtering="trilinear at the pixel footprint" if filter_latents else "level 0, bilinear",
        **result,
    )

"""Several neural materials for one scene: one decoder architecture, a shared first decoder part.

Seed 000's three ways to scale a neural material system to many materials, as they map here:

1. *one architecture for all*: every material of a pack is baked with the same latent size,
   decoder width/depth and direction inputs, so one shader function shape serves them all;
2. *share the direction-interpreting part*: the first material is baked in full; every other one
   starts from its decoder, keeps the first ``shared_layers`` layers fixed and trains only the
   rest of the decoder, its encoder and its latents (``NeuralMaterialConfig.shared_decoder``), so
   the shared layers are stored once in the pack's weight buffer;
3. *scene-specific compilation*: the pack's shader contains exactly the given materials, with a
   material-id switch (``neuralbake.export.neural_material.export_material_pack_shader``).

Inputs may be materials (``.json``/``.mtlx``, baked here into ``<out>/materials/<name>``) or
folders baked before (used as they are; they must share the architecture, which the shader
export checks).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from neuralbake.bakes.neural_material import NeuralMaterialConfig, bake_neural_material
from neuralbake.errors import ConfigError, InputError, NeuralbakeError
from neuralbake.io.files import atomic_write_json, prepare_output_dir
from neuralbake.io.limits import load_json_file

__all__ = ["pack_materials"]


def _is_bundle(path: Path) -> bool:
    return path.is_dir() and (path / "network.json").is_file()


def _bundle_name(path: Path) -> str:
    """The baked material's file name (as the shader export names it), else the folder's name.

    Only a name for messages and ids: the bundle itself is read and checked by the shader export
    (``read_bundle`` and ``read_neural_material_manifest``), which refuses a damaged manifest.
    """
    try:
        manifest = load_json_file(path / "network.json", what="bundle manifest")
    except NeuralbakeError:
        return path.name
    material = manifest.get("material") if isinstance(manifest, dict) else None
    source = material.get("source") if isinstance(material, dict) else None
    return Path(source).stem or path.name if isinstance(source, str) and "\x00" not in source else path.name


def pack_materials(
    inputs: list[str | Path],
    out_dir: str | Path,
    template: NeuralMaterialConfig,
    *,
    share: bool = True,
    progress: bool = True,
    precision: str = "fp16",
    latent_format: str = "fp16",
    name: str = "material_pack",
) -> dict[str, Any]:
    """Bake (where needed) and pack ``inputs`` into ``out_dir``; returns the pack summary.

    ``template`` holds the settings every bake uses (its ``material`` is replaced per input). With
    ``share``, the second and later materials share the first one's leading decoder layers
    (``template.shared_layers`` of them). Writes ``<out>/materials/<name>/`` per baked material,
    ``<out>/shader/`` (the pack's Slang and HLSL modules and buffers) and ``<out>/pack.json``.
    """
    from neuralbake.export.neural_material import export_material_pack_shader

    if len(inputs) < 1:
        raise ConfigError("no materials to pack.", field="materials", fix="pass one or more .json/.mtlx materials or baked folders.")
    paths = [Path(p) for p in inputs]
    for path in paths:
        if not path.exists():
            raise InputError("no such material or baked folder.", path=path, fix="check the path.")
        if not _is_bundle(path) and path.suffix.lower() not in (".json", ".mtlx"):
            raise InputError(
                "neither a material (.json, .mtlx) nor a baked neural material folder.", path=path, fix="pass a material file or a bake folder."
            )
    if len({path.resolve() for path in paths}) != len(paths):
        raise ConfigError("the same material or folder is given twice.", field="materials", fix="pass each material once.")
    names: list[str] = []
    for path in paths:  # same names (two copper trays from different folders) get _2, _3, as in the shader
        base = _bundle_name(path) if _is_bundle(path) else path.stem
        unique, k = base, 2
        while unique in names:
            unique, k = f"{base}_{k}", k + 1
        names.append(unique)
    out = prepare_output_dir(out_dir)
    bundles: list[Path] = []
    reports: dict[str, Any] = {}
    first: Path | None = None
    for path, material_name in zip(paths, names):
        if _is_bundle(path):
            bundles.append(path)
            first = first or path
            continue
        config = copy.deepcopy(template)
        config.material = str(path)
        if share and first is not None:
            config.shared_decoder = str(first)
        folder = out / "materials" / material_name
        report = bake_neural_material(config, folder, progress=progress)
        reports[material_name] = {k: report[k] for k in ("psnr_db", "flip", "seconds", "decoder_params", "decoder_trained_params")}
        bundles.append(folder)
        first = first or folder
    export = export_material_pack_shader(bundles, out / "shader", precision=precision, latent_format=latent_format, name=name)
    summary = {
        "materials": [{"id": i, "name": n, "bundle": str(bundle)} for i, (n, bundle) in enumerate(zip(names, bundles))],
        "shared_first_layers": template.shared_layers if share else 0,
        "bakes": reports,
        "shader": {key: str(value) for key, value in _files(export).items()},
    }
    atomic_write_json(out / "pack.json", summary)
    return summary


def _files(export: Any) -> dict[str, Any]:
    if isinstance(export, dict):
        return export
    fields = getattr(export, "__dataclass_fields__", None)
    return {key: getattr(export, key) for key in fields} if fields else {"export": export}

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

``shared_decoder`` (``--shared-decoder``) replaces 2 with the seed's own scheme: every material to
bake trains in one phase (``joint``), each step an equal share of samples of each material, with
its own encoder and latent texture and one decoder for all
(:func:`neuralbake.bakes.neural_material.bake_materials_jointly`); the shader stores the decoder
once (the weight buffer keeps equal layers once).

Inputs may be materials (``.json``/``.mtlx``, baked here into ``<out>/materials/<name>``), glTF
scenes (``.gltf``/``.glb``: each lit material the scene's meshes use, in the scene's order, baked
as an asset material and scored on renders of the scene), or folders baked before (used as they are, after their ``bake.json`` is checked; they must share the
architecture, which the shader export checks).

The pack is a bake on the one runner (:mod:`neuralbake.bakes.run`): each material to bake is a
training phase named after it (its checkpoint in ``.neuralbake/checkpoints/<name>.pt``, so a
killed pack resumes inside the material it was baking), written into the staging folder with its
own ``config.json``, ``report.json``, ``loss.png`` and ``bake.json``; the shader export and
``pack.json`` follow, and the runner swaps the whole pack into ``--out`` at the end.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from neuralbake.bakes.footprint import dominant_field, footprint
from neuralbake.bakes.neural_material import NeuralMaterialConfig, bake_material, bake_materials_jointly
from neuralbake.bakes.neural_material.config import MATERIAL_BASE_BYTES, device_defaults, material_knobs, material_memory, material_steps
from neuralbake.bakes.neural_material.bake import HELD_OUT_QUALITY, HELD_OUT_RATE
from neuralbake.bakes.run import Bake, BakeOutcome, BakeRun, Footprint, run_bake
from neuralbake.core.config import config_to_dict
from neuralbake.core.events import EventSink
from neuralbake.core.paths import InputPath
from neuralbake.core.report import plot_loss_curve, write_report
from neuralbake.errors import ConfigError, InputError, NeuralbakeError
from neuralbake.export.neural_material import export_material_pack_shader
from neuralbake.io.files import atomic_write_json
from neuralbake.io.gltf import load_bake_input
from neuralbake.io.limits import load_json_file
from neuralbake.io.manifest import verify_bake_folder, write_bake_manifest
from neuralbake.nn.convergence import training_record
from neuralbake.nn.trainer import TrainerConfig

__all__ = ["MATERIAL_PACK", "MaterialPackConfig", "pack_materials"]


def _default_bake() -> NeuralMaterialConfig:
    # a pack runs the verdict (an NTC run per glTF material) only when asked: --verdict
    return NeuralMaterialConfig(material="", verdict=False)


@dataclass
class MaterialPackConfig:
    """Everything that determines a material pack."""
    materials: list[InputPath] = field(default_factory=list)
    """Materials (.json, .mtlx; baked here), glTF scenes (.gltf, .glb: each lit material their meshes use, baked here on the scene) or baked neural material folders; material ids follow this order."""
    share: bool = True
    """Later materials reuse the first one's leading decoder layers (``bake.shared_layers`` of them, stored once)."""
    shared_decoder: bool = False
    """Train every material to bake together with one decoder (per-material encoders and latent textures: the seed's scheme; the decoder is stored once); replaces ``share``."""
    precision: Literal["fp32", "fp16"] = "fp16"
    """Weight storage in the shader's buffer: fp32 or fp16 (arithmetic is fp32 either way)."""
    latent_format: Literal["fp16", "u8"] = "fp16"
    """Latent storage: fp16, or u8 (8-bit codes with a per-channel scale and offset)."""
    name: str = "material_pack"
    """Shader name: nb_NAME_eval(material_id, uv, wi, wo, mip)."""
    bake: NeuralMaterialConfig = field(default_factory=_default_bake)
    """The settings every material is baked with (one architecture for the whole pack); its ``material`` is set per input."""
    @property
    def device(self) -> str:
        """The device every bake of the pack runs on (``bake.device``)."""
        return self.bake.device

    @property
    def train(self) -> TrainerConfig:
        """The bakes' optimisation settings (``bake.train``; the runner seeds from its ``seed``)."""
        return self.bake.train

    def validate(self) -> None:
        """Raise ConfigError on settings no pack can use (before any file is touched)."""
        if not self.materials:
            raise ConfigError("no materials to pack.", field="materials", fix="pass one or more .json/.mtlx materials or baked folders.")
        if self.precision not in ("fp32", "fp16"):
            raise ConfigError(f"unknown precision {self.precision!r}.", field="precision", fix="use fp32 or fp16.")
        if self.latent_format not in ("fp16", "u8"):
            raise ConfigError(f"unknown latent format {self.latent_format!r}.", field="latent_format", fix="use fp16 or u8.")
        self.bake.validate_settings()


def _is_bundle(path: Path) -> bool:
    return path.is_dir() and (path / "network.json").is_file()


def _bundle_name(path: Path) -> str:
    """The baked material's file name (as the shader export names it), else the folder's name.

    Only a name for messages and ids: the folder is checked against its ``bake.json`` before
    this, and the bundle itself is read and checked by the shader export (``read_bundle`` and
    ``read_neural_material_manifest``), which refuses a damaged manifest.
    """
    try:
        manifest = load_json_file(path / "network.json", what="bundle manifest")
    except NeuralbakeError:
        return path.name
    material = manifest.get("material") if isinstance(manifest, dict) else None
    name = material.get("name") if isinstance(material, dict) else None
    if isinstance(name, str) and name and "\x00" not in name:  # baked from a glTF asset: its material's name
        return name
    source = material.get("source") if isinstance(material, dict) else None
    return Path(source).stem or path.name if isinstance(source, str) and "\x00" not in source else path.name


def _scene_materials(path: Path) -> list[str]:
    """The lit materials a glTF scene's meshes use, in the scene's material order (the pack's material ids)."""
    scene = load_bake_input(path, field="materials", fix="pass a .gltf or .glb scene.")
    used = {mesh.material for mesh in scene.meshes if len(mesh.indices)}
    names: list[str] = []
    for index, material in enumerate(scene.materials):
        if index not in used or material.unlit:
            continue
        if material.name in names:
            if material.name == "default" and not material.textures():
                continue  # the reader's glTF default material, one per primitive without a material: all alike
            raise InputError(
                f"the scene names two materials {material.name!r}.", path=path, field=f"materials[{index}].name",
                fix="give each material of the scene its own name.",
            )
        names.append(material.name)
    if not names:
        raise InputError("no mesh of the scene uses a lit material.", path=path, field="materials", fix="pass a scene with metal/rough materials.")
    return names


def _safe_name(name: str) -> str:
    """A material's name as a folder and phase name: letters, digits, ``_``, ``-`` and inner dots only."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._-") or "material"


def _entries(paths: list[Path]) -> list[tuple[Path, str]]:
    """Every input as ``(path, glTF material name or "")``: a glTF scene stands for each lit material its meshes use."""
    entries: list[tuple[Path, str]] = []
    for path in paths:
        if path.is_file() and path.suffix.lower() in (".gltf", ".glb"):
            entries += [(path, name) for name in _scene_materials(path)]
        else:
            entries.append((path, ""))
    return entries


def _inputs(entries: list[tuple[Path, str]]) -> list[str]:
    """Check the inputs (baked folders against their ``bake.json``); return each one's unique name."""
    for path, _ in entries:
        if not path.exists():
            raise InputError("no such material or baked folder.", path=path, fix="check the path.")
        if _is_bundle(path):
            verify_bake_folder(path)
        elif path.suffix.lower() not in (".json", ".mtlx", ".gltf", ".glb"):
            raise InputError(
                "neither a material (.json, .mtlx), a glTF scene nor a baked neural material folder.", path=path,
                fix="pass a material file, a .gltf/.glb scene or a bake folder.",
            )
    if len({(path.resolve(), name) for path, name in entries}) != len(entries):
        raise ConfigError("the same material or folder is given twice.", field="materials", fix="pass each material once.")
    names: list[str] = []
    for path, material_name in entries:  # same names (two copper trays from different folders) get _2, _3, as in the shader
        base = _safe_name(_bundle_name(path) if _is_bundle(path) else (material_name or path.stem))
        unique, k = base, 2
        while unique in names:
            unique, k = f"{base}_{k}", k + 1
        names.append(unique)
    return names


def _final(run: BakeRun, path: Path) -> str:
    """Where ``path`` will be once the runner has swapped the staging folder into ``--out``."""
    try:
        return str(run.out / path.relative_to(run.stage))
    except ValueError:
        return str(path)


def _bake_one(run: BakeRun, config: NeuralMaterialConfig, folder: Path, phase: str, shared_as: str | None) -> dict[str, Any]:
    """One material of the pack: its phase, then its own config, report, loss curve and bake.json."""
    metrics, fields = bake_material(run, config, folder, phase=phase, shared_as=shared_as, verdict=config.verdict)
    return _write_material(run, config, folder, phase, metrics, fields, f"neural material: {Path(config.material).name}")


def _write_material(run: BakeRun, config: NeuralMaterialConfig, folder: Path, phase: str, metrics: dict[str, Any], fields: dict[str, Any], title: str) -> dict[str, Any]:
    """A baked material's own config, loss curve (of training phase ``phase``), report and bake.json in its folder."""
    atomic_write_json(folder / "config.json", run.shown(config_to_dict(config)))  # inputs as the caller sees them
    result = next(result for name, result in run.phases if name == phase)
    if result.history:
        plot_loss_curve(folder / "loss.png", result.history, title=title, quality_key=HELD_OUT_QUALITY)
    report = write_report(folder / "report.json", bake="neural_material", device=run.device, metrics=run.shown(metrics), **run.shown(fields), pack_phase=phase,
                          training=training_record([(phase, result)], HELD_OUT_QUALITY, rate_tolerance=HELD_OUT_RATE))
    write_bake_manifest(folder, bake="neural_material")
    return report


def _pack_body(run: BakeRun) -> BakeOutcome:
    config: MaterialPackConfig = run.config
    entries = _entries([Path(p) for p in config.materials])
    names = _inputs(entries)
    if config.shared_decoder:
        return _joint_body(run, config, entries, names)
    bundles: list[Path] = []
    reports: dict[str, Any] = {}
    first: Path | None = None
    for (path, gltf_name), material_name in zip(entries, names, strict=True):
        if _is_bundle(path):
            bundles.append(path)
            first = first or path
            continue
        material = copy.deepcopy(config.bake)
        material.material = str(path)
        material.material_name = gltf_name
        if config.share and first is not None:
            material.shared_decoder = str(first)
        folder = run.stage / "materials" / material_name
        run.note(f"material {len(bundles)}: {material_name}")
        report = _bake_one(run, material, folder, material_name, _final(run, first) if config.share and first is not None else None)
        reports[material_name] = {k: report[k] for k in ("psnr_db", "flip", "seconds", "decoder_params", "decoder_trained_params")}
        bundles.append(folder)
        first = first or folder
    return _export_pack(run, config, names, bundles, reports, {"shared_first_layers": config.bake.shared_layers if config.share else 0})


def _joint_body(run: BakeRun, config: MaterialPackConfig, entries: list[tuple[Path, str]], names: list[str]) -> BakeOutcome:
    """``shared_decoder``: the materials to bake train as one phase with one decoder; baked folders are packed as they are."""
    todo = [(i, path, gltf_name) for i, (path, gltf_name) in enumerate(entries) if not _is_bundle(path)]
    configs, folders = [], []
    for index, path, gltf_name in todo:
        material = copy.deepcopy(config.bake)
        material.material, material.material_name, material.shared_decoder = str(path), gltf_name, ""
        configs.append(material)
        folders.append(run.stage / "materials" / names[index])
    bundles: list[Path] = [path for path, _ in entries]
    reports: dict[str, Any] = {}
    if todo:
        joint = [names[i] for i, _, _ in todo]
        run.note(f"{len(todo)} materials with one decoder: {', '.join(joint)}")
        results = bake_materials_jointly(run, configs, folders, joint)
        for (i, _, _), material, folder, (metrics, fields) in zip(todo, configs, folders, results, strict=True):
            report = _write_material(run, material, folder, "joint", metrics, fields, f"material pack, one decoder: {', '.join(joint)}")
            reports[names[i]] = {k: report[k] for k in ("psnr_db", "flip", "seconds", "decoder_params", "decoder_trained_params")}
            bundles[i] = folder
    return _export_pack(run, config, names, bundles, reports, {"shared_decoder": "one decoder trained with every baked material", "shared_first_layers": 0})


def _export_pack(run: BakeRun, config: MaterialPackConfig, names: list[str], bundles: list[Path], reports: dict[str, Any], sharing: dict[str, Any]) -> BakeOutcome:

    shader = run.stage / "shader"
    export = export_material_pack_shader(bundles, shader, precision=config.precision, latent_format=config.latent_format, name=config.name)
    _record_final_bundles(run, export.manifest)
    summary = {
        "materials": [{"id": i, "name": n, "bundle": _final(run, bundle)} for i, (n, bundle) in enumerate(zip(names, bundles, strict=True))],
        **sharing,
        "bakes": reports,
        "shader": {key: _final(run, value) if isinstance(value, Path) else str(value) for key, value in dataclasses.asdict(export).items()},
    }
    atomic_write_json(run.stage / "pack.json", run.shown(summary))
    return BakeOutcome({}, summary, curve_title=f"material pack: {', '.join(reports) or 'no bakes'}" if reports else None, quality_key=HELD_OUT_QUALITY, rate_tolerance=HELD_OUT_RATE)


def _record_final_bundles(run: BakeRun, manifest: Path) -> None:
    """The shader manifest names each material's bundle folder: the one in ``--out``, not in staging."""
    data = load_json_file(manifest, what="shader manifest")
    for entry in data.get("materials", []):
        entry["bundle"] = _final(run, Path(entry["bundle"]))
    atomic_write_json(manifest, run.shown(data))


# -- footprint --------------------------------------------------------------------------------

ASSUMED_SCENE_MATERIALS = 4
"""Lit materials a glTF scene of ``materials`` is assumed to bring (known once it is read; the
example crates scene has 3)."""


def _to_bake(config: MaterialPackConfig) -> list[NeuralMaterialConfig]:
    """A config per material the pack bakes (a glTF scene counts :data:`ASSUMED_SCENE_MATERIALS`; a
    baked folder, anything without a material suffix, is packed as it is)."""
    configs = []
    for path in config.materials:
        suffix = Path(str(path)).suffix.lower()
        count = ASSUMED_SCENE_MATERIALS if suffix in (".gltf", ".glb") else 1 if suffix in (".json", ".mtlx") else 0
        configs += [dataclasses.replace(config.bake, material=str(path))] * count
    return configs


def _pack_memory(config: MaterialPackConfig, device: Any) -> dict[str, float]:
    configs = _to_bake(config)
    if not configs:
        return {"bake.texture_size": 0.0}
    if config.shared_decoder:  # one phase: every material's reference chunk and encoder at once, the batch split between them
        terms = material_memory(configs[0], device, materials=len(configs))
    else:  # one material after another: the largest
        each = [material_memory(c, device) for c in configs]
        terms = max(each, key=lambda t: sum(t.values()))
    return {f"bake.{name}": value for name, value in terms.items()}


def material_pack_footprint(config: MaterialPackConfig, device: Any) -> Footprint:
    """Peak memory of a pack (the largest material's bake, or all of them at once with
    ``shared_decoder``) and its steps: every material's, one after another (one phase with ``shared_decoder``)."""
    configs = _to_bake(config)
    terms = _pack_memory(config, device)
    total = lambda c, d: sum(_pack_memory(c, d).values())  # noqa: E731
    field = dominant_field(total, config, device, material_knobs(device, "bake."), fallback=max(terms, key=lambda k: terms[k]))
    steps = material_steps(config.bake) if config.shared_decoder else sum(material_steps(c) for c in configs)
    return footprint(terms, steps=steps, steps_field="bake.train.steps", base=MATERIAL_BASE_BYTES, field=field)


MATERIAL_PACK = Bake(
    "material_pack", MaterialPackConfig, _pack_body, device_defaults=device_defaults("bake."), title="material pack",
    footprint=material_pack_footprint,
)
"""The material pack, as the runner runs it: one training phase per material to bake, then the shader export."""


def pack_materials(
    inputs: list[str | Path],
    out_dir: str | Path,
    template: NeuralMaterialConfig,
    *,
    share: bool = True,
    shared_decoder: bool = False,
    progress: bool = True,
    precision: Literal["fp32", "fp16"] = "fp16",
    latent_format: Literal["fp16", "u8"] = "fp16",
    name: str = "material_pack",
    resume: bool = False,
    sinks: list[EventSink] | None = None,
) -> dict[str, Any]:
    """Bake (where needed) and pack ``inputs`` into ``out_dir``; returns the pack's report.

    ``template`` holds the settings every bake uses (its ``material`` is replaced per input). With
    ``shared_decoder``, the materials to bake train together with one decoder; else, with
    ``share``, the second and later materials share the first one's leading decoder layers
    (``template.shared_layers`` of them). Writes ``<out>/materials/<name>/`` per baked material,
    ``<out>/shader/`` (the pack's Slang and HLSL modules and buffers), ``<out>/pack.json`` and the
    runner's ``report.json`` and ``bake.json``.
    """
    config = MaterialPackConfig(materials=[str(p) for p in inputs], share=share, shared_decoder=shared_decoder, precision=precision,
                                latent_format=latent_format, name=name, bake=template)
    return run_bake(MATERIAL_PACK, config, out_dir, resume=resume, progress=progress, sinks=sinks)

"""``neuralbake lod``: one command from a PBR asset to a finished LOD, seed 003's whole chain.

1. **simplify** (:mod:`neuralbake.bakes.simplify`): QEM decimation to the budget, then the shape fitted to
   the original's renders with large steps (over the animation for a skinned asset);
2. **skin** (:mod:`neuralbake.bakes.skin`, skinned and animated assets only): weights transferred from the
   original and fitted over its animation;
3. **fit** (:mod:`neuralbake.bakes.fit`): the original's full PBR look fitted into an unlit texture or
   vertex colours of the simplified mesh, judged against renders of the original (``reference``); for a
   static asset jointly with the vertex positions (``shape``).

Each stage is a bake of its own on the one run path (its config, checkpoints, report, manifest), run in
``.neuralbake/checkpoints/stages/<stage>`` of the output folder; ``--resume`` skips the stages that
finished and resumes the one that was stopped from its own checkpoint. The output folder gets the
finished ``lod.glb`` (one binary glTF: mesh, unlit material and texture or colours, and the original's
skeleton, skin and clips when skinned), each stage's picture (``simplify.png``, ``frames.png``,
``triptych.png``) and a report with every stage's figures.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import torch

from neuralbake.bakes.config import SeededConfig
from neuralbake.bakes.fit import FIT, FitConfig
from neuralbake.bakes.folder import STATE_DIR
from neuralbake.bakes.run import Bake, BakeOutcome, BakeRun, Footprint, apply_defaults, set_field
from neuralbake.bakes.simplify import SIMPLIFY, SimplifyConfig
from neuralbake.bakes.skin import SKIN, SkinConfig
from neuralbake.core.config import coerce_field
from neuralbake.core.paths import InputPath, StageConfigs
from neuralbake.errors import ConfigError
from neuralbake.io.gltf import DEFAULT_MAX_TRIANGLES, check_opaque, load_bake_input, write_gltf
from neuralbake.io.gltf.model import see_through_materials
from neuralbake.render.skinning import pose_scene

__all__ = ["LOD", "LodConfig", "make_lod"]

STAGES_FILE = "lod.pt"
"""The chain's own checkpoint: the stages that finished (the stages' folders hold the rest)."""


def _stage_types() -> dict[str, type]:
    """Each stage's config type."""
    return {"simplify": SimplifyConfig, "skin": SkinConfig, "fit": FitConfig}


@dataclass
class LodConfig(SeededConfig):
    """Everything that determines a LOD chain; the stages' other settings keep their own defaults
    (full size on a GPU, minutes on a CPU)."""

    asset: InputPath = ""
    """Path of the PBR asset (.gltf or .glb)."""
    ratio: float = 0.25
    """Share of the triangles to keep, in (0, 1]."""
    triangles: int = 0
    """Triangles to keep (overrides ratio when > 0)."""
    target: Literal["unlit", "vertex-color"] = "unlit"
    """What the LOD stores its look in: an unlit texture (uv1, unwrapped with xatlas) or vertex colours."""
    shape: bool = True
    """Fit the vertex positions together with the look in the fit stage (static assets; a skinned asset's
    shape is fitted over its animation by the simplify stage)."""
    skin: bool = True
    """Fit the skin weights of a skinned, animated asset (off: the weights the decimation carried over)."""
    texture_size: int | None = None
    """Side of the unlit texture (unset: the fit's default, 1024)."""
    shadows: bool = True
    """Shadow rays in the fit's reference renders (needs warp-lang)."""
    max_triangles: int = DEFAULT_MAX_TRIANGLES
    """Triangle budget of the input: larger assets are refused before their attributes are decoded."""
    stage_options: Annotated[dict[str, dict[str, Any]], StageConfigs(_stage_types)] = field(default_factory=dict)
    """Further settings per stage, e.g. ``{"fit": {"epochs": 5}, "simplify": {"views": 8}}`` (a --config file's
    ``[stage_options.fit]`` table): any field of that stage's config."""

    def validate(self) -> None:
        """Raise :class:`~neuralbake.errors.ConfigError` for unusable settings."""
        if not self.asset:
            raise ConfigError("no asset given.", field="asset", fix="pass the PBR glTF to make a LOD of.")
        if isinstance(self.ratio, bool) or not isinstance(self.ratio, (int, float)) or math.isnan(self.ratio) or not 0.0 < self.ratio <= 1.0:
            raise ConfigError(f"ratio must be in (0, 1], got {self.ratio!r}.", field="ratio", fix="pass e.g. 0.25 to keep a quarter of the triangles.")
        if isinstance(self.triangles, bool) or not isinstance(self.triangles, int) or self.triangles < 0:
            raise ConfigError(f"triangles must be 0 (use ratio) or a positive integer, got {self.triangles!r}.", field="triangles", fix="pass e.g. 5000.")
        if self.target not in ("unlit", "vertex-color"):
            raise ConfigError(f"unknown target {self.target!r}.", field="target", fix="use unlit or vertex-color.")
        if not isinstance(self.stage_options, dict) or not all(isinstance(v, dict) for v in self.stage_options.values()):
            raise ConfigError("stage_options must be a table of tables, one per stage.", field="stage_options",
                              fix='write e.g. {"fit": {"epochs": 5}} ([stage_options.fit] in TOML).')
        unknown = sorted(set(self.stage_options) - {"simplify", "skin", "fit"})
        if unknown:
            raise ConfigError(f"stage_options names an unknown stage {unknown[0]!r}.", field="stage_options", fix="use simplify, skin or fit.")
        for stage in self.stage_options:
            _stage_config(stage, self, "in.glb", "original.glb")  # each option checked as that stage's config file would check it


def _stage_config(stage: str, config: LodConfig, asset: str, original: str) -> Any:
    """The ``stage``'s config: the chain's settings, then its ``stage_options``."""
    common = {"device": config.device, "max_triangles": config.max_triangles}
    if stage == "simplify":
        out: Any = SimplifyConfig(asset=asset, ratio=float(config.ratio), triangles=config.triangles, seed=config.seed, **common)
    elif stage == "skin":
        out = SkinConfig(lod=asset, reference=original, seed=config.seed, **common)
    else:
        # 8-bit stored values, trained through the quantiser: what lod.glb ships is what the fit scored
        out = FitConfig(asset=asset, reference=original, target=config.target, shape=config.shape, texture_size=config.texture_size,
                        shadows=config.shadows, quantize=8, **common)
        out.train.seed = config.seed
    for name, value in config.stage_options.get(stage, {}).items():
        # Typed as a config file's value would be (a path field must be a string, a table a table).
        set_field(out, name, coerce_field(type(out), name, value, source=f"the {stage} stage", prefix=f"stage_options.{stage}."))
    return out


class _Forward:
    """Hands a stage's headline events on to the chain's log (tagged with the stage)."""

    KEPT = ("bake", "eval", "done", "interrupted")

    def __init__(self, run: BakeRun, stage: str) -> None:
        self.run, self.stage = run, stage

    def write(self, event: dict[str, Any]) -> None:
        if event.get("event") in self.KEPT:
            self.run.events.emit("stage", stage=self.stage, **{("stage_event" if k == "event" else k): v for k, v in event.items()})

    def close(self) -> None:
        pass


def _finished(folder: Path) -> dict[str, Any] | None:
    """The report of a stage that finished in ``folder`` (``None`` if it did not)."""
    report, manifest = folder / "report.json", folder / "bake.json"
    if report.is_file() and manifest.is_file():
        return json.loads(report.read_text())
    return None


def _body(run: BakeRun) -> BakeOutcome:
    started = time.perf_counter()
    config: LodConfig = run.config
    asset = Path(config.asset)
    scene = load_bake_input(asset, max_triangles=config.max_triangles, see_through=True)  # bind pose: only its skins and clips are asked about
    fit_options = config.stage_options.get("fit", {})
    target = fit_options.get("target", config.target)
    if target != "unlit" or fit_options.get("tonemap") == "fit":  # refused before the simplify stage spends its minutes
        field = "target" if target != "unlit" else "stage_options.fit.tonemap"
        check_opaque(scene, path=asset, field=field, why=f"a {target} LOD with a {fit_options.get('tonemap', 'none')} tone map cannot carry its cut-outs and blending",
                     fix="use --target unlit without a fitted tone map, which keeps the alpha in the LOD's texture and its alphaMode.")
    clear = not see_through_materials(scene)
    skinned = any(m.skin is not None for m in scene.meshes)
    animated = skinned and scene.rig is not None and any(c.duration > 0 for c in scene.rig.clips)
    stages = run.checkpoints / "stages"
    bakes = {"simplify": SIMPLIFY, "skin": SKIN, "fit": FIT}
    plan = ["simplify", *(["skin"] if animated and config.skin else []), "fit"]
    reports: dict[str, dict[str, Any]] = {}
    current = str(asset.resolve())
    for stage in plan:
        folder = stages / stage
        stage_config = _stage_config(stage, config, current, str(asset.resolve()))
        if stage == "fit" and (skinned or not clear):
            # the simplify stage fitted the shape (over the animation; through the see-through layers, which the fit's
            # shape step does not render yet)
            stage_config.shape = False
        report = _finished(folder) if run.resume else None
        if report is None:
            run.note(f"lod: {stage}")
            resume = run.resume and (folder / STATE_DIR / "checkpoints").is_dir() and any((folder / STATE_DIR / "checkpoints").glob("*.pt"))
            report = run.run_stage(bakes[stage], stage_config, folder, resume=resume, sinks=[_Forward(run, stage)])
            torch.save({"stages": [*reports, stage]}, run.checkpoints / STAGES_FILE)
        reports[stage] = report
        current = str(folder / ("lod.gltf" if stage == "fit" else "lod.glb"))
    out = run.stage
    lod = pose_scene(load_bake_input(current, field="lod", see_through=True))
    write_gltf(out / "lod.glb", lod, texture_bits=8)
    pictures = {"simplify": ("triptych.png", "simplify.png"), "skin": ("frames.png", "frames.png"), "fit": ("triptych.png", "triptych.png")}
    for stage in plan:
        source, name = pictures[stage]
        shutil.copyfile(stages / stage / source, out / name)
    fit, simplify = reports["fit"], reports["simplify"]
    metrics = {
        "psnr_union_db": fit["psnr_union_db"],
        "ssim": fit["ssim"],
        "triangles": simplify["triangles"],
        "original_triangles": simplify["triangles_original"],
    }
    keep = {
        "simplify": ("psnr_db", "flip", "start_psnr_db", "start_flip", "triangles", "seconds"),
        "skin": ("vertex_error", "transferred_vertex_error", "psnr_db", "transferred_psnr_db", "pruning_cost", "seconds"),
        "fit": ("psnr_union_db", "initial_psnr_union_db", "psnr_db", "ssim", "bytes", "shape", "epochs", "seconds"),
    }
    fields = {
        "asset": str(asset),
        "target": config.target,
        "skinned": skinned,
        "stages": {s: {**{k: reports[s].get(k) for k in keep[s]}, "training": reports[s].get("training")} for s in plan},
        "training": _chain_training(reports, plan),
        "stage_folders": {s: str(Path(STATE_DIR) / "checkpoints" / "stages" / s) for s in plan},
        "lod_bytes": (out / "lod.glb").stat().st_size,
        "seconds": time.perf_counter() - started,
        "metrics_definition": (
            "psnr_union_db / ssim: the finished LOD against renders of the original over the fit's held-out views, on the pixels "
            "either covers (display space); each stage's own figures are under stages (see their reports)"
        ),
    }
    return BakeOutcome(metrics, fields, curve_title=None)


def _chain_training(reports: dict[str, dict[str, Any]], plan: list[str]) -> dict[str, Any]:
    """The chain's ``training`` verdict: the first stage that stopped while still improving, else the fit's
    (the stage whose figure the LOD is judged by); ``stage`` names which."""
    trained = {s: reports[s]["training"] for s in plan if isinstance(reports[s].get("training"), dict)}
    if not trained:
        return {"converged": None}
    stage = next((s for s, t in trained.items() if t.get("converged") is False), "fit" if "fit" in trained else next(iter(trained)))
    return {**trained[stage], "stage": stage}


# -- footprint --------------------------------------------------------------------------------


def _stage_field(stage: str, name: str, config: LodConfig) -> str:
    """Where the chain's config sets a stage's setting ``name``: its own field (``texture_size``,
    ``shadows``...) when the chain passes it on and the stage options do not override it, else
    ``stage_options.<stage>.<name>``."""
    passed = {"simplify": ("ratio", "triangles", "seed", "max_triangles"), "skin": ("seed", "max_triangles"),
              "fit": ("target", "shape", "texture_size", "shadows", "seed", "max_triangles")}
    if name in passed[stage] and name not in config.stage_options.get(stage, {}):
        return name
    return f"stage_options.{stage}.{name}"


def stage_footprints(config: LodConfig, device: torch.device) -> dict[str, Footprint]:
    """Each stage's footprint, from its config as the chain builds it (:func:`_stage_config`, the
    stage's device defaults filled), after the stage's own checks: the stage options are any values,
    and a stage would refuse them only when it starts. The skin stage is counted always: whether the
    asset is skinned and animated is known only once it is read."""
    out = {}
    for stage, bake in (("simplify", SIMPLIFY), ("skin", SKIN), ("fit", FIT)):
        if stage == "skin" and not config.skin:
            continue
        stage_config = _stage_config(stage, config, "in.glb", "original.glb")
        apply_defaults(bake, stage_config, device)
        try:
            stage_config.validate()
            out[stage] = bake.footprint(stage_config, device)
        except ConfigError as exc:
            raise ConfigError(exc.problem, field=_stage_field(stage, exc.field or "", config), fix=exc.fix) from exc
        except (TypeError, ValueError) as exc:  # a value of the wrong type that the stage's checks let through
            raise ConfigError(f"the {stage} stage cannot use its options ({exc}).", field=f"stage_options.{stage}",
                              fix=f"see `neuralbake {stage} --help` for its settings.") from exc
    return out


def lod_footprint(config: LodConfig, device: torch.device) -> Footprint:
    """The chain's footprint: the largest of its stages' memory (they run one after another, each
    freeing its own), the sum of their steps; the fields are those of the chain's config that set them."""
    stages = stage_footprints(config, device)
    largest = max(stages, key=lambda s: stages[s].memory_bytes)
    longest = max(stages, key=lambda s: stages[s].steps)
    return Footprint(
        memory_bytes=stages[largest].memory_bytes,
        steps=sum(f.steps for f in stages.values()),
        field=_stage_field(largest, stages[largest].field, config),
        steps_field=_stage_field(longest, stages[longest].steps_field, config),
    )


LOD = Bake("lod", LodConfig, _body, title="lod", footprint=lod_footprint)
"""The chain, as the runner (:mod:`neuralbake.bakes.run`) runs it."""


def make_lod(config: LodConfig, out_dir: str | Path, **options: Any) -> dict[str, Any]:
    """Make a finished LOD of ``config.asset`` in ``out_dir`` (see the module docstring); return the report."""
    return LOD.run(config, out_dir, **options)

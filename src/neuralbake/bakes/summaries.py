"""Each bake's closing line: the few figures of its report a user reads first, as one line of text.

The command line prints them after ``done``; they read the report only (never the bake's objects),
so a summary can be made for any ``report.json``. Numbers go through
:func:`neuralbake.core.report.metric_text`, which never fails on a missing or non-finite value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from neuralbake.core.report import metric_text

__all__ = [
    "fit_summary",
    "lod_summary",
    "material_pack_summary",
    "material_summary",
    "mipmap_summary",
    "ntc_summary",
    "postfx_lora_summary",
    "postfx_summary",
    "simplify_summary",
    "skin_summary",
    "still_improving",
    "texture_summary",
]


def texture_summary(report: dict[str, Any], out: Path) -> str:
    low_key = f"psnr_{report['precision']}_db"
    return (
        f"{report['steps']} steps in {metric_text(report, 'seconds', spec='.1f')} s on {report['device']['name']} "
        f"({report['device']['type']}): PSNR {metric_text(report, 'psnr_db', unit=' dB')} (fp32 weights), "
        f"{metric_text(report, low_key, unit=' dB')} ({report['precision']}), {report['params']} parameters -> {out}"
    )


def material_summary(report: dict[str, Any], out: Path) -> str:
    def m(*path: str, spec: str = ".2f", unit: str = "") -> str:
        return metric_text(report, *path, spec=spec, unit=unit)

    asset = report.get("asset") or {}
    scored = asset.get("psnr_db") is not None or "asset.psnr_db" in (report.get("non_finite") or {})
    where = f"on renders of {asset['asset']} ({asset['material']})" if scored else "on preview renders"
    extra = f"; its BC set {m('asset', 'bc', 'psnr_db', unit=' dB')}" if scored and "bc" in asset else ""
    if scored and "ntc" in asset:  # the verdict's NTC, at the neural material's bytes or NTC's highest rate
        extra += f", NTC {m('asset', 'ntc', 'psnr_db', unit=' dB')} at {m('verdict', 'ntc', 'bits_per_texel', spec='.1f', unit=' bpp')}"
    recommendation = (report.get("verdict") or {}).get("recommendation") or {}
    verdict = f"; verdict: {recommendation['why']}" if recommendation.get("tool") not in (None, "neural_material") else ""
    return (
        f"{report['steps']} steps in {m('seconds', spec='.1f')} s: PSNR {m('psnr_db', unit=' dB')}, FLIP {m('flip', spec='.3f')} "
        f"{where} vs the reference{extra} (8-bit latents on texture views: {m('texture_views', 'psnr_u8_latents_db', unit=' dB')} "
        f"vs {m('texture_views', 'psnr_db', unit=' dB')}), decoder {report['decoder_params']} parameters, "
        f"{m('throughput', 'speedup', spec='.1f', unit='x')} the reference's samples/s on {report['device']['type']} -> {out}{verdict}"
    )


def material_pack_summary(report: dict[str, Any], out: Path) -> str:
    lines = [f"{len(report['materials'])} materials -> {out / 'shader'}"]
    for entry in report["materials"]:
        bake = report["bakes"].get(entry["name"])
        psnr = metric_text(report, "bakes", entry["name"], "psnr_db", unit=" dB")
        flip = metric_text(report, "bakes", entry["name"], "flip", spec=".3f")
        quality = f" (baked: PSNR {psnr}, FLIP {flip})" if bake else ""
        lines.append(f"  id {entry['id']}: {entry['name']}{quality}")
    return "\n".join(lines)


def _ntc_rows_text(report: dict[str, Any], *where: str) -> str | None:
    """``", BC1 set 26.67 bpp 25.94 dB, ..."``: the comparison rows after NTC's (one rate's, or ``rd``'s with an NTC->BC7
    row per rate: ``NTC->BC7 (42.68 bpp) 30.1 dB, 33.2 dB``), ``None`` for a report without ``comparison.rows``."""
    rows: Any = report
    for key in (*where, "comparison", "rows"):
        rows = rows.get(key) if isinstance(rows, dict) else None
    if not isinstance(rows, list):
        return None
    parts: dict[str, list[tuple[str, str]]] = {}
    for index, row in enumerate(rows):
        if not isinstance(row, dict) or row.get("name") == "ntc":
            continue
        at = (*where, "comparison", "rows", index)
        entry = (metric_text(report, *at, "bpp", unit=" bpp"), metric_text(report, *at, "psnr_db", unit=" dB"))
        parts.setdefault(str(row.get("label", row.get("name"))), []).append(entry)

    def text(label: str, entries: list[tuple[str, str]]) -> str:
        if len(entries) > 1 and len({bpp for bpp, _ in entries}) == 1:  # one rate per NTC rate, all the same size
            return f", {label} ({entries[0][0]}) {', '.join(psnr for _, psnr in entries)}"
        return f", {label} {', '.join(f'{bpp} {psnr}' for bpp, psnr in entries)}"

    return "".join(text(label, entries) for label, entries in parts.items())


def ntc_summary(report: dict[str, Any], out: Path) -> str:
    if "rd" in report:
        points = ", ".join(
            f"{metric_text(report, 'rd', 'ntc', i, 'bpp', unit=' bpp')} {metric_text(report, 'rd', 'ntc', i, 'psnr_db', unit=' dB')}"
            for i in range(len(report["rd"]["ntc"]))
        )
        return f"NTC {points}{_ntc_rows_text(report, 'rd') or ''}; rd.json + rd.png -> {out}"
    extra = _ntc_rows_text(report)
    if extra is None:  # a report written before the comparison table
        extra = "".join(
            f", {k.upper()} set {metric_text(report, 'bcn', k, 'bpp', unit=' bpp')} "
            f"{metric_text(report, 'bcn', k, 'quality', 'overall_db', unit=' dB')}"
            for k in report.get("bcn", {})
        )
    return (
        f"{metric_text(report, 'bpp_measured', spec='.3f', unit=' bpp')} ({report['bytes']} B, {report['latent_shape']['name']}): "
        f"PSNR {metric_text(report, 'ntc', 'overall_db', unit=' dB')} at mip 0{extra} -> {out}"
    )


def mipmap_summary(report: dict[str, Any], out: Path) -> str:
    means = "  ".join(f"{name} {metric_text(report, f'mean_psnr_{name}_db')}" for name in ("box", "toksvig", "learned"))
    loses = report.get("learned_loses")
    if loses:
        verdict = (f"; learned LOSES to {loses['baseline']} at {loses['class'].replace('_', '-')} pairs, level {loses['level']}: "
                   f"{loses['learned_db']:.2f} vs {loses['baseline_db']:.2f} dB")
    elif "per_class" in report:
        verdict = "; learned >= every baseline in every class (mirror, off-mirror, grazing) and level"
    else:
        verdict = ""
    return (
        f"{report['levels']} levels, {report['steps']} steps in {metric_text(report, 'seconds', spec='.1f')} s on "
        f"{report['device']['name']} ({report['device']['type']}): mean shaded PSNR (dB) {means}{verdict} -> {out}"
    )


def fit_summary(report: dict[str, Any], out: Path) -> str:
    key = report.get("judged_by", "psnr_db")
    what = "PSNR (pixels either covers)" if key == "psnr_union_db" else "PSNR"
    def m(key: str, spec: str = ".2f", unit: str = "") -> str:
        return metric_text(report, key, spec=spec, unit=unit)

    return (
        f"{report['target']}{' + shape' if report.get('shape') else ''}: {report['epochs']} epochs in {m('seconds', '.1f')} s on "
        f"{report['device']['name']} ({m('ms_per_epoch', '.0f')} ms/epoch): held-out {what} {m(key, unit=' dB')} "
        f"(start {m('initial_' + key)}), "
        f"SSIM {m('ssim', '.3f')}, {report['bytes']:,} bytes -> {out}"
    )


def simplify_summary(report: dict[str, Any], out: Path) -> str:
    def m(key: str, spec: str = ".2f", unit: str = "") -> str:
        return metric_text(report, key, spec=spec, unit=unit)

    return (
        f"{report['triangles_original']:,} -> {report['triangles']:,} triangles in {m('seconds', '.1f')} s on {report['device']['name']}: "
        f"held-out PSNR {m('psnr_db', unit=' dB')}, FLIP {m('flip', '.4f')} ({report['start']} alone: {m('start_psnr_db', unit=' dB')}, "
        f"{m('start_flip', '.4f')}){_shape_stop(report)} -> {out}"
    )


def _shape_stop(report: dict[str, Any]) -> str:
    """Where simplify's shape fit stopped early: after which epoch, and why."""
    if report.get("shape_stopped_by") != "patience" or not report.get("views"):
        return ""
    return (f"; the shape fit stopped after epoch {report['steps'] // report['views']} of {report['epochs']} "
            f"({report.get('patience')} passes in a row raised the loss and were undone)")


def skin_summary(report: dict[str, Any], out: Path) -> str:
    def m(key: str, spec: str = ".2f", unit: str = "", scale: float = 1.0) -> str:
        return metric_text(report, key, spec=spec, unit=unit, scale=scale)

    return (
        f"{report['vertices']:,} vertices, {report['steps']} steps in {m('seconds', '.1f')} s on {report['device']['name']}: "
        "held-out vertex error "
        f"{m('vertex_error', '.3f', ' %', 100)} of the size (transferred {m('transferred_vertex_error', '.3f', ' %', 100)}), "
        f"PSNR {m('psnr_db', unit=' dB')} (transferred {m('transferred_psnr_db', unit=' dB')}) -> {out}"
    )


def lod_summary(report: dict[str, Any], out: Path) -> str:
    def stage(name: str, key: str, spec: str = ".2f", unit: str = "", scale: float = 1.0) -> str:
        return metric_text(report, "stages", name, key, spec=spec, unit=unit, scale=scale)

    parts = [f"simplify {stage('simplify', 'start_psnr_db')} -> {stage('simplify', 'psnr_db', unit=' dB')}"]
    if "skin" in report["stages"]:
        before, after = stage("skin", "transferred_vertex_error", ".3f", scale=100), stage("skin", "vertex_error", ".3f", " %", 100)
        parts.append(f"skin vertex error {before} -> {after}")
    parts.append(f"fit {stage('fit', 'initial_psnr_union_db')} -> {stage('fit', 'psnr_union_db', unit=' dB')}")
    return (
        f"{report['original_triangles']:,} -> {report['triangles']:,} triangles, {report['target']}, "
        f"in {metric_text(report, 'seconds', spec='.0f')} s on "
        f"{report['device']['name']} ({'; '.join(parts)}): LOD vs original {metric_text(report, 'psnr_union_db', unit=' dB')}, "
        f"{report['lod_bytes']:,} bytes -> {out / 'lod.glb'}"
    )


def postfx_summary(report: dict[str, Any], out: Path) -> str:
    m = report
    temporal = f", temporal ratio {metric_text(m, 'temporal_ratio')}" if m.get("temporal_ratio") is not None else ""
    what = "frames/" if m["frames"] > 1 else "result.png"
    speed = f", {metric_text(m, 'seconds_per_frame', unit=' s/frame')}" if m.get('seconds_per_frame') is not None else ""
    return f"{m['frames']} frame(s){speed}{temporal} -> {out / what}"


def postfx_lora_summary(report: dict[str, Any], out: Path) -> str:
    before = report.get("denoise_loss_before")
    change = f" (base model {metric_text(report, 'denoise_loss_before', spec='.4f')})" if before is not None else ""
    return (f"rank-{report['rank']} LoRA on {report['images']} image(s), {report['steps']} steps in "
            f"{metric_text(report, 'train_seconds', spec='.1f')} s: "
            f"denoising loss {metric_text(report, 'denoise_loss', spec='.4f')}{change} -> {out / 'lora.safetensors'}")


LONGER = {"fit": "--epochs", "simplify": "--epochs", "skin": "--steps"}
"""The flag that lengthens a bake's training, where it is not ``--steps``."""


def still_improving(report: dict[str, Any]) -> str:
    """The warning a summary line ends with when the bake stopped while still improving (else "")."""
    training = report.get("training") or {}
    if training.get("converged") is not False:
        return ""
    gain = training.get("last_quarter_gain")
    unit = " dB" if str(training.get("quality_key", "")).endswith("_db") else ""
    stage = training.get("stage")
    if stage:  # a chain (lod): the stage that stopped early, raised through --set
        more, where = f"--set {stage}.{'steps' if stage == 'skin' else 'epochs'}", f"its {stage} stage was "
    else:
        more, where = LONGER.get(str(report.get("bake")), "--steps (or --seconds)"), ""
    doubling, half = training.get("doubling_gain"), training.get("half_run_steps")
    if isinstance(doubling, (int, float)) and half:  # a wsd run, judged against its half-length twin
        return f"  [{where}still improving when it stopped: +{doubling:.2f}{unit} over the same bake at {half:,} steps; twice the {more} would gain more]"
    return (
        f"  [{where}still improving when it stopped: +{gain:.2f}{unit} over its last quarter; more {more} would gain more]"
        if isinstance(gain, (int, float)) else ""
    )

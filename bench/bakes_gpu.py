"""Every bake end to end as a user runs it: its defaults for the device, its README input, PyTorch against the fused kernels.

For each bake kind it runs the registered bake (:mod:`neuralbake.bakes.registry`, the entries the CLI and the service
use) on the input the README gives it, once per kernel path where the bake has one (``--kernels torch`` and
``--kernels triton``; bakes without fused kernels run once), each in a fresh process, and prints per run:

- wall seconds (process start to report, imports excluded) and training seconds (the report's phases, summed);
- the quality figure the bake trains towards (its ``training.quality_key``; stages and pack members: the last one);
- whether training had converged (``training.converged``: the last quarter's gain under the tolerance), and its gain;
- for a fused path, compile seconds: the wall of a first run on an empty Triton cache minus that of a second run on
  the warm cache (Triton keeps compiled kernels on disk, so a machine pays the compile once);
- the bake's own summary line (and, in ``--json`` rows, the report's ``kernel_paths``: which path each piece of work
  took and why).

``--profile KIND`` instead profiles a short run of one bake (``--profile-steps`` steps) with ``torch.profiler`` and
writes the operators by GPU time, to see what a training step spends its time on.

    python bench/bakes_gpu.py --device cuda --json out/bakes_gpu.jsonl              # every kind, both paths
    python bench/bakes_gpu.py --kinds material ntc --paths torch --device cuda
    python bench/bakes_gpu.py --profile material --profile-steps 300 --paths torch triton --device cuda
    python bench/bakes_gpu.py --kinds texture --device cpu                           # CPU: PyTorch only
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

EXAMPLES = ROOT / "examples"
CRATE = EXAMPLES / "crate"
INPUTS: dict[str, dict[str, Any]] = {
    "texture": {"image": str(EXAMPLES / "neural_texture" / "grace_hopper_256.png")},
    "material": {"material": str(EXAMPLES / "materials" / "antique_copper_tray.json")},
    "material-pack": {"materials": [str(EXAMPLES / "materials" / "velvet.json"), str(EXAMPLES / "materials" / "rusty_iron_nail.json")]},
    "ntc": {"sources": [str(CRATE / "crate.gltf")], "bpp": [4.0]},
    "mipmap": {"base_color": str(CRATE / "crate_base_color.png"), "normal": str(CRATE / "crate_normal.png"),
               "roughness_map": str(CRATE / "crate_metallic_roughness.png")},
    "fit": {"asset": str(CRATE / "crate.gltf")},
    "simplify": {"asset": str(CRATE / "crate.gltf"), "ratio": 0.2},
    "lod": {"asset": str(EXAMPLES / "arm" / "arm.gltf"), "ratio": 0.25},
    # the lod chain's middle stage on its own: the arm as its own (skinned) LOD
    "skin": {"lod": str(EXAMPLES / "arm" / "arm.gltf"), "reference": str(EXAMPLES / "arm" / "arm.gltf")},
}
"""Each kind's input, as the README's commands give it (sizes and steps left to the device defaults)."""

DEVICE_FIELD = {"material-pack": "bake.device"}
"""Where a kind keeps its device (dotted), where it is not ``device``."""
KERNELS_FIELD = {"texture": "kernels", "material": "kernels", "material-pack": "bake.kernels", "ntc": "kernels"}
"""The kinds with fused kernels and the field that picks the path."""
STEPS_FIELD = {"material-pack": "bake.train.steps", "fit": "epochs", "simplify": "epochs", "skin": "steps"}
"""Where ``--profile-steps`` goes, where it is not ``train.steps`` (fit and simplify count epochs over their views)."""


def build_config(kind: str, device: str, path: str | None, steps: int | None = None, overrides: list[str] = ()) -> Any:
    """The config of one run of ``kind``: its README input, then ``FIELD=VALUE`` overrides (dotted, values as ``--set``
    reads them), the device, the kernel path and optionally the step count, each checked as a config file's would be."""
    from neuralbake.bakes.registry import BAKES
    from neuralbake.bakes.run import set_field
    from neuralbake.core.names import split_setting
    from neuralbake.core.config import coerce_field, config_from_dict

    config_type = BAKES[kind].bake.config_type
    config = config_from_dict(config_type, INPUTS[kind])
    settings = [split_setting(item, example="train.steps=30000") for item in overrides]
    settings.append((DEVICE_FIELD.get(kind, "device"), device))
    if path is not None:
        settings.append((KERNELS_FIELD[kind], path))
    if steps is not None:
        settings.append((STEPS_FIELD.get(kind, "train.steps"), steps))
    for dotted, value in settings:
        set_field(config, dotted, coerce_field(config_type, dotted, value))
    return config


def trainings(report: Any, where: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every ``training`` block in a report (a bake's own, its stages', a pack's members'), with where it sits."""
    found = []
    if isinstance(report, dict):
        for key, value in report.items():
            if key == "training" and isinstance(value, dict) and "converged" in value:
                found.append((where or "bake", value))
            else:
                found.extend(trainings(value, f"{where}.{key}" if where else key))
    elif isinstance(report, list):
        for i, value in enumerate(report):
            found.extend(trainings(value, f"{where}[{i}]"))
    return found


def _figure(report: dict[str, Any], key: str | None) -> float | None:
    if not key:
        return None
    for holder in (report, report.get("metrics") or {}):
        if isinstance(holder.get(key), (int, float)):
            return float(holder[key])
    return None


def row_of(kind: str, path: str | None, report: dict[str, Any], summary: str, wall: float) -> dict[str, Any]:
    """One table row from a finished bake's report."""
    blocks = trainings(report)
    phases = [p for _, block in blocks for p in block.get("phases", [])]
    last = blocks[-1][1] if blocks else {}
    quality_key = last.get("quality_key")
    figure = _figure(report, quality_key)
    if figure is None and blocks:  # a chain or pack: the figure sits beside its training block
        holder: Any = report
        for part in blocks[-1][0].replace("]", "").replace("[", ".").split("."):
            if part == "bake":
                break
            holder = holder[int(part)] if isinstance(holder, list) else holder.get(part, {})
        figure = _figure(holder if isinstance(holder, dict) else {}, quality_key)
    if figure is None and isinstance(report.get("psnr_db"), (int, float)):  # a figure only evaluations hold (material): the report's own
        quality_key, figure = "psnr_db", float(report["psnr_db"])
    return {
        "kind": kind,
        "kernels": path or "-",
        "device": report["device"]["name"],
        "wall_s": round(wall, 1),
        "train_s": round(sum(p.get("train_seconds") or 0.0 for p in phases), 1) if phases else None,
        "quality_key": quality_key,
        "quality": figure,
        "converged": [b.get("converged") for _, b in blocks],
        "last_quarter_gain": [b.get("last_quarter_gain") for _, b in blocks],
        "steps": [p.get("steps") for p in phases],
        "kernels_report": report.get("kernels"),
        "kernel_paths": report.get("kernel_paths"),  # each piece of work's path and why (BakeRun.kernels)
        "summary": summary,
    }


def run_one(kind: str, device: str, path: str | None, out: Path, steps: int | None = None, profile: Path | None = None,
            overrides: list[str] = ()) -> dict[str, Any]:
    """Bake ``kind`` once in this process; the row for it (and, with ``profile``, the profiler's table written there)."""
    from timing import Stopwatch

    from neuralbake.bakes.registry import BAKES
    from neuralbake.bakes.run import run_bake

    entry = BAKES[kind]
    config = build_config(kind, device, path, steps, overrides)
    if out.exists():
        shutil.rmtree(out)
    if profile is None:
        with Stopwatch(device) as watch:
            report = run_bake(entry.bake, config, out, progress=False)
        return row_of(kind, path, report, entry.summary(report, out), watch.seconds)
    import torch
    from torch.profiler import ProfilerActivity, profile as profiler

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profiler(activities=activities) as prof, Stopwatch(device) as watch:
        report = run_bake(entry.bake, config, out, progress=False)
    sort = "cuda_time_total" if torch.cuda.is_available() else "cpu_time_total"
    averages = prof.key_averages()
    profile.write_text(f"{kind} kernels={path} steps={steps} wall {watch.seconds:.1f} s\n"
                       f"{averages.table(sort_by=sort, row_limit=40, max_name_column_width=70)}\n"
                       f"by host time (launch-bound steps show here):\n"
                       f"{averages.table(sort_by='self_cpu_time_total', row_limit=25, max_name_column_width=70)}\n"
                       f"launches: {sum(e.count for e in averages if e.device_type.name == 'CUDA')} GPU kernels\n")
    return row_of(kind, path, report, entry.summary(report, out), watch.seconds)


def _spawn(kind: str, device: str, path: str | None, out: Path, env: dict[str, str], extra: list[str], overrides: list[str]) -> dict[str, Any]:
    """One run in a fresh process (so a first run pays its compiles and nothing is shared between runs)."""
    with tempfile.NamedTemporaryFile("r", suffix=".json") as row_file:
        command = [sys.executable, __file__, "--worker", kind, "--device", device, "--out", str(out), "--row", row_file.name, *extra]
        command += [f"--set={item}" for item in overrides]
        if path is not None:
            command += ["--path", path]
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            return {"kind": kind, "kernels": path or "-", "error": done.stderr.strip().splitlines()[-5:]}
        return json.loads(Path(row_file.name).read_text())


def _print(row: dict[str, Any]) -> None:
    if "error" in row:
        print(f"{row['kind']:13s} {row['kernels']:6s} FAILED: {' | '.join(row['error'])}", flush=True)
        return
    quality = f"{row['quality']:.2f}" if isinstance(row.get("quality"), float) else "-"
    compile_s = f"{row['compile_s']:.1f}" if isinstance(row.get("compile_s"), float) else "-"
    train = f"{row['train_s']:.1f}" if isinstance(row.get("train_s"), float) else "-"
    print(f"{row['kind']:13s} {row['kernels']:6s} wall {row['wall_s']:7.1f} s  train {train:>7s} s  compile {compile_s:>6s} s  "
          f"{row.get('quality_key') or '':10s} {quality:>7s}  converged {row['converged']}  | {row['summary']}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", nargs="+", default=list(INPUTS), choices=list(INPUTS))
    parser.add_argument("--paths", nargs="+", default=["torch", "triton"], choices=["torch", "triton", "auto"],
                        help="kernel paths to run for the kinds that have fused kernels (on a CPU only torch runs)")
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    parser.add_argument("--out", type=Path, default=Path("out/bakes_gpu"), help="parent of one output folder per run")
    parser.add_argument("--json", type=Path, help="append the rows here, one JSON object a line")
    parser.add_argument("--no-warm", action="store_true", help="skip the second run of a fused path (no compile seconds)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                        help="override a config field of every run (dotted, e.g. train.steps=30000 or shadows=false); repeatable")
    parser.add_argument("--profile", choices=list(INPUTS), help="profile a short run of this kind instead (torch.profiler)")
    parser.add_argument("--profile-steps", type=int, default=300)
    parser.add_argument("--worker", choices=list(INPUTS), help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--row", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--profile-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        row = run_one(args.worker, args.device, args.path, args.out, args.steps, args.profile_out, args.overrides)
        args.row.write_text(json.dumps(row))
        return

    paths = [p for p in args.paths if args.device.startswith("cuda") or p == "torch"]
    kinds = [args.profile] if args.profile else args.kinds
    for kind in kinds:
        for path in (paths if kind in KERNELS_FIELD else [None]):
            out = args.out / f"{kind}_{path or 'default'}"
            env = dict(os.environ)
            if args.profile:
                table = args.out / f"profile_{kind}_{path or 'default'}.txt"
                table.parent.mkdir(parents=True, exist_ok=True)
                row = _spawn(kind, args.device, path, out, env, ["--steps", str(args.profile_steps), "--profile-out", str(table)], args.overrides)
                row["profile"] = str(table)
            elif path in ("triton", "auto") and not args.no_warm:
                with tempfile.TemporaryDirectory() as cache:  # an empty kernel cache, then the same one warm
                    env["TRITON_CACHE_DIR"] = cache
                    env["TORCHINDUCTOR_CACHE_DIR"] = str(Path(cache) / "inductor")  # the compiled steps' (NTC's) FX graphs too
                    cold = _spawn(kind, args.device, path, out, env, [], args.overrides)
                    row = _spawn(kind, args.device, path, out, env, [], args.overrides) if "error" not in cold else cold
                    if "error" not in row:
                        row["cold_wall_s"] = cold["wall_s"]
                        row["compile_s"] = round(cold["wall_s"] - row["wall_s"], 1)
            else:
                row = _spawn(kind, args.device, path, out, env, [], args.overrides)
            row["overrides"] = args.overrides
            _print(row)
            if args.json:
                args.json.parent.mkdir(parents=True, exist_ok=True)
                with args.json.open("a") as sink:
                    sink.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()

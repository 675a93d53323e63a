"""neuralbake's MaterialX compiler against MaterialX's own generated shader code, per example document.

For every ``.mtlx`` in the given folders it compiles the document with neuralbake and runs MaterialX's generated
Slang for it on slangpy's CPU device (``tests/material/mtlx_oracle.py`` says how, and why the two differ), at fixed-seed
samples (``--points`` shading points x ``--per-point`` light directions), and prints per example the median and 95th
percentile of ``|ours - theirs| / max(theirs, 0.01)`` over samples and RGB of ``f cos_i``, the mean relative error of
the hemisphere sum (directional albedo) and both mean albedos; a document our compiler refuses is listed as refused
with its reason, one the oracle cannot run (image files) as skipped.

    python bench/materialx_oracle.py                                  # ../shared/materialx (if present) + examples/materials
    python bench/materialx_oracle.py path/to/folder --points 64 --per-point 256 --json out/materialx_oracle.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from neuralbake.errors import InputError  # noqa: E402
from tests.material.mtlx_oracle import compare, oracle_available, sample_set  # noqa: E402

SHARED = ROOT.parent / "shared" / "materialx"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "folders", nargs="*", type=Path, help="folders of .mtlx documents (default: ../shared/materialx if present, and examples/materials)"
    )
    parser.add_argument("--points", type=int, default=32, help="shading points, each with its own wo, uv and position")
    parser.add_argument("--per-point", type=int, default=64, help="light directions per shading point")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write one JSON row per example to this file")
    args = parser.parse_args()
    reason = oracle_available()
    if reason:
        print(f"materialx_oracle: cannot run: {reason}", file=sys.stderr)
        return 1
    folders = args.folders or [f for f in (SHARED, ROOT / "examples" / "materials") if f.is_dir()]
    samples = sample_set(args.points, args.per_point, args.seed)
    rows = []
    print(f"{'example':34} {'median':>7} {'p95':>7} {'albedo':>7} {'ours':>6} {'theirs':>6}  seconds")
    for path in sorted(p for folder in folders for p in folder.glob("*.mtlx")):
        start = time.perf_counter()
        row = {"example": path.stem, "folder": str(path.parent), "samples": args.points * args.per_point}
        try:
            run = compare(path, samples)
        except InputError as error:
            status = "refused" if "not supported by the material compiler" in str(error) else "skipped"
            row |= {"status": status, "reason": str(error)}
            print(f"{path.stem:34} {status}: {str(error).split(': ', 2)[-1][:100]}")
        else:
            result = run.agreement()
            row |= {"status": "compared", "mirror_excluded": run.delta, **result.row()}
            seconds = time.perf_counter() - start
            mark = " (mirror direction left out: roughness 0)" if run.delta else ""
            print(
                f"{path.stem:34} {result.median:7.3f} {result.p95:7.3f} {result.albedo:7.3f} "
                f"{result.albedo_ours:6.3f} {result.albedo_theirs:6.3f}  {seconds:5.1f}{mark}"
            )
        rows.append(row)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

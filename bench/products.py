"""Each product's main job as a user runs it: the registered bake, its defaults for the device, the shipped example input.

Run it after a change that could move a product's figures (a kernel, the run path, a default): it bakes each kind
through the registry (:mod:`neuralbake.bakes.registry`, the same entries the CLI and the service use) and prints the
bake's own summary line and its wall time, to set beside the tables of docs/benchmarks.md.

    python bench/products.py                          # texture, material, ntc on the shipped examples
    python bench/products.py --kinds texture --device cuda --out /tmp/products
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from timing import Stopwatch  # noqa: E402

from neuralbake.bakes.registry import BAKES  # noqa: E402
from neuralbake.bakes.run import run_bake  # noqa: E402
from neuralbake.core.config import config_from_dict  # noqa: E402

EXAMPLES = ROOT / "examples"
INPUTS = {
    "texture": {"image": str(EXAMPLES / "neural_texture" / "grace_hopper_256.png")},
    "material": {"material": str(EXAMPLES / "materials" / "antique_copper_tray.json")},
    "ntc": {"sources": [str(EXAMPLES / "crate" / "crate.gltf")], "bpp": [4.0]},
    "fit": {"asset": str(EXAMPLES / "crate" / "crate.gltf")},
}
"""Each kind's example input, as the README's commands give it."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", nargs="+", default=["texture", "material", "ntc"], choices=sorted(INPUTS))
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--out", type=Path, default=Path("out/products"), help="parent of one output folder per kind")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    rows = []
    for kind in args.kinds:
        entry = BAKES[kind]
        config = config_from_dict(entry.bake.config_type, {**INPUTS[kind], "device": args.device})
        out = args.out / kind
        with Stopwatch() as watch:
            report = run_bake(entry.bake, config, out, progress=False)
        rows.append({"kind": kind, "seconds": round(watch.seconds, 1), "device": report["device"]["name"], "summary": entry.summary(report, out)})
        print(f"{kind:9s} {watch.seconds:7.1f} s  {rows[-1]['summary']}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()

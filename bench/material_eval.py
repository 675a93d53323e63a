"""Evaluation throughput of the reference layered materials: BSDF samples per second.

For each material in ``examples/materials`` (and any given on the command line), evaluates the
full material (nodes, layers, every lobe) at random uv, normals and light/view directions in
batches, and prints samples/s: the denominator of the neural material speed-up (a neural
material must beat these numbers by 10x on the same device). Times with device synchronisation,
after a warm-up, median of several repeats.

    python bench/material_eval.py --device cpu
    python bench/material_eval.py --device cuda --batch 1048576
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from neuralbake.core.device import describe_device, resolve_device  # noqa: E402
from neuralbake.errors import NeuralbakeError  # noqa: E402
from neuralbake.material.loader import load_material  # noqa: E402
from timing import measure  # noqa: E402


def directions(n: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    v = torch.randn(n, 3, generator=generator, device=device)
    v[:, 2] = v[:, 2].abs() + 0.05
    return torch.nn.functional.normalize(v, dim=1)


def throughput(path: Path, device: torch.device, batch: int, repeats: int) -> float:
    material = load_material(path, device=device)
    generator = torch.Generator(device=device).manual_seed(0)
    uv = torch.rand(batch, 2, generator=generator, device=device)
    normal = directions(batch, generator, device)[:, [0, 2, 1]]
    wi, wo = directions(batch, generator, device), directions(batch, generator, device)

    def run() -> torch.Tensor:
        with torch.no_grad():
            return material(uv, normal).eval(wi, wo)

    timing = measure(run, repeats=repeats, device=device)
    assert torch.isfinite(timing.value).all(), f"{path.name}: non-finite BSDF values"
    return timing.rate(batch, best=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("materials", nargs="*", type=Path)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch", type=int, default=65536)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()
    device = resolve_device(args.device)
    paths = args.materials or sorted(p for p in (ROOT / "examples" / "materials").iterdir() if p.suffix in (".json", ".mtlx"))
    rows = []
    for path in paths:
        try:
            rate = throughput(path, device, args.batch, args.repeats)
        except NeuralbakeError as exc:
            print(f"{path.name}: skipped ({exc})")
            continue
        rows.append({"material": path.name, "samples_per_second": rate})
        print(f"{path.name:32s} {rate / 1e6:10.3f} M samples/s", flush=True)
    base = rows[0]["samples_per_second"] if rows else 1.0
    print(f"\n{'material':32s} {'M samples/s':>12s} {'x first':>8s}   ({describe_device(device)['name']}, batch {args.batch})")
    for row in rows:
        print(f"{row['material']:32s} {row['samples_per_second'] / 1e6:12.3f} {row['samples_per_second'] / base:8.2f}")
    if args.out:
        args.out.write_text(json.dumps({"device": describe_device(device), "batch": args.batch, "torch": torch.__version__,
                                        "date": time.strftime("%Y-%m-%d"), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()

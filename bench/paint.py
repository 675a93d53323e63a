"""Benchmark: carrying a painted stroke through a view's uv buffer into the uv0 weights mask.

Builds the uv buffer of a square view whose every pixel sees a plane unwrapped over the whole uv
square (so a stroke's pixel count is known exactly), paints a disc covering ``--stroke-pixels``
pixels, and times :func:`neuralbake.render.paint.project_strokes` (numpy) into masks of several
sizes: seconds per projection and texels reached, then each size's time relative to the first.

    python bench/paint.py --view 1024 --masks 512 1024 2048
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np

from neuralbake.render.paint import project_strokes, view_uv_buffer
from timing import measure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--view", type=int, default=1024, help="Side of the painted view, in pixels.")
    parser.add_argument("--masks", type=int, nargs="+", default=[512, 1024, 2048], help="Sides of the weights masks.")
    parser.add_argument("--stroke-pixels", type=int, default=320_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    n = args.view
    ys, xs = np.mgrid[0:n, 0:n]
    uv = np.stack(((xs + 0.5) / n, (ys + 0.5) / n), -1).reshape(-1, 2)
    buffer = view_uv_buffer(np.arange(n * n), uv, np.tile([1.0 / n, 0.0], (n * n, 1)), np.tile([0.0, 1.0 / n], (n * n, 1)), n, n)
    radius = math.sqrt(args.stroke_pixels / math.pi)
    strokes = (((xs - n / 2) ** 2 + (ys - n / 2) ** 2) <= radius * radius).astype(np.float32)
    first = None
    for side in args.masks:
        timed = measure(lambda: project_strokes(buffer, strokes, np.zeros((side, side), np.float32)), repeats=args.repeats, warmup=0)  # noqa: B023
        _, texels = timed.value
        best = timed.best
        first = first or best
        print(json.dumps({"view": n, "stroke_pixels": int(strokes.sum()), "mask": side, "texels": int(texels), "seconds": round(best, 3),
                          "relative_to_first": round(best / first, 2)}), flush=True)


if __name__ == "__main__":
    main()

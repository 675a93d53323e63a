"""PyTorch operations a skin-fit step dispatches, by the neuralbake function that called them: how launch-bound steps are
counted (each operation is one kernel launch, or more, on a GPU).

It runs the skin bake on the CPU (the arm as its own skinned LOD, the README's input, tiny sizes) and counts every ATen
operation of a few steps in the middle of the fit with a dispatch mode, attributing it to the innermost frame in the
package. The backward's operations run from the autograd engine, so they are attributed to the bake's own loop.

    python bench/step_operations.py                 # the table, per step
    python bench/step_operations.py --steps 8 --top 40
"""

from __future__ import annotations

import argparse
import collections
import inspect
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5, help="steps counted (after two uncounted ones)")
    parser.add_argument("--top", type=int, default=25, help="functions listed")
    args = parser.parse_args()

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from neuralbake.bakes.skin import SkinConfig, skin_lod

    counts: collections.Counter[str] = collections.Counter()
    state = {"adam_steps": 0, "counting": False}

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if state["counting"]:
                frame, where = inspect.currentframe(), "(outside neuralbake)"
                while frame is not None:
                    name = frame.f_code.co_filename
                    if "/neuralbake/" in name and "/nn/" not in name:
                        where = f"{name.split('/neuralbake/')[-1]}:{frame.f_code.co_name}"
                        break
                    frame = frame.f_back
                counts[where] += 1
            return func(*args, **(kwargs or {}))

    adam_step = torch.optim.Adam.step

    def counted_step(self, *a, **k):  # steps 2 .. 2 + steps - 1 are counted, from one optimiser step to the next
        result = adam_step(self, *a, **k)
        state["adam_steps"] += 1
        state["counting"] = 2 <= state["adam_steps"] < 2 + args.steps
        return result

    torch.optim.Adam.step = counted_step
    arm = str(ROOT / "examples" / "arm" / "arm.gltf")
    config = SkinConfig(lod=arm, reference=arm, steps=2 + args.steps + 1, device="cpu", render_size=64, views=2)
    with tempfile.TemporaryDirectory() as out, Count():
        skin_lod(config, Path(out) / "skin", progress=False)
    total = sum(counts.values())
    print(f"operations per skin step: {total / args.steps:.0f} (counted over {args.steps} steps)")
    for where, count in counts.most_common(args.top):
        print(f"{count / args.steps:8.1f}  {where}")


if __name__ == "__main__":
    main()

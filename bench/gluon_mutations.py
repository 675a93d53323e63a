"""Do the CPU tests of the Gluon kernels fail when a kernel is wrong? Each mutation below breaks one thing in a copy of
the sources; the interpreter tests (``tests/kernels/test_gluon_train.py`` / ``test_gluon_decode.py``, ``-k
interpreter``, under ``TRITON_INTERPRET=1``) then run on that copy and must fail. The working tree is not touched.

    python bench/gluon_mutations.py            # every mutation (a few minutes on 2 cores)
    python bench/gluon_mutations.py --only train

A mutation the tests miss is printed as MISSED with what it changes; the script exits 1 if any mutation expected to
fail passes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAIN = "src/neuralbake/kernels/gluon_train.py"
DECODE = "src/neuralbake/kernels/gluon_decode.py"

MUTATIONS = [
    # (kernel, what it breaks, text, replacement, whether the tests must catch it)
    ("train", "a hidden layer's gradient takes the wrong activation", "warpgroup_mma(transposed, act_s.index(layer), g_hid[layer])", "warpgroup_mma(transposed, act_s.index(layer + 1), g_hid[layer])", True),
    ("train", "the loss is not masked past the last row", "valid = gl.expand_dims(at < N, 1) & gl.expand_dims(ob < O, 0)", "valid = gl.expand_dims(at >= 0, 1) & gl.expand_dims(ob < O, 0)", True),
    ("train", "a hidden bias gradient lands one place off in the slot", "gl.store(slot + g_b_hid + j * HP + column_offsets", "gl.store(slot + g_b_hid + j * HP + 1 + column_offsets", True),
    ("train", "the input layer's gradient is stored transposed", "gl.store(slot + gl.expand_dims(ik * HP, 0) + gl.expand_dims(io, 1), g_in)", "gl.store(slot + gl.expand_dims(ik, 0) + gl.expand_dims(io * KP, 1), g_in)", True),
    ("train", "the last, partial tile is dropped", "for tile in range(pid, gl.cdiv(N, BM), programs):", "for tile in range(pid, N // BM, programs):", True),
    ("train", "the output bias gradient restarts every tile", "gb_out = warpgroup_mma(ones64, dzo_s, gb_out)", "gb_out = warpgroup_mma(ones64, dzo_s, gb_out * 0.0)", True),
    ("train", "da reads W where W^T belongs", "da = warpgroup_mma(dz_s, w_hid_s.index(layer).permute((1, 0)), zeros, use_acc=False)", "da = warpgroup_mma(dz_s, w_hid_s.index(layer), zeros, use_acc=False)", True),
    ("decode", "the direction features overwrite the latents", "x_s.slice(FP, FP, dim=1).store(", "x_s.slice(0, FP, dim=1).store(", True),
    ("decode", "the next tile's u is read from v", "                u = next_u\n", "                u = next_v\n", True),
    ("decode", "every hidden layer reads the first one's weights", "w_hid_s.slice(layer * HP, HP, dim=0).load(DB)", "w_hid_s.slice(0, HP, dim=0).load(DB)", True),
    ("decode", "the output's max(y, 0) is dropped", "value = gl.where(valid, gl.exp(gl.maximum(y, 0.0)) - 1.0, 0.0)", "value = gl.where(valid, gl.exp(y) - 1.0, 0.0)", True),
    ("decode", "the trilinear blend's weights are swapped", "x = a * (1.0 - t) + b * t", "x = a * t + b * (1.0 - t)", True),
    # loads a uv the program never uses (still inside the batch): no value changes, so no test can see it
    ("decode", "the uv look-ahead loads past the program's last tile", "ahead_mask = (ahead < N) & (tile + 1 < last)", "ahead_mask = (ahead < N)", False),
]


def _tests(kind: str, folder: Path) -> subprocess.CompletedProcess:
    """The interpreter tests of ``kind``'s kernel, run on the copy in ``folder``."""
    test = "tests/kernels/test_gluon_train.py" if kind == "train" else "tests/kernels/test_gluon_decode.py"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", test, "-k", "interpreter"],
        cwd=folder, env=_environment(folder), capture_output=True, text=True, check=False,
    )  # fmt: skip


def _environment(folder: Path) -> dict:
    return {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(folder / "src")}


def run(kind: str, text: str, replacement: str, folder: Path) -> bool:
    """Whether the interpreter tests fail (pytest's exit code 1: a test failed) on a copy of the sources with ``text``
    replaced. Any other outcome (the tests could not be collected or run) stops the script."""
    path = folder / (TRAIN if kind == "train" else DECODE)
    original = (ROOT / (TRAIN if kind == "train" else DECODE)).read_text()
    if original.count(text) != 1:
        raise SystemExit(f"{path.name}: the mutation's text is not there exactly once (the kernel changed): {text!r}")
    path.write_text(original.replace(text, replacement))
    try:
        done = _tests(kind, folder)
        if done.returncode not in (0, 1):
            raise SystemExit(f"the tests did not run on the mutation {replacement!r} (pytest exit {done.returncode}):\n{done.stdout[-2000:]}")
        return done.returncode == 1
    finally:
        path.write_text(original)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["train", "decode"], help="only this kernel's mutations")
    args = parser.parse_args()
    chosen = [m for m in MUTATIONS if args.only in (None, m[0])]
    wrong = 0
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name in ("src", "tests"):
            shutil.copytree(ROOT / name, folder / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        for file in ("pyproject.toml",):
            shutil.copy(ROOT / file, folder / file)
        # the copy is what runs (not an installed neuralbake), and its tests pass unmutated
        where = subprocess.run([sys.executable, "-c", "import neuralbake; print(neuralbake.__file__)"], cwd=folder, env=_environment(folder), capture_output=True, text=True, check=True)
        if not Path(where.stdout.strip()).is_relative_to(folder):
            raise SystemExit(f"the tests would import neuralbake from {where.stdout.strip()}, not from the copy")
        for kind in sorted({m[0] for m in chosen}):
            baseline = _tests(kind, folder)
            if baseline.returncode != 0:
                raise SystemExit(f"the {kind} kernel's interpreter tests fail before any mutation:\n{baseline.stdout[-2000:]}")
        for kind, what, text, replacement, must_fail in chosen:
            caught = run(kind, text, replacement, folder)
            verdict = "caught" if caught else "MISSED"
            expected = "" if caught == must_fail else "  <- unexpected"
            wrong += caught != must_fail
            print(f"{kind:6s} {verdict:6s}  {what}{'' if must_fail else ' (changes no value)'}{expected}", flush=True)
    print(f"{sum(1 for m in chosen if m[4])} mutations that change values, {len(chosen)} in all: {'as expected' if not wrong else f'{wrong} unexpected'}")
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()

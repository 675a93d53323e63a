"""Static SASS of the fused kernels for an H100 (sm_90), compiled on any machine, no GPU needed.

Compiles :func:`neuralbake.kernels.triton_decode.neural_material_kernel` at the copper tray's shape
(8 latents, wi and wo: decoder 14 -> 64 x 3 -> 3, fp16, 128 rows x 2 warps, ``mma.sync``; pointers
16-byte aligned as the launches are) with each of the decode's three speed choices
(fp16 sums, half-width feature tiles, 4 output columns; all shipped) added one after another, and
counts the instructions per program with the CUDA tools Triton's wheel carries (``cuobjdump``,
``nvdisasm``). ``--gluon`` compiles the Gluon decode of :mod:`neuralbake.kernels.gluon_decode` at its parity
shapes and counts its persistent tile loop apart from what comes before it (the weights' stores); ``--gluon-train`` the
same for the Gluon training kernel of :mod:`neuralbake.kernels.gluon_train`. ``--train`` does the same for :func:`~neuralbake.kernels.triton_train.mlp_train_kernel`
at the RTXNS network's shape (2 coordinates, 3 octaves: 12 -> 64 x 4 -> 3, leaky ReLU, sigmoid, MSE,
fp16, 64 rows x 4 warps): gradients added to the slots, carried in registers with the
weights loaded once (``CARRY``, ``kernels.training.carries_gradients``), and that with the batch drawn in the
kernel (``SAMPLE``, as the neural texture bake's trainer runs it), counting the loop body
and the epilogue once and the barriers apart. ``--lines N`` also lists, for each, the N source lines
of the kernels' triton_*.py sources with the most instructions.

    python bench/kernels_sass.py [--train] [--lines 12]
    python bench/kernels_sass.py --gluon [--json]
    python bench/kernels_sass.py --gluon-train [--json]

The counts depend on the Triton version (docs/dev/benchmarks-diary.md quotes Triton 3.6.0:
``pip install triton==3.6.0`` into a separate ``--target`` folder and put it first on PYTHONPATH).
The speed is measured by ``bench/kernels.py --ab`` and ``--ab-train`` on a GPU; this only shows where the instructions go.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

if os.environ.get("TRITON_INTERPRET") == "1":
    sys.exit("bench/kernels_sass.py compiles for the GPU; unset TRITON_INTERPRET.")
os.environ["DISABLE_MMA_V3"] = "1"  # as kernels.tuning.mma_sync sets it around every launch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from neuralbake.kernels import triton_decode, triton_train
from neuralbake.kernels.tuning import TILES

TOOLS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
KERNELS = Path(triton_decode.__file__).resolve().parent
"""The folder of the kernels' sources, whose lines the listings count."""

SIGNATURE = {
    "uv_ptr": "*fp32", "wi_ptr": "*fp32", "wo_ptr": "*fp32", "lod_ptr": "*fp32", "lat_ptr": "*fp16",
    "level_offset": "*i32", "level_width": "*i32", "level_height": "*i32", "LEVELS": "i32", "out_ptr": "*fp32", "N": "i32",
    "w_in": "*fp16", "b_in": "*fp32", "w_hid": "*fp16", "b_hid": "*fp32", "w_out": "*fp16", "b_out": "*fp32",
}  # fmt: skip

STEPS = (
    ("before (fp32 sums, one feature tile, 16 outputs)", {"HALF_SUMS": False, "FP": 16, "OP": 16}),
    ("+ fp16 sums", {"HALF_SUMS": True, "FP": 16, "OP": 16}),
    ("+ half-width feature tiles", {"HALF_SUMS": True, "FP": 8, "OP": 16}),
    ("+ 4 output columns (shipped)", {"HALF_SUMS": True, "FP": 8, "OP": 4}),
)


def _compile(kernel, signature: dict, constants: dict, tile: tuple[int, int], source_type: type = ASTSource) -> bytes:
    """``kernel`` compiled for sm_90 at ``tile`` (rows per program as ``BM``, warps), pointers and ``N`` 16-byte aligned
    as the launches are. ``source_type``: Triton's ``ASTSource``, or Gluon's for a Gluon kernel."""
    rows, warps = tile
    constants = {**constants, "BM": rows}
    types = dict(signature) | {name: "constexpr" for name in constants}
    aligned = {(i,): [["tt.divisibility", 16]] for i, (name, kind) in enumerate(signature.items()) if kind.startswith("*") or name == "N"}
    source = source_type(fn=kernel, signature=types, constexprs=constants, attrs=aligned)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps}).asm["cubin"]


def compile_decode(choices: dict) -> bytes:
    constants = {"C": 8, "DIR0": 0, "DIR1": 1, "DIR2": -1, "TRILINEAR": False, "KP": 16, "HP": 64, "HIDDEN": 2, "HACT": 1, "LEAK": 0.01, "DOT": "tf32", "WIDE": False}
    return _compile(triton_decode.neural_material_kernel, SIGNATURE, constants | choices, TILES["forward"])


TRAIN_SIGNATURE = {
    "in_ptr": "*fp32", "target_ptr": "*fp32", "N": "i32", "scratch_ptr": "*fp16", "grad_ptr": "*fp32", "loss_ptr": "*fp32", "scale_ptr": "*fp32",
    "dx_ptr": "*fp32", "w_in": "*fp16", "b_in": "*fp32", "w_hid": "*fp16", "b_hid": "*fp32", "w_out": "*fp16", "b_out": "*fp32",
    "SEED": "i32", "IMG_W": "i32", "IMG_H": "i32",
}  # fmt: skip

TRAIN_STEPS = (
    ("gradients added to the slots", {"CARRY": False}),
    ("carried in registers, weights loaded once", {"CARRY": True}),
    ("+ batch drawn in the kernel (shipped)", {"CARRY": True, "SAMPLE": True, "TRANSFORM": 0}),
)


def compile_train(choices: dict) -> bytes:
    constants = {"K": 2, "O": 3, "FREQ": 3, "KP": 16, "HP": 64, "OP": 16, "HIDDEN": 3, "HACT": 2, "OACT": 5, "LEAK": 0.01, "LOSS": 0,
                 "FLOOR": 0.01, "DOT": "tf32", "DX": False, "SAMPLE": False, "TRANSFORM": 0}  # fmt: skip
    signature = TRAIN_SIGNATURE | ({"in_ptr": "*i64"} if choices.get("SAMPLE") else {})  # a drawn batch: the step counter, then the image
    return _compile(triton_train.mlp_train_kernel, signature, constants | choices, TILES["train"])


def instructions(cubin: bytes) -> tuple[collections.Counter, collections.Counter, str]:
    """Opcode counts, instruction counts per ``(file name, line)`` of the kernels' triton_*.py sources, and the resource line."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "decode.cubin"
        path.write_bytes(cubin)
        listing = subprocess.run([TOOLS / "nvdisasm", "--print-line-info", str(path)], capture_output=True, text=True, check=True).stdout
        usage = subprocess.run([TOOLS / "cuobjdump", "-res-usage", str(path)], capture_output=True, text=True, check=True).stdout
    opcodes, lines, line = collections.Counter(), collections.Counter(), None
    for text in listing.splitlines():
        where = re.search(r'//## File "([^"]+)", line (\d+)', text)
        if where:
            name = Path(where.group(1)).name
            line = (name, int(where.group(2))) if name.startswith("triton_") and (KERNELS / name).is_file() else None
            continue
        op = re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", text)
        if op:
            opcodes[op.group(1)] += 1
            if line is not None:
                lines[line] += 1
    resources = next((t.strip() for t in usage.splitlines() if "REG:" in t), "")
    return opcodes, lines, resources


GLUON_SHAPES = (
    (8, (0, 1, -1), 16, 64, 2, 1),
    (8, (2, 1, 0), 32, 64, 2, 1),
    (8, (0, 1, -1), 16, 32, 1, 2),
    (4, (2, -1, -1), 16, 16, 0, 1),
    (16, (0, 1, 2), 32, 64, 3, 2),
    (16, (0, 1, -1), 32, 64, 2, 1),
)
"""The Gluon decode's shapes (latent channels, direction codes, inputs, hidden width, hidden-to-hidden layers,
activation code): those tests/kernels/test_gpu_parity.py checks on the GPU, the copper tray's first."""


def compile_gluon(shape: tuple, trilinear: bool) -> bytes:
    """:func:`neuralbake.kernels.gluon_decode.neural_material_gluon_kernel` compiled for sm_90 at ``shape``."""
    from triton.experimental.gluon._runtime import GluonASTSource

    from neuralbake.kernels import gluon_decode

    channels, (d0, d1, d2), kp, hp, hidden, act = shape
    constants = {
        "C": channels, "FP": kp // 2, "DIR0": d0, "DIR1": d1, "DIR2": d2, "TRILINEAR": trilinear, "KP": kp, "HP": hp, "OP": 4,
        "HIDDEN": hidden, "HACT": act, "LEAK": 0.01, "W": gluon_decode.TILE[1], **gluon_decode.launch_constants(kp, hp, 4, hidden),
    }  # fmt: skip
    signature = SIGNATURE | {"EACH": "i32"}  # then the tiles per program
    return _compile(gluon_decode.neural_material_gluon_kernel, signature, constants, gluon_decode.TILE, GluonASTSource)


def loop_counts(cubin: bytes) -> dict:
    """Opcode counts of a persistent kernel before its tile loop and inside it (the last backward branch's range),
    its registers and its local (spill) memory."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "kernel.cubin"
        path.write_bytes(cubin)
        listing = subprocess.run([TOOLS / "cuobjdump", "-sass", str(path)], capture_output=True, text=True, check=True).stdout
        usage = subprocess.run([TOOLS / "cuobjdump", "-res-usage", str(path)], capture_output=True, text=True, check=True).stdout
    code = [(int(at, 16), op, rest) for at, op, rest in re.findall(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);", listing)]
    back = [(at, int(target[0], 16)) for at, op, rest in code if op.startswith("BRA") and (target := re.findall(r"0x([0-9a-f]+)", rest)) and int(target[0], 16) < at]
    end, start = max(back) if back else (-1, -1)
    before = collections.Counter(op.split(".")[0] for at, op, _ in code if at < start)
    body = collections.Counter(op.split(".")[0] for at, op, _ in code if start <= at <= end)
    number = lambda key: int(m.group(1)) if (m := re.search(rf"{key}:(\d+)", usage)) else None
    return {"before": dict(before), "loop": dict(body), "registers": number("REG"), "local": number("LOCAL")}


GLUON_TRAIN_SIGNATURE = {
    "in_ptr": "*fp32", "target_ptr": "*fp32", "N": "i32", "grad_ptr": "*fp32", "loss_ptr": "*fp32", "scale_ptr": "*fp32",
    "w_in": "*fp16", "b_in": "*fp32", "w_hid": "*fp16", "b_hid": "*fp32", "w_out": "*fp16", "b_out": "*fp32", "SEED": "i32", "IMG_W": "i32", "IMG_H": "i32",
}  # fmt: skip

GLUON_TRAIN_SHAPES = (
    {"K": 2, "FREQ": 3, "KP": 16, "HIDDEN": 3, "HACT": 2, "OACT": 5, "LOSS": 0, "SAMPLE": True},
    {"K": 2, "FREQ": 3, "KP": 16, "HIDDEN": 3, "HACT": 2, "OACT": 5, "LOSS": 0, "SAMPLE": False},
    {"K": 2, "FREQ": 3, "KP": 16, "HIDDEN": 2, "HACT": 1, "OACT": 0, "LOSS": 2, "SAMPLE": False},
    {"K": 2, "FREQ": 3, "KP": 16, "HIDDEN": 1, "HACT": 2, "OACT": 4, "LOSS": 1, "SAMPLE": False},
    {"K": 2, "FREQ": 3, "KP": 16, "HIDDEN": 2, "HACT": 3, "OACT": 0, "LOSS": 0, "SAMPLE": True},
    {"K": 2, "FREQ": 3, "KP": 16, "HIDDEN": 3, "HACT": 1, "OACT": 5, "LOSS": 1, "SAMPLE": False},
    {"K": 5, "FREQ": 0, "KP": 16, "HIDDEN": 3, "HACT": 2, "OACT": 0, "LOSS": 0, "SAMPLE": False},
    {"K": 2, "FREQ": 8, "KP": 32, "HIDDEN": 3, "HACT": 2, "OACT": 5, "LOSS": 0, "SAMPLE": True},
)
"""The Gluon training kernel's variants: the RTXNS network's drawn step first (12 -> 64 x 4 -> 3, leaky ReLU, sigmoid,
MSE), then those tests/kernels/test_gpu_parity.py -k gluon_training checks on the GPU, plain inputs and 32 encoded inputs."""


def compile_gluon_train(shape: dict, tile: tuple[int, int]) -> bytes:
    """:func:`neuralbake.kernels.gluon_train.mlp_train_gluon_kernel` compiled for sm_90 with ``shape``'s constants at
    ``tile`` (rows, warps)."""
    from triton.experimental.gluon._runtime import GluonASTSource

    from neuralbake.kernels import gluon_train

    constants = {"O": 3, "HP": 64, "OP": 16, "LEAK": 0.01, "FLOOR": 0.01, "TRANSFORM": 0, "W": tile[1]} | shape
    signature = GLUON_TRAIN_SIGNATURE | ({"in_ptr": "*i64"} if shape["SAMPLE"] else {})  # a drawn batch: the draw counter
    return _compile(gluon_train.mlp_train_gluon_kernel, signature, constants, tile, GluonASTSource)


def _count_variants(variants, as_json: bool, opcodes: tuple[str, ...]) -> None:
    """Compile and count each ``(label, build, fields)`` of ``variants`` (``build()`` gives the cubin, ``fields`` join its
    counts): a line each with the tile loop's ``opcodes``, or with ``as_json`` one JSON list (the tests read it)."""
    results = []
    for label, build, fields in variants:
        counts = loop_counts(build()) | fields
        results.append(counts)
        if not as_json:
            loop = counts["loop"]
            shown = ", ".join(f"{loop.get(op, 0)} {op}" for op in opcodes)
            print(
                f"{label} {counts['registers']} registers, local {counts['local']} B; tile loop {sum(loop.values()):5d} instructions, "
                f"{shown}; before it {counts['before'].get('STS', 0)} STS",
                flush=True,
            )
    if as_json:
        print(json.dumps(results))


def gluon_train_main(as_json: bool) -> None:
    from neuralbake.kernels import gluon_train

    variants = (
        (f"{tile!s:9s} {' '.join(f'{k}={v}' for k, v in shape.items()):64s}", lambda shape=shape, tile=tile: compile_gluon_train(shape, tile), {"shape": shape, "tile": tile})
        for tile in (gluon_train.LARGE_TILE, gluon_train.SMALL_TILE)
        for shape in GLUON_TRAIN_SHAPES
    )
    _count_variants(variants, as_json, ("HGMMA", "LDL", "STSM", "BAR"))


def gluon_main(as_json: bool) -> None:
    variants = (
        (f"{shape!s:34s} {'trilinear' if trilinear else 'bilinear ':9s}", lambda shape=shape, trilinear=trilinear: compile_gluon(shape, trilinear), {"shape": shape, "trilinear": trilinear})
        for shape in GLUON_SHAPES
        for trilinear in (False, True)
    )
    _count_variants(variants, as_json, ("HMMA", "LDSM", "STS", "BAR"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", action="store_true", help="the training kernel instead of the decode")
    parser.add_argument("--gluon", action="store_true", help="the Gluon neural-material decode (kernels.gluon_decode) at its parity shapes: its tile loop's instructions")
    parser.add_argument("--gluon-train", action="store_true", help="the Gluon training kernel (kernels.gluon_train) at its variants: its tile loop's instructions")
    parser.add_argument("--json", action="store_true", help="with --gluon or --gluon-train: the counts as JSON (tests/kernels/test_gluon_*.py read them)")
    parser.add_argument("--lines", type=int, default=0, help="under each step, list this many source lines with the most instructions")
    args = parser.parse_args()
    if not (TOOLS / "nvdisasm").is_file():
        sys.exit(f"this Triton ({triton.__version__}) has no CUDA tools in {TOOLS}; install a Triton wheel with the NVIDIA backend.")
    if args.gluon:
        gluon_main(args.json)
        return
    if args.gluon_train:
        gluon_train_main(args.json)
        return
    if args.train:
        print(f"Triton {triton.__version__}, sm_90, training kernel of the RTXNS network 12 -> 64 x 4 -> 3 fp16, {TILES['train'][0]} rows x {TILES['train'][1]} warps", flush=True)
        steps, build, per = TRAIN_STEPS, compile_train, f"per {TILES['train'][0]}-row tile and warp"
    else:
        print(f"Triton {triton.__version__}, sm_90, neural-material decode 14 -> 64 x 3 -> 3 fp16, {TILES['forward'][0]} rows x {TILES['forward'][1]} warps", flush=True)
        steps, build, per = STEPS, compile_decode, None
    sources = {path.name: path.read_text().splitlines() for path in KERNELS.glob("triton_*.py")}
    for label, choices in steps:
        opcodes, lines, resources = instructions(build(choices))
        total = sum(opcodes.values())
        if per:
            spills = opcodes["LDL"] + opcodes["STL"]
            print(f"{label:40s} {total:6,d} instructions {per}, {opcodes['BAR']} barriers, {opcodes['HMMA']} HMMA, {spills} spill loads/stores; {resources}", flush=True)
        else:
            print(f"{label:50s} {total:6,d} instructions ({total * 2 / 128:5.1f} warp instructions per sample), {opcodes['HMMA']} HMMA; {resources}", flush=True)
        for (name, number), count in lines.most_common(args.lines):
            print(f"    {count:6d}  {name}:{number}  {sources[name][number - 1].strip()[:90]}")


if __name__ == "__main__":
    main()

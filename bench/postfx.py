"""Benchmark: seconds per frame of the AI render pass (seed 004's budget: about 2 s per render).

Builds Stable Diffusion 1.5- and SDXL-shaped networks with random weights straight on the device
(the architecture sets the cost, not the weights; no model is downloaded), and times the chain's own
code end to end on one frame: the Canny condition, the diffusion call
(:class:`neuralbake.bakes.postfx.chain.Chain`: img2img at strength 1, so every scheduled step runs, with
and without a ControlNet) and, where asked, the Real-ESRGAN x2 upscale (ncnn; on the GPU through
Vulkan when the machine has it). 1- and 4-step rows run without classifier-free guidance (how
distilled models such as LCM or Turbo are run), 20-step rows with guidance 7 (two UNet passes a
step). Each row is the median of ``--repeats`` after a warm-up call; ``under_2s`` marks the seed's
budget.

    python bench/postfx.py --families sd15 sdxl --sizes 512 1024 --steps 1 4 20
    python bench/postfx.py --families tiny --sizes 64 --steps 1 2 --device cpu   # a smoke run on a CPU
"""

from __future__ import annotations

import argparse
import json
import statistics

import numpy as np
import torch

from neuralbake.bakes.postfx.chain import Chain
from neuralbake.bakes.postfx.config import PostfxConfig
from neuralbake.postfx.conditions import canny_condition
from neuralbake.postfx.models import chain_pipeline, make_random_model
from neuralbake.postfx.upscale import upscale
from timing import Stopwatch

FAMILIES = {"tiny": ("sd", "tiny"), "sd15": ("sd", "sd15"), "sdxl": ("sdxl", "sdxl")}


def _frame(size: int) -> np.ndarray:
    """A test render: soft gradients and a few hard-edged shapes (so Canny finds edges)."""
    ys, xs = np.mgrid[0:size, 0:size].astype(np.float32) / size
    image = np.stack((xs, ys, 0.5 + 0.5 * np.sin(6 * xs + 4 * ys)), -1) * 0.8
    image[size // 4 : size // 2, size // 4 : size // 2] = (0.9, 0.6, 0.2)
    image[(xs - 0.7) ** 2 + (ys - 0.6) ** 2 < 0.02] = (0.2, 0.3, 0.9)
    return image.astype(np.float32)


def _one_frame(chain: Chain, image: np.ndarray, control: bool, factor: int, device: torch.device, gpu: int) -> dict[str, float]:
    """One frame through the chain's code: condition, diffusion, upscale; seconds of each."""
    side = image.shape[0]
    with Stopwatch(device) as conditions:
        controls = [canny_condition(image)] if control else []
    with Stopwatch(device) as diffusion:
        out = chain.diffuse(image, controls, prompt="a weathered copper statue in a museum, studio light", negative="", loras=[], strength=1.0)
    with Stopwatch(device) as upscaling:
        out = upscale(out, factor, tile=0 if side <= 512 else 512, gpu=gpu)
    assert out.shape[0] == side * factor
    seconds = {"conditions": conditions.seconds, "diffusion": diffusion.seconds, "upscale": upscaling.seconds}
    return seconds | {"total": sum(seconds.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", nargs="+", default=["sd15", "sdxl"], choices=sorted(FAMILIES))
    parser.add_argument("--sizes", type=int, nargs="+", default=[512, 1024])
    parser.add_argument("--steps", type=int, nargs="+", default=[1, 4, 20])
    parser.add_argument("--upscale-steps", type=int, default=4, help="Steps of the rows also run with the x2 upscaler.")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--gpu-upscaler", type=int, default=0, help="Vulkan device of the upscaler (-1: CPU).")
    args = parser.parse_args()
    device = torch.device(args.device)
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(json.dumps({"device": name, "torch": torch.__version__, "dtype": str(dtype)}), flush=True)
    for family_name in args.families:
        family, size_class = FAMILIES[family_name]
        build = Stopwatch(device).start()
        made = make_random_model("", family=family, size=size_class, controlnet=True, save=False, device=str(device))  # type: ignore[arg-type]
        base, net = made["pipeline"].to(device, dtype), made["controlnet"].to(device, dtype)
        print(json.dumps({"family": family_name, "parameters_millions": {k: round(v / 1e6, 1) for k, v in made["parameters"].items()},
                          "build_seconds": round(build.stop(), 1)}), flush=True)
        pipes = {False: chain_pipeline(base, [], family=family), True: chain_pipeline(base, [net], family=family)}
        for side in args.sizes:
            image = _frame(side)
            for steps in args.steps:
                guidance = 1.0 if steps < 8 else 7.0
                for control in (False, True):
                    upscales = (1, 2) if control and steps == args.upscale_steps else (1,)
                    for factor in upscales:
                        config = PostfxConfig(steps=steps, strength=1.0, guidance=guidance, upscale=factor, size=side)
                        chain = Chain(pipes[control], family, [("canny", "", 1.0)] if control else [], config)

                        run = (chain, image, control, factor, device, args.gpu_upscaler)
                        _one_frame(*run)  # warm-up: kernels chosen, memory pools filled
                        runs = [_one_frame(*run) for _ in range(args.repeats)]
                        median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                        row = {"family": family_name, "size": side, "steps": steps, "guidance": guidance, "controlnet": control, "upscale": factor,
                               **{f"{k}_s": round(v, 4) for k, v in median.items()}, "under_2s": median["total"] < 2.0}
                        print(json.dumps(row), flush=True)
        del base, net, pipes, made
        if device.type == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

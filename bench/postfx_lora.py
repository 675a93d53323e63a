"""Benchmark: style-LoRA training speed (`neuralbake postfx lora`) on Stable Diffusion 1.5-shaped
networks with random weights (the cost is the architecture's), through the bake itself: images
encoded once, then steps of the shared trainer (fp16 compute on a GPU, fp32 LoRA masters).
Prints the bake's own timings: milliseconds per step and images per second, and the denoising loss
before and after (meaningless for quality with random weights; it shows the loop runs).

    python bench/postfx_lora.py --size sd15 --resolution 512 --steps 100 --rank 16
    python bench/postfx_lora.py --size tiny --resolution 64 --steps 10 --device cpu   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import torch

from neuralbake.io.images import save_png
from neuralbake.nn.trainer import TrainerConfig
from neuralbake.bakes.postfx.lora import LORA_TRAIN, LoraTrainConfig
from neuralbake.postfx.models import make_random_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="sd15", choices=["tiny", "sd15"])
    parser.add_argument("--resolution", type=int, default=512)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--images", type=int, default=8)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        made = make_random_model(root / "model", family="sd", size=args.size, controlnet=False)
        rng = np.random.default_rng(0)
        (root / "images").mkdir()
        for k in range(args.images):
            save_png(root / "images" / f"{k:02d}.png", rng.random((args.resolution, args.resolution, 3)).astype(np.float32))
        precision = "fp16" if args.device.startswith("cuda") else "fp32"
        train = TrainerConfig(steps=args.steps, learning_rate=1e-4, schedule="constant", precision=precision, log_every=10, eval_every=0,
                              checkpoint_every=0, checkpoint_seconds=0, cuda_graph=False)
        config = LoraTrainConfig(images=str(root / "images"), base=made["base"], prompt="a style", rank=args.rank, resolution=args.resolution,
                                 batch_size=args.batch_size, samples=0, train=train, device=args.device)
        report = LORA_TRAIN.run(config, root / "out", progress=False)
        name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
        print(json.dumps({"device": name, "size": args.size, "resolution": args.resolution, "rank": args.rank, "batch_size": args.batch_size,
                          "steps": report["steps"], "lora_parameters": report["lora_parameters"], "train_seconds": round(report["train_seconds"], 2),
                          "ms_per_step": round(1000 * report["train_seconds"] / report["steps"], 1),
                          "images_per_second": round(report["steps"] * args.batch_size / report["train_seconds"], 2),
                          "seconds_total": round(report["seconds"], 1), "denoise_loss_before": report["denoise_loss_before"],
                          "denoise_loss": report["denoise_loss"]}), flush=True)


if __name__ == "__main__":
    main()

"""NTC diagnosis: one compression of DamagedHelmet's material set with one thing changed.

The figures in the "Diagnosis" table of docs/dev/benchmarks-diary.md come from this script. Settings the
bake exposes (rate, decoder width, positional encoding, learning rate, steps, batch) are passed
straight to :class:`~neuralbake.bakes.ntc.NTCConfig`; the experimental variants the bake does not
offer are made by swapping functions of the ``neuralbake.bakes.ntc`` modules *in this process only*:

- ``--shape H F B``: force one latent shape (high-res cell side, features, bits) instead of the
  rate table's pick; ``--bpp`` is then only checked against the file size, up to any value.
- ``--float``: no quantisation while training (latents only clamped, weights float). The file
  still stores 8-bit-or-less latents and int8 weights, so the final mip-0 PSNR includes that
  rounding; ``evals`` (all levels, the model as trained) shows the float model.
- ``--latent-lr-gain G``: latents are trained as ``G * parameter`` (under Adam: G times their
  learning rate). ``--straight-through-clamp``: the [-1, 1] clamp passes gradients outside.
- ``--row-adam``: latents (and weights) trained with a row-sparse ("lazy") Adam, which leaves
  cells an all-zero gradient alone instead of letting dense Adam coast them on momentum.
- ``--bilinear-high``: the high-resolution grid is sampled bilinearly (one cell's worth of
  features) instead of concatenating its four corner cells.
- ``--codecs``: no NTC at all: the same channels as four 8-bit images through Pillow's JPEG and
  WebP at several qualities (bits per mip-0 texel, mip 0 only).
- ``--linear-bound``: no NTC: block PCA of the set with a fixed count of float numbers per texel
  (the best linear fixed-rate code, unquantised), for comparison with NTC's latent count.

Prints one JSON line: measured bpp, latent shape, mip-0 PSNR of the decoded file, the all-level
evaluations during training, per-group mip-0 PSNR, the share of high-resolution latents at the
clamp bound, seconds.

    python bench/ntc_variants.py --size 256 --bpp 4                       # the CPU baseline
    python bench/ntc_variants.py --device cuda --size 2048 --bpp 3 --batch-size 65536 --hidden 128 128 64
    python bench/ntc_variants.py --size 256 --bpp 4 --lr 0.005 --latent-lr-gain 20 --straight-through-clamp
    python bench/ntc_variants.py --size 64 --float --shape 2 12 8 --bpp 900 --batch-size 2048 --steps 4000
    python bench/ntc_variants.py --codecs
    python bench/ntc_variants.py --linear-bound
"""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from neuralbake.bakes import ntc
from neuralbake.bakes.ntc import bake as ntc_bake
from neuralbake.bakes.ntc import config as ntc_config
from neuralbake.bakes.ntc import decode as ntc_decode
from neuralbake.bakes.ntc import layout as ntc_layout
from neuralbake.bakes.ntc import model as ntc_model
from neuralbake.nn.trainer import TrainerConfig
from timing import Stopwatch

DEFAULT_GLTF = ROOT.parent / "shared" / "assets" / "DamagedHelmet" / "DamagedHelmet.gltf"


def codec_reference(gltf: Path) -> list[dict]:
    """JPEG and WebP of each channel group (2-channel groups padded with a zero channel) at full size."""
    from PIL import Image

    texture_set = ntc.load_gltf_material(gltf)
    stack = texture_set.stacked()
    height, width, _ = stack.shape
    rows = []
    for fmt in ("JPEG", "WEBP"):
        for quality in (30, 50, 70, 85, 95):
            bits, decoded, start = 0, [], 0
            for group in texture_set.groups:
                n = len(group.channels)
                image = np.zeros((height, width, 3), np.float32)
                image[..., :n] = stack[..., start : start + n]
                if n == 1:
                    image[...] = stack[..., start : start + 1]
                start += n
                buffer = io.BytesIO()
                Image.fromarray((image * 255 + 0.5).clip(0, 255).astype(np.uint8)).save(buffer, fmt, quality=quality)
                bits += 8 * buffer.tell()
                back = np.asarray(Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")).astype(np.float32) / 255
                decoded.append(back[..., : max(n, 1)])
            error = float(((np.concatenate(decoded, axis=2) - stack) ** 2).mean())
            rows.append({"codec": fmt, "quality": quality, "bpp_mip0": round(bits / (width * height), 3), "psnr_db": round(10 * math.log10(1 / error), 3)})
    return rows


def linear_bound(gltf: Path) -> list[dict]:
    """Block PCA of the whole set: the best *linear* code with a fixed number of float coefficients per block.

    Every ``b x b`` block of all channels is one vector; keeping its first ``k`` principal
    components is the least-squares optimum among linear codes of ``k`` unquantised numbers per
    block. NTC's latents at ``hDIV fF`` are ``F / DIV^2 + F / (2 DIV)^2`` numbers per texel, so this
    says how much a fixed-rate, per-block code can hold on this set, before quantisation.
    """
    stack = ntc.load_gltf_material(gltf).stacked().astype(np.float64)
    height, width, channels = stack.shape
    rows = []
    for block, per_texel in ((4, (0.3125, 0.625, 1.25)), (8, (0.3125, 0.625, 1.25)), (16, (0.3125, 0.625))):
        vectors = stack.reshape(height // block, block, width // block, block, channels).transpose(0, 2, 1, 3, 4).reshape(-1, block * block * channels)
        mean = vectors.mean(0)
        centred = vectors - mean
        _, basis = np.linalg.eigh(centred.T @ centred / len(centred))
        basis = basis[:, ::-1]
        for rate in per_texel:
            k = round(rate * block * block)
            error = float((((centred @ basis[:, :k]) @ basis[:, :k].T - centred) ** 2).mean())
            rows.append({"block": block, "components": k, "numbers_per_texel": rate, "psnr_db": round(10 * math.log10(1 / error), 2)})
    return rows


class RowAdam(torch.optim.Optimizer):
    """Adam that leaves rows (cells) with an all-zero gradient alone: value, moments and step count.

    Dense Adam keeps moving a latent row that this batch did not touch on its old momentum, so a
    rarely touched row travels up to 1 / (1 - beta1) times further per real gradient than one
    touched every step. This "lazy" variant (as TensorFlow Addons' LazyAdam) gives each row the
    Adam update from its own count of updates. With every row touched it is Adam
    (:func:`check_row_adam` runs before every ``--row-adam`` run). Device-only, so the trainer's
    CUDA graph still captures it.
    """

    def __init__(self, params: Iterable[torch.Tensor], lr: float | torch.Tensor, betas: tuple[float, float], eps: float) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps})
        self.found_inf: torch.Tensor | None = None

    @staticmethod
    def _row_mask(grad: torch.Tensor) -> torch.Tensor:
        """1.0 for rows with any non-zero gradient, shaped to broadcast over the parameter."""
        if grad.dim() == 0:
            return (grad != 0).to(grad.dtype)
        touched = (grad.reshape(grad.shape[0], -1) != 0).any(dim=1)
        return touched.to(grad.dtype).reshape(grad.shape[0], *([1] * (grad.dim() - 1)))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, eps = group["lr"], group["eps"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                grad = param.grad
                state = self.state[param]
                if not state:
                    state["exp_avg"] = torch.zeros_like(param)
                    state["exp_avg_sq"] = torch.zeros_like(param)
                    rows = (param.shape[0],) + (1,) * (param.dim() - 1) if param.dim() > 0 else ()
                    state["row_steps"] = torch.zeros(rows, dtype=param.dtype, device=param.device)
                touched = self._row_mask(grad)
                if self.found_inf is not None:
                    touched = touched * (self.found_inf == 0).to(touched.dtype)
                exp_avg, exp_avg_sq, steps = state["exp_avg"], state["exp_avg_sq"], state["row_steps"]
                steps.add_(touched)
                exp_avg.add_(touched * (1 - beta1) * (grad - exp_avg))
                exp_avg_sq.add_(touched * (1 - beta2) * (grad * grad - exp_avg_sq))
                counted = steps.clamp(min=1)
                correction1 = 1 - torch.pow(beta1, counted)
                correction2 = 1 - torch.pow(beta2, counted)
                update = (exp_avg / correction1) / ((exp_avg_sq / correction2).sqrt() + eps)
                param.sub_(lr * touched * update)
        return loss


def check_row_adam() -> None:
    """RowAdam equals torch.optim.Adam (float64, 12 steps) when every row has a gradient."""
    generator = torch.Generator().manual_seed(0)
    ours = torch.nn.Parameter(torch.randn(6, 3, generator=generator, dtype=torch.float64))
    reference = torch.nn.Parameter(ours.detach().clone())
    row_adam = RowAdam([ours], lr=torch.tensor(0.05, dtype=torch.float64), betas=(0.9, 0.99), eps=1e-10)
    adam = torch.optim.Adam([reference], lr=0.05, betas=(0.9, 0.99), eps=1e-10)
    for _ in range(12):
        gradient = torch.randn(6, 3, generator=generator, dtype=torch.float64) + 0.3
        ours.grad, reference.grad = gradient.clone(), gradient.clone()
        row_adam.step()
        adam.step()
    error = float((ours - reference).abs().max())
    if error > 1e-12:
        raise SystemExit(f"RowAdam differs from torch.optim.Adam by {error:g} with every row touched")


def apply_variants(args: argparse.Namespace) -> None:
    """Swap functions of neuralbake.bakes.ntc for this process (see the module docstring)."""
    if args.shape:
        ntc_layout.LATENT_SHAPES = (ntc.LatentShape(*args.shape),)
        ntc_layout.check_bpp = ntc_config.check_bpp = lambda bpp: None
    if args.bilinear_high:
        ntc.NTCLayout.mlp_inputs = property(lambda self: 2 * self.shape.features + 4 * self.pe_frequencies + 1)
        concatenated = ntc.sample_features

        def bilinear(high, low, tables, level, x, y, pe_frequencies, quantize=None):
            out = concatenated(high, low, tables, level, x, y, pe_frequencies, quantize)
            features = high.shape[1]
            c = out[:, : 4 * features].reshape(-1, 4, features)
            u = (x.to(high.dtype) + 0.5) / tables.level_w[level].to(high.dtype)
            v = (y.to(high.dtype) + 0.5) / tables.level_h[level].to(high.dtype)
            pair = torch.div(level, 2, rounding_mode="floor")
            px = u * tables.high_w[pair].to(u.dtype) - 0.5  # the cell-centred grid's lower-left cell and fractions
            py = v * tables.high_h[pair].to(v.dtype) - 0.5
            fx, fy = px - torch.floor(px), py - torch.floor(py)
            fx, fy = fx[:, None], fy[:, None]
            blended = (c[:, 0] * (1 - fx) + c[:, 1] * fx) * (1 - fy) + (c[:, 2] * (1 - fx) + c[:, 3] * fx) * fy
            return torch.cat((blended, out[:, 4 * features :]), dim=1)

        ntc_model.sample_features = ntc_decode.sample_features = bilinear
    if args.row_adam:
        from neuralbake.nn import trainer as trainer_module

        check_row_adam()

        construct = trainer_module.Trainer.__init__

        def with_row_adam(self, *a, **k):
            construct(self, *a, **k)
            config = self.config
            self.optimizer = RowAdam(self.master.values(), lr=self._lr_t, betas=(config.adam_beta1, config.adam_beta2), eps=config.adam_eps)

        trainer_module.Trainer.__init__ = with_row_adam
    gain = args.latent_lr_gain
    quantize = ntc_model.fake_quantize_latents

    def quantize_variant(latents, bits, mode, *, noise=None):
        t = latents * gain
        if args.straight_through_clamp:
            t = t + (t.clamp(-1.0, 1.0) - t).detach()
        if args.float:
            return t.clamp(-1.0, 1.0)
        return quantize(t, bits, mode, noise=noise)

    ntc_model.fake_quantize_latents = quantize_variant
    if args.float:
        ntc_model.fake_quantize_int8 = lambda weight: weight
    initialise, pack = ntc.NTCModel.__init__, ntc.pack_container

    def init(self, *a, **k):
        initialise(self, *a, **k)
        with torch.no_grad():
            self.latents_high /= gain
            self.latents_low /= gain

    def pack_scaled(model):
        with torch.no_grad():
            model.latents_high *= gain
            model.latents_low *= gain
        args.saturated = float((model.latents_high.detach().abs() >= 1).float().mean())
        return pack(model)

    ntc.NTCModel.__init__ = init
    ntc_bake.pack_container = pack_scaled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gltf", type=Path, default=DEFAULT_GLTF)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--bpp", type=float, default=4.0)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--finetune-steps", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--eval-every", type=int, default=1000)
    parser.add_argument("--hidden", type=int, nargs="+", default=None, help="decoder widths (default the bake's 64 48 32)")
    parser.add_argument("--pe", type=int, default=None, help="positional-encoding octaves (default the bake's)")
    parser.add_argument("--shape", type=int, nargs=3, metavar=("HIGH_DIV", "FEATURES", "BITS"), default=None)
    parser.add_argument("--float", action="store_true")
    parser.add_argument("--latent-lr-gain", type=float, default=1.0)
    parser.add_argument("--straight-through-clamp", action="store_true")
    parser.add_argument("--bilinear-high", action="store_true")
    parser.add_argument("--row-adam", action="store_true")
    parser.add_argument("--codecs", action="store_true")
    parser.add_argument("--linear-bound", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "ntc_variant")
    args = parser.parse_args()
    if not args.gltf.is_file():
        raise SystemExit(f"{args.gltf} is absent (the team's ../shared asset folder)")
    if args.codecs or args.linear_bound:
        for row in (codec_reference if args.codecs else linear_bound)(args.gltf):
            print(json.dumps(row), flush=True)
        return

    args.saturated = None
    apply_variants(args)
    extra = {"hidden": tuple(args.hidden)} if args.hidden else {}
    if args.pe is not None:
        extra["pe_frequencies"] = args.pe
    config = ntc.NTCConfig(
        sources=[str(args.gltf)],
        texture_size=args.size,
        bpp=[args.bpp],
        device=args.device,
        batch_size=args.batch_size,
        finetune_steps=args.finetune_steps,
        baselines=False,
        train=TrainerConfig(steps=args.steps, learning_rate=args.lr, precision="fp32", eval_every=args.eval_every, checkpoint_every=0, log_every=500),
        **extra,
    )
    watch = Stopwatch().start()
    report = ntc.compress_texture_set(config, args.out, progress=False)
    evals = [json.loads(line)["psnr_db"] for line in (args.out / "events.jsonl").read_text().splitlines() if '"eval"' in line]
    print(
        json.dumps(
            {
                "bpp": round(report["bpp_measured"], 2),
                "shape": report["latent_shape"]["name"],
                "mip0_db": report["ntc"]["overall_db"],
                "evals_all_levels_db": [round(e, 2) for e in evals],
                "groups_mip0_db": {k: round(v["mip0_db"], 2) for k, v in report["ntc"]["groups"].items()},
                "saturated_high_latents": None if args.saturated is None else round(args.saturated, 3),
                "seconds": round(watch.stop()),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()

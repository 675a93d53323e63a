"""Calibration of the bakes' footprints: each bake's estimated peak memory beside the measured one.

For every bake (``Bake.footprint``) it runs a small bake of an input from ``examples/`` in a child
process (``--device cpu``, a few steps), takes the child's peak resident memory from ``os.wait4``'s
``ru_maxrss``, and prints it beside the footprint of the same config (device defaults filled in as
the runner fills them) and their ratio, in one table:

    python bench/footprints.py                 # every bake, about 6 minutes on 2 cores
    python bench/footprints.py --only texture material
    python bench/footprints.py --json out.json

The postfx chain and the LoRA training run the tiny random model of ``postfx make-model``; their
footprints assume an SD 1.5-size model they cannot read from the config (``bakes.postfx.footprint.SD15``), so
the table gives the estimate with the tiny model's sizes (``TINY``, the same arithmetic) as the
compared figure and the declared footprint beside it.

Measured on this project's 2-core CPU machine (x86_64, PyTorch 2.13 CPU build, 23 GiB RAM):

    bake            estimate MiB   peak MiB   ratio
    texture              488          529      0.92
    texture_batch        703          670      1.05   (131,072 samples a step: the batch term)
    texture_default      866          529      1.64   (texture_size unset: a 2K image assumed; the input is 256^2)
    material             698          617      1.13
    material_large      1168          719      1.62   (--only material_large: 512^2 latents, 32,768 samples, 2^18 chunk)
    material_pack        693          529      1.31
    ntc                  690          530      1.30   (16 channels assumed; the crate has 11)
    mipmap               502          530      0.95
    fit                  949          588      1.62   (the assumed asset, 0.4 GiB; the crate is 3 k triangles, 256^2 maps)
    simplify            1352          607      2.23   (the asset and its LOD assumed; the arm is tiny)
    skin                1643          546      3.01   (two assumed assets and 50 k LOD vertices; the arm is tiny)
    lod                 1568          638      2.46   (the skin stage, with its assumed assets, is the largest)
    postfx               834          750      1.11   (tiny model; the declared footprint, for SD 1.5, is 6.1 GiB)
    lora                 893          616      1.45   (tiny model; the declared footprint, for SD 1.5, is 4.9 GiB)

The estimates sum what a bake holds, and its phases do not all peak at once, so they sit above the
peak; most of these small runs' peak is the process's base (about 530 MiB whatever the bake). The
mesh bakes (fit, simplify, skin, lod) are dominated at these sizes by the assumed glTF asset
(``footprint.ASSUMED_ASSET_BYTES``: 100 k triangles and five 2K maps), which the config cannot see;
the diffusion bakes by the assumed model (``bakes.postfx.footprint.SD15``), likewise unseen.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from timing import Stopwatch

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
MIB = 1 << 20


# -- the cases: (bake, config) for a small run of each --------------------------------------------


def _texture(**extra: Any) -> tuple[Any, Any]:
    from neuralbake.bakes.neural_texture import NEURAL_TEXTURE, NeuralTextureConfig

    image = str(EXAMPLES / "neural_texture" / "grace_hopper_256.png")
    config = NeuralTextureConfig(image=image, **{k: v for k, v in extra.items() if k != "steps"})
    config.train.steps = extra.get("steps", 30)
    config.train.eval_every = 0
    return NEURAL_TEXTURE, config


def _material(**extra: Any) -> tuple[Any, Any]:
    from neuralbake.bakes.neural_material import NEURAL_MATERIAL, NeuralMaterialConfig

    settings = {"texture_size": 64, "compare_size": 32, "compare_spp": 4, "reference_chunk": 16384, **extra}
    config = NeuralMaterialConfig(material=str(EXAMPLES / "materials" / "antique_copper_tray.json"), **settings)
    config.train.steps = 20
    return NEURAL_MATERIAL, config


def _pack(work: Path) -> tuple[Any, Any]:
    from neuralbake.bakes.material_pack import MATERIAL_PACK, MaterialPackConfig
    from neuralbake.bakes.neural_material import NeuralMaterialConfig

    template = NeuralMaterialConfig(material="", texture_size=32, compare_size=16, compare_spp=2, reference_chunk=8192)
    template.train.steps = 10
    materials = [str(EXAMPLES / "materials" / "velvet.json"), str(EXAMPLES / "materials" / "rusty_iron_nail.json")]
    return MATERIAL_PACK, MaterialPackConfig(materials=materials, bake=template)


def _ntc(work: Path) -> tuple[Any, Any]:
    from neuralbake.bakes.ntc import NTC, NTCConfig

    config = NTCConfig(sources=[str(EXAMPLES / "crate" / "crate.gltf")], texture_size=256, finetune_steps=10)
    config.train.steps = 30
    return NTC, config


def _mipmap(work: Path) -> tuple[Any, Any]:
    from neuralbake.bakes.mipmap import MIPMAP, MipmapConfig

    crate = EXAMPLES / "crate"
    config = MipmapConfig(base_color=str(crate / "crate_base_color.png"), normal=str(crate / "crate_normal.png"),
                          roughness_map=str(crate / "crate_metallic_roughness.png"), texture_size=128)
    config.train.steps = 20
    return MIPMAP, config


def _fit(work: Path) -> tuple[Any, Any]:
    from neuralbake.bakes.fit import FIT, FitConfig

    return FIT, FitConfig(asset=str(EXAMPLES / "crate" / "crate.gltf"), render_size=96, texture_size=128, views=4, epochs=2)


def _simplify(work: Path) -> tuple[Any, Any]:
    from neuralbake.bakes.simplify import SIMPLIFY, SimplifyConfig

    arm = str(EXAMPLES / "arm" / "arm.gltf")
    return SIMPLIFY, SimplifyConfig(asset=arm, ratio=0.3, render_size=64, views=4, held_out_views=2, epochs=1)


def _skin(work: Path) -> tuple[Any, Any]:
    from neuralbake.bakes.skin import SKIN, SkinConfig

    lod = work / "simplify" / "lod.glb"  # the simplify case's output (it runs first)
    arm = str(EXAMPLES / "arm" / "arm.gltf")
    return SKIN, SkinConfig(lod=str(lod), reference=arm, steps=20, views=3, render_size=48, frames=3, held_out_frames=2)


def _lod(work: Path) -> tuple[Any, Any]:
    from neuralbake.bakes.lod import LOD, LodConfig

    options = {"simplify": {"render_size": 48, "views": 3, "held_out_views": 1, "epochs": 1},
               "skin": {"steps": 10, "views": 2, "render_size": 32, "frames": 2, "held_out_frames": 1},
               "fit": {"render_size": 64, "views": 3, "held_out_views": 1, "epochs": 1}}
    return LOD, LodConfig(asset=str(EXAMPLES / "arm" / "arm.gltf"), ratio=0.3, texture_size=64, stage_options=options)


def _tiny_model(work: Path) -> Path:
    folder = work / "tiny-model"
    if not (folder / "base").is_dir():
        from neuralbake.postfx.models import make_random_model

        make_random_model(folder, family="sd", size="tiny", controlnet=True, seed=1)
    return folder


def _postfx(work: Path) -> tuple[Any, Any]:
    from neuralbake.bakes.postfx.chain import POSTFX
    from neuralbake.bakes.postfx.config import PostfxConfig

    model = _tiny_model(work)
    crate = str(EXAMPLES / "crate" / "crate.gltf")
    return POSTFX, PostfxConfig(render=crate, model=str(model / "base"), controlnets=[f"depth={model / 'controlnet'}"], prompt="a crate",
                                steps=4, size=64, scene_size=64)


def _lora(work: Path) -> tuple[Any, Any]:
    from neuralbake.bakes.postfx.lora import LORA_TRAIN, LoraTrainConfig

    model = _tiny_model(work)
    images = work / "lora-images"
    images.mkdir(exist_ok=True)
    for name in ("crate_base_color.png", "crate_normal.png"):
        shutil.copy(EXAMPLES / "crate" / name, images / name)
    config = LoraTrainConfig(images=str(images), base=str(model / "base"), prompt="crate textures", resolution=32, samples=1,
                             sample_steps=2)
    config.train.steps = 3
    return LORA_TRAIN, config


CASES: dict[str, Callable[[Path], tuple[Any, Any]]] = {
    "texture": lambda work: _texture(texture_size=(256, 256)),
    "texture_batch": lambda work: _texture(texture_size=(256, 256), batch_size=1 << 17, steps=3),
    "texture_default": lambda work: _texture(),
    "material": lambda work: _material(),
    "material_pack": _pack,
    "ntc": _ntc,
    "mipmap": _mipmap,
    "fit": _fit,
    "simplify": _simplify,
    "skin": _skin,
    "lod": _lod,
    "postfx": _postfx,
    "lora": _lora,
}
OPTIONAL = {"material_large": lambda work: _material(texture_size=512, batch_size=1 << 15, reference_chunk=1 << 18)}
"""Slower cases, run only when named with ``--only``."""


def _config(name: str, work: Path) -> tuple[Any, Any]:
    bake, config = {**CASES, **OPTIONAL}[name](work)
    if hasattr(config, "bake"):  # a pack's device is its template's
        config.bake.device = "cpu"
    else:
        config.device = "cpu"
    return bake, config


# -- running and measuring --------------------------------------------------------------------


def _child(name: str, work: Path) -> None:
    """Run case ``name`` in this process (the parent measures it)."""
    bake, config = _config(name, work)
    out = work / name
    shutil.rmtree(out, ignore_errors=True)
    bake.run(config, out, progress=False)


def _measure(name: str, work: Path) -> tuple[float, float]:
    """Run case ``name`` in a child process; its peak RSS (bytes) and seconds."""
    watch = Stopwatch().start()
    log = work / f"{name}.log"
    with open(log, "wb") as stderr:  # a file, not a pipe: a chatty child cannot block on a full pipe
        child = subprocess.Popen([sys.executable, __file__, "--child", name, "--work", str(work)], stdout=subprocess.DEVNULL, stderr=stderr)
        _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise RuntimeError(f"case {name} failed ({child.returncode}):\n{log.read_text(errors='replace')[-3000:]}")
    return usage.ru_maxrss * 1024.0, watch.stop()  # Linux: KiB


def _estimate(name: str, work: Path) -> tuple[float, float | None, str]:
    """The footprint of case ``name`` as the runner checks it; for the diffusion bakes also the
    estimate with the tiny model's sizes (what the run measures)."""
    from neuralbake.bakes.run import apply_defaults

    bake, config = _config(name, work)
    device = torch.device("cpu")
    apply_defaults(bake, config, device)
    declared = bake.footprint(config, device)
    compared: float | None = None
    if name == "postfx":
        from neuralbake.bakes.postfx.footprint import CHAIN_BASE_BYTES, TINY, postfx_memory

        compared = CHAIN_BASE_BYTES + sum(postfx_memory(config, device, model=TINY).values())
    elif name == "lora":
        from neuralbake.bakes.postfx.footprint import CHAIN_BASE_BYTES, TINY
        from neuralbake.bakes.postfx.lora import lora_memory

        compared = CHAIN_BASE_BYTES + sum(lora_memory(config, device, model=TINY).values())
    return declared.memory_bytes, compared, declared.field


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help=f"cases to run (default: all of {', '.join(CASES)}; optional: {', '.join(OPTIONAL)})")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    parser.add_argument("--work", help="working folder (default: a temporary one)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="neuralbake-footprints-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.child:
        _child(args.child, work)
        return
    names = args.only or list(CASES)
    if "skin" in names and "simplify" not in names:
        names.insert(names.index("skin"), "simplify")  # skin fits the simplify case's LOD
    if {"postfx", "lora"} & set(names):
        _tiny_model(work)  # made once, outside the measured runs
    rows = []
    print(f"{'bake':<16}{'estimate MiB':>14}{'peak MiB':>11}{'ratio':>8}{'seconds':>9}  declared footprint")
    for name in names:
        try:
            peak, seconds = _measure(name, work)
        except RuntimeError as exc:  # one broken case leaves the others' rows
            print(f"{name:<16}failed: {str(exc).splitlines()[-1]}", flush=True)
            continue
        declared, compared, field = _estimate(name, work)
        estimate = compared if compared is not None else declared
        row = {"bake": name, "estimate_bytes": estimate, "peak_rss_bytes": peak, "ratio": estimate / peak, "seconds": round(seconds, 1),
               "declared_bytes": declared, "field": field}
        rows.append(row)
        note = f"{declared / MIB:.0f} MiB (SD 1.5 assumed)" if compared is not None else f"field {field}"
        print(f"{name:<16}{estimate / MIB:>14.0f}{peak / MIB:>11.0f}{estimate / peak:>8.2f}{seconds:>9.1f}  {note}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Every bake's footprint: declared, modest for the defaults, and refusing hostile settings by name.

No training and no file reads: footprints are arithmetic on configs (path fields hold dummy names).
``bench/footprints.py`` compares the estimates with measured peaks.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from neuralbake.bakes.run import Bake, apply_defaults, check_footprint, set_field
from neuralbake.errors import ConfigError
from neuralbake.service.settings import ServiceSettings

GIB = 1 << 30
SERVICE_MEMORY = 16 * GIB
SERVICE_STEPS = ServiceSettings(data=Path(".")).max_steps  # the service default


def _bakes() -> dict[str, tuple[Bake[Any], Callable[[], Any]]]:
    """Every bake with a factory for its default config (path fields set to dummy names)."""
    from neuralbake.bakes.fit import FIT, FitConfig
    from neuralbake.bakes.lod import LOD, LodConfig
    from neuralbake.bakes.material_pack import MATERIAL_PACK, MaterialPackConfig
    from neuralbake.bakes.mipmap import MIPMAP, MipmapConfig
    from neuralbake.bakes.neural_material import NEURAL_MATERIAL, NeuralMaterialConfig
    from neuralbake.bakes.neural_texture import NEURAL_TEXTURE, NeuralTextureConfig
    from neuralbake.bakes.ntc import NTC, NTCConfig
    from neuralbake.bakes.postfx.chain import POSTFX
    from neuralbake.bakes.postfx.config import PostfxConfig
    from neuralbake.bakes.postfx.lora import LORA_TRAIN, LoraTrainConfig
    from neuralbake.bakes.simplify import SIMPLIFY, SimplifyConfig
    from neuralbake.bakes.skin import SKIN, SkinConfig

    return {
        "texture": (NEURAL_TEXTURE, lambda: NeuralTextureConfig(image="image.png")),
        "material": (NEURAL_MATERIAL, lambda: NeuralMaterialConfig(material="material.json")),
        "material_pack": (MATERIAL_PACK, lambda: MaterialPackConfig(materials=["a.json", "b.mtlx", "scene.gltf"])),
        "ntc": (NTC, lambda: NTCConfig(sources=["base_color.png", "normal.png"])),
        "mipmap": (MIPMAP, lambda: MipmapConfig(base_color="base_color.png", normal="normal.png")),
        "fit": (FIT, lambda: FitConfig(asset="asset.gltf")),
        "simplify": (SIMPLIFY, lambda: SimplifyConfig(asset="asset.gltf")),
        "skin": (SKIN, lambda: SkinConfig(lod="lod.glb", reference="original.gltf")),
        "lod": (LOD, lambda: LodConfig(asset="asset.gltf")),
        "postfx": (POSTFX, lambda: PostfxConfig(render="render.png", model="model", controlnets=["depth=controlnet"])),
        "lora": (LORA_TRAIN, lambda: LoraTrainConfig(images="images", base="model")),
    }


BAKES = _bakes()

HOSTILE: list[tuple[str, str, Any, str]] = [
    # (bake, setting, absurd value, field the refusal must name)
    ("texture", "batch_size", 10**9, "batch_size"),
    ("texture", "network.hidden", 10**6, "network.hidden"),
    ("texture", "train.steps", 10**12, "train.steps"),
    ("material", "batch_size", 10**9, "batch_size"),
    ("material", "texture_size", 10**6, "texture_size"),
    ("material", "decoder_hidden", 10**6, "decoder_hidden"),
    ("material", "reference_chunk", 10**10, "reference_chunk"),
    ("material", "train.steps", 10**12, "train.steps"),
    ("material_pack", "bake.batch_size", 10**9, "bake.batch_size"),
    ("material_pack", "bake.texture_size", 10**6, "bake.texture_size"),
    ("material_pack", "bake.train.steps", 10**12, "bake.train.steps"),
    ("ntc", "batch_size", 10**9, "batch_size"),
    ("ntc", "texture_size", 2**20, "texture_size"),
    ("ntc", "hidden", (10**5, 10**5), "hidden"),
    ("ntc", "train.steps", 10**12, "train.steps"),
    ("mipmap", "texture_size", 2**20, "texture_size"),
    ("mipmap", "directions_per_step", 10**7, "directions_per_step"),
    ("mipmap", "train.steps", 10**12, "train.steps"),
    ("fit", "render_size", 10**6, "render_size"),
    ("fit", "views", 10**6, "views"),
    ("fit", "texture_size", 10**6, "texture_size"),
    ("fit", "epochs", 10**12, "epochs"),
    ("simplify", "render_size", 10**6, "render_size"),
    ("simplify", "views", 10**7, "views"),
    ("simplify", "epochs", 10**12, "epochs"),
    ("skin", "render_size", 10**6, "render_size"),
    ("skin", "views", 10**6, "views"),
    ("skin", "steps", 10**12, "steps"),
    ("lod", "texture_size", 10**6, "texture_size"),
    ("lod", "stage_options", {"fit": {"render_size": 10**6}}, "stage_options.fit.render_size"),
    ("lod", "stage_options", {"simplify": {"views": 10**7}}, "stage_options.simplify.views"),
    ("lod", "stage_options", {"simplify": {"epochs": 10**12}}, "stage_options.simplify.epochs"),
    ("postfx", "size", 10**6, "size"),
    ("postfx", "steps", 10**12, "steps"),
    ("lora", "resolution", 10**6, "resolution"),
    ("lora", "batch_size", 10**6, "batch_size"),
    ("lora", "rank", 10**9, "rank"),
    ("lora", "train.steps", 10**12, "train.steps"),
]


def _default(name: str, device: str) -> tuple[Bake[Any], Any, torch.device]:
    bake, make = BAKES[name]
    config = make()
    torch_device = torch.device(device)
    apply_defaults(bake, config, torch_device)
    return bake, config, torch_device


def test_every_bake_declares_a_footprint() -> None:
    from neuralbake.bakes.registry import BAKES as REGISTERED

    bakes = {kind: entry.bake for kind, entry in REGISTERED.items()}
    missing = [kind for kind, bake in bakes.items() if bake.footprint is None]
    assert not missing, f"bakes without a footprint: {missing}"
    assert {bake.name for bake in bakes.values()} <= {bake.name for bake, _ in BAKES.values()}  # this module covers them all


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("name", sorted(BAKES))
def test_default_configs_fit_a_modest_machine(name: str, device: str) -> None:
    bake, config, torch_device = _default(name, device)
    footprint = bake.footprint(config, torch_device)
    assert 0 < footprint.memory_bytes < 8 * GIB, f"{name} on {device}: {footprint.memory_bytes / GIB:.2f} GiB"
    assert 0 < footprint.steps < SERVICE_STEPS, f"{name} on {device}: {footprint.steps} steps"
    assert check_footprint(bake, config, torch_device, memory_bytes=SERVICE_MEMORY, max_steps=SERVICE_STEPS) == footprint


@pytest.mark.parametrize(("name", "setting", "value", "field"), HOSTILE, ids=[f"{n}-{s}-{f}" for n, s, _, f in HOSTILE])
def test_hostile_settings_are_refused_naming_the_field(name: str, setting: str, value: Any, field: str) -> None:
    bake, config, device = _default(name, "cpu")
    set_field(config, setting, value)
    with pytest.raises(ConfigError) as refused:
        check_footprint(bake, config, device, memory_bytes=SERVICE_MEMORY, max_steps=SERVICE_STEPS)
    assert refused.value.field == field, f"{name}: {setting}={value!r} was refused naming {refused.value.field!r}"
    assert field in str(refused.value)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_texture_estimate_grows_with_batch_and_width(device: str) -> None:
    bake, base, torch_device = _default("texture", device)

    def memory(**settings: Any) -> int:
        config = copy.deepcopy(base)
        for key, value in settings.items():
            set_field(config, key, value)
        return bake.footprint(config, torch_device).memory_bytes

    batches = [memory(batch_size=b) for b in (1, 256, 1024, 16384, 1 << 20)]
    assert batches == sorted(batches) and len(set(batches)) == len(batches), batches
    widths = [memory(**{"network.hidden": h}) for h in (8, 32, 64, 128, 1024)]
    assert widths == sorted(widths) and len(set(widths)) == len(widths), widths
    layers = [memory(**{"network.layers": n}) for n in (1, 2, 4, 8)]
    assert layers == sorted(layers) and len(set(layers)) == len(layers), layers
    # memory is a product of batch and width: a wide network costs more per sample
    assert memory(batch_size=1 << 16, **{"network.hidden": 128}) - memory(batch_size=1 << 10, **{"network.hidden": 128}) > \
        memory(batch_size=1 << 16) - memory(batch_size=1 << 10)


def test_material_estimate_grows_with_its_sizes() -> None:
    bake, base, device = _default("material", "cpu")
    for setting, values in (("batch_size", (256, 4096, 65536)), ("texture_size", (64, 512, 2048)), ("decoder_hidden", (16, 64, 256))):
        sizes = []
        for value in values:
            config = copy.deepcopy(base)
            set_field(config, setting, value)
            sizes.append(bake.footprint(config, device).memory_bytes)
        assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes), (setting, sizes)


def test_the_runner_refuses_before_touching_the_output_folder(tmp_path: Path) -> None:
    from neuralbake.bakes.neural_texture import NEURAL_TEXTURE, NeuralTextureConfig

    config = NeuralTextureConfig(image=str(tmp_path / "never_read.png"), batch_size=10**9, device="cpu")
    out = tmp_path / "out"
    with pytest.raises(ConfigError) as refused:
        NEURAL_TEXTURE.run(config, out, progress=False)
    assert refused.value.field == "batch_size"
    assert not out.exists()

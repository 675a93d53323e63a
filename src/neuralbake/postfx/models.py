"""Diffusion models for the AI render pass: local folders checked, loaded with diffusers, and random
ones built from configs.

Models come only from local folders in the diffusers layout (``model_index.json`` beside one folder
per component: ``unet`` or ``transformer``, ``vae``, ``text_encoder``, ``tokenizer``, ``scheduler``),
as ``save_pretrained`` writes them and as model repositories ship them; nothing is downloaded at run
time (every load passes ``local_files_only``). Three families are known, told apart by the pipeline
class in ``model_index.json``: Stable Diffusion 1.x/2.x (``sd``), SDXL (``sdxl``) and Flux
(``flux``). ControlNets are folders of their own (``config.json`` + weights) of the same family.
Loading goes through diffusers' own classes (``DiffusionPipeline.from_pretrained``, then
``AutoPipelineForImage2Image.from_pipe`` for the img2img / ControlNet variant), so every
architecture diffusers reads is read the same way here; this module only checks folders first, so
that a wrong folder is an error saying what to put where instead of a hub lookup or a traceback.

:func:`make_random_model` writes a model folder with random weights, built offline from configs:
``tiny`` ones for tests and the README's demo (seconds on a CPU), and ``sd15``- / ``sdxl``-size
ones whose cost is that of the real networks, for latency benchmarks (Flux: tiny only) (the architecture sets the
cost; the weights do not). Their tokenizer is a real CLIP byte-level BPE tokenizer whose vocabulary
holds single characters only (no merges), since the learned vocabulary is not available offline.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from neuralbake.errors import ConfigError, InputError
from neuralbake.io.limits import parse_json_text

# transformers reports optional packages it lacks (torchvision) while it is imported; the chain uses none of them.
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

__all__ = ["SCHEDULERS", "ModelInfo", "inspect_controlnet", "inspect_model", "load_pipeline", "make_random_model"]

Family = Literal["sd", "sdxl", "flux"]

PIPELINE_FAMILIES: dict[str, Family] = {
    "StableDiffusionPipeline": "sd",
    "StableDiffusionImg2ImgPipeline": "sd",
    "StableDiffusionControlNetPipeline": "sd",
    "StableDiffusionControlNetImg2ImgPipeline": "sd",
    "StableDiffusionXLPipeline": "sdxl",
    "StableDiffusionXLImg2ImgPipeline": "sdxl",
    "StableDiffusionXLControlNetPipeline": "sdxl",
    "StableDiffusionXLControlNetImg2ImgPipeline": "sdxl",
    "FluxPipeline": "flux",
    "FluxImg2ImgPipeline": "flux",
    "FluxControlNetPipeline": "flux",
    "FluxControlNetImg2ImgPipeline": "flux",
}
"""The pipeline classes a model folder may name, and the family each belongs to."""

CONTROLNET_FAMILIES: dict[str, Family] = {"ControlNetModel": "sd", "FluxControlNetModel": "flux"}
"""ControlNet classes (SD and SDXL ControlNets share ``ControlNetModel``)."""

SCHEDULERS = {
    "ddim": "DDIMScheduler",
    "euler": "EulerDiscreteScheduler",
    "euler-a": "EulerAncestralDiscreteScheduler",
    "dpm++": "DPMSolverMultistepScheduler",
    "unipc": "UniPCMultistepScheduler",
    "lcm": "LCMScheduler",
}
"""``--scheduler`` names and the diffusers classes they pick (``default``: the model's own)."""

_GET = "put a model folder in the diffusers layout there (model_index.json, unet/ or transformer/, vae/, text_encoder/, tokenizer/, scheduler/): " \
       "e.g. save one with `pipe.save_pretrained(DIR)`, copy a downloaded model repository, or make a random one with `neuralbake postfx make-model`."


@dataclass(frozen=True)
class ModelInfo:
    """A checked model folder."""

    path: Path
    family: Family
    pipeline_class: str
    components: tuple[str, ...]


def _read_json(path: Path, field: str, fix: str) -> dict[str, Any]:
    try:
        data = parse_json_text(path.read_text(encoding="utf-8"), source=str(path))
    except InputError:
        raise
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"cannot be read as JSON ({exc}).", path=path, field=field, fix=fix) from exc
    if not isinstance(data, dict):
        raise InputError("is not a JSON object.", path=path, field=field, fix=fix)
    return data


def inspect_model(path: str | Path, *, field: str = "model") -> ModelInfo:
    """Check a diffusers model folder without loading weights: its pipeline class, family and components."""
    folder = Path(path)
    if not str(path):
        raise ConfigError("no model folder was given.", field=field, fix=_GET)
    if folder.is_file():
        raise InputError("is a single file; neuralbake reads diffusers-layout model folders.", path=folder, field=field,
                         fix="convert the checkpoint once with diffusers (`StableDiffusionPipeline.from_single_file(FILE).save_pretrained(DIR)`) and pass DIR.")
    if not folder.is_dir():
        raise InputError("the model folder does not exist.", path=folder, field=field, fix=_GET)
    index_file = folder / "model_index.json"
    if not index_file.is_file():
        raise InputError("has no model_index.json, so it is not a diffusers model folder.", path=folder, field=field, fix=_GET)
    index = _read_json(index_file, field, _GET)
    name = index.get("_class_name")
    family = PIPELINE_FAMILIES.get(name) if isinstance(name, str) else None
    if family is None:
        known = sorted({k for k in PIPELINE_FAMILIES if not k.endswith(("Img2ImgPipeline", "ControlNetPipeline"))})
        raise InputError(f"names the pipeline {name!r}, which the render pass does not run.", path=index_file, field=f"{field}._class_name",
                         fix=f"use a model of one of these pipelines: {', '.join(known)}.")
    components = []
    for key, value in index.items():
        if key.startswith("_") or not isinstance(value, list) or len(value) != 2 or value[0] is None:
            continue
        sub = folder / key
        if not sub.is_dir():
            raise InputError(f"model_index.json lists the component {key!r} but the folder {key}/ is missing.", path=folder, field=f"{field}.{key}",
                             fix=f"copy the model's {key}/ folder too (a model folder holds every component model_index.json lists).")
        components.append(key)
    return ModelInfo(folder, family, name, tuple(components))


def inspect_controlnet(path: str | Path, family: Family, *, field: str = "controlnets") -> str:
    """Check a ControlNet folder (``config.json`` + weights) of ``family``; return its class name."""
    folder = Path(path)
    fix = "pass a ControlNet folder in the diffusers layout (config.json + diffusion_pytorch_model.safetensors) made for the same base model."
    if not folder.is_dir():
        raise InputError("the ControlNet folder does not exist.", path=folder, field=field, fix=fix)
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise InputError("has no config.json, so it is not a diffusers ControlNet folder.", path=folder, field=field, fix=fix)
    name = _read_json(config_file, field, fix).get("_class_name")
    own = CONTROLNET_FAMILIES.get(name) if isinstance(name, str) else None
    if own is None:
        raise InputError(f"names the class {name!r}, not a ControlNet.", path=config_file, field=f"{field}._class_name", fix=fix)
    if (own == "flux") != (family == "flux"):
        raise InputError(f"is a {name} but the base model is of the {family} family.", path=folder, field=field, fix=fix)
    return name


def load_pipeline(
    info: ModelInfo, controlnets: list[Path], *, device: Any, dtype: Any, scheduler: str = "default", img2img: bool = True,
) -> Any:
    """The img2img pipeline of a checked model (with its ControlNets when any are given), on ``device``."""
    import diffusers
    import torch

    quiet_libraries()
    kwargs: dict[str, Any] = {"local_files_only": True, "dtype": dtype}
    if info.family == "sd":
        kwargs.update(safety_checker=None, requires_safety_checker=False)
    try:
        base = diffusers.DiffusionPipeline.from_pretrained(info.path, **kwargs)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise InputError(f"diffusers could not load the model ({str(exc).splitlines()[0][:300]}).", path=info.path, field="model", fix=_GET) from exc
    nets = []
    for path in controlnets:
        name = inspect_controlnet(path, info.family)
        try:
            nets.append(getattr(diffusers, name).from_pretrained(path, local_files_only=True, dtype=dtype))
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise InputError(f"diffusers could not load the ControlNet ({str(exc).splitlines()[0][:300]}).", path=path, field="controlnets",
                             fix="pass a complete ControlNet folder (config.json + its weights).") from exc
    return chain_pipeline(base, nets, family=info.family, scheduler=scheduler, img2img=img2img).to(torch.device(device))


def chain_pipeline(base: Any, nets: list[Any], *, family: Family, scheduler: str = "default", img2img: bool = True) -> Any:
    """The pipeline the chain calls, made from a loaded ``base`` pipeline (its components shared):
    img2img (or text-to-image) with the ControlNet models ``nets`` when any are given."""
    import diffusers

    extra: dict[str, Any] = {}
    if nets:
        extra["controlnet"] = nets[0] if len(nets) == 1 else nets
    if img2img or nets:
        pipe = diffusers.AutoPipelineForImage2Image.from_pipe(base, **extra) if img2img else diffusers.AutoPipelineForText2Image.from_pipe(base, **extra)
    else:
        pipe = base
    if scheduler != "default":
        if family == "flux":
            raise ConfigError("Flux models sample with their own flow-matching scheduler.", field="scheduler", fix="leave --scheduler at default for Flux.")
        pipe.scheduler = getattr(diffusers, SCHEDULERS[scheduler]).from_config(pipe.scheduler.config)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def quiet_libraries() -> None:
    """No load bars or notices from diffusers and transformers: neuralbake shows its own progress."""
    import diffusers
    import transformers

    diffusers.utils.logging.set_verbosity_error()
    diffusers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


# -- random models from configs -------------------------------------------------------------


def _byte_vocab() -> dict[str, int]:
    """A CLIP byte-level vocabulary of single characters: the 256 byte symbols, each plain and as a
    word end, then the start and end tokens (CLIP's byte-to-symbol table: printable Latin-1 bytes stand
    for themselves, the rest are moved to code points from 256 on)."""
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    moved = [b for b in range(256) if b not in keep]
    symbols = [chr(b) for b in keep] + [chr(256 + i) for i in range(len(moved))]
    vocab: dict[str, int] = {}
    for symbol in sorted(symbols):
        vocab[symbol] = len(vocab)
        vocab[symbol + "</w>"] = len(vocab)
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    return vocab


def _tokenizer(folder: Path, max_length: int) -> Any:
    from transformers import CLIPTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = CLIPTokenizer(vocab=_byte_vocab(), merges=[], model_max_length=max_length)
    tokenizer.save_pretrained(folder)
    return tokenizer


_SIZES: dict[str, dict[str, Any]] = {
    # Cheap enough for unit tests: every block type of the real networks, a few channels each.
    "tiny": {"blocks": (8, 16), "layers": 1, "heads": 2, "text": 16, "text_layers": 2, "text_ff": 32, "groups": 4, "vae": (8, 16), "vocab": 1000, "length": 16,
                 "transformer": (1, 1), "cond": (4, 8)},
    # Stable Diffusion 1.5's shapes (860 M UNet, 123 M CLIP ViT-L text encoder, 84 M VAE).
    "sd15": {"blocks": (320, 640, 1280, 1280), "layers": 2, "heads": 8, "text": 768, "text_layers": 12, "text_ff": 3072, "groups": 32, "vae": (128, 256, 512, 512),
                 "vocab": 49408, "length": 77, "transformer": (1, 1, 1, 1), "cond": (16, 32, 96, 256)},
    # SDXL's shapes (2.6 G UNet; two text encoders: CLIP ViT-L 768 and OpenCLIP bigG 1280).
    "sdxl": {"blocks": (320, 640, 1280), "layers": 2, "heads": (5, 10, 20), "text": 768, "text2": 1280, "text_layers": 12, "text2_layers": 32, "text_ff": 3072,
                 "text2_ff": 5120, "groups": 32, "vae": (128, 256, 512, 512), "vocab": 49408, "length": 77, "transformer": (1, 2, 10), "cond": (16, 32, 96, 256)},
}


def _unet_and_controlnet(family: str, size: str, controlnet: bool) -> tuple[Any, Any]:
    from diffusers import ControlNetModel, UNet2DConditionModel

    s = _SIZES[size]
    n = len(s["blocks"])
    down = ["CrossAttnDownBlock2D"] * (n - 1) + ["DownBlock2D"]
    up = ["UpBlock2D"] + ["CrossAttnUpBlock2D"] * (n - 1)
    if family == "sdxl" and size == "sdxl":
        down, up = ["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"], ["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"]
    kwargs: dict[str, Any] = {
        "block_out_channels": s["blocks"], "layers_per_block": s["layers"], "in_channels": 4, "out_channels": 4, "sample_size": 64 if size != "tiny" else 16,
        "down_block_types": tuple(down), "up_block_types": tuple(up), "norm_num_groups": s["groups"], "attention_head_dim": s["heads"],
        "transformer_layers_per_block": s["transformer"],
    }
    if family == "sd":
        kwargs["cross_attention_dim"] = s["text"]
    else:
        text2 = s.get("text2", s["text"])
        kwargs.update(cross_attention_dim=s["text"] + text2, addition_embed_type="text_time", addition_time_embed_dim=256 if size != "tiny" else 8,
                      projection_class_embeddings_input_dim=text2 + 6 * (256 if size != "tiny" else 8), use_linear_projection=True)
    unet = UNet2DConditionModel(**kwargs)
    net = ControlNetModel.from_unet(unet, conditioning_embedding_out_channels=s["cond"]) if controlnet else None
    if net is not None:
        # A new ControlNet's output convolutions start at zero (it changes nothing until trained); a random
        # model's must act, so its condition reaches the UNet as a trained one's does.
        import torch

        zeroed = [net.controlnet_cond_embedding.conv_out, *net.controlnet_down_blocks, net.controlnet_mid_block]
        with torch.no_grad():
            for module in zeroed:
                for parameter in module.parameters():
                    parameter.normal_(0.0, 0.05)
    return unet, net


def make_random_model(out: str | Path, *, family: Literal["sd", "sdxl", "flux"] = "sd", size: Literal["tiny", "sd15", "sdxl"] = "tiny",
                      controlnet: bool = True, seed: int = 0, save: bool = True, device: str = "cpu") -> dict[str, Any]:
    """Build a diffusion model with random weights from configs (offline) and write it to ``out``:
    ``out/base`` (diffusers layout) and ``out/controlnet`` (a ControlNet of the same UNet).

    With ``save=False`` nothing is written and the pipeline and ControlNet are returned (benchmarks
    build them straight on ``device``, e.g. ``cuda``). Returns ``{"base": path, "controlnet": path, "parameters": {...}}``.
    """
    import torch

    if size == "sdxl" and family != "sdxl" or size == "sd15" and family != "sd":
        raise ConfigError(f"the {size} size is a {'sdxl' if size == 'sdxl' else 'sd'} model.", field="size", fix="pick the family that matches the size.")
    if family == "flux" and size != "tiny":
        raise ConfigError("random Flux models are made tiny only (a Flux-size one is 12 B parameters).", field="size", fix="use --size tiny with --family flux.")
    s = _SIZES[size]
    quiet_libraries()
    torch.manual_seed(seed)
    out = Path(out)
    with torch.device(device):
        if family == "flux":
            return _build_flux(out, controlnet, save)
        return _build(out, family, size, s, controlnet, save)


def _build_flux(out: Path, controlnet: bool, save: bool) -> dict[str, Any]:
    """A tiny Flux pipeline: the MMDiT transformer, a VAE without quant convs, CLIP and T5 text encoders;
    its T5 tokenizer is a unigram vocabulary of single characters (the learned one is not available offline)."""
    import torch
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxControlNetModel, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel, T5Tokenizer

    heads, head_dim = 2, 8
    transformer = FluxTransformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=head_dim,
                                         num_attention_heads=heads, joint_attention_dim=32, pooled_projection_dim=16, axes_dims_rope=[2, 2, 4])
    vae = AutoencoderKL(block_out_channels=(8, 16), in_channels=3, out_channels=3, latent_channels=4, norm_num_groups=4, layers_per_block=1,
                        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2, use_quant_conv=False,
                        use_post_quant_conv=False, shift_factor=0.0, scaling_factor=1.0)
    vocab = _byte_vocab()
    clip = CLIPTextModel(CLIPTextConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, vocab_size=1000,
                                        max_position_embeddings=77, projection_dim=16, bos_token_id=len(vocab) - 2, eos_token_id=len(vocab) - 1,
                                        pad_token_id=len(vocab) - 1))
    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)] + [(chr(c), -1.0) for c in range(32, 127)] + [("\u2581" + chr(c), -1.0) for c in range(32, 127)]
    t5 = T5EncoderModel(T5Config(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, vocab_size=256, relative_attention_num_buckets=8))
    with torch.device("cpu"):
        scheduler = FlowMatchEulerDiscreteScheduler()
    staging = out / "base"
    tokenizer = _tokenizer(staging / "tokenizer", 77) if save else _tokenizer(Path(_tmp()) / "tokenizer", 77)
    pipe = FluxPipeline(transformer=transformer, vae=vae, text_encoder=clip, tokenizer=tokenizer, text_encoder_2=t5,
                        tokenizer_2=T5Tokenizer(vocab=pieces, extra_ids=0, model_max_length=64), scheduler=scheduler)
    net = FluxControlNetModel.from_transformer(transformer, num_layers=1, num_single_layers=1, attention_head_dim=head_dim, num_attention_heads=heads) \
        if controlnet else None
    if net is not None:
        with torch.no_grad():  # a new ControlNet's output layers start at zero; a random model's must act
            for module in (*net.controlnet_blocks, *net.controlnet_single_blocks, net.controlnet_x_embedder):
                for parameter in module.parameters():
                    parameter.normal_(0.0, 0.05)
    return _finish(pipe, net, out, save)


def _build(out: Path, family: str, size: str, s: dict[str, Any], controlnet: bool, save: bool) -> dict[str, Any]:
    import torch
    from diffusers import AutoencoderKL, EulerDiscreteScheduler, StableDiffusionPipeline, StableDiffusionXLPipeline
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    unet, net = _unet_and_controlnet(family, size, controlnet)
    vae = AutoencoderKL(block_out_channels=s["vae"], in_channels=3, out_channels=3, latent_channels=4, norm_num_groups=s["groups"],
                        down_block_types=("DownEncoderBlock2D",) * len(s["vae"]), up_block_types=("UpDecoderBlock2D",) * len(s["vae"]),
                        layers_per_block=1 if size == "tiny" else 2, sample_size=32 if size == "tiny" else 512)

    vocab = _byte_vocab()  # the tokenizer's: its start and end tokens are its last two ids

    def text_config(width: int, layers: int, ff: int, projection: int) -> Any:
        return CLIPTextConfig(hidden_size=width, intermediate_size=ff, num_hidden_layers=layers, num_attention_heads=max(2, width // 64),
                              vocab_size=s["vocab"], max_position_embeddings=s["length"], projection_dim=projection, hidden_act="quick_gelu",
                              bos_token_id=len(vocab) - 2, eos_token_id=len(vocab) - 1, pad_token_id=len(vocab) - 1)

    with torch.device("cpu"):  # a scheduler's tables live on the CPU (it indexes them with numpy)
        scheduler = EulerDiscreteScheduler(num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", steps_offset=1,
                                           timestep_spacing="leading")
    staging = out / "base"
    tokenizer = _tokenizer(staging / "tokenizer", s["length"]) if save else _tokenizer(Path(_tmp()) / "tokenizer", s["length"])
    if family == "sd":
        text = CLIPTextModel(text_config(s["text"], s["text_layers"], s["text_ff"], s["text"]))
        pipe = StableDiffusionPipeline(unet=unet, vae=vae, text_encoder=text, tokenizer=tokenizer, scheduler=scheduler, safety_checker=None,
                                       feature_extractor=None, requires_safety_checker=False)
    else:
        text = CLIPTextModel(text_config(s["text"], s["text_layers"], s["text_ff"], s["text"]))
        text2 = CLIPTextModelWithProjection(text_config(s.get("text2", s["text"]), s.get("text2_layers", s["text_layers"]), s.get("text2_ff", s["text_ff"]),
                                                        s.get("text2", s["text"])))
        pipe = StableDiffusionXLPipeline(unet=unet, vae=vae, text_encoder=text, text_encoder_2=text2, tokenizer=tokenizer, tokenizer_2=tokenizer,
                                         scheduler=scheduler)
    return _finish(pipe, net, out, save)


def _finish(pipe: Any, net: Any, out: Path, save: bool) -> dict[str, Any]:
    """Count a built model's parameters; write it (``out/base``, ``out/controlnet``) or hand it back."""
    import torch

    counts = {name: sum(p.numel() for p in model.parameters()) for name, model in pipe.components.items() if isinstance(model, torch.nn.Module)}
    if net is not None:
        counts["controlnet"] = sum(p.numel() for p in net.parameters())
    if not save:
        return {"pipeline": pipe, "controlnet": net, "parameters": counts}
    pipe.save_pretrained(out / "base")
    result: dict[str, Any] = {"base": str(out / "base"), "parameters": counts}
    if net is not None:
        net.save_pretrained(out / "controlnet")
        result["controlnet"] = str(out / "controlnet")
    return result


def _tmp() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="neuralbake-tokenizer-")

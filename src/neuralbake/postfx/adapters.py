"""LoRA adapters for the render pass's diffusion models, made with peft.

:func:`add_lora` puts a peft LoRA (rank ``rank`` on the attention projections) on a UNet or Flux
transformer; :func:`save_lora` writes its weights as one ``.safetensors`` file in the diffusers LoRA
layout (``unet.…`` / ``transformer.…`` keys, the file ``pipe.load_lora_weights`` reads back). The
chain loads such files, and kohya-layout files from other tools, through diffusers; the training
bake that makes them is :data:`neuralbake.bakes.postfx.lora.LORA_TRAIN`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from neuralbake.io.files import atomic_path

__all__ = ["LORA_TARGETS", "add_lora", "save_lora"]

LORA_TARGETS = ("to_q", "to_k", "to_v", "to_out.0")
"""The attention projections a LoRA adapts (the choice of the diffusers training scripts)."""


def add_lora(network: Any, *, rank: int = 4, alpha: float | None = None, random_b: bool = False, name: str = "default") -> Any:
    """Add a trainable LoRA adapter to ``network`` (a UNet or Flux transformer) in place and return it.

    ``random_b``: start B random instead of zero (peft's ``init_lora_weights=False``), so the adapter
    changes the output from the start (tests; a trained LoRA starts from zero).
    """
    from peft import LoraConfig  # peft and diffusers are optional (the postfx extra)

    config = LoraConfig(r=rank, lora_alpha=alpha if alpha is not None else rank, target_modules=list(LORA_TARGETS),
                        init_lora_weights=not random_b)
    network.add_adapter(config, adapter_name=name)
    return network


def save_lora(network: Any, path: str | Path, *, family: str = "sd", name: str = "default") -> Path:
    """Write ``network``'s LoRA adapter ``name`` to ``path`` (``.safetensors``, diffusers layout), atomically."""
    from diffusers import FluxPipeline, StableDiffusionPipeline, StableDiffusionXLPipeline
    from diffusers.utils import convert_state_dict_to_diffusers
    from peft.utils import get_peft_model_state_dict

    path = Path(path)
    state = convert_state_dict_to_diffusers(get_peft_model_state_dict(network, adapter_name=name))
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        if family == "flux":
            FluxPipeline.save_lora_weights(tmp.parent, transformer_lora_layers=state, weight_name=tmp.name)
        else:
            pipeline = StableDiffusionXLPipeline if family == "sdxl" else StableDiffusionPipeline
            pipeline.save_lora_weights(tmp.parent, unet_lora_layers=state, weight_name=tmp.name)
    return path

"""The AI render pass's bakes: the chain of conditions, diffusion, composition and upscaler
(:data:`neuralbake.bakes.postfx.chain.POSTFX`, its settings in :mod:`~neuralbake.bakes.postfx.config`)
and the training of a style LoRA (:data:`neuralbake.bakes.postfx.lora.LORA_TRAIN`). The image work
they run is the library :mod:`neuralbake.postfx`, a layer below."""

"""One module per product; each turns a config into a bundle and a report."""

from neuralbake.bakes.neural_texture import NeuralTextureConfig, bake_neural_texture, render_saved_network

__all__ = ["NeuralTextureConfig", "bake_neural_texture", "render_saved_network"]

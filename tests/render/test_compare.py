"""The material comparison: identical materials score perfectly, different ones do not, noise cancels."""


import torch

from neuralbake.material import layer
from neuralbake.render.compare import compare_materials, flip_error


def lambert(albedo):
    colour = torch.tensor(albedo)

    def material(uv, normal):
        return layer("lambert", {"albedo": colour.expand(uv.shape[0], 3)})

    return material


def test_identical_materials_are_a_perfect_match(tmp_path):
    result = compare_materials(lambert([0.5, 0.4, 0.3]), lambert([0.5, 0.4, 0.3]), tmp_path, size=12, spp=2)
    assert result["flip"] == 0.0 and result["psnr_db"] == float("inf")
    assert (tmp_path / "comparison.png").is_file() and (tmp_path / "sphere_test.exr").is_file()


def test_score_falls_as_the_materials_differ():
    near = compare_materials(lambert([0.5, 0.4, 0.3]), lambert([0.52, 0.4, 0.3]), size=12, spp=2)
    far = compare_materials(lambert([0.5, 0.4, 0.3]), lambert([0.1, 0.6, 0.3]), size=12, spp=2)
    assert far["psnr_db"] < near["psnr_db"] < 80 and near["flip"] < far["flip"]


def test_common_random_numbers_cancel_the_noise():
    """At 1 spp the noise is large, but with the same directions a 1 % albedo change stays a 1 % change."""
    result = compare_materials(lambert([0.5, 0.5, 0.5]), lambert([0.505, 0.505, 0.505]), size=16, spp=1)
    assert result["psnr_db"] > 40


def test_flip_error_map_shape():
    a = torch.rand(8, 8, 3)
    mean, error_map = flip_error(a, a * 1.5)
    assert error_map.shape == (8, 8, 3) and 0 < mean < 1

import numpy as np
import png
import pytest
from PIL import Image

from neuralbake.errors import InputError
from neuralbake.io.images import MAX_IMAGE_SIDE, load_image, save_exr, save_png


def test_rgb_png_round_trip(tmp_path):
    image = np.random.default_rng(0).random((5, 7, 3)).astype(np.float32)
    save_png(tmp_path / "a.png", image)
    loaded, info = load_image(tmp_path / "a.png")
    assert loaded.shape == (5, 7, 3) and info.bit_depth == 8
    assert np.abs(loaded - image).max() <= 0.5 / 255 + 1e-6


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
def test_16bit_png_keeps_full_precision(tmp_path, channels):
    rng = np.random.default_rng(channels)
    data = rng.integers(0, 65536, size=(4, 6, channels), dtype=np.uint16)
    writer = png.Writer(width=6, height=4, bitdepth=16, greyscale=channels <= 2, alpha=channels in (2, 4))
    with open(tmp_path / "deep.png", "wb") as handle:
        writer.write(handle, data.reshape(4, -1).tolist())
    loaded, info = load_image(tmp_path / "deep.png")
    assert info.bit_depth == 16 and loaded.shape == (4, 6, channels)
    np.testing.assert_array_equal(np.round(loaded * 65535).astype(np.uint16), data)


def test_16bit_save_round_trip(tmp_path):
    image = np.random.default_rng(1).random((3, 4, 4)).astype(np.float32)
    save_png(tmp_path / "b.png", image, bits=16)
    loaded, info = load_image(tmp_path / "b.png")
    assert info.bit_depth == 16 and np.abs(loaded - image).max() <= 0.5 / 65535 + 1e-7


def test_rgba_grey_and_palette(tmp_path):
    Image.new("RGBA", (4, 3), (10, 20, 30, 40)).save(tmp_path / "rgba.png")
    Image.new("L", (4, 3), 128).save(tmp_path / "grey.png")
    Image.new("P", (4, 3), 1).save(tmp_path / "pal.png")
    Image.new("RGB", (4, 3), (255, 0, 0)).save(tmp_path / "red.jpg")
    assert load_image(tmp_path / "rgba.png")[0].shape == (3, 4, 4)
    grey, info = load_image(tmp_path / "grey.png")
    assert grey.shape == (3, 4, 1) and grey[0, 0, 0] == pytest.approx(128 / 255)
    assert load_image(tmp_path / "pal.png")[0].shape == (3, 4, 3)
    assert load_image(tmp_path / "red.jpg")[0].shape == (3, 4, 3)


def test_bad_images_are_clear_errors(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_image(tmp_path / "missing.png")
    (tmp_path / "notes.png").write_text("hello")
    with pytest.raises(InputError, match="not an image") as info:
        load_image(tmp_path / "notes.png")
    assert "notes.png" in str(info.value) and "Fix:" in str(info.value)
    Image.new("RGB", (1, 1)).save(tmp_path / "dot.png")
    with pytest.raises(InputError, match="1x1"):
        load_image(tmp_path / "dot.png")
    with pytest.raises(InputError, match="folder"):
        load_image(tmp_path)


def test_truncated_image(tmp_path):
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(tmp_path / "x.png")
    data = (tmp_path / "x.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="damaged"):
        load_image(tmp_path / "cut.png")


@pytest.mark.parametrize("bits", [8, 16])
def test_oversized_image_rejected_before_decoding(tmp_path, bits):
    path = tmp_path / "huge.png"
    if bits == 8:
        Image.new("L", (MAX_IMAGE_SIDE + 1, 2)).save(path)
    else:
        writer = png.Writer(width=MAX_IMAGE_SIDE + 1, height=2, bitdepth=16, greyscale=True)
        with open(path, "wb") as handle:
            writer.write(handle, [[0] * (MAX_IMAGE_SIDE + 1)] * 2)
    with pytest.raises(InputError, match="at most 16384"):
        load_image(path)


def test_exr_channels_round_trip(tmp_path):
    import OpenEXR
    import torch

    rgb = np.random.default_rng(1).random((3, 5, 3)).astype(np.float32) * 4.0
    save_exr(tmp_path / "rgb.exr", torch.from_numpy(rgb))
    save_exr(tmp_path / "xy.exr", rgb[..., :2], channels=("normal_x", "normal_y"))
    with OpenEXR.File(str(tmp_path / "rgb.exr"), separate_channels=True) as handle:
        channels = {name: np.asarray(c.pixels) for name, c in handle.channels().items()}
    assert sorted(channels) == ["B", "G", "R"] and channels["R"].dtype == np.float32
    np.testing.assert_array_equal(np.stack([channels[c] for c in "RGB"], axis=-1), rgb)
    with OpenEXR.File(str(tmp_path / "xy.exr"), separate_channels=True) as handle:
        assert sorted(handle.channels()) == ["normal_x", "normal_y"]
    with pytest.raises(ValueError, match="channel names"):
        save_exr(tmp_path / "bad.exr", rgb, channels=("R", "G"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rgb.exr", "xy.exr"]

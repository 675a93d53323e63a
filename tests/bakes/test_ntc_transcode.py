"""``ntc transcode``: DDS files that an independent reader decodes to the PSNR the report gives, formats, flags, refusals.

The reader here is the test's own: the DDS header parsed with ``struct`` from Microsoft's documented
layout (not :mod:`neuralbake.io.dds`), every level's blocks decoded with texture2ddecoder, and
level 0 also with Pillow's DDS reader.
"""

from __future__ import annotations

import io
import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import texture2ddecoder
from PIL import Image

from neuralbake.bakes.ntc import compress_texture_set, decode_all_levels, load_texture_set, open_container
from neuralbake.bakes.ntc.transcode import choose_formats, transcode
from neuralbake.errors import BundleError, ConfigError, InputError
from neuralbake.io.manifest import write_bake_manifest

from ..conftest import make_test_pattern
from .test_ntc import _config, _ntc_cli, _save

SIZE = 32
DXGI = {71: ("bc1", False), 72: ("bc1", True), 77: ("bc3", False), 78: ("bc3", True), 80: ("bc4", False), 83: ("bc5", False), 98: ("bc7", False), 99: ("bc7", True)}
"""DXGI_FORMAT values (dxgiformat.h) -> (format, sRGB)."""
BLOCK_BYTES = {"bc1": 8, "bc4": 8, "bc3": 16, "bc5": 16, "bc7": 16}


@pytest.fixture(scope="module")
def ntc_folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A 32x32 set of base colour (RGB), normal (XY) and roughness (one channel), compressed in a few steps."""
    tmp = tmp_path_factory.mktemp("transcode")
    textures = tmp / "textures"
    textures.mkdir()
    normal = make_test_pattern(SIZE, SIZE, 3, seed=2)
    normal[..., 2] = 1.0
    sources = [
        f"base_color={_save(textures / 'base.png', make_test_pattern(SIZE, SIZE, 3, seed=1))}",
        f"normal={_save(textures / 'normal.png', normal)}",
        f"roughness={_save(textures / 'rough.png', make_test_pattern(SIZE, SIZE, 1, seed=3))}",
    ]
    compress_texture_set(_config(sources, bpp=24.0, steps=20, finetune=5), tmp / "ntc", progress=False)
    return tmp / "ntc", sources


def _read_dds(path: Path) -> tuple[dict, list[np.ndarray]]:
    """Parse a DX10 DDS file and decode every level -> (header fields, float32 levels [H, W, 4] RGBA)."""
    data = path.read_bytes()
    assert data[:4] == b"DDS "
    size, flags, height, width, _pitch, _depth, mips = struct.unpack_from("<7I", data, 4)
    assert size == 124 and flags & 0x20000  # DDSD_MIPMAPCOUNT
    fourcc = data[4 + 72 + 8 : 4 + 72 + 12]  # DDS_PIXELFORMAT at byte 72 of the header; its dwFourCC at 8
    assert fourcc == b"DX10"
    dxgi, dimension, _misc, array_size, _alpha = struct.unpack_from("<5I", data, 128)
    assert dimension == 3 and array_size == 1
    fmt, srgb = DXGI[dxgi]
    offset, levels, w, h = 148, [], width, height
    for _ in range(mips):
        length = ((w + 3) // 4) * ((h + 3) // 4) * BLOCK_BYTES[fmt]
        pw, ph = (w + 3) // 4 * 4, (h + 3) // 4 * 4
        bgra = np.frombuffer(getattr(texture2ddecoder, f"decode_{fmt}")(data[offset : offset + length], pw, ph), np.uint8).reshape(ph, pw, 4)
        levels.append(bgra[:h, :w, [2, 1, 0, 3]].astype(np.float32) / 255.0)
        offset += length
        w, h = max(1, w // 2), max(1, h // 2)
    assert offset == len(data), "bytes after the last level"
    return {"format": fmt, "srgb": srgb, "width": width, "height": height, "mips": mips}, levels


def _psnr(levels: list[np.ndarray], reference: list[np.ndarray], mip0: bool) -> float:
    pairs = list(zip(levels, reference))[:1] if mip0 else list(zip(levels, reference))
    error = sum(float(np.sum((a.astype(np.float64) - b) ** 2)) for a, b in pairs) / sum(b.size for _, b in pairs)
    return 10.0 * np.log10(1.0 / error)


def _check_against_reference(out: Path, report: dict, reference: list[np.ndarray], key: str) -> None:
    channel = 0
    for name, entry in report["textures"].items():
        header, levels = _read_dds(out / entry["file"])
        count = len(entry["channels"])
        assert (header["format"], header["srgb"], header["mips"]) == (entry["format"], entry["srgb"], entry["mips"])
        assert (header["width"], header["height"]) == (SIZE, SIZE) and header["mips"] == 6  # 32 .. 1
        assert [lv.shape[:2] for lv in levels] == [(SIZE >> k, SIZE >> k) for k in range(6)]
        ref = [level[..., channel : channel + count] for level in reference]
        got = [level[..., :count] for level in levels]
        assert _psnr(got, ref, mip0=True) == pytest.approx(entry["psnr"][key]["mip0_db"], abs=0.05), name
        assert _psnr(got, ref, mip0=False) == pytest.approx(entry["psnr"][key]["all_mips_db"], abs=0.05), name
        assert entry["bytes"] == (out / entry["file"]).stat().st_size
        channel += count


@pytest.mark.parametrize("spec", [None, "bc1", "bc3,roughness=bc4", "base_color=bc7,normal=bc5"])
def test_dds_decode_to_the_reported_psnr_against_the_source(ntc_folder: tuple[Path, list[str]], tmp_path: Path, spec: str | None) -> None:
    folder, sources = ntc_folder
    out = tmp_path / "bc"
    report = transcode(folder, out, formats=spec, device="cpu")
    assert sorted(p.name for p in out.iterdir()) == ["base_color.dds", "normal.dds", "report.json", "roughness.dds"]
    assert not any(p.name.endswith(".staging") for p in tmp_path.iterdir())
    base = {"bc1": "bc1", "bc3,roughness=bc4": "bc3"}.get(spec or "", "bc7")
    assert {n: t["format"] for n, t in report["textures"].items()} == {"base_color": base, "normal": "bc5", "roughness": "bc4"}
    assert {n: t["srgb"] for n, t in report["textures"].items()} == {"base_color": True, "normal": False, "roughness": False}
    assert report["reference"]["kind"] == "source"
    reference = load_texture_set(sources).mip_chain()
    _check_against_reference(out, report, reference, "transcoded_vs_source")
    on_disk = json.loads((out / "report.json").read_text())
    assert on_disk["textures"] == json.loads(json.dumps(report["textures"]))
    for entry in report["textures"].values():
        plain = entry["psnr"]["plain_bcn_of_source"]["mip0_db"]
        assert plain > entry["psnr"]["transcoded_vs_source"]["mip0_db"]  # a few training steps: NTC is the weaker link
    assert report["decode_seconds"] >= 0 and report["encode_seconds"] > 0


def test_pillow_reads_level_zero(ntc_folder: tuple[Path, list[str]], tmp_path: Path) -> None:
    """Pillow's DDS reader (it reads BC1/BC3 only in their linear variant, so those copies say linear: same blocks)."""
    folder, _ = ntc_folder
    for spec in (None, "bc1", "bc3"):
        out = tmp_path / (spec or "default")
        report = transcode(folder, out, formats=spec, device="cpu")
        for entry in report["textures"].values():
            data = bytearray((out / entry["file"]).read_bytes())
            _, levels = _read_dds(out / entry["file"])
            if entry["format"] in ("bc1", "bc3"):
                data[128:132] = struct.pack("<I", struct.unpack_from("<I", data, 128)[0] - 1)  # *_UNORM_SRGB -> *_UNORM
            with Image.open(io.BytesIO(bytes(data))) as image:
                pixels = np.asarray(image.convert("RGBA"), dtype=np.float32) / 255.0
            count = len(entry["channels"])
            assert image.size == (SIZE, SIZE)
            assert np.max(np.abs(pixels[..., :count] - levels[0][..., :count])) <= 1.5 / 255.0, entry["file"]


def test_without_the_sources_the_reference_is_the_ntc_decode(ntc_folder: tuple[Path, list[str]], tmp_path: Path) -> None:
    folder = tmp_path / "ntc"
    shutil.copytree(ntc_folder[0], folder)
    config = json.loads((folder / "config.json").read_text())
    config["sources"] = [str(tmp_path / "gone.png")]
    (folder / "config.json").write_text(json.dumps(config))
    write_bake_manifest(folder, bake="ntc")
    report = transcode(folder, tmp_path / "bc", device="cpu")
    assert report["reference"]["kind"] == "ntc_decode" and "gone.png" in report["reference"]["why_not_source"]
    decoded = decode_all_levels(open_container(folder))
    _check_against_reference(tmp_path / "bc", report, decoded, "transcoded_vs_ntc_decode")


def test_format_choice() -> None:
    from neuralbake.bakes.ntc import ChannelGroup

    groups = [ChannelGroup("base", ("R", "G", "B")), ChannelGroup("normal", ("X", "Y"), "normal_xy"), ChannelGroup("rough", ("R",), "data"),
              ChannelGroup("mask", ("R", "G", "B", "A"), "data")]
    assert choose_formats(groups, None) == {"base": "bc7", "normal": "bc5", "rough": "bc4", "mask": "bc7"}
    assert choose_formats(groups, ["bc1"]) == {"base": "bc1", "normal": "bc5", "rough": "bc4", "mask": "bc7"}
    assert choose_formats(groups, ["bc3", "rough=bc4,mask=bc7"]) == {"base": "bc3", "normal": "bc5", "rough": "bc4", "mask": "bc7"}
    with pytest.raises(ConfigError, match="unknown format 'bc9'"):
        choose_formats(groups, "bc9")
    with pytest.raises(ConfigError, match="no texture 'albedo'"):
        choose_formats(groups, "albedo=bc7")
    with pytest.raises(ConfigError, match=r"bc5 cannot hold base \(3 channels\)"):
        choose_formats(groups, "base=bc5")
    with pytest.raises(ConfigError, match="two formats for every texture"):
        choose_formats(groups, "bc1,bc7")
    with pytest.raises(ConfigError, match="fits none"):
        choose_formats(groups[:2], "bc4")


def test_refusals_leave_nothing_behind(ntc_folder: tuple[Path, list[str]], tmp_path: Path) -> None:
    folder, _ = ntc_folder
    target = tmp_path / "file.dds"
    target.write_bytes(b"keep")
    with pytest.raises(InputError, match="is a file"):
        transcode(folder, target, device="cpu")
    assert target.read_bytes() == b"keep"
    before = sorted(p.name for p in folder.iterdir())
    with pytest.raises(InputError, match="holds a bake"):
        transcode(folder, folder, device="cpu")
    assert sorted(p.name for p in folder.iterdir()) == before
    damaged = tmp_path / "damaged"
    shutil.copytree(folder, damaged)
    data = bytearray((damaged / "texture.ntc").read_bytes())
    data[len(data) // 2] ^= 0x10
    (damaged / "texture.ntc").write_bytes(bytes(data))
    with pytest.raises(BundleError, match="texture.ntc"):
        transcode(damaged, tmp_path / "out", device="cpu")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["damaged", "file.dds"]


def test_cli(ntc_folder: tuple[Path, list[str]], tmp_path: Path) -> None:
    folder, _ = ntc_folder
    result = _ntc_cli(["transcode", str(folder), "--out", str(tmp_path / "bc"), "--format", "bc1", "--format", "normal=bc5", "--device", "cpu", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "3 DDS files" in result.output and "vs the source" in result.output and "plain BCn of the source" in result.output
    assert json.loads((tmp_path / "bc" / "report.json").read_text())["textures"]["base_color"]["format"] == "bc1"
    result = _ntc_cli(["transcode", str(folder), "--out", str(tmp_path / "bad"), "--format", "bc6"])
    assert result.exit_code == 2 and "bc6" in result.output and not (tmp_path / "bad").exists()

import json
from pathlib import Path

from PIL import Image
from typer.testing import CliRunner

from neuralbake.cli import app

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "materials"


def test_material_preview_command(tmp_path):
    out = tmp_path / "preview"
    result = runner.invoke(
        app, ["material", "preview", str(EXAMPLES / "rusty_iron_nail.json"), "--out", str(out), "--size", "12", "--spp", "4", "--device", "cpu"]
    )
    assert result.exit_code == 0, result.output
    assert "BSDF samples/s" in result.output
    for name in ["sphere.exr", "tile.exr", "sphere.png", "tile.png", "preview.png", "report.json"]:
        assert (out / name).is_file(), name
    report = json.loads((out / "report.json").read_text())
    assert report["bsdf_evaluations_per_second"] > 0 and report["render"]["size"] == 12
    assert Image.open(out / "sphere.png").size == (12, 12)


def test_material_preview_bad_inputs(tmp_path):
    result = runner.invoke(app, ["material", "preview", str(tmp_path / "none.json"), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "does not exist" in result.output
    assert not (tmp_path / "o").exists()
    (tmp_path / "m.json").write_text('{"format": "neuralbake.material", "version": 1, "nodes": {"a": {"op": "swirl"}}, "surface": {}}')
    result = runner.invoke(app, ["material", "preview", str(tmp_path / "m.json"), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "swirl" in result.output and not (tmp_path / "o").exists()


def test_material_preview_help():
    for args in (["material", "--help"], ["material", "preview", "--help"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0 and "Usage" in result.output


SHARED_MTLX = Path(__file__).resolve().parents[2].parent / "shared" / "materialx"


def test_every_shared_materialx_document_previews():
    import pytest
    import torch

    from neuralbake.errors import InputError
    from neuralbake.material.loader import load_material
    from neuralbake.render.preview import render_preview

    if not SHARED_MTLX.is_dir():
        pytest.skip(f"{SHARED_MTLX} is absent (the team's shared MaterialX examples)")
    rendered, refused = [], []
    for path in sorted(SHARED_MTLX.glob("*.mtlx")):
        try:
            material = load_material(path)
        except InputError as exc:
            assert "transmission" in str(exc), f"{path.name}: {exc}"
            refused.append(path.name)
            continue
        images = render_preview(material, size=6, spp=2, device="cpu")
        assert all(torch.isfinite(image).all() and image.min() >= 0 for image in images.values()), path.name
        rendered.append(path.name)
    assert len(rendered) == 10 and refused == ["open_pbr_glass.mtlx"]

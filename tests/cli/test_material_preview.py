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

    from neuralbake.material.loader import load_material
    from neuralbake.render.preview import render_preview

    if not SHARED_MTLX.is_dir():
        pytest.skip(f"{SHARED_MTLX} is absent (the team's shared MaterialX examples)")
    rendered = []
    for path in sorted(SHARED_MTLX.glob("*.mtlx")):
        material = load_material(path)  # every one compiles, the glass included
        images = render_preview(material, size=6, spp=2, device="cpu")
        assert all(torch.isfinite(image).all() and image.min() >= 0 for image in images.values()), path.name
        rendered.append(path.name)
    assert len(rendered) == 11 and "open_pbr_glass.mtlx" in rendered


def test_glass_shows_what_lies_behind_it():
    """A glass tile previews the environment below it (light refracted through the surface), where the same surface
    with no transmission shows only its reflection."""
    import torch

    from neuralbake.material.mtlx_compiler import compile_materialx
    from neuralbake.render.preview import render_preview

    def tile(tmp: Path, transmission: str) -> torch.Tensor:
        path = tmp / f"t{transmission}.mtlx"
        path.write_text(f"""<?xml version="1.0"?>
<materialx version="1.39" colorspace="lin_rec709">
  <open_pbr_surface name="SR" type="surfaceshader">
    <input name="transmission_weight" type="float" value="{transmission}" />
    <input name="base_color" type="color3" value="0, 0, 0" />
    <input name="specular_roughness" type="float" value="0.2" />
  </open_pbr_surface>
  <surfacematerial name="M" type="material"><input name="surfaceshader" type="surfaceshader" nodename="SR" /></surfacematerial>
</materialx>
""")
        return render_preview(compile_materialx(path), size=16, spp=8, device="cpu", light="environment")["tile"]

    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        glass, black = tile(Path(folder), "1"), tile(Path(folder), "0")
    centre = (slice(6, 10), slice(6, 10))  # on the tile, away from the background around it
    assert float(glass[centre].mean()) > 1.8 * float(black[centre].mean())  # 2.4x measured

"""Confinement: a material (JSON or MaterialX) reads files only from its own folder.

A sentinel file sits beside the material's folder (``tmp_path/secret.*`` with the material in
``tmp_path/mat/``); a relative ``../``, an absolute path and a symlink that points out are each
refused with an InputError naming the field, and nothing about the outside file (its content,
its size) appears in the message. ``allow_outside_refs()`` (the CLI's --allow-outside-refs) lifts
the rule.
"""

from __future__ import annotations

import builtins
import io
import json
import os
from pathlib import Path

import MaterialX as mx
import numpy as np
import pytest
from PIL import Image

from neuralbake.errors import InputError
from neuralbake.io.materialx import load_materialx
from neuralbake.io.refs import allow_outside_refs
from neuralbake.material.graph import compile_material
from neuralbake.material.mtlx_compiler import compile_materialx

SECRET_TEXT = "TOP-SECRET-CONTENT-" * 37  # 703 characters: its size must not show in a message


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """``(material folder, outside secret image)``; the folder also holds a good ``inside.png``."""
    folder = tmp_path / "mat"
    folder.mkdir()
    pixels = np.full((4, 4, 3), 200, dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "secret.png")
    Image.fromarray(pixels).save(folder / "inside.png")
    return folder, tmp_path / "secret.png"


def _references(folder: Path, secret: Path) -> dict[str, str]:
    os.symlink(secret, folder / "link.png")
    return {"relative": "../secret.png", "absolute": str(secret), "symlink": "link.png"}


def _json_material(folder: Path, file: str) -> Path:
    document = {
        "format": "neuralbake.material",
        "version": 1,
        "nodes": {"tex": {"op": "texture", "file": file}},
        "surface": {"lobe": "lambert", "params": {"albedo": "@tex"}},
    }
    path = folder / "m.json"
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize("kind", ["relative", "absolute", "symlink"])
def test_json_texture_outside_the_folder_is_refused(layout, kind):
    folder, secret = layout
    file = _references(folder, secret)[kind]
    with pytest.raises(InputError, match="outside the input's folder") as info:
        compile_material(_json_material(folder, file))
    text = str(info.value)
    assert "nodes.tex.file" in text and "m.json" in text and "--allow-outside-refs" in text
    assert "4x4" not in text  # nothing read from the outside image


def test_json_texture_inside_the_folder_and_the_opt_in(layout):
    folder, secret = layout
    compile_material(_json_material(folder, "inside.png"))
    with allow_outside_refs():
        material = compile_material(_json_material(folder, "../secret.png"))
    assert material.parameters is not None


def _mtlx_image_document(folder: Path, file: str) -> Path:
    path = folder / "m.mtlx"
    path.write_text(
        f"""<?xml version="1.0"?>
<materialx version="1.39">
  <nodegraph name="NG">
    <image name="tex" type="color3">
      <input name="file" type="filename" value="{file}" />
    </image>
    <output name="out" type="color3" nodename="tex" />
  </nodegraph>
  <standard_surface name="SR" type="surfaceshader">
    <input name="base_color" type="color3" nodegraph="NG" output="out" />
  </standard_surface>
  <surfacematerial name="M" type="material">
    <input name="surfaceshader" type="surfaceshader" nodename="SR" />
  </surfacematerial>
</materialx>
"""
    )
    return path


@pytest.mark.parametrize("kind", ["relative", "absolute", "symlink"])
def test_materialx_image_outside_the_folder_is_refused(layout, kind):
    folder, secret = layout
    file = _references(folder, secret)[kind]
    with pytest.raises(InputError, match="outside the input's folder") as info:
        compile_materialx(_mtlx_image_document(folder, file))
    assert "NG/tex/file" in str(info.value) and "m.mtlx" in str(info.value)


def test_materialx_image_inside_and_the_opt_in(layout):
    folder, _ = layout
    compile_materialx(_mtlx_image_document(folder, "inside.png"))
    with allow_outside_refs():
        compile_materialx(_mtlx_image_document(folder, "../secret.png"))


_SHADER = """
  <standard_surface name="SR" type="surfaceshader" />
  <surfacematerial name="M" type="material">
    <input name="surfaceshader" type="surfaceshader" nodename="SR" />
  </surfacematerial>"""


def _include_document(folder: Path, href: str, name: str = "m.mtlx", shader: bool = True) -> Path:
    path = folder / name
    path.write_text(f'<?xml version="1.0"?>\n<materialx version="1.39">\n  <xi:include href="{href}" />{_SHADER if shader else ""}\n</materialx>\n')
    return path


@pytest.fixture
def opened(monkeypatch) -> list[str]:
    """Every path opened from Python or handed to MaterialX's reader during the test."""
    seen: list[str] = []
    real_open, real_read = builtins.open, mx.readFromXmlFile

    def spy_open(file, *args, **kwargs):
        seen.append(str(file))
        return real_open(file, *args, **kwargs)

    def spy_read(document, file, *args, **kwargs):
        seen.append(str(file))
        return real_read(document, file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy_open)
    monkeypatch.setattr(io, "open", spy_open)  # pathlib's read_bytes / read_text go through io.open
    monkeypatch.setattr(mx, "readFromXmlFile", spy_read)
    return seen


@pytest.mark.parametrize("kind", ["relative", "absolute", "symlink"])
def test_materialx_include_outside_the_folder_is_never_opened(tmp_path, opened, kind):
    folder = tmp_path / "mat"
    folder.mkdir()
    secret = tmp_path / "secret.mtlx"
    secret.write_text(SECRET_TEXT)  # not XML: MaterialX would quote its length in a parse error
    os.symlink(secret, folder / "link.mtlx")
    href = {"relative": "../secret.mtlx", "absolute": str(secret), "symlink": "link.mtlx"}[kind]
    document = _include_document(folder, href)
    opened.clear()
    with pytest.raises(InputError, match="outside the input's folder") as info:
        load_materialx(document)
    text = str(info.value)
    assert "xi:include[0]/href" in text
    assert "TOP-SECRET" not in text and str(len(SECRET_TEXT)) not in text and "character" not in text
    assert str(folder / "m.mtlx") in opened  # the spy sees reads...
    assert not any(Path(p).resolve() == secret for p in opened if os.path.exists(p)), opened  # ...and not this one


def test_materialx_include_of_etc_passwd(tmp_path, opened):
    folder = tmp_path / "mat"
    folder.mkdir()
    with pytest.raises(InputError, match="outside the input's folder") as info:
        load_materialx(_include_document(folder, "/etc/passwd"))
    assert "character" not in str(info.value)
    assert "/etc/passwd" not in [str(Path(p)) for p in opened]


def test_materialx_include_inside_the_folder_is_followed(tmp_path):
    folder = tmp_path / "mat"
    (folder / "lib").mkdir(parents=True)
    (folder / "lib" / "graphs.mtlx").write_text(
        '<?xml version="1.0"?>\n<materialx version="1.39">\n  <nodegraph name="NG_lib">\n'
        '    <constant name="c" type="float"><input name="value" type="float" value="0.25" /></constant>\n'
        '    <output name="out" type="float" nodename="c" />\n  </nodegraph>\n</materialx>\n'
    )
    document = load_materialx(_include_document(folder, "lib/graphs.mtlx"))
    assert [graph.name for graph in document.node_graphs] == ["NG_lib"]


def test_materialx_include_opt_in_cycle_and_doctype(tmp_path):
    folder = tmp_path / "mat"
    folder.mkdir()
    (tmp_path / "outside.mtlx").write_text('<?xml version="1.0"?>\n<materialx version="1.39">\n</materialx>\n')
    with allow_outside_refs():
        load_materialx(_include_document(folder, "../outside.mtlx"))
    _include_document(folder, "b.mtlx", name="a.mtlx")
    _include_document(folder, "a.mtlx", name="b.mtlx", shader=False)
    with pytest.raises(InputError, match="cycle"):
        load_materialx(folder / "a.mtlx")
    bomb = folder / "bomb.mtlx"
    bomb.write_text('<?xml version="1.0"?>\n<!DOCTYPE m [<!ENTITY a "aaaaaaaaaa">]>\n<materialx version="1.39">&a;</materialx>\n')
    with pytest.raises(InputError, match="DOCTYPE"):
        load_materialx(bomb)

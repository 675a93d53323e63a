"""The add-on as a zip Blender installs (Edit > Preferences > Add-ons > Install from Disk).

The zip holds one package, ``neuralbake_postfx/``: this folder's modules (not this one) and, under
``vendor/``, a copy of ``neuralbake/__init__.py``, ``neuralbake/version.py``, ``neuralbake/errors.py`` and ``neuralbake/client/``,
which the add-on puts on ``sys.path`` (Blender's Python cannot import the installed neuralbake). The
client needs only the standard library, so the copy runs in any Blender.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import neuralbake.client
import neuralbake.errors
import neuralbake.version
from neuralbake.io.files import atomic_path

__all__ = ["ADDON_PACKAGE", "addon_files", "write_addon_zip"]

ADDON_PACKAGE = "neuralbake_postfx"
"""The add-on's module name in Blender (its preferences are stored under it)."""

_HERE = Path(__file__).resolve().parent


def _vendored() -> dict[str, Path]:
    """The neuralbake modules the add-on carries, by their path under ``vendor/``."""
    client = Path(neuralbake.client.__file__).resolve().parent
    package = Path(neuralbake.errors.__file__).resolve().parent  # the top package itself stands above this layer
    files = {"neuralbake/__init__.py": package / "__init__.py", "neuralbake/version.py": Path(neuralbake.version.__file__),
             "neuralbake/errors.py": Path(neuralbake.errors.__file__)}
    files.update({f"neuralbake/client/{p.name}": p for p in sorted(client.glob("*.py"))})
    return files


def addon_files() -> dict[str, bytes]:
    """Every file of the zip, by its name in it."""
    files = {f"{ADDON_PACKAGE}/{p.name}": p.read_bytes() for p in sorted(_HERE.glob("*.py")) if p.name != Path(__file__).name}
    files.update({f"{ADDON_PACKAGE}/vendor/{name}": path.read_bytes() for name, path in _vendored().items()})
    return files


def write_addon_zip(out: str | Path) -> Path:
    """Write the add-on zip to ``out`` (whole or not at all)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in addon_files().items():
            archive.writestr(name, data)
    return out

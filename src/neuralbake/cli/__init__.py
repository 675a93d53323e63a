"""The ``neuralbake`` command line: one module per bake, its options generated from the bake's config.

``neuralbake texture|material|ntc|mipmap|fit ...``; each module here has a ``register(app)`` that
adds its commands. Bake commands are made by :func:`neuralbake.cli.common.bake_command` from the
config dataclasses (help from the field docstrings; settings resolve as defaults, then ``--config
FILE``, then the flags given), and every command reports its outcome through the one error handler
in :mod:`neuralbake.cli.common`.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console

from neuralbake.cli import fit, lod, material, mipmap, ntc, postfx, service, simplify, skin, texture
from neuralbake.cli.common import PlainErrorsGroup

__all__ = ["app", "main"]

app = typer.Typer(
    cls=PlainErrorsGroup,
    name="neuralbake",
    help="Bake heavy graphics assets into compact ones that render fast (neural textures, materials, LODs).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(
    allow_outside_refs: Annotated[
        bool,
        typer.Option(
            "--allow-outside-refs",
            help="Let files an input refers to (glTF buffers and images, material textures, MaterialX includes) "
            "lie outside that input's folder. Off by default: only trust inputs you made. May also follow the command.",
        ),
    ] = False,
) -> None:
    """Bake heavy graphics assets into compact ones that render fast (neural textures, materials, LODs)."""
    if allow_outside_refs:
        from neuralbake.io.refs import allow_outside_refs_for_this_process

        allow_outside_refs_for_this_process()


@app.command()
def version() -> None:
    """Print the neuralbake version and the versions it runs on."""
    from neuralbake.core.device import versions

    out = Console()
    for name, value in versions().items():
        out.print(f"{name} {value}", highlight=False)


for _module in (texture, material, ntc, mipmap, fit, simplify, skin, lod, postfx, service):
    _module.register(app)


def _normalise_argv(argv: list[str]) -> list[str]:
    """Accept ``--allow-outside-refs`` anywhere on the line, and refuse an empty ``--out``.

    An empty ``--out ""`` would silently mean the current folder (``Path("")`` is ``.``).
    """
    for i, arg in enumerate(argv):
        value = arg.split("=", 1)[1] if arg.startswith("--out=") else argv[i + 1] if arg in ("--out", "-o") and i + 1 < len(argv) else None
        if value is not None and not value.strip():
            Console(stderr=True).print("error: --out is empty. Fix: name the output folder (or file), e.g. --out out/result.", highlight=False, markup=False)
            raise SystemExit(2)
    flag = "--allow-outside-refs"
    if flag in argv[1:]:
        argv = [flag] + [a for a in argv if a != flag]
    return argv


def main() -> None:
    """Entry point of the ``neuralbake`` script."""
    app(args=_normalise_argv(sys.argv[1:]), prog_name="neuralbake")


if __name__ == "__main__":
    sys.exit(main())

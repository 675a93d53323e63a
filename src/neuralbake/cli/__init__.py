"""The ``neuralbake`` command line: one command per registered bake, its options generated from the bake's config.

Every entry of :data:`neuralbake.bakes.registry.BAKES` becomes a command (``neuralbake fit``, or a
subcommand of a group: ``neuralbake material pack``); the groups' other commands (``texture infer``,
``material export``, ``ntc decompress``, ``postfx conditions``...) and the service's commands are
written out in their modules here. Bake commands are made by
:func:`neuralbake.cli.common.bake_command` from the config dataclasses (help from the field docstrings; settings resolve as defaults, then ``--config
FILE``, then the flags given), and every command reports its outcome through the one error handler
in :mod:`neuralbake.cli.common`.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console

from neuralbake.bakes.registry import BAKES
from neuralbake.cli import service
from neuralbake.cli.common import PlainErrorsGroup, bake_command
from neuralbake.cli.material import material_app
from neuralbake.cli.ntc import ntc_app
from neuralbake.cli.postfx import postfx_app
from neuralbake.cli.texture import texture_app
from neuralbake.core.device import versions
from neuralbake.io.refs import allow_outside_refs_for_this_process
from neuralbake.version import __version__

__all__ = ["GROUPS", "app", "main"]

app = typer.Typer(
    cls=PlainErrorsGroup,
    name="neuralbake",
    help="Bake heavy graphics assets into compact ones that render fast (neural textures, materials, LODs).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(given: bool) -> None:
    """``--version``: print ``neuralbake X.Y.Z`` and stop (the fuller record is ``neuralbake version``)."""
    if given:
        Console().print(f"neuralbake {__version__}", highlight=False, markup=False)
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the neuralbake version and exit."),
    ] = False,
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

        allow_outside_refs_for_this_process()


@app.command()
def version() -> None:
    """Print the neuralbake version and the versions it runs on."""
    out = Console()
    for name, value in versions().items():
        out.print(f"{name} {value}", highlight=False)


GROUPS: dict[str, typer.Typer] = {"texture": texture_app, "material": material_app, "ntc": ntc_app, "postfx": postfx_app}
"""Command groups that hold bakes and other commands; a registered bake of two words goes into its group."""


def _add_bake_commands() -> None:
    added: set[str] = set()
    for entry in BAKES.values():
        if len(entry.command) == 1:
            bake_command(app, entry)
            continue
        group = entry.command[0]
        if group not in added:
            app.add_typer(GROUPS[group], name=group)
            added.add(group)
        bake_command(GROUPS[group], entry)


_add_bake_commands()
service.register(app)


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

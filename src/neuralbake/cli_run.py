"""How every neuralbake command reports its outcome: one line of plain text and an exit code.

A :class:`~neuralbake.errors.NeuralbakeError` (bad input, a bad config, a damaged bundle...) prints
``error: <message>`` on stderr and exits 2; a run stopped with Ctrl-C after saving its checkpoint
prints ``stopped: ...`` and exits 130 (the shell's code for SIGINT). Anything else is a bug and
keeps its traceback. Messages are printed as text, never as rich markup: a path such as
``a[red]b.png`` or ``x[/y]`` is shown as it is written.

A command that fails removes the output folder it created itself (nothing is left of a run that
produced nothing usable); a folder that existed before, or one holding a checkpoint of an
interrupted run, is kept.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from neuralbake.core.config import field_docs
from neuralbake.errors import NeuralbakeError
from neuralbake.nn.trainer import TrainingInterrupted

__all__ = ["option_help", "print_done", "run_action"]

_err = Console(stderr=True)
_out = Console()
T = TypeVar("T")


def _first_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (what a run would create)."""
    path = path.absolute()
    if path.exists():
        return None
    while not path.parent.exists() and path.parent != path:
        path = path.parent
    return path


def _remove_created(created: Path | None) -> None:
    if created is not None and created.is_dir() and not created.is_symlink():
        shutil.rmtree(created, ignore_errors=True)


def run_action(action: Callable[[], T], *, out: Path | None = None) -> T:
    """Run ``action``, turning neuralbake errors into a one-line message and an exit code.

    ``out``: the command's output folder (or file); if the command creates it and then fails with
    an error (not an interrupt that saved a checkpoint), it is removed again.
    """
    created = _first_missing(out) if out is not None else None
    try:
        return action()
    except TrainingInterrupted as exc:
        _err.print(Text.assemble(("stopped:", "yellow"), " ", str(exc)), highlight=False)
        raise typer.Exit(130) from exc
    except NeuralbakeError as exc:
        _remove_created(created)
        _err.print(Text.assemble(("error:", "red"), " ", str(exc)), highlight=False)
        raise typer.Exit(2) from exc
    except BaseException:
        _remove_created(created)
        raise


def print_done(message: str) -> None:
    """Print a command's closing summary: ``done`` and ``message``, as plain text."""
    _out.print(Text.assemble(("done", "bold green"), " ", message), highlight=False)


def _shown(value: Any) -> str:
    if isinstance(value, tuple | list):
        return ",".join(str(v) for v in value)
    return str(value)


def option_help(cls: type, name: str, instance: Any | None = None, *, extra: str = "") -> str:
    """An option's help: the config field's docstring, ``extra``, and ``[default: X]`` from ``instance``.

    Every command shows defaults the same way typer does for literal defaults (``[default: X]``);
    a ``None`` default is not shown (the docstring says what ``None`` means). Docstring markup
    (double backticks) is reduced to single ones, and square brackets are escaped so that rich
    shows them instead of reading them as style tags.
    """
    text = " ".join(part for part in (field_docs(cls).get(name, ""), extra) if part).replace("``", "`")
    text = text.replace("[", "\\[")
    if instance is not None and getattr(instance, name) is not None:
        text += f" \\[default: {_shown(getattr(instance, name))}]"
    return text

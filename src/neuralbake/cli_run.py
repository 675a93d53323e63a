"""How every neuralbake command reports failure: one line on stderr and an exit code.

A :class:`~neuralbake.errors.NeuralbakeError` (bad input, a bad config, a damaged bundle...) prints
``error: <message>`` and exits 2; a run stopped with Ctrl-C after saving its checkpoint prints
``stopped: ...`` and exits 130 (the shell's code for SIGINT). Anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import typer
from rich.console import Console

from neuralbake.errors import NeuralbakeError
from neuralbake.nn.trainer import TrainingInterrupted

__all__ = ["run_action"]

_err = Console(stderr=True)
T = TypeVar("T")


def run_action(action: Callable[[], T]) -> T:
    """Run ``action``, turning neuralbake errors into a one-line message and an exit code."""
    try:
        return action()
    except TrainingInterrupted as exc:
        _err.print(f"[yellow]stopped:[/] {exc}", highlight=False)
        raise typer.Exit(130) from exc
    except NeuralbakeError as exc:
        _err.print(f"[red]error:[/] {exc}", highlight=False)
        raise typer.Exit(2) from exc

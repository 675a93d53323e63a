"""Error types shared by every layer of neuralbake.

Every error a user can trigger names what was wrong (the file and, where there is one, the field)
and how to fix it. The message is assembled here once so that the CLI, the Python API and the
asset service all print the same sentence.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = [
    "BundleError",
    "short_repr",
    "ConfigError",
    "InputError",
    "NeuralbakeError",
    "TrainingError",
]


class NeuralbakeError(Exception):
    """Base class: a problem the user can act on.

    Parameters
    ----------
    problem:
        What is wrong, in one sentence.
    path:
        The file or folder concerned, if any.
    field:
        The field, key, layer or option concerned, if any.
    fix:
        What the user should do about it.
    """

    def __init__(
        self,
        problem: str,
        *,
        path: str | Path | None = None,
        field: str | None = None,
        fix: str | None = None,
    ) -> None:
        self.problem = problem
        self.path = None if path is None else str(path)
        self.field = field
        self.fix = fix
        super().__init__(self._format())

    def _format(self) -> str:
        where = ": ".join(part for part in (self.path, self.field) if part)
        text = f"{where}: {self.problem}" if where else self.problem
        if self.fix:
            text += f" Fix: {self.fix}"
        return text


class InputError(NeuralbakeError):
    """An input file or argument cannot be used."""


class ConfigError(NeuralbakeError):
    """A configuration value or file is invalid."""


class BundleError(NeuralbakeError):
    """A network bundle is missing, truncated, corrupt or inconsistent."""


class TrainingError(NeuralbakeError):
    """Training cannot continue (diverged, or a checkpoint does not fit the run)."""


def short_repr(value: Any, limit: int = 80) -> str:
    """``repr`` cut to ``limit`` characters: a message must not echo a whole (possibly huge) input."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."

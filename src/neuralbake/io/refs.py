"""Confinement: the one rule for files that an input refers to.

A glTF names its buffers and images, a material its textures, a MaterialX document its includes,
a bundle manifest its files. Every such reference is resolved here, and only inside the folder of
the input that names it (after symlinks are resolved), so a hostile or careless input cannot make
neuralbake read ``/etc/passwd`` into vertex colours or leak a file's size through an error. An
absolute path, a ``..`` that climbs out, or a symlink that points out is refused with an
:class:`~neuralbake.errors.InputError` naming the reference and the fix.

A user who trusts an asset laid out across folders can lift the rule for one command with the
CLI's ``--allow-outside-refs`` (which enters :func:`allow_outside_refs`); the asset service never
does. Data URIs are not file references and are not affected.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from pathlib import Path

from neuralbake.errors import InputError

__all__ = ["allow_outside_refs", "allow_outside_refs_for_this_process", "outside_refs_allowed", "resolve_reference"]

_ALLOWED: contextvars.ContextVar[bool] = contextvars.ContextVar("neuralbake_outside_refs", default=False)


@contextlib.contextmanager
def allow_outside_refs(allowed: bool = True) -> Iterator[None]:
    """Within the block, references may resolve outside their input's folder (CLI opt-in only)."""
    token = _ALLOWED.set(bool(allowed))
    try:
        yield
    finally:
        _ALLOWED.reset(token)


def allow_outside_refs_for_this_process() -> None:
    """Lift the rule until the process ends: the CLI's ``--allow-outside-refs`` (one process, one command)."""
    _ALLOWED.set(True)


def outside_refs_allowed() -> bool:
    """Whether :func:`allow_outside_refs` is in force."""
    return _ALLOWED.get()


def resolve_reference(source: str | Path, reference: str, *, field: str, what: str = "file") -> Path:
    """Resolve ``reference`` (as written in ``source``) to a path inside ``source``'s folder.

    Parameters
    ----------
    source:
        The input file that names the reference (a ``.gltf``, a material ``.json``, a ``.mtlx``,
        a bundle manifest). Its folder is the only place references may resolve to.
    reference:
        The path as written in the input (already URI-unquoted where the format quotes it).
    field:
        Where the reference stands in the input (``images[2].uri``, ``layers[0].texture.file``).
    what:
        What the referenced file is, for the message (``buffer``, ``texture image``...).

    Returns
    -------
    Path
        The resolved path (symlinks resolved). Whether it exists is the caller's check.

    Raises
    ------
    InputError
        If the reference is empty, absolute, or resolves (through ``..`` or a symlink) outside
        the folder of ``source``, unless :func:`allow_outside_refs` is in force.
    """
    source = Path(source)
    if not isinstance(reference, str) or not reference.strip():
        raise InputError(f"the {what} reference is empty.", path=source, field=field, fix="name a file beside the input.")
    if "\x00" in reference:
        raise InputError(f"the {what} reference contains a NUL character.", path=source, field=field, fix="name a file beside the input.")
    folder = source.parent.resolve()
    written = Path(reference)
    target = (folder / written).resolve()
    if outside_refs_allowed():
        return target
    if written.is_absolute() or written.drive or not target.is_relative_to(folder):
        raise InputError(
            f"the {what} {reference!r} lies outside the input's folder {folder}; neuralbake reads referenced files "
            "only from the folder of the file that names them.",
            path=source,
            field=field,
            fix="copy the file beside the input and refer to it by a relative path, or, if you trust this input, "
            "run the command with --allow-outside-refs.",
        )
    return target

"""Config fields that name files: declared once, as a type, and found at any depth.

A config field whose value is the path of a file or folder that a bake reads is annotated with
:data:`InputPath` (or :data:`InputPathOrFolder`, or ``Annotated[str, PathField(...)]`` for a value
with more around the path, such as ``NAME=PATH`` or ``PATH:WEIGHT``) instead of plain ``str``. To
the config loader it is a string like any other; the type is what the rules follow:
:func:`path_fields` lists every such field of a config type, through nested configs, lists of
configs and a chain's per-stage settings (:class:`StageConfigs`), and :func:`map_paths` rewrites
their values in a config's dict form (what a request or a stored job holds). The asset service
confines every one of them to the caller's uploads this way (:mod:`neuralbake.service.paths`), so
a new field that names a file is covered the day it is declared, without a list to keep.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from neuralbake.errors import ConfigError, short_repr

__all__ = ["InputPath", "InputPathOrFolder", "LibraryFolder", "PathField", "PathSpec", "StageConfigs", "map_paths", "path_fields"]


def _whole(value: str) -> tuple[str, str, str]:
    return "", value, ""


@dataclass(frozen=True)
class PathField:
    """Marks a ``str`` config field (or the items of a list of them) as naming a file the bake reads."""

    folder: bool = False
    """The value may name a folder (a frame sequence, a baked bundle), not only a file."""
    library: bool = False
    """The value names an entry of the asset service's model library (diffusion models, LoRAs), not an upload."""
    split: Callable[[str], tuple[str, str, str]] = _whole
    """``value -> (head, path, tail)`` for values with more than the path (``NAME=PATH``, ``PATH:WEIGHT``);
    ``head + path + tail`` gives the value back. May raise a ConfigError for a malformed value."""


InputPath = Annotated[str, PathField()]
"""A config field holding the path of one file a bake reads."""
InputPathOrFolder = Annotated[str, PathField(folder=True)]
"""A config field holding the path of a file or of a folder a bake reads."""
LibraryFolder = Annotated[str, PathField(folder=True, library=True)]
"""A model folder (diffusers layout) that the asset service takes from its model library, by name."""


@dataclass(frozen=True)
class StageConfigs:
    """Marks a ``dict[stage, dict[setting, value]]`` field whose inner dicts are settings of other
    configs (a chain's stages): ``configs()`` gives each stage's config type (called late, so a
    chain's module need not import its stages' modules at import time)."""

    configs: Callable[[], Mapping[str, type]]


@dataclass(frozen=True)
class PathSpec:
    """One path field of a config type, as :func:`path_fields` lists it."""

    name: str
    """Dotted name (``image``, ``bake.material``, ``passes[].loras``, ``stage_options.fit.warm_start``)."""
    field: PathField
    many: bool
    """A list of paths rather than one."""


def _unwrap(hint: Any) -> tuple[Any, PathField | StageConfigs | None, bool]:
    """``hint`` -> (the type inside Optional/Annotated, its path or stage marker, whether it is a list of it)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(args) == 1:
            return _unwrap(args[0])
        return hint, None, False
    if origin is Annotated:
        base, *extras = typing.get_args(hint)
        for extra in extras:
            if isinstance(extra, PathField | StageConfigs):
                return base, extra, False
        return _unwrap(base)
    if origin in (list, tuple):
        args = [arg for arg in typing.get_args(hint) if arg is not Ellipsis]
        if len(args) == 1:
            inner, marker, many = _unwrap(args[0])
            if isinstance(marker, PathField) and not many:
                return inner, marker, True
            if dataclasses.is_dataclass(inner) and marker is None:
                return inner, None, True
    return hint, None, False


def _hints(config_type: type) -> dict[str, Any]:
    return typing.get_type_hints(config_type, include_extras=True)


def _init_fields(config_type: type) -> list[str]:
    return [item.name for item in dataclasses.fields(config_type) if item.init]


def path_fields(config_type: type, prefix: str = "") -> list[PathSpec]:
    """Every path field of a config dataclass at any depth (see the module docstring)."""
    out: list[PathSpec] = []
    hints = _hints(config_type)
    for name in _init_fields(config_type):
        inner, marker, many = _unwrap(hints[name])
        if isinstance(marker, PathField):
            out.append(PathSpec(prefix + name, marker, many))
        elif isinstance(marker, StageConfigs):
            for stage, stage_type in marker.configs().items():
                out += path_fields(stage_type, f"{prefix}{name}.{stage}.")
        elif dataclasses.is_dataclass(inner):
            out += path_fields(inner, f"{prefix}{name}{'[]' if many else ''}.")
    return out


Rewrite = Callable[[str, str, PathField], str]
"""``(dotted name, path, marker) -> new path``: what :func:`map_paths` applies to each path."""


def map_paths(config_type: type, data: Mapping[str, Any], rewrite: Rewrite, prefix: str = "") -> dict[str, Any]:
    """A copy of ``data`` (a config's dict form) with every path in a path field replaced by
    ``rewrite(name, path, marker)``; the text around a path (``NAME=``, ``:WEIGHT``) is kept.

    A path field holding anything but a string (or, for a list field, a list of strings) is refused
    with a ConfigError naming it; other values of the wrong shape are left for the config loader to
    refuse. Every value that could reach a reader goes through ``rewrite``.
    """
    if not isinstance(data, Mapping):
        return data  # type: ignore[return-value]
    out = dict(data)
    hints = _hints(config_type)
    for name in _init_fields(config_type):
        if name not in data:
            continue
        value, dotted = data[name], prefix + name
        inner, marker, many = _unwrap(hints[name])
        if isinstance(marker, PathField):
            if many and isinstance(value, list | tuple):
                out[name] = [_rewrite_one(f"{dotted}[{i}]", item, marker, rewrite) for i, item in enumerate(value)]
            elif many and value is not None:
                raise ConfigError(f"expected a list of file names, got {short_repr(value)}.", field=f"config.{dotted}", fix='write e.g. ["a.png"].')
            elif value is not None:
                out[name] = _rewrite_one(dotted, value, marker, rewrite)
        elif isinstance(marker, StageConfigs) and isinstance(value, Mapping):
            out[name] = _map_stages(marker, value, rewrite, dotted)
        elif dataclasses.is_dataclass(inner):
            if many and isinstance(value, list | tuple):
                out[name] = [map_paths(inner, item, rewrite, f"{dotted}[{i}].") for i, item in enumerate(value)]
            elif isinstance(value, Mapping):
                out[name] = map_paths(inner, value, rewrite, f"{dotted}.")
    return out


def _rewrite_one(dotted: str, value: Any, marker: PathField, rewrite: Rewrite) -> Any:
    if not isinstance(value, str):
        # Refused here, not left to a loader: a chain's stage options hold untyped values, and
        # str(123) would be a path relative to wherever the reader runs.
        raise ConfigError(f"expected a file's name as a string, got {short_repr(value)}.", field=f"config.{dotted}", fix="write it as a string.")
    if value == "":
        return value  # unset
    head, path, tail = marker.split(value)
    return head + rewrite(dotted, path, marker) + tail


def _map_stages(marker: StageConfigs, stages: Mapping[str, Any], rewrite: Rewrite, dotted: str) -> dict[str, Any]:
    """A chain's per-stage settings: dotted keys (``train.steps``) or nested tables, each against its stage's config."""
    configs = marker.configs()
    out: dict[str, Any] = {}
    for stage, options in stages.items():
        stage_type = configs.get(stage)
        if stage_type is None or not isinstance(options, Mapping):
            out[stage] = options  # an unknown stage or a malformed table: the chain's validate() refuses it
            continue
        rewritten = {}
        for key, value in options.items():
            if not isinstance(key, str):
                rewritten[key] = value
                continue
            *parents, last = key.split(".")
            owner = stage_type
            for part in parents:
                hint = _hints(owner).get(part) if dataclasses.is_dataclass(owner) else None
                owner = _unwrap(hint)[0] if hint is not None else None
            if owner is None or not dataclasses.is_dataclass(owner):
                rewritten[key] = value
                continue
            # One field of the stage's config (or a nested table of one): rewrite it as that config would.
            single = map_paths(owner, {last: value}, rewrite, f"{dotted}.{stage}.{'.'.join(parents) + '.' if parents else ''}")
            rewritten[key] = single[last] if last in single else value
        out[stage] = rewritten
    return out

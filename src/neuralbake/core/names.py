"""One name per setting: how ``--set KEY=VALUE`` keys turn into a config's fields.

A setting's name is its config field's dotted path (``texture_size``, ``train.steps``): what a
``--config`` file and the asset service's web UI use. On the command line its flag is that field's
own name (``--texture-size``, ``--steps``) or a shorter alias of it (``--size``, ``--lr``; see
:func:`neuralbake.cli.common.config_flags`), and both are accepted. ``neuralbake submit --set``
takes the same spellings: a field path or a flag name of the kind's command, with dashes or
underscores (``--set size=256`` is ``texture_size``). A chain's ``--set STAGE.FIELD=VALUE``
(``neuralbake lod``) names one stage's setting the same way (:func:`stage_settings`).
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from neuralbake.core.paths import StageConfigs
from neuralbake.errors import ConfigError, short_repr

__all__ = ["field_paths", "parse_value", "resolve_key", "setting_keys", "split_setting", "stage_settings", "stage_types"]


def field_paths(config_type: type, prefix: str = "") -> dict[str, bool]:
    """Every settable field of a config dataclass as a dotted path -> whether it holds a table of its own
    (a field that is a dataclass is walked into, and not listed itself)."""
    out: dict[str, bool] = {}
    hints = typing.get_type_hints(config_type)
    for item in dataclasses.fields(config_type):
        if not item.init:
            continue
        hint = hints[item.name]
        if dataclasses.is_dataclass(hint):
            out.update(field_paths(hint, f"{prefix}{item.name}."))
            continue
        base = typing.get_origin(hint) or hint
        out[prefix + item.name] = base is dict or (isinstance(base, type) and issubclass(base, Mapping))
    return out


def setting_keys(config_type: type, flags: Iterable[Any] = ()) -> dict[str, str]:
    """Every accepted spelling of ``config_type``'s settings -> its dotted field path.

    ``flags``: the command's generated options (:class:`neuralbake.cli.common.Flag`: ``path``, ``name``,
    ``aliases``); each flag's names count with dashes and with underscores. A field path always means
    itself, even where a flag of another field has that name.
    """
    keys: dict[str, str] = {}
    for flag in flags:
        for name in (flag.name, *flag.aliases):
            for spelling in (name, name.replace("-", "_")):
                keys.setdefault(spelling, flag.path)
    keys.update({path: path for path in field_paths(config_type)})
    return keys


def resolve_key(key: str, config_type: type, keys: Mapping[str, str]) -> str | None:
    """The dotted field path a ``--set`` key names (``size`` -> ``texture_size``); a key inside a field
    that holds a table (``stage_options.fit.epochs``) is kept as given; ``None`` if it names no setting."""
    if key in keys:
        return keys[key]
    tables = [path for path, table in field_paths(config_type).items() if table]
    if any(key.startswith(path + ".") for path in tables):
        return key
    return None


def parse_value(text: str) -> Any:
    """A ``--set`` value: JSON where it parses (``500``, ``true``, ``[1, 2]``), else the text itself."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def split_setting(item: str, *, example: str) -> tuple[str, Any]:
    """``KEY=VALUE`` -> ``(KEY, value)`` (:func:`parse_value`); a :class:`ConfigError` naming ``--set`` otherwise."""
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"{short_repr(item)} is not KEY=VALUE.", field="--set", fix=f"write e.g. --set {example}.")
    return key, parse_value(text)


def stage_types(config_type: type, field: str) -> Mapping[str, type]:
    """The stages of a chain's per-stage settings field (annotated with :class:`~neuralbake.core.paths.StageConfigs`)
    -> each stage's config type."""
    hint = typing.get_type_hints(config_type, include_extras=True)[field]
    for extra in getattr(hint, "__metadata__", ()):
        if isinstance(extra, StageConfigs):
            return extra.configs()
    raise TypeError(f"{config_type.__name__}.{field} is not annotated with StageConfigs")


def stage_settings(
    items: Sequence[str], stages: Mapping[str, type], keys_of: Callable[[str], Mapping[str, str]]
) -> dict[str, dict[str, Any]]:
    """``--set STAGE.FIELD=VALUE`` items -> ``{stage: {dotted field: value}}`` (later items win).

    ``FIELD`` is a field of that stage's config (dotted: ``train.steps``) or a flag name of the stage's
    own command (``size``, ``lr``); ``keys_of(stage)`` gives those spellings (:func:`setting_keys`). An
    unknown stage or field is a :class:`ConfigError` naming it and listing the valid ones. Values are
    checked later, as the stage's config file would check them.
    """
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, value = split_setting(item, example="fit.epochs=5")
        stage, dot, name = key.partition(".")
        if not dot or not name:
            raise ConfigError(
                f"{short_repr(item)} names no stage.",
                field="--set",
                fix=f"write STAGE.FIELD=VALUE with STAGE one of {', '.join(stages)}, e.g. --set fit.epochs=5.",
            )
        if stage not in stages:
            raise ConfigError(
                f"unknown stage {short_repr(stage)} in --set {short_repr(item)}.",
                field="--set",
                fix=f"name one of the stages: {', '.join(stages)} (e.g. --set fit.epochs=5).",
            )
        path = resolve_key(name, stages[stage], keys_of(stage))
        if path is None:
            valid = ", ".join(sorted(field_paths(stages[stage])))
            raise ConfigError(
                f"the {stage} stage has no setting {short_repr(name)}.",
                field=f"--set {stage}.{name}"[:80],
                fix=f"use one of its settings: {valid} (or a flag name of `neuralbake {stage}`).",
            )
        out.setdefault(stage, {})[path] = value
    return out

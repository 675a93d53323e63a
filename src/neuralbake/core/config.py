"""Dataclass configs: one source for the CLI, the Python API and the record saved beside a result.

Each config is a plain ``@dataclass`` whose fields carry a docstring (a string literal right under
the field, as in nerfstudio/tyro). :func:`field_docs` reads those docstrings from the source with
``ast`` so the CLI help and ``docs/`` quote the same sentence. Configs load from JSON or TOML with
strict checking (an unknown or mistyped key is an error naming the file, the key and the valid
keys) and are saved as JSON so any bake can be re-run exactly.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import json
import textwrap
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from neuralbake.errors import ConfigError
from neuralbake.io.files import atomic_write_json

__all__ = ["config_from_dict", "config_to_dict", "field_docs", "load_config", "save_config"]

C = TypeVar("C")


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Map each dataclass field of ``cls`` (and its dataclass bases) to its docstring."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass) or klass is object:
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        body = ast.parse(source).body[0].body  # type: ignore[attr-defined]
        for node, following in zip(body, body[1:] + [None]):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                docs[node.target.id] = inspect.cleandoc(following.value.value)
    return docs


def config_to_dict(config: Any) -> dict[str, Any]:
    """A JSON-ready dict of a (nested) dataclass config."""
    return dataclasses.asdict(config)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, where: str, source: str) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise ConfigError(f"expected a table/object for {_type_name(tp)}, got {value!r}.", path=source, field=where, fix="write it as a nested table.")
        return config_from_dict(tp, value, source=source, prefix=f"{where}.")
    if origin is typing.Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise ConfigError(f"{value!r} is not one of {list(choices)}.", path=source, field=where, fix=f"use one of {list(choices)}.")
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        last_error: ConfigError | None = None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where, source)
            except ConfigError as exc:
                last_error = exc
        assert last_error is not None
        raise last_error
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"expected a list, got {value!r}.", path=source, field=where, fix="write it as a list, e.g. [512, 512].")
        args = typing.get_args(tp)
        item_type = args[0] if args else Any
        items = [_coerce(item, item_type, f"{where}[{i}]", source) for i, item in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"expected true or false, got {value!r}.", path=source, field=where, fix="write true or false.")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"expected an integer, got {value!r}.", path=source, field=where, fix="write a whole number.")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"expected a number, got {value!r}.", path=source, field=where, fix="write a number.")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"expected a string, got {value!r}.", path=source, field=where, fix="quote the value.")
        return value
    return value


def config_from_dict(cls: type[C], data: Mapping[str, Any], *, source: str = "<config>", prefix: str = "") -> C:
    """Build ``cls`` from a mapping, checking every key and value type.

    Missing keys take their defaults; unknown keys are an error that lists the valid ones.
    """
    hints = typing.get_type_hints(cls)
    fields = {field.name: field for field in dataclasses.fields(cls) if field.init}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(
            f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(prefix + key for key in unknown)}.",
            path=source,
            field=prefix + unknown[0],
            fix=f"valid keys here are: {', '.join(sorted(fields))}.",
        )
    values = {key: _coerce(value, hints[key], prefix + key, source) for key, value in data.items()}
    return cls(**values)


def load_config(cls: type[C], path: str | Path) -> C:
    """Load a config from a ``.json`` or ``.toml`` file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("the config file does not exist.", path=path, fix="check the path given to --config.")
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix.lower() == ".toml":
            data = tomllib.loads(text)
        elif path.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            raise ConfigError("unknown config file type.", path=path, fix="use a .json or .toml file.")
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"the file cannot be parsed ({exc}).", path=path, fix="correct the syntax.") from exc
    if not isinstance(data, dict):
        raise ConfigError("the config must be a table/object at the top level.", path=path, fix="wrap the settings in {...}.")
    return config_from_dict(cls, data, source=str(path))


def save_config(path: str | Path, config: Any) -> None:
    """Save the resolved config as JSON (atomically)."""
    atomic_write_json(path, config_to_dict(config))

"""Dataclass configs: one source for the CLI, the Python API and the record saved beside a result.

Each config is a plain ``@dataclass`` whose fields carry a docstring (a string literal right under
the field, as in nerfstudio/tyro). :func:`field_docs` reads those docstrings from the source with
``ast`` so the CLI help and ``docs/`` quote the same sentence. Configs load from JSON or TOML with
strict checking (an unknown or mistyped key is an error naming the file, the key and the valid
keys) and are saved as JSON so any bake can be re-run exactly.

A config file is input like any other: it is read with the shared limits (size, nesting; see
:mod:`neuralbake.io.limits`) so that a 100,000-deep document is an error, not a ``RecursionError``,
and every value is checked against its field's type (finite floats, integers that fit in 64 bits,
tuples of the declared length); every problem is a :class:`~neuralbake.errors.ConfigError`
naming the file and the field.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import math
import re
import textwrap
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from neuralbake.errors import ConfigError, InputError, short_repr
from neuralbake.io.files import atomic_write_json
from neuralbake.io.limits import MAX_JSON_DEPTH, bracket_depth, data_depth, parse_json_text

__all__ = ["coerce_field", "config_from_dict", "config_to_dict", "field_docs", "load_config", "save_config"]

C = TypeVar("C")

MAX_CONFIG_BYTES = 1024 * 1024
"""Largest config file read (a real one is a few hundred bytes)."""

_INT_LIMIT = 2**63
"""Integers must fit in a signed 64-bit integer (what torch and numpy compute with)."""


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


_show = short_repr


def _coerce(value: Any, tp: Any, where: str, source: str) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise ConfigError(f"expected a table/object for {_type_name(tp)}, got {_show(value)}.", path=source, field=where, fix="write it as a nested table.")
        return config_from_dict(tp, value, source=source, prefix=f"{where}.")
    if origin is typing.Literal:
        choices = typing.get_args(tp)
        # Same type and value: `True == 1` and `1.0 == 1` must not pass for a choice of 1 / True.
        if not any(type(choice) is type(value) and choice == value for choice in choices):
            raise ConfigError(f"{_show(value)} is not one of {list(choices)}.", path=source, field=where, fix=f"use one of {list(choices)}.")
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
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"expected a table/object, got {_show(value)}.", path=source, field=where, fix="write it as a nested table.")
        key_type, value_type = typing.get_args(tp) or (str, Any)
        out = {}
        for key, item in value.items():
            if not isinstance(key, str) or not key:
                raise ConfigError(f"the key {_show(key)} is not a name.", path=source, field=where, fix="use names as keys.")
            out[key] = _coerce(item, value_type, f"{where}.{key}", source)
        return out
    if origin in (tuple, list):
        args = typing.get_args(tp)
        fixed = origin is tuple and args and args[-1] is not Ellipsis
        if not isinstance(value, (list, tuple)):
            if not fixed and isinstance(value, str | int | float):  # one value of a list field: "bpp": 4 is [4]
                value = [value]
            else:
                example = ", ".join(_example(arg) for arg in args) if fixed else _example(args[0] if args else Any)
                raise ConfigError(f"expected a list, got {_show(value)}.", path=source, field=where, fix=f"write it as a list, e.g. [{example}].")
        if fixed:
            # tuple[int, int]: exactly that many items, each of its own type.
            if len(value) != len(args):
                raise ConfigError(
                    f"expected a list of {len(args)} items, got {len(value)}.",
                    path=source,
                    field=where,
                    fix=f"write {len(args)} values, e.g. [{', '.join(_example(arg) for arg in args)}].",
                )
            return tuple(_coerce(item, arg, f"{where}[{i}]", source) for i, (item, arg) in enumerate(zip(value, args)))
        item_type = args[0] if args else Any
        items = [_coerce(item, item_type, f"{where}[{i}]", source) for i, item in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"expected true or false, got {_show(value)}.", path=source, field=where, fix="write true or false.")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"expected an integer, got {_show(value)}.", path=source, field=where, fix="write a whole number.")
        if not -_INT_LIMIT <= value < _INT_LIMIT:
            raise ConfigError(f"the integer {_show(value)} is too large.", path=source, field=where, fix="write a whole number of at most 18 digits.")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"expected a number, got {_show(value)}.", path=source, field=where, fix="write a number.")
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise ConfigError(f"{_show(value)} is not a finite number.", path=source, field=where, fix="write a finite number (no NaN, no infinity, at most about 1e308).")
        return number
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"expected a string, got {_show(value)}.", path=source, field=where, fix="quote the value.")
        if "\x00" in value:
            raise ConfigError("the string contains a NUL character.", path=source, field=where, fix="remove it.")
        return value
    return value


def coerce_field(cls: type, dotted: str, value: Any, *, source: str = "<config>", prefix: str = "") -> Any:
    """``value`` checked as the field ``dotted`` (``train.steps``) of the config dataclass ``cls`` is
    checked when a config file is loaded; errors name ``prefix + dotted``."""
    owner, parts = cls, dotted.split(".")
    for depth, part in enumerate(parts):
        fields = {item.name for item in dataclasses.fields(owner) if item.init} if dataclasses.is_dataclass(owner) else set()
        if part not in fields:
            raise ConfigError(f"{part!r} is not a setting here.", path=source, field=prefix + dotted,
                              fix=f"valid keys here are: {', '.join(sorted(fields))}." if fields else "name a setting.")
        hint = typing.get_type_hints(owner)[part]
        if depth == len(parts) - 1:
            return _coerce(value, hint, prefix + dotted, source)
        owner = hint
    raise AssertionError(dotted)  # pragma: no cover - the loop returns


def _example(tp: Any) -> str:
    return {int: "512", float: "0.5", str: '"text"', bool: "true"}.get(tp, "...")


def _default_of(item: dataclasses.Field) -> Any:
    if item.default_factory is not dataclasses.MISSING:
        return item.default_factory()
    return None if item.default is dataclasses.MISSING else item.default


def _overlay(base: dict[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``given``'s keys put over it, nested tables key by key."""
    out = dict(base)
    for key, value in given.items():
        out[key] = _overlay(out[key], value) if isinstance(out.get(key), dict) and isinstance(value, Mapping) else value
    return out


def config_from_dict(cls: type[C], data: Mapping[str, Any], *, source: str = "<config>", prefix: str = "") -> C:
    """Build ``cls`` from a mapping, checking every key and value type.

    Missing keys take their defaults; unknown keys are an error that lists the valid ones.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"expected a table/object of settings, got {_show(data)}.", path=source, field=prefix.rstrip(".") or None, fix="wrap the settings in {...}."
        )
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
    values = {}
    for key, value in data.items():
        default = _default_of(fields[key])
        if dataclasses.is_dataclass(default) and isinstance(value, Mapping):
            # A nested table changes only the keys it names: the rest keep this field's default (a bake's
            # own training defaults), not the nested class's.
            value = _overlay(dataclasses.asdict(default), value)  # type: ignore[arg-type]
        values[key] = _coerce(value, hints[key], prefix + key, source)
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:  # a __post_init__ that refuses a combination of values
        raise ConfigError(f"the settings cannot be combined ({exc}).", path=source, field=prefix.rstrip(".") or None, fix="correct the values named.") from exc


# A TOML string or comment (so that brackets and dots inside them are not counted).
_TOML_SKIP = re.compile(r'"""(?:[^\\]|\\.)*?"""|\'\'\'.*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*', re.S)
_FLOAT_DOT = re.compile(r"\d\.\d")  # 1.5: a dot that is not a key separator


def _toml_nesting(text: str) -> int:
    """An upper bound, from the text, on how deep a TOML document nests: brackets and dotted keys.

    ``tomllib`` recurses on brackets and is quadratic in the length of a dotted key
    (``a.a.a...`` 40,000 deep takes 40 s), so the nesting is bounded before it parses.
    """
    stripped = _TOML_SKIP.sub('""', text)
    deepest = bracket_depth(stripped)
    # A dotted key stays on one line; at least half the dots of "1.2.3..." still count.
    dots = max((line.count(".") - len(_FLOAT_DOT.findall(line)) for line in stripped.splitlines()), default=0)
    return max(deepest, dots + 1)


def load_config(cls: type[C], path: str | Path) -> C:
    """Load a config from a ``.json`` or ``.toml`` file.

    Raises
    ------
    ConfigError
        The file is missing, unreadable, not UTF-8, too large, nested too deeply, malformed, or a
        key or value does not fit ``cls`` (the message names the file and the field).
    """
    path = Path(path)
    if not path.is_file():
        what = "is a folder, not a file" if path.is_dir() else "does not exist"
        raise ConfigError(f"the config file {what}.", path=path, fix="check the path given to --config.")
    suffix = path.suffix.lower()
    if suffix not in (".json", ".toml"):
        raise ConfigError("unknown config file type.", path=path, fix="use a .json or .toml file.")
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(f"the config file is {size:,} bytes; at most {MAX_CONFIG_BYTES:,} is read.", path=path, fix="pass the right file.")
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"the config file is not UTF-8 text ({exc.reason}).", path=path, fix="save it as UTF-8.") from exc
    except OSError as exc:
        raise ConfigError(f"the config file cannot be read ({exc.strerror or exc}).", path=path, fix="check the path and its permissions.") from exc
    if suffix == ".json":
        try:
            data = parse_json_text(text, source=path, what="config file", fix="correct the syntax.")
        except InputError as exc:
            raise ConfigError(exc.problem.replace("is not valid JSON", "cannot be parsed"), path=path, field=exc.field, fix=exc.fix) from exc
    else:
        nesting = _toml_nesting(text)
        if nesting > MAX_JSON_DEPTH:
            raise ConfigError(
                f"the config file nests tables/arrays about {nesting} deep; at most {MAX_JSON_DEPTH} is accepted.",
                path=path,
                fix="flatten the file; a config needs two or three levels.",
            )
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"the file cannot be parsed ({exc}).", path=path, fix="correct the syntax.") from exc
        except (RecursionError, ValueError) as exc:  # the scan should have caught nesting; ValueError: a 5,000-digit integer
            raise ConfigError(f"the file cannot be parsed ({type(exc).__name__}: {str(exc)[:200]}).", path=path, fix="correct the syntax.") from exc
    if not isinstance(data, dict):
        raise ConfigError("the config must be a table/object at the top level.", path=path, fix="wrap the settings in {...}.")
    if data_depth(data) > MAX_JSON_DEPTH:
        raise ConfigError(f"the config nests more than {MAX_JSON_DEPTH} deep.", path=path, fix="flatten the file.")
    return config_from_dict(cls, data, source=str(path))


def save_config(path: str | Path, config: Any) -> None:
    """Save the resolved config as JSON (atomically)."""
    atomic_write_json(path, config_to_dict(config))

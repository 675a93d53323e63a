"""What every neuralbake command shares: bake commands generated from config dataclasses, one
error handler, and the plain-text closing line.

:func:`bake_command` turns a registered bake (:class:`~neuralbake.bakes.registry.Registered`) into a typer command: one option
per config field (nested configs' fields too, grouped under their own heading in ``--help``), its
help the field's docstring and its shown default the dataclass default. Every option's CLI default
is ``None``, so settings resolve as: the dataclass default, then ``--config FILE`` (JSON or TOML),
then the flags actually given — an untouched flag never overrides the file. Every bake command has
the same common options: ``--config``, ``--out``, ``--device``, ``--seed``, ``--resume``,
``--quiet``. Values from the command line go through the same typed checks as a config file
(:func:`neuralbake.core.config.config_from_dict`), so a bad value is an error naming the option.

Errors (:func:`run_action`): a :class:`~neuralbake.errors.NeuralbakeError` prints
``error: <message>`` on stderr and exits 2; a run stopped with Ctrl-C or SIGTERM after saving its
checkpoint prints ``stopped: ...`` and exits 130. Anything else is a bug and keeps its traceback.
Messages are printed as text, never as rich markup. A command that fails removes the output
folder it created itself, unless training left checkpoints in it (for ``--resume``) or the folder
is another running bake's; a folder that existed before is kept. A bad option value that the
command line itself parses (a number that is not one, out of its range) gets the same one-line
``error:`` and exit code 2 (:class:`PlainErrorsGroup`, the root group), not a usage box.

The bake commands themselves are listed in :mod:`neuralbake.bakes.registry`; their summary lines
are in :mod:`neuralbake.bakes.summaries`.
"""

from __future__ import annotations

import dataclasses
import inspect
import shutil
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.text import Text
from typer.core import TyperCommand, TyperGroup

from neuralbake.bakes import run as bake_runner
from neuralbake.bakes.config import shared_fields
from neuralbake.bakes.folder import OutputLockedError
from neuralbake.bakes.registry import BAKES, Arg, Registered
from neuralbake.bakes.run import Bake
from neuralbake.bakes.summaries import still_improving
from neuralbake.core.names import setting_keys, stage_settings, stage_types
from neuralbake.core.config import config_from_dict, field_docs, load_config
from neuralbake.errors import ConfigError, NeuralbakeError, short_repr
from neuralbake.nn.trainer import TrainingInterrupted

__all__ = [
    "DefaultSubcommandGroup",
    "PlainErrorsGroup",
    "bake_command",
    "config_flags",
    "entry_flags",
    "option_help",
    "parse_size",
    "print_done",
    "run_action",
]

_err = Console(stderr=True)
_out = Console()
T = TypeVar("T")

COMMON_OPTIONS = ("config", "out", "device", "seed", "resume", "quiet")
"""Options every bake command has."""

LEAF_RENAMES = {"learning_rate": "lr"}
"""Short flag names used by every bake for these config fields."""

_PANELS = {"train": "Training", "network": "Network", "decoder": "Decoder"}
"""``--help`` headings for nested configs."""


# -- outcome --------------------------------------------------------------------------------


def _first_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (what a run would create)."""
    path = path.absolute()
    if path.exists():
        return None
    while not path.parent.exists() and path.parent != path:
        path = path.parent
    return path


def _remove_created(created: Path | None) -> None:
    if created is None or not created.is_dir() or created.is_symlink():
        return
    if any(created.rglob(".neuralbake/checkpoints/*.pt")):
        return  # training happened: the checkpoints stay for --resume
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
        if not isinstance(exc, OutputLockedError):  # the folder is another bake's: leave it alone
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

    A ``None`` default is not shown (the docstring says what ``None`` means). Docstring markup
    (double backticks) is reduced to single ones, and square brackets are escaped so that rich
    shows them instead of reading them as style tags.
    """
    text = " ".join(part for part in (field_docs(cls).get(name, ""), extra) if part).replace("``", "`")
    text = text.replace("[", "\\[")
    if instance is not None and getattr(instance, name) is not None:
        text += f" \\[default: {_shown(getattr(instance, name))}]"
    return text


def parse_size(text: str, *, field: str = "--size") -> tuple[int, int]:
    """Parse ``WxH`` (or ``N`` for N x N) into ``(width, height)``; a :class:`ConfigError` naming ``field`` otherwise."""
    parts = text.lower().replace("×", "x").split("x")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        values = []
    if len(values) == 1:
        values = values * 2
    if len(values) != 2 or min(values) < 1:
        raise ConfigError(f"{short_repr(text)} is not a size.", field=field, fix="write WIDTHxHEIGHT with both at least 1, e.g. 512x512.")
    return values[0], values[1]


class PlainErrorsGroup(TyperGroup):
    """The root command group: a bad option value that the command line parses itself (``--steps abc``, a
    number outside its range) is reported like every other input error, as one ``error:`` line naming the
    option and the fix with exit code 2, instead of a usage box. A missing argument or an unknown option
    keeps the usage text, which is what helps there."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except typer.BadParameter as exc:
            if type(exc) is not typer.BadParameter:  # MissingParameter: the usage text says what is missing
                raise
            _err.print(Text.assemble(("error:", "red"), " ", str(_bad_value(exc))), highlight=False)
            raise typer.Exit(2) from exc


def _bad_value(exc: typer.BadParameter) -> ConfigError:
    """The :class:`ConfigError` for a value the command line refused (``exc``): the option, the value, why, what fits."""
    param = getattr(exc, "param", None)
    opts = [opt for opt in getattr(param, "opts", None) or [] if opt.startswith("-")]
    longs = [opt for opt in opts if opt.startswith("--")]  # the first long name: the one the help and README use
    field = longs[0] if longs else max(opts, key=len) if opts else getattr(exc, "param_hint", None) or (getattr(param, "name", None) or "").upper() or None
    cause = exc.__cause__
    given = None
    try:  # typer checks values with pydantic, whose error keeps the input
        given = cause.errors()[0].get("input") if cause is not None and hasattr(cause, "errors") else None  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - only a nicer message is lost
        given = None
    reason = exc.message.rstrip(".")
    problem = f"{short_repr(given)} is not a valid value: {reason[:1].lower()}{reason[1:]}." if given is not None else f"{reason}."
    return ConfigError(problem, field=field, fix=f"give {field or 'it'} {_expected(param)} (--help describes each option).")


def _expected(param: Any) -> str:
    """What a parameter takes, in words (``a whole number from 16 to 4096``), from typer's description of it."""
    try:
        runtime = param.get_runtime_param()
        annotation, info = _strip_optional(runtime.annotation), runtime.parameter_info
    except Exception:  # noqa: BLE001 - a parameter typer describes otherwise
        return "a valid value"
    kind = {int: "a whole number", float: "a number"}.get(annotation)
    if kind is None:
        return "a valid value"
    low, high = getattr(info, "min", None), getattr(info, "max", None)
    if low is not None and high is not None:
        return f"{kind} from {low} to {high}"
    if low is not None:
        return f"{kind} of at least {low}"
    if high is not None:
        return f"{kind} of at most {high}"
    return kind


class DefaultSubcommandGroup(TyperGroup):
    """A group that runs its ``bake`` subcommand when the first argument names no subcommand.

    So ``neuralbake texture photo.png`` and ``neuralbake texture bake photo.png`` are the same,
    while ``neuralbake texture infer DIR`` still reaches ``infer``.
    """

    default_command = "bake"

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


# -- options from configs -------------------------------------------------------------------


@dataclass
class Flag:
    """One generated option: a config field (dotted path) and how the command line spells it."""

    path: str
    """Dotted field path in the config (``train.learning_rate``)."""
    name: str
    """Option name without dashes (``lr``)."""
    hint: Any
    """The field's type."""
    help: str
    """Help text (docstring and shown default)."""
    panel: str | None
    """Heading in ``--help`` (the nested config's name), ``None`` for top-level fields."""
    aliases: tuple[str, ...] = ()
    """Other names the option answers to (the field's own name where ``name`` is a shorter one)."""

    @property
    def param(self) -> str:
        """The Python parameter name of the generated command."""
        return "opt_" + self.path.replace(".", "__")


def _strip_optional(hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return hint


def config_flags(
    config_type: type, *, rename: dict[str, str] | None = None, skip: Sequence[str] = (), notes: dict[str, str] | None = None
) -> list[Flag]:
    """Every settable field of ``config_type`` (nested dataclasses flattened) as a :class:`Flag`.

    ``rename`` maps dotted paths to option names; fields named in :data:`LEAF_RENAMES` get their
    short names; ``notes`` adds a sentence to a field's help (e.g. a device default that the
    shared config's docstring cannot know). Two fields that would share an option name are a
    programming error. A renamed option also answers to its field's own name (``--size`` and
    ``--texture-size``, ``--lr`` and ``--learning-rate``) where no other option has that name, so
    the name a config file, ``submit --set`` and the web UI use works on the command line too.
    """
    rename, notes = rename or {}, notes or {}
    flags: list[Flag] = []

    def walk(cls: type, instance: Any, prefix: str, panel: str | None) -> None:
        hints = typing.get_type_hints(cls)
        shared = shared_fields() if not prefix else frozenset()  # the settings every bake has come after the bake's own
        for item in sorted(dataclasses.fields(cls), key=lambda f: f.name in shared):
            if not item.init:
                continue
            path = prefix + item.name
            if path in skip:
                continue
            hint = hints[item.name]
            if dataclasses.is_dataclass(hint):
                walk(hint, getattr(instance, item.name), path + ".", panel or _PANELS.get(item.name, item.name.replace("_", " ").capitalize()))
                continue
            name = rename.get(path, LEAF_RENAMES.get(item.name, item.name)).replace("_", "-")
            flags.append(Flag(path, name, hint, option_help(cls, item.name, instance, extra=notes.get(path, "")), panel))

    walk(config_type, config_type(), "", None)
    names = [flag.name for flag in flags]
    clashes = sorted({name for name in names if names.count(name) > 1})
    if clashes:
        raise RuntimeError(f"{config_type.__name__}: options {clashes} come from more than one field; rename one.")
    taken = {*names, *COMMON_OPTIONS, "set", "help"}
    for flag in flags:
        own = flag.path.rsplit(".", 1)[-1].replace("_", "-")
        if own not in taken:
            flag.aliases = (own,)
            taken.add(own)
    return flags


def entry_flags(entry: Registered) -> list[Flag]:
    """The options of a registered bake's command (its positional arguments' fields have none)."""
    skip = [*entry.skip, *(arg.field for arg in entry.arguments)]
    return config_flags(entry.bake.config_type, rename=dict(entry.rename), skip=skip, notes=dict(entry.notes))


def _cli_type(hint: Any) -> tuple[Any, dict[str, Any]]:
    """The typer annotation for a field type, and extra typer.Option keywords."""
    base = _strip_optional(hint)
    origin = typing.get_origin(base)
    if base is bool:
        return bool | None, {}
    if base in (int, float, str):
        return base | None, {}
    if origin is typing.Literal:
        return str | None, {"metavar": "|".join(str(c) for c in typing.get_args(base))}
    if origin in (tuple, list):
        args = typing.get_args(base)
        if origin is tuple and args == (int, int):
            return str | None, {"metavar": "WxH"}
        return str | None, {"metavar": "A,B,..."}
    return str | None, {}


def _from_text(flag_name: str, hint: Any, value: Any) -> Any:
    """Turn a command-line value into JSON-like data for ``config_from_dict`` (which checks types)."""
    base = _strip_optional(hint)
    origin = typing.get_origin(base)
    if not isinstance(value, str) or origin not in (tuple, list):
        return value
    args = typing.get_args(base)
    if origin is tuple and args == (int, int):
        return list(parse_size(value, field=f"--{flag_name}"))
    item = args[0] if args else str
    parts = [part.strip() for part in value.split(",") if part.strip()]
    if item in (int, float):
        try:
            return [item(part) for part in parts]
        except ValueError as exc:
            raise ConfigError(f"{value!r} is not a comma-separated list of {item.__name__}s.", field=f"--{flag_name}", fix="write e.g. 1,2,3.") from exc
    return parts


def _set_path(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        data = data.setdefault(part, {})
    data[last] = value


def _config_data(config: Any) -> dict[str, Any]:
    """A config as plain data (init fields only), ready for ``config_from_dict``."""
    data: dict[str, Any] = {}
    for item in dataclasses.fields(config):
        if not item.init:
            continue
        data[item.name] = _plain(getattr(config, item.name))
    return data


def _plain(value: Any) -> Any:
    """A config value as plain data: nested configs (also inside lists, e.g. composition passes) as dicts."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _config_data(value)
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def resolve_config(
    config_type: type[T], config_file: Path | None, values: dict[str, Any], flags: Sequence[Flag],
    tables: dict[str, dict[str, dict[str, Any]]] | None = None,
) -> T:
    """Defaults, then ``config_file``, then the given values (``{dotted path: value}``; ``None`` = not given).

    ``tables``: ``{field: {stage: {setting: value}}}`` from ``--set STAGE.FIELD=VALUE``, put over the file's
    per-stage tables setting by setting (a setting the flags leave alone keeps the file's value)."""
    base = load_config(config_type, config_file) if config_file is not None else config_type()
    data = _config_data(base)
    by_path = {flag.path: flag for flag in flags}
    for path, value in values.items():
        if value is None:
            continue
        flag = by_path.get(path)
        _set_path(data, path, _from_text(flag.name if flag else path, flag.hint if flag else Any, value))
    for field, stages in (tables or {}).items():
        table = data.get(field) if isinstance(data.get(field), dict) else {}
        for stage, settings in stages.items():
            kept = table.get(stage) if isinstance(table.get(stage), dict) else {}
            table[stage] = {**kept, **settings}
        data[field] = table
    return config_from_dict(config_type, data, source="the command line" if config_file is None else f"{config_file} + the command line")


def bake_command(app: typer.Typer, entry: Registered) -> Callable[..., None]:
    """Add the registry entry's command (its last word) to ``app``: generated from the bake's config.

    The command resolves the config and hands it to :func:`neuralbake.bakes.run.run_bake`;
    ``entry.summary(report, out)`` is the closing line. Every generated command is listed in
    :data:`BAKE_COMMANDS` (the precedence test walks them all).
    """
    bake, command_name, help, arguments, summary = entry.bake, entry.command[-1], entry.help, entry.arguments, entry.summary
    out_help = entry.out_help
    config_type = bake.config_type
    flags = entry_flags(entry)
    missing = {"device", "seed"} - {flag.name for flag in flags}
    if missing:
        raise RuntimeError(f"{config_type.__name__} lacks fields for the common options {sorted(missing)}.")
    parameters: list[inspect.Parameter] = []
    for arg in arguments:
        annotation = list[Path] if arg.many else Path
        if arg.optional:
            annotation = annotation | None
        info = typer.Argument(help=arg.help, metavar=arg.metavar or arg.field.rsplit(".", 1)[-1].upper(), show_default=False)
        parameters.append(inspect.Parameter("arg_" + arg.field.replace(".", "__"), inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                            annotation=Annotated[annotation, info], default=None if arg.optional else inspect.Parameter.empty))
    out_info = typer.Option("--out", "-o", help=out_help, show_default=False)
    parameters.append(inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[Path, out_info]))
    for flag in flags:
        annotation, extra = _cli_type(flag.hint)
        switch = _strip_optional(flag.hint) is bool
        decls = [f"--{name}/--no-{name}" if switch else f"--{name}" for name in (flag.name, *flag.aliases)]
        info = typer.Option(*decls, help=flag.help, rich_help_panel=flag.panel, show_default=False, **extra)
        parameters.append(inspect.Parameter(flag.param, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[annotation, info], default=None))
    common = {
        "config": (Path | None, typer.Option("--config", help="Load settings from a JSON or TOML file (flags given here win).", show_default=False), None),
        "resume": (bool, typer.Option("--resume", help="Continue the interrupted (or finished) bake in --out from its checkpoints."), False),
        "quiet": (bool, typer.Option("--quiet", "-q", help="No progress bars or notes on stderr."), False),
    }
    stages = stage_types(config_type, entry.stage_field) if entry.stage_field else {}
    if stages:
        names = ", ".join(stages)
        set_help = (f"A stage's setting: STAGE.FIELD=VALUE, STAGE one of {names}; FIELD a field of that stage's config (dotted: train.steps) "
                    "or a flag name of its own command; VALUE JSON or text. E.g. --set fit.epochs=5. Repeatable; wins over the --config file.")
        common["sets"] = (list[str] | None, typer.Option("--set", metavar="STAGE.FIELD=VALUE", help=set_help, show_default=False), None)
    for name, (annotation, info, default) in common.items():
        parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[annotation, info], default=default))

    def stage_keys(stage: str) -> dict[str, str]:
        own = BAKES.get(stage)  # the stage's own command, whose flag names --set also takes
        return setting_keys(stages[stage], entry_flags(own) if own is not None and own.bake.config_type is stages[stage] else ())

    def command(**given: Any) -> None:
        out: Path = given["out"]

        def action() -> dict[str, Any]:
            values = {flag.path: given[flag.param] for flag in flags}
            for arg in arguments:
                value = given["arg_" + arg.field.replace(".", "__")]
                if value is not None:
                    values[arg.field] = [str(v) for v in value] if arg.many else str(value)
            tables = {entry.stage_field: stage_settings(given["sets"], stages, stage_keys)} if entry.stage_field and given.get("sets") else None
            config = resolve_config(config_type, given["config"], values, flags, tables)
            return bake_runner.run_bake(bake, config, out, resume=given["resume"], progress=not given["quiet"])

        report = run_action(action, out=out)
        print_done(summary(report, out) + still_improving(report))

    command.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    command.__annotations__ = {}
    command.__doc__ = help
    command.__name__ = command_name.replace("-", "_")
    checked = type("CheckedCommand", (_CheckedArguments,), {"entry": entry}) if entry.check_arguments else None
    app.command(command_name, help=help, **({"cls": checked} if checked else {}))(command)
    BAKE_COMMANDS.append(BakeCommand(entry, bake, command_name, list(arguments), flags, command))
    return command


class _CheckedArguments(TyperCommand):
    """A generated command whose positional arguments go through ``entry.check_arguments`` as parsed so far,
    also when click refuses the line (a missing argument): the check names a wrong kind of input, which
    is what the user needs to hear, instead of the argument it left missing."""

    entry: Registered

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        finally:
            given = {arg.field: str(ctx.params[key]) for arg in self.entry.arguments
                     if (key := "arg_" + arg.field.replace(".", "__")) in ctx.params and ctx.params[key] is not None and not arg.many}
            try:
                if self.entry.check_arguments is not None:
                    self.entry.check_arguments(given)
            except NeuralbakeError as exc:
                _err.print(Text.assemble(("error:", "red"), " ", str(exc)), highlight=False)
                raise typer.Exit(2) from exc


@dataclass
class BakeCommand:
    """A generated bake command, as registered."""

    entry: Registered
    bake: Bake[Any]
    name: str
    arguments: list[Arg]
    flags: list[Flag]
    function: Callable[..., None]


BAKE_COMMANDS: list[BakeCommand] = []
"""Every command made by :func:`bake_command`, in registration order."""

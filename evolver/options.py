"""Run settings declared once: a pydantic field (type, range, default) annotated with a `Flag`
(help text, choices, the option's name) is at the same time a key of the file it is stored in
and an option of `curateevo run` (flag `--name`, config-file key `name` or `name_with_underscores`).

A setting that is a field of a model the run config nests (RunConfig's `train`, a
trainer.train.TrainSpec) is declared in that model (type, range, default, docstring) and made an
option by a `Nested` on the nesting field, which gives each nested field its `Flag`: the model
below the loop does not know the options of `run`, and nothing is declared twice.

This module turns such declarations into the options argparse is given (`options_of`), checks
an option's value against its declaration (`check_option`, for flags and config files alike) and
says a value pydantic refused in one sentence naming the key and what it must be (`sentence`).
"""
from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from base.errors import UserError

_UNSET = object()


@dataclass(frozen=True)
class Flag:
    """How a declared setting appears as an option of `curateevo run`."""
    help: str
    name: str = ""                  # the option's name when it is not the field's (dashes for underscores)
    derived: bool = False           # the option defaults to "not given" (None); `resolve` derives the value
    choices: Callable[[], tuple] | tuple | None = None
    group: str = "run"
    nargs: str | None = None        # a list option: "+" or "*" (default "*")
    option_type: Any = None         # the option's own type when it is not the field's (--seeds N → seeds 0..N-1)
    option_default: Any = _UNSET    # the option's default when it is not the field's
    expected: str = ""              # what a value out of range must be, when the constraints do not say it well
    secret: bool = False            # a refused value is not echoed (a key pasted where a variable's NAME goes)

    def allowed(self) -> tuple | None:
        return self.choices() if callable(self.choices) else self.choices


class Nested:
    """The options of fields of a nested model (RunConfig's `train: TrainSpec`, `eval: EvalSpec`):
    a `Flag` by nested field name, in the order the options appear; each option's type, range and
    default are the nested field's own."""

    def __init__(self, **flags: Flag):
        self.flags = tuple(flags.items())


@dataclass(frozen=True)
class Option:
    """One generated option: what argparse and the config-file reader need, and its declaration."""
    name: str                       # --name; the config-file key
    dest: str                       # the key of the merged options (`resolve` reads it)
    type: type                      # int, float or str: argparse's conversion of one value
    nargs: str | None
    default: Any                    # None: not given (derived, or the setting has no default of its own)
    help: str
    flag: Flag
    annotation: Any                 # the option value's type with its constraints
    field: str = ""                 # the declaring model's field
    model: type | None = None       # the declaring model (RunConfig, LaunchOptions, TrainSpec through a Nested, …)

    @property
    def adapter(self) -> TypeAdapter:
        """pydantic's strict check of `annotation`, built on first use (a run checks few options)."""
        if "_adapter" not in self.__dict__:
            object.__setattr__(self, "_adapter", TypeAdapter(self.annotation, config=ConfigDict(strict=True)))
        return self.__dict__["_adapter"]

    @property
    def group(self) -> str:
        return self.flag.group

    def allowed(self) -> tuple | None:
        return self.flag.allowed()


def flag_of(info: FieldInfo) -> Flag | None:
    return next((m for m in info.metadata if isinstance(m, Flag)), None)


def nested_of(info: FieldInfo) -> Nested | None:
    return next((m for m in info.metadata if isinstance(m, Nested)), None)


def flagged(model: type[BaseModel]):
    """(model, field name, field, Flag) of every field of `model` with a Flag, in declaration order,
    a nested model's flagged fields (`Nested`) in the nesting field's place."""
    for field_name, info in model.model_fields.items():
        nested = nested_of(info)
        if nested is not None:
            sub = sub_model(info)
            yield from ((sub, name, sub.model_fields[name], flag) for name, flag in nested.flags)
        elif (flag := flag_of(info)) is not None:
            yield model, field_name, info, flag


def constraints(info: FieldInfo) -> list:
    """The field's constraint metadata (Ge, Gt, allow_inf_nan, …) without the Flag."""
    return [m for m in info.metadata if not isinstance(m, Flag)]


def declared_type(info: FieldInfo) -> Any:
    """The field's type with its constraints, as one annotation."""
    meta = constraints(info)
    return typing.Annotated[(info.annotation, *meta)] if meta else info.annotation


def options_of(*models: type[BaseModel]) -> tuple[Option, ...]:
    """The options of every field with a Flag, in declaration order, model after model."""
    out = []
    for declaring in models:
        for model, field_name, info, flag in flagged(declaring):
            annotation = flag.option_type or declared_type(info)
            scalar, is_list = _scalar(annotation)
            if scalar not in (int, float, str):   # a switch (bool) would need store_true: not generated yet
                raise TypeError(f"{model.__name__}.{field_name}: an option takes int, float or str values")
            name = flag.name or field_name.replace("_", "-")
            default = None if flag.derived else info.get_default(call_default_factory=True) \
                if flag.option_default is _UNSET else flag.option_default
            out.append(Option(name=name, dest={"lambda": "lam"}.get(name, name.replace("-", "_")), type=scalar,
                              nargs=(flag.nargs or "*") if is_list else None, default=default, help=flag.help,
                              flag=flag, annotation=annotation, field=field_name, model=model))
    return tuple(out)


def _scalar(annotation: Any) -> tuple[type, bool]:
    """The scalar type of one value (int, float, str, bool) and whether the option takes a list."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
        elif origin in (list, tuple):
            return _scalar(typing.get_args(annotation)[0])[0], True
        else:
            return annotation, False


def check_option(option: Option, value: Any, where: str, key: str = "") -> Any:
    """`value` of `option` checked against its declaration (type, range, choices); None stays None
    (not given). `where` opens the sentence of a bad value: a config file (`key` as written there),
    or "" for a flag."""
    if value is None:
        return None
    shown, given = (f"{where}: {key or option.name}" if where else f"--{option.name}"), value
    if option.nargs and not isinstance(value, (list, tuple)):   # a list option takes a list, even of one
        raise UserError(f"{shown} must be a list (e.g. [{repr(value)[:40]}]), not {type(value).__name__} "
                        f"{repr(value)[:60]}")
    if option.nargs:   # argparse and YAML give lists; a tuple-typed setting checks them as its tuple
        value = tuple(value) if typing.get_origin(_bare(option.annotation)) is tuple else list(value)
    if option.type is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    try:
        checked = option.adapter.validate_python(value)
    except ValidationError as exc:
        raise UserError(f"{shown} must be {expected(exc.errors()[0], option.annotation, option.flag.expected)}"
                        + ("" if option.flag.secret else f", not {_shown(given)}")) from None
    allowed = option.allowed()
    for v in (checked if option.nargs else [checked]):
        if allowed and v not in allowed:
            raise UserError(f"{shown} must be one of {', '.join(map(str, allowed))}, not {v!r}")
    return list(checked) if option.nargs else checked


def _bare(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _shown(value: Any) -> str:
    return f"{type(value).__name__} {repr(value)[:60]}" if not isinstance(value, (int, float)) or \
        isinstance(value, bool) else repr(value)[:60]


_KINDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
_RANGE = ("greater_than", "greater_than_equal", "less_than", "less_than_equal", "finite_number")
_SHAPE = ("string_too_short", "string_pattern_mismatch")   # a string of the right type, not of the right form


def expected(error: Mapping, annotation: Any, override: str = "") -> str:
    """What a value pydantic refused with `error` must be, from its declared type and range."""
    kind = error["type"]
    scalar, is_list = _scalar(annotation)
    bounds = _bounds(annotation)
    if kind in _SHAPE:
        return override or "a string of the declared form"
    if kind in _RANGE:
        if override:
            return override
        if scalar is float:
            return "a finite number" + _range_text(bounds)
        low = bounds.get("ge", bounds.get("gt", -1) + 1)
        if "le" in bounds or "lt" in bounds:
            return f"an integer in {_range_text(bounds).strip()}"
        return "0 or more" if low == 0 else f"at least {low}"
    if kind in ("dict_type", "mapping_type", "model_type", "model_attributes_type"):
        return "a mapping or null" if _optional(annotation) else "a mapping"
    if is_list:
        return f"a list of {_KINDS.get(scalar, 'value').split(' ', 1)[-1]}s" if scalar in (int, str) else "a list"
    text = _KINDS.get(scalar, f"a {getattr(scalar, '__name__', scalar)}")
    return text + " or null" if _optional(annotation) else text


def _optional(annotation: Any) -> bool:
    annotation = _bare(annotation)
    return typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in typing.get_args(annotation)


def _bounds(annotation: Any) -> dict:
    out = {}
    while typing.get_origin(annotation) is typing.Annotated:
        annotation, *meta = typing.get_args(annotation)
        for m in meta:
            for cls, key in ((Ge, "ge"), (Gt, "gt"), (Le, "le"), (Lt, "lt")):
                if isinstance(m, cls):
                    out[key] = getattr(m, key)
            if isinstance(m, FieldInfo):
                out.update(_bounds(typing.Annotated[(object, *m.metadata)]))
    return out


def _range_text(b: dict) -> str:
    low = ("[", b["ge"]) if "ge" in b else ("(", b["gt"]) if "gt" in b else None
    high = ("]", b["le"]) if "le" in b else (")", b["lt"]) if "lt" in b else None
    if low and high:
        return f" in {low[0]}{low[1]:g}, {high[1]:g}{high[0]}"
    if low:
        return f" {'>=' if low[0] == '[' else '>'} {low[1]:g}"
    if high:
        return f" {'<=' if high[0] == ']' else '<'} {high[1]:g}"
    return ""


def sentence(exc: ValidationError, model: type[BaseModel], data: Mapping, what: str = "run config",
             within: tuple[str, ...] = ()) -> UserError:
    """The first error pydantic found in `data` for `model`, as one sentence naming the key (a
    sub-model's key as `agent.step_limit`; `within`: the keys of `data` itself, a nested spec's)."""
    error = exc.errors()[0]
    loc, keys = list(error["loc"]), list(within)
    while True:
        name = next((n for n, i in model.model_fields.items() if loc and loc[0] in (n, i.alias)), None)
        if name is None or (error["type"] == "extra_forbidden" and len(loc) == 1):
            known = ", ".join(i.alias or n for n, i in model.model_fields.items())
            return UserError(f"{what}: unknown setting(s) {'.'.join(map(str, keys + loc[:1]))}; known: {known}")
        info = model.model_fields[name]
        key = info.alias or name
        value = data.get(key, data.get(name)) if isinstance(data, Mapping) else None
        keys.append(key)
        loc.pop(0)
        sub = sub_model(info)
        if not (loc and sub and isinstance(value, Mapping)):
            break
        model, data = sub, value
    flag = flag_of(info)
    annotation = declared_type(info)
    if error["type"] == "missing":
        return UserError(f"{what}: {'.'.join(keys)} must be given")
    also = f" (--{flag.name})" if flag and flag.name and flag.name != key else ""
    shown = "" if flag and flag.secret else f", not {_shown(value)}"
    return UserError(f"{what}: {'.'.join(keys)}{also} must be {expected(error, annotation, flag.expected if flag else '')}"
                     f"{shown}")


def sub_model(info: FieldInfo) -> type[BaseModel] | None:
    """The model a field nests (RunConfig's `llm`, `agent`), None for a plain value."""
    for t in (info.annotation, *typing.get_args(info.annotation)):
        if isinstance(t, type) and issubclass(t, BaseModel):
            return t
    return None


def check_choices(config: BaseModel, what: str) -> None:
    """Each field of `config` whose Flag names choices holds one of them (the registries are read
    when a config is checked, not when it is declared); one sentence naming the key otherwise."""
    nests = {sub: getattr(config, name) for name, info in type(config).model_fields.items()
             if nested_of(info) is not None and (sub := sub_model(info)) is not None}
    for model, name, info, flag in flagged(type(config)):
        allowed = flag.allowed()
        value = getattr(nests.get(model, config), name)
        for v in (value if isinstance(value, tuple) else (value,)) if allowed else ():
            if v not in allowed:
                key = flag.name if isinstance(value, tuple) and flag.name else info.alias or name
                raise UserError(f"{what}: {key} must be one of {', '.join(map(str, allowed))}, not {v!r}")

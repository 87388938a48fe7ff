"""Any run setting by its dotted key, beside the named flags people use most (issue 72):

    curateevo run --set train.profile=cpu-small --set eval.batch_size=16 --set agent.step_limit=40

KEY is the setting's path in run.json (`curateevo run … ` writes the nested model as it is:
`train.base`, `eval.memory_k`, `agent.repairs`, a free mapping's own keys such as
`train.budget.sft_steps`); VALUE is read as YAML (`16`, `0.5`, `true`, `[0, 1]`, a plain word as a
string) and then checked by the setting's own declaration, so a wrong type or range is the same
one sentence a flag would get. A key that names no setting is one sentence with the nearest names.
`--set` is applied last: it wins over a flag and over `--config`. The parsing follows
mini-swe-agent's `_key_value_spec_to_nested_dict` (KEY=VALUE, dots nest)."""
from __future__ import annotations

import difflib
import typing
from typing import Any, Mapping, Sequence

from pydantic import BaseModel, ValidationError

from base.errors import UserError
from evolver.options import sentence, sub_model


def nested(specs: Sequence[str]) -> dict:
    """`["a.b=1", "a.c=x"]` → `{"a": {"b": 1, "c": "x"}}` (values read as YAML); UserError on a spec
    without `=` or with an empty key part."""
    import yaml

    out: dict = {}
    for spec in specs:
        key, sep, raw = spec.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            raise UserError(f"--set {spec!r}: write KEY=VALUE with a dotted KEY, e.g. --set eval.batch_size=16")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            raise UserError(f"--set {spec!r}: the value is not YAML ({getattr(exc, 'problem', exc)})") from None
        at = out
        for part in parts[:-1]:
            at = at.setdefault(part, {})
            if not isinstance(at, dict):
                raise UserError(f"--set {spec!r}: {'.'.join(parts[:-1])} was set to a value above, not a mapping")
        at[parts[-1]] = value
    return out


def _is_mapping(annotation: Any) -> bool:
    """A free mapping (`train.budget`, `holdout`; Optional too): its keys are the user's to name."""
    return any(t is dict or typing.get_origin(t) in (dict, Mapping) for t in (annotation, *typing.get_args(annotation)))


def check_keys(model: type[BaseModel], given: Mapping, above: tuple[str, ...] = ()) -> None:
    """UserError naming the first key of `given` that `model` (and its nested models) does not declare."""
    fields = {info.alias or name: info for name, info in model.model_fields.items()}
    for key, value in given.items():
        path = ".".join((*above, key))
        if key not in fields:
            near = difflib.get_close_matches(key, list(fields), n=3)
            hint = f"; did you mean {' or '.join('.'.join((*above, n)) for n in near)}?" if near else \
                f"; the settings there: {', '.join(sorted(fields))}"
            raise UserError(f"--set {path}: no such setting{hint}")
        sub = sub_model(fields[key])
        if isinstance(value, Mapping) and sub is not None:
            check_keys(sub, value, (*above, key))
        elif isinstance(value, Mapping) and not _is_mapping(fields[key].annotation):
            raise UserError(f"--set {path}.{next(iter(value))}: {path} is a single value, not a group of settings")


def merged(doc: Any, over: Any) -> Any:
    """`over` laid onto `doc`: mappings merge key by key, anything else replaces."""
    if isinstance(doc, Mapping) and isinstance(over, Mapping):
        return {**doc, **{k: merged(doc.get(k), v) for k, v in over.items()}}
    return over


def apply(cfg, specs: Sequence[str] | None):
    """The RunConfig `cfg` with every `--set KEY=VALUE` laid on it, checked like a new config (one
    sentence on error). The evaluation settings the run sets itself (config.RUN_SETS) stay the run's."""
    if not specs:
        return cfg
    from evolver.config import RUN_SETS

    over = nested(specs)
    check_keys(type(cfg), over)
    taken = sorted(set(over.get("eval") or ()) & set(RUN_SETS))
    if taken:
        raise UserError(f"--set eval.{taken[0]}: the run sets it from its own setting ({taken[0]}); set that instead")
    doc = merged(cfg.model_dump(by_alias=True, exclude={"eval": set(RUN_SETS)}), over)   # run.json's own keys
    try:
        return type(cfg)(**doc)
    except ValidationError as exc:
        raise sentence(exc, type(cfg), doc, what="--set") from None
    except UserError as exc:   # the config's own check, in its words: said as --set's
        raise UserError("--set: " + str(exc).removeprefix("run config: ")) from None

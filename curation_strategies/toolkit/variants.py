"""Argument variants of single-turn items (CoEvolve's "vary the arguments within the scenario",
for items without an environment): a successful single-call item whose request states an
argument's value verbatim gets that value changed in the request and in the call alike, and the
variant is kept only when the tool's schema accepts the changed call. Joined with the original,
the variants make parallel items — one function called several times with different arguments —
from a corpus whose simple items share no function (BFCL's train split: few do). Deterministic
under the `random.Random` passed in."""
from __future__ import annotations

import json
import random
import re
from typing import Mapping, Sequence

from .calls import parse_arguments, validate_call
from .compose import _answer, category, join_requests, single_call_items, synthesised
from .provenance import step


def _stated_once(text: str, literal: str) -> re.Pattern | None:
    """A pattern matching `literal` as a whole token of `text`, when it occurs there exactly once."""
    pattern = re.compile(rf"(?<![\w.$/^-]){re.escape(literal)}(?![\w/%^]|[.,]\d)")
    return pattern if len(pattern.findall(text)) == 1 else None


def _other_number(value: int | float, rng: random.Random) -> int | float:
    """Another number of the same type, sign and rough size."""
    if isinstance(value, int):
        step = rng.randint(1, max(1, abs(value) // (10 if abs(value) >= 100 else 2))) * rng.choice((-1, 1))
        new = value + step
        if (value > 0 >= new) or (value >= 0 > new) or new == value:
            new = value + abs(step)
        return new
    decimals = len(repr(value).partition(".")[2]) or 1
    new = round(value * rng.uniform(0.5, 1.5), decimals)
    return new if new != value and (new > 0) == (value > 0) else round(value + 10 ** -decimals, decimals)


def argument_variant(request: str, tool: Mapping, call: Mapping, rng: random.Random) -> tuple[str, dict] | None:
    """(the request, the call) with every argument whose value the request states verbatim once —
    a number, or a string of the schema's `enum` — changed alike in both; None when no value could
    be changed or the schema refuses the changed call."""
    args = parse_arguments(call)
    if not args:
        return None
    props = (tool["function"].get("parameters") or {}).get("properties") or {}
    text, new_args = request, dict(args)
    for name in sorted(args):
        value, spec = args[name], props.get(name) or {}
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            new = _other_number(value, rng)
        elif isinstance(value, str) and len([e for e in spec.get("enum") or () if isinstance(e, str)]) > 1:
            new = rng.choice(sorted(e for e in spec["enum"] if isinstance(e, str) and e != value))
        else:
            continue
        pattern = _stated_once(text, str(value))
        if pattern is None or _stated_once(text, str(new)) is not None or str(new) in text:
            continue
        text = pattern.sub(lambda _: str(new), text)
        new_args[name] = new
    if new_args == args:
        return None
    variant = {**call, "function": {**call["function"], "arguments": json.dumps(new_args)}}
    return None if validate_call(variant, [tool]) else (text, variant)


def parallel_variants(raws: Sequence[Mapping], rng: random.Random, limit: int, calls: int = 2) -> list[dict]:
    """Parallel items from single items: a successful single-call item's request joined with
    `calls - 1` argument variants of it ("A. Also, A'."), all its calls answered in one message;
    at most `limit` items, sources in a seeded order."""
    items, out, made_by = single_call_items(raws), [], step("parallel_variants", "synthesised", limit=limit, calls=calls)
    for n in rng.sample(range(len(items)), len(items)):
        if len(out) >= limit:
            break
        raw, request, tool, call = items[n]
        requests, answers = [request], [call]
        for _ in range(calls - 1):
            made = argument_variant(request, tool, call, rng)
            if made is None or made[0] in requests:
                break
            requests.append(made[0])
            answers.append(made[1])
        if len(answers) == calls:
            out.append(synthesised([raw], "parallel", join_requests(requests), [tool], _answer(answers),
                                   tags=["variant"], made=made_by))
    return out


def argument_variants(raws: Sequence[Mapping], rng: random.Random, limit: int) -> list[dict]:
    """Items like the kept single-call ones with other values: a successful single-call item's
    request and call with the values its request states changed alike (argument_variant), the
    same tools offered, the one changed call answered; at most `limit`, sources in a seeded order.
    More supervision of the step BFCL's argument checker fails most: copying the request's values
    into the call."""
    made_by, out = step("argument_variants", "synthesised", limit=limit), []
    items = single_call_items(raws)
    for n in rng.sample(range(len(items)), len(items)):
        if len(out) >= limit:
            break
        raw, request, tool, call = items[n]
        made = argument_variant(request, tool, call, rng)
        if made is not None:
            kind = category(raw) or "simple_python"
            out.append(synthesised([raw], kind, made[0], raw["tools"], _answer([made[1]]), tags=["variant"],
                                   made=made_by, suffix="argument-variant"))
    return out

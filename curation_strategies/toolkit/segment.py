"""Fine-grained trajectory decomposition (CurateEvo App. C): decision points — the turn after an
error, the turn after a new user request, the turn after a state change — and segmentation of
long trajectories there into sub-trajectories that are valid SFT records on their own; and
windows: long trajectories cut into sub-trajectories that fit a token budget (`windows`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from .calls import is_state_changing, tool_calls
from .errors import turn_errors
from .provenance import carry, traced
from .tokens import count_tokens, message_tokens
from .trajectory import assistant_indices, last_user_before, same_user_turn, step_boundaries

DECISION_KINDS = ("after_error", "new_request", "state_change")


def decision_points(raw: Mapping, validate: bool = True) -> list[tuple[int, str]]:
    """(message index, kind) of each assistant turn that opens a decision, in order; one kind per
    turn, by priority after_error > new_request > state_change. The first turn is the start,
    not a decision point."""
    messages = raw["messages"]
    errors = turn_errors(raw, validate)
    turns = assistant_indices(messages)
    points = []
    for prev, j in zip(turns, turns[1:]):
        if not same_user_turn(messages, prev, j):
            points.append((j, "new_request"))
        elif prev in errors:
            points.append((j, "after_error"))
        elif any(is_state_changing(c["function"]["name"]) for c in tool_calls(messages[prev])):
            points.append((j, "state_change"))
    return points


@dataclass
class Segment:
    """A sub-trajectory of `source`: `messages` (context + own turns) and one weight per
    assistant message (context turns 0). `start` is the source index of its first own turn."""

    source: Mapping
    messages: list
    weights: list
    start: int
    kind: str


def _cut_positions(raw: Mapping, turns: list[int], max_turns: int, kinds: Sequence[str]) -> list[int]:
    """Positions p in `turns` where a new segment starts: the latest decision point of `kinds`
    that keeps each segment within max_turns (and at least half of it, so no sliver segments),
    else a plain cut at max_turns."""
    points = {i for i, kind in decision_points(raw) if kind in kinds}
    cuts_ok = set(step_boundaries(raw["messages"]))
    min_turns = max(1, max_turns // 2)
    starts, start = [0], 0
    while len(turns) - start > max_turns:
        window = [p for p in range(start + 1, start + max_turns + 1) if turns[p] in cuts_ok]
        preferred = [p for p in window if turns[p] in points and p - start >= min_turns]
        later = [p for p in range(start + max_turns + 1, len(turns)) if turns[p] in cuts_ok]
        if not (preferred or window or later):
            break  # no valid cut left: the rest stays one (longer) segment
        start = max(preferred) if preferred else (max(window) if window else later[0])
        starts.append(start)
    return starts


def segment(raw: Mapping, weights: Sequence[int] | None = None, max_turns: int = 8,
            context_turns: int = 2, kinds: Sequence[str] = ("after_error", "new_request")) -> list[Segment]:
    """Split a trajectory longer than max_turns assistant turns at decision points of `kinds`.

    A later segment opens with the source's leading system messages, the user request its first
    turn answers, and up to context_turns earlier turns of that request (weight 0, with their
    results). Own turns keep `weights` (default 1). Segments that would train nothing are left
    out; a trajectory within max_turns is one segment."""
    turns = assistant_indices(raw["messages"])
    starts = _cut_positions(raw, turns, max_turns, kinds) if turns else []
    return _segments(raw, weights, starts, context_turns, "segment",
                     {"max_turns": max_turns, "context_turns": context_turns})


WINDOW_SHARE = 0.75
"""A window aims at this share of the token budget: the toolkit counts cl100k tokens of the contents
(`tokens.py`), the trainer its base's tokens of the rendered record, and the two differ by a fraction."""
MESSAGE_OVERHEAD = 5   # the role header and end token each message adds when rendered


def window_tokens(raw: Mapping, messages: Sequence[Mapping] | None = None) -> int:
    """Estimated tokens of `messages` (default: all of `raw`'s) rendered with `raw`'s tools: each
    message's content and calls plus its header, each tool as one line (name, parameters, the
    description's first line), as the chat format's compact style writes it."""
    messages = raw["messages"] if messages is None else messages
    return _tools_tokens(raw) + sum(message_tokens(m) + MESSAGE_OVERHEAD for m in messages)


def _tools_tokens(raw: Mapping) -> int:
    total = 0
    for tool in raw.get("tools") or ():
        fn = tool.get("function", tool)
        params = " ".join((fn.get("parameters") or {}).get("properties") or {})
        total += count_tokens(f"{fn.get('name', '')}({params}) {(fn.get('description') or '').split(chr(10))[0][:120]}")
        total += MESSAGE_OVERHEAD
    return total


def windows(raw: Mapping, max_tokens: int, weights: Sequence[int] | None = None,
            context_turns: int = 1) -> list[Segment]:
    """Cut a trajectory too long for `max_tokens` (by `window_tokens`) into windows that each train
    their own turns within about WINDOW_SHARE of it, with the context `segment` gives a later
    segment (system messages, the user request, up to context_turns earlier turns at weight 0).
    Cuts fall only where no tool call is left unanswered; one step longer than a window is a window
    of its own. A trajectory within `max_tokens`, or whose system messages and request alone leave
    no room for a turn, is one segment: itself."""
    messages = raw["messages"]
    turns = assistant_indices(messages)
    if not turns or window_tokens(raw) <= max_tokens:
        return _segments(raw, weights, [0] if turns else [], context_turns, "windows")
    sizes = [message_tokens(m) + MESSAGE_OVERHEAD for m in messages]
    fixed = _tools_tokens(raw)
    limit = max_tokens * WINDOW_SHARE
    cuts_ok = set(step_boundaries(messages))
    head = _head(messages)
    first_user = next((i for i, m in enumerate(messages) if m["role"] == "user"), None)
    if fixed + sum(sizes[:len(head)]) + (sizes[first_user] if first_user is not None else 0) >= limit:
        return _segments(raw, weights, [0], context_turns, "windows")
    starts, start = [0], 0
    while True:
        nexts = [q for q in range(start + 1, len(turns)) if turns[q] in cuts_ok]
        fits = None
        for q in nexts + [len(turns)]:
            prefix, body_start, end = _window(messages, turns, head, cuts_ok, start, q, context_turns)
            if fixed + sum(sizes[i] for i in prefix) + sum(sizes[body_start:end]) > limit:
                break
            fits = q
        if fits == len(turns) or not nexts:
            break
        start = fits if fits is not None else nexts[0]
        starts.append(start)
    return _segments(raw, weights, starts, context_turns, "windows",
                     {"max_tokens": max_tokens, "context_turns": context_turns})


def _head(messages: Sequence[Mapping]) -> list[int]:
    """Positions of the leading system messages."""
    head = []
    for i, m in enumerate(messages):
        if m["role"] != "system":
            break
        head.append(i)
    return head


def _window(messages, turns, head, cuts_ok, p, q, context_turns) -> tuple[list[int], int, int]:
    """The segment whose own turns are turns[p:q]: (positions of its prefix — the system messages
    and the request — , where its body starts, where it ends)."""
    first = turns[p]
    end = turns[q] if q < len(turns) else len(messages)
    if p == 0:
        return [], 0, end
    user = last_user_before(messages, first)
    earlier = [t for t in turns[max(0, p - context_turns):p] if (user is None or t > user) and t in cuts_ok]
    body_start = earlier[0] if earlier else first
    prefix = list(head) + ([user] if user is not None and user >= len(head) else [])
    return prefix, body_start, end


def _segments(raw: Mapping, weights: Sequence[int] | None, starts: list[int], context_turns: int, op: str,
              params: Mapping | None = None) -> list[Segment]:
    """The segments whose own turns begin at assistant turns `starts` (positions in the
    trajectory's assistant turns), as `segment` documents them; a cut one names `op` and `params`."""
    messages = list(raw["messages"])
    turns = assistant_indices(messages)
    weights_in = weights
    weights = list(weights) if weights is not None else [1] * len(turns)
    if len(weights) != len(turns):
        raise ValueError(f"{raw['id']}: {len(weights)} weights for {len(turns)} assistant messages")
    weight_at = dict(zip(turns, weights))
    kind_at = dict(decision_points(raw))
    cuts_ok = set(step_boundaries(messages))
    head = _head(messages)
    segments = []
    for n, p in enumerate(starts):
        q = starts[n + 1] if n + 1 < len(starts) else len(turns)
        prefix, body_start, end = _window(messages, turns, head, cuts_ok, p, q, context_turns)
        first = turns[p]
        body = messages[body_start:end]
        while body and body[-1]["role"] == "user":
            body.pop()
        seg_messages = [messages[i] for i in prefix] + body
        seg_weights = [weight_at[t] if t >= first else 0 for t in turns if body_start <= t < end]
        if any(seg_weights):
            if len(starts) > 1:   # the record will name the operator that cut it, and its masking before
                seg_messages = traced(seg_messages, op, "segmented", **(params or {}))
                seg_weights = carry(seg_weights, weights_in)
            segments.append(Segment(raw, seg_messages, seg_weights, first, kind_at.get(first, "start")))
    return segments

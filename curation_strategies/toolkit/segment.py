"""Fine-grained trajectory decomposition (CurateEvo App. C): decision points — the turn after an
error, the turn after a new user request, the turn after a state change — and segmentation of
long trajectories there into sub-trajectories that are valid SFT records on their own."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from .calls import is_state_changing, tool_calls
from .errors import turn_errors
from .provenance import carry, traced
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
    messages = list(raw["messages"])
    turns = assistant_indices(messages)
    weights_in = weights
    weights = list(weights) if weights is not None else [1] * len(turns)
    if len(weights) != len(turns):
        raise ValueError(f"{raw['id']}: {len(weights)} weights for {len(turns)} assistant messages")
    if not turns:
        return []
    weight_at = dict(zip(turns, weights))
    kind_at = dict(decision_points(raw))
    starts = _cut_positions(raw, turns, max_turns, kinds)
    cuts_ok = set(step_boundaries(messages))
    head = []
    for m in messages:
        if m["role"] != "system":
            break
        head.append(m)
    segments = []
    for n, p in enumerate(starts):
        first = turns[p]
        end = turns[starts[n + 1]] if n + 1 < len(starts) else len(messages)
        if p == 0:
            body_start, prefix = 0, []
        else:
            user = last_user_before(messages, first)
            earlier = [t for t in turns[max(0, p - context_turns):p]
                       if (user is None or t > user) and t in cuts_ok]
            body_start = earlier[0] if earlier else first
            prefix = list(head)
            if user is not None and user >= len(head):
                prefix.append(messages[user])
        body = messages[body_start:end]
        while body and body[-1]["role"] == "user":
            body.pop()
        seg_messages = prefix + body
        seg_weights = [weight_at[t] if t >= first else 0 for t in turns if body_start <= t < end]
        if any(seg_weights):
            if len(starts) > 1:   # the record will name the operator that cut it, and its masking before
                seg_messages = traced(seg_messages, "segment", "segmented", max_turns=max_turns, context_turns=context_turns)
                seg_weights = carry(seg_weights, weights_in)
            segments.append(Segment(raw, seg_messages, seg_weights, first, kind_at.get(first, "start")))
    return segments


"""What was won and may not be undone blind (issue 60): the settings of the best strategy that an
accepted edit introduced, each with the dev tasks that edit fixed.

The outcome deltas (`Brief.outcomes`, evolver/lineage.py) say per evaluated edit which dev tasks
it fixed and broke. An accepted edit `+op(params)` whose setting the best strategy still holds —
or an accepted `-op` whose operator it still lacks — is *protected*: a revision may not retune or
remove that operator (or put a removed one back), since each would risk the tasks the edit fixed,
unless the diagnosis names it (`named`): a failed point whose text names the operator (an LLM's
diagnosis may), one on a task the edit fixed (a won task fails again), a forgotten task the edit
fixed, or a harm whose remedy removes it. A failed point `broken_by` the edit does not release it:
the edit was accepted with what it broke, and what it broke gets its own remedy (the `broken`
motive adds its categories' data back) without undoing what it won — evo4's epoch 2 undid part of
its epoch 1 that way (docs/search.md). Both proposers are told the same facts: the offline
proposer filters its edits by `Guard.allows`; the code agent's brief carries `won_lines`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

EDIT = re.compile(r"([+-])(\w+)(?:\((.*)\))?$")


def setting_key(op: str, params: Mapping | None) -> str:
    """The edit key that sets `op` to `params` (None: removes it), as the offline proposer writes it."""
    if params is None:
        return f"-{op}"
    return f"+{op}(" + ", ".join(f"{k}={params[k]!r}" for k in sorted(params)) + ")"


@dataclass(frozen=True)
class Won:
    """A protected setting: the accepted edit that made it, its epoch and the dev tasks it fixed."""
    op: str
    edit: str
    epoch: int
    fixed: tuple[str, ...]


def won_settings(genome: Mapping | None, outcomes: Sequence[Mapping]) -> dict[str, Won]:
    """op → Won for every accepted edit that fixed dev tasks (oldest first, a later one on the same
    operator replacing it) whose setting the best strategy's `genome` still holds; {} when the best
    is not a composed strategy (its settings cannot be read)."""
    if genome is None:
        return {}
    found: dict[str, Won] = {}
    for delta in outcomes:
        if not delta.get("accepted"):
            continue
        fixed = tuple(sorted({r["task"] for r in delta.get("fixed") or ()}))
        for key in delta.get("edits") or ():
            m = EDIT.match(key)
            if m is None:
                continue
            op = m.group(2)
            holds = op not in genome if m.group(1) == "-" else op in genome and setting_key(op, genome[op]) == key
            if holds and fixed:   # an edit accepted on a lower C alone fixed no task: nothing to lose
                found[op] = Won(op, key, int(delta["epoch"]), fixed)
            else:
                found.pop(op, None)
    return found


def named(won: Mapping[str, Won], failed_points: Sequence[Mapping], signals: Mapping,
          harmed: Iterable[str] = ()) -> set[str]:
    """The protected operators the diagnosis names (module docstring); `harmed`: operators a
    diagnosed harm's remedies remove."""
    out = set(harmed) & set(won)
    forgotten = set(signals.get("forgetting") or ())
    for op, w in won.items():
        word = re.compile(rf"\b{re.escape(op)}\b")
        for p in failed_points:
            text = " ".join(str(p.get(k) or "") for k in ("failed_point", "evidence", "curation_hint"))
            if word.search(text) or set(w.fixed) & set(p.get("task_ids") or ()):
                out.add(op)
        if set(w.fixed) & forgotten:
            out.add(op)
    return out


@dataclass(frozen=True)
class Guard:
    """The protected settings of one revision and those the diagnosis releases."""
    won: Mapping[str, Won]
    released: frozenset[str]

    def allows(self, op: str) -> bool:
        """Whether an edit that changes operator `op` (retunes, removes or re-adds it) may be proposed."""
        return op not in self.won or op in self.released

    def note(self) -> str:
        """The commit message's paragraph: what was kept and why, what the diagnosis released."""
        if not self.won:
            return ""
        lines = [f"- {w.edit[1:] if w.edit.startswith('+') else 'without ' + w.op}: accepted in epoch {w.epoch}, fixed "
                 f"{len(w.fixed)} dev task(s) ({_ids(w.fixed)}); "
                 + ("the diagnosis names it, so it may change." if w.op in self.released else "kept.")
                 for w in self.won.values()]
        return "Accepted settings (inputs/outcomes: what each accepted edit fixed):\n" + "\n".join(lines) + "\n\n"


def won_lines(outcomes: Sequence[Mapping], genome: Mapping | None) -> list[str]:
    """For the code agent's brief: per accepted edit, the dev tasks it fixed, and what must not be
    undone (the protected settings by name when the best strategy is composed, `genome`; else the
    accepted change)."""
    won = won_settings(genome, outcomes)
    lines = []
    for delta in outcomes:
        if not delta.get("accepted"):
            continue
        fixed = sorted({r["task"] for r in delta.get("fixed") or ()})
        kept = [w.edit for w in won.values() if w.epoch == delta["epoch"]]
        edits = ", ".join(delta.get("edits") or ()) or "the code agent's change"
        lines.append(f"the edit accepted in epoch {delta['epoch']} ({edits}) fixed {len(fixed)} dev task(s)"
                     + (f" [{_ids(fixed)}]" if fixed else "")
                     + (f": protected, do not remove or retune {', '.join(kept)} unless the diagnosis names it"
                        if kept else ": a later accepted edit changed its settings" if genome is not None and delta.get("edits")
                        else ": do not undo this change unless the diagnosis names it or those tasks"))
    return lines


def _ids(items: Sequence[str]) -> str:
    return ", ".join(items[:6]) + (f" … ({len(items)} in all)" if len(items) > 6 else "")

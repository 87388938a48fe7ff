"""The offline proposer: diagnosed failure families → edits of a toolkit strategy's PLAN.

It needs no LLM. Each epoch it proposes an effectiveness revision (operators that address the
failure families and signals of the best strategy's diagnosis), then an efficiency revision
(operators that shrink the curated set, paying for λ·C). Each proposal is a sequence of
candidates, best first; the loop dry-runs them and takes the first whose artifacts differ from
the parent's (an edit that changes nothing is rejected as empty). Edits already tried in a
rejected epoch are not proposed again.
"""
from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from evolver.errors import RunFailed
from evolver.proposers.brief import Brief, Outcome, Verdict

TEMPLATE = Path(__file__).resolve().parents[2] / "curation_strategies" / "planned" / "strategy.py"


@dataclass(frozen=True)
class Edit:
    path: tuple[str, str]      # (section, key) in PLAN
    value: Any
    why: str

    @property
    def key(self) -> str:
        return f"{self.path[0]}.{self.path[1]}={self.value!r}"


# family (or signal) → edits that address it, most direct first
EFFECTIVENESS = {
    "unparseable_call": [Edit(("sft", "mask_corrected_errors"), True, "stop training on malformed calls that were later corrected")],
    "empty_turn": [Edit(("filters", "drop_abandoned"), True, "drop abandoned trajectories that end without an answer")],
    "unknown_tool": [Edit(("memory", "tool_signatures"), True, "give the agent the exact tool signatures at inference time")],
    "bad_arguments": [Edit(("memory", "tool_signatures"), True, "give the agent the exact tool signatures at inference time"),
                      Edit(("sft", "mask_corrected_errors"), True, "stop training on calls with bad arguments that were later corrected")],
    "tool_error_not_recovered": [Edit(("memory", "error_constraints"), True, "turn recurring tool errors into constraints in memory"),
                                 Edit(("rl", "steps"), "recovery", "spend RL on the decisions that follow an error")],
    "state_mismatch": [Edit(("filters", "drop_failed"), True, "stop training on trajectories that ended in a wrong state")],
    "missing_output": [Edit(("filters", "drop_failed"), True, "stop training on trajectories whose outputs were wrong")],
    "repeated_call_loop": [Edit(("filters", "drop_redundant"), True, "drop trajectories with redundant repeated calls")],
    "premature_stop": [Edit(("filters", "drop_abandoned"), True, "drop abandoned trajectories that teach stopping early"),
                       Edit(("sft", "segment_max_turns"), None, "train whole trajectories so the agent learns to finish")],
    "step_limit": [Edit(("filters", "drop_redundant"), True, "drop trajectories whose repeated calls teach looping")],
    "forgetting": [Edit(("dedup", "near_threshold"), None, "keep near-duplicate variants: skills learnt before were forgotten")],
    "boundary": [Edit(("rl", "rest_fraction"), 1.0, "send every clean step to RL where outcomes are unstable")],
    "rare": [Edit(("memory", "task_facts"), True, "remember task-family facts for rare action patterns")],
}
# each step shrinks Cost_train; taken in order, one per efficiency revision
EFFICIENCY = [
    Edit(("dedup", "exact"), True, "remove exact duplicate trajectories"),
    Edit(("filters", "drop_abandoned"), True, "drop abandoned trajectories"),
    Edit(("dedup", "near_threshold"), 0.8, "remove near-duplicate trajectories (task + call-sequence MinHash, Jaccard ≥ 0.8)"),
    Edit(("rl", "steps"), "recovery", "keep RL records at recovery steps, sample the clean ones"),
    Edit(("rl", "rest_fraction"), 0.5, "sample half of the clean RL steps"),
    Edit(("rl", "rest_fraction"), 0.25, "sample a quarter of the clean RL steps"),
    Edit(("filters", "drop_redundant"), True, "drop trajectories with redundant repeated calls"),
    Edit(("rl", "rest_fraction"), 0.1, "sample a tenth of the clean RL steps"),
]


@dataclass(frozen=True)
class Revision:
    files: dict[str, bytes]
    message: str
    edits: tuple[Edit, ...]


def read_plan(source: str) -> tuple[dict, tuple[int, int]]:
    """PLAN's value and its (first, last) line in `source`."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["PLAN"]:
            return ast.literal_eval(node.value), (node.lineno, node.end_lineno)
    raise LookupError("no PLAN literal")


def _literal(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else repr(value)


def format_plan(plan: Mapping) -> str:
    """PLAN as the template writes it: one section a line, keys sorted, double quotes."""
    rows = [f'    "{section}": {{' + ", ".join(f'"{k}": {_literal(v)}' for k, v in sorted(values.items())) + "},"
            for section, values in sorted(plan.items())]
    return "PLAN = {\n" + "\n".join(rows) + "\n}\n"


def write_plan(source: str, plan: dict) -> str:
    _, (first, last) = read_plan(source)
    lines = source.splitlines(keepends=True)
    return "".join(lines[: first - 1]) + format_plan(plan) + "".join(lines[last:])


def planned_source(files: Mapping[str, bytes]) -> str:
    """The strategy's source if it has a PLAN; else the planned template (ρ0's behaviour)."""
    source = files["strategy.py"].decode("utf-8")
    try:
        read_plan(source)
        return source
    except (LookupError, SyntaxError, ValueError):
        return TEMPLATE.read_text(encoding="utf-8")


def _apply(plan: dict, edits: Sequence[Edit]) -> dict:
    new = {section: dict(values) for section, values in plan.items()}
    for edit in edits:
        section, key = edit.path
        if section not in new or key not in new[section]:
            raise RunFailed(f"PLAN has no {section}.{key}: the strategy's PLAN is not the planned template's")
        new[section][key] = edit.value
    return new


def _failures(name: str, failed_points: Sequence[Mapping], signals: Mapping) -> str:
    points = [p for p in failed_points if p.get("family") == name]
    if points:
        count = sum(p.get("count", 1) for p in points)
        tasks = sorted({t for p in points for t in p.get("task_ids", [])})
        return f"{name}: {count} failure(s) on {', '.join(tasks[:5])}{' …' if len(tasks) > 5 else ''}"
    if name in signals.get("families", {}):
        return f"{name}: {signals['families'][name]} failure(s)"
    return f"{name} signal: {len(signals.get(name) or ())} task(s) or pattern(s)"


def _ranked_motives(failed_points: Sequence[Mapping], signals: Mapping) -> list[str]:
    counts = dict(signals.get("families", {}))
    for p in failed_points:
        counts.setdefault(p.get("family", ""), 0)
    ranked = sorted((name for name in counts if name in EFFECTIVENESS), key=lambda n: (-counts[n], n))
    ranked += [s for s in ("forgetting", "boundary", "rare") if signals.get(s)]
    return ranked


class OfflineProposer:
    """Two revisions per epoch, each a stream of candidates for the loop to dry-run."""

    name = "offline"

    def revise(self, phase: str, brief: Brief, validate: Callable[[dict], Verdict], out_dir: Path | None = None) -> Outcome:
        """The first candidate of `phase` whose dry run changes the artifacts."""
        candidates = (self.effectiveness(brief.files, brief.failed_points, brief.signals, brief.rejected_edits)
                      if phase == "effectiveness" else self.efficiency(brief.files, brief.profile, brief.lam, brief.rejected_edits))
        attempts = []
        for revision in candidates:
            verdict = validate(revision.files)
            attempts.append({"edits": [e.key for e in revision.edits], "dry_run": verdict.kind})
            if verdict.ok:
                return Outcome(revision.files, revision.message, tuple(e.key for e in revision.edits), attempts)
        return Outcome(None, attempts=attempts)

    def effectiveness(self, files: Mapping[str, bytes], failed_points: Sequence[Mapping], signals: Mapping,
                      rejected: Sequence[str] = ()) -> Iterator[Revision]:
        source = planned_source(files)
        plan, _ = read_plan(source)
        for motive in _ranked_motives(failed_points, signals):
            for edit in EFFECTIVENESS[motive]:
                if _apply(plan, [edit]) == plan or edit.key in rejected:
                    continue
                message = (f"effectiveness: {edit.why} (PLAN {edit.key})\n\n"
                           f"Motivated by {_failures(motive, failed_points, signals)}.")
                yield self._revision(files, source, plan, [edit], message)

    def efficiency(self, files: Mapping[str, bytes], profile: Mapping, lam: float,
                   rejected: Sequence[str] = ()) -> Iterator[Revision]:
        if lam <= 0:
            return
        source = planned_source(files)
        plan, _ = read_plan(source)
        for edit in EFFICIENCY:
            if _apply(plan, [edit]) == plan or edit.key in rejected:
                continue
            message = (f"efficiency: {edit.why} (PLAN {edit.key})\n\n"
                       f"λ = {lam:g}; the parent curates Cost_train = {profile.get('cost_train')} turns, "
                       f"C = {profile.get('C', 0):.4f}, so λ·C = {lam * profile.get('C', 0):.4f} of J.")
            yield self._revision(files, source, plan, [edit], message)

    @staticmethod
    def _revision(files, source, plan, edits, message) -> Revision:
        new_files = {k: v for k, v in files.items() if not k.startswith("inputs/")}
        new_files["strategy.py"] = write_plan(source, _apply(plan, edits)).encode("utf-8")
        return Revision(new_files, message, tuple(edits))

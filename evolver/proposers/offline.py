"""The offline proposer: the diagnosis → operator edits → a strategy's code, with no LLM.

The strategy is composed from toolkit operators (evolver/proposers/operators.py). Each
diagnosed failure family and each CoEvolve signal has remedies (REMEDIES): operators to insert,
retune or remove, with parameters — the diagnosed categories and tools become an operator's
*focus*. An effectiveness revision combines the first remedy of each of the most frequent
motives (up to MAX_EDITS edits; motives backed by failed dev tasks rank before those read off
the corpus, `motives`); an efficiency revision prunes, conditioned on the diagnosis:
`focus_prune` keeps what covers the failing categories, rare patterns' tools and recovery turns
and samples the rest, then dedup and step sampling. Each phase is a stream of candidates, best
first; the loop dry-runs them (`validate`) and an edit that changes nothing is rejected as empty.
Parameter choices are ordered by an RNG seeded with the run's seed and the parent's source, so
a run is deterministic; edits of rolled-back epochs (`brief.rejected_edits`) are not proposed
again; the commit message explains every edit.

What was won is kept (evolver/proposers/protected.py): a setting an accepted edit introduced and
the best still holds — the edit fixed dev tasks (`brief.outcomes`) — is not retuned, removed or
put back in either phase unless the diagnosis names that operator or those tasks; the commit
message says what was kept. The combined revisions come first (the top motives' first edits
together, then each pair), so k candidates try remedies together before one at a time.

Rolled-back candidates also teach (`brief.rejected`, inputs/rejected.json): an operator that a
rolled-back candidate added or retuned is not proposed again with any parameters when that
candidate broke more dev tasks the best policy solves than it fixed (CoEvolve's forgetting against
the best), and the categories of the tasks it broke join the efficiency focus, so `focus_prune`
keeps their data.
"""
from __future__ import annotations

import hashlib
import itertools
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

from base import registry
from evolver.diagnose import trade_text
from evolver.proposers.brief import Brief, Outcome, Verdict
from evolver.proposers.operators import BY_NAME, FOCUS, TEMPLATE, compose, read_genome
from evolver.proposers.protected import Guard, named, won_settings

MAX_EDITS = 3           # edits one effectiveness revision combines
SIGNALS = ("forgetting", "boundary", "rare", "broken")

# family or signal → remedies, most direct first: "+op" inserts (or retunes) an operator, "-op"
# removes it. Operators that add data are the direct remedy where the model never sees the skill:
# irrelevance items for unwanted calls, distractors for a wrong tool, parallel items for a wrong
# call count, refinements and environment variants for unrecovered errors and wrong end states. Adding a remedy is one string here; adding an operator, one entry in OPERATORS.
REMEDIES = {
    "unparseable_call": ("+mask_corrected", "+drop_uncorrected"),
    "missing_call": ("+repeat_focus", "+rl_focus", "+with_tool_calls"),
    "unwanted_call": ("+irrelevance_items", "+repeat_no_call", "+task_facts"),
    "unknown_tool": ("+tool_signatures", "+drop_uncorrected"),
    "wrong_tool": ("+add_distractors", "+tool_signatures", "+task_facts", "+repeat_focus"),
    "wrong_call_count": ("+parallel_variants", "+compose_parallel", "+compose_parallel_multiple", "+repeat_focus",
                         "+drop_redundant"),
    # argument variants last: on the tuning slice they cost 8.3 points (irrelevance 21 → 11 of 24,
    # the calling categories level at 17), docs/search.md
    "bad_arguments": ("+tool_signatures", "+mask_corrected", "+error_constraints", "+rl_successes", "+worked_examples",
                      "+argument_variants"),
    "tool_error_not_recovered": ("+error_constraints", "+refinement_synthesis", "+rl_recovery", "+mask_corrected"),
    "state_mismatch": ("+drop_failed", "+environment_variants", "+rl_focus", "+rl_recovery", "+rl_successes"),
    "missing_output": ("+drop_failed", "+drop_abandoned"),
    "empty_turn": ("+drop_abandoned", "+repeat_focus"),
    "repeated_call_loop": ("+drop_redundant", "+max_turns"),
    "misled_by_memory": ("-tool_signatures", "-task_facts", "-error_constraints", "-worked_examples"),
    "premature_stop": ("+drop_abandoned", "-segment", "+repeat_focus"),
    "step_limit": ("+drop_redundant", "+segment"),
    "unclassified": ("+drop_failed", "+repeat_focus"),
    # from the curated profile (evolver.diagnose.outcome_point): the corpus recorded these trajectories as failures
    "trained_failures": ("+drop_failed", "+rl_successes"),
    # CoEvolve's signals: train again on what was forgotten (and undo pruning), more supervision near the
    # decision boundary (RL on the corpus's own boundary tasks too), more exposure to rare patterns
    "forgetting": ("+repeat_focus", "-focus_prune", "-near_dedup", "-max_turns"),
    "boundary": ("+rl_focus", "+rl_boundary", "+repeat_focus"),
    "rare": ("+repeat_focus", "+rl_focus", "+rebalance", "+task_facts"),
    # the outcome deltas (evolver/lineage.py): tasks the last accepted edit broke get their
    # categories' data repeated back
    "broken": ("+repeat_focus", "+rl_focus", "+rl_boundary"),
    # from the trainings (evolver.diagnose.grpo_point): most GRPO groups scored alike, so RL taught nothing
    "rl_no_signal": ("+rl_boundary", "+rl_successes"),
}
# Families that name harm done by the parent's own operators: their remedies remove those
# operators, the revision starts with them, and no other motive may add or retune them (hints
# naming tools the task did not offer cost dev tasks, docs/results/evolution.md, while
# bad_arguments, the top motive, retuned the same tool_signatures operator to put in more of them).
HARMS = ("misled_by_memory",)
# efficiency: each shrinks Cost_train; parameter values mildest first
EFFICIENCY = ("+focus_prune", "+fit_budget", "+exact_dedup", "+near_dedup", "+rl_recovery", "+drop_redundant", "+max_tokens",
              "+memory_budget")


@dataclass(frozen=True)
class Edit:
    op: str
    params: Mapping | None      # None: remove the operator
    motive: str

    @property
    def key(self) -> str:
        if self.params is None:
            return f"-{self.op}"
        return f"+{self.op}(" + ", ".join(f"{k}={self.params[k]!r}" for k in sorted(self.params)) + ")"

    def apply(self, genome: Mapping) -> dict:
        new = {k: dict(v) for k, v in genome.items()}
        if self.params is None:
            new.pop(self.op, None)
        else:
            new[self.op] = dict(self.params)
        return new


@dataclass(frozen=True)
class Revision:
    files: dict[str, bytes]
    message: str
    edits: tuple[Edit, ...]


def categorizer(benchmark: str | None) -> Callable[[str], str]:
    """A dev task's category as the corpus names its environment variant, by the benchmark's
    environment (`base.environment`: category_of; BFCL: simple_python_3 → simple_python,
    multi_turn_base_12 → base); without a benchmark, the id rule of registry.NO_ENVIRONMENT."""
    return registry.get(benchmark or registry.NO_ENVIRONMENT).category_of


def vocabulary(corpus) -> dict[str, set] | None:
    """The environment variants and called tool names of a corpus (None: unknown, keep every focus)."""
    if corpus is None:
        return None
    records = [(((r.get("meta") or {}).get("env") or {}).get("variant"),
                frozenset(c["function"]["name"] for m in r["messages"] for c in m.get("tool_calls") or ()))
               for r in corpus.records]
    return {"categories": {c for c, _ in records}, "tools": set().union(*(n for _, n in records)), "records": records}


def narrowed(categories: set, tools: set, known: Mapping | None) -> dict[str, tuple]:
    """A focus among what the corpus has; empty when it would hold every record or none (a
    focus on everything is no focus)."""
    if known is not None:
        categories, tools = categories & known["categories"], tools & known["tools"]
        if all(c in categories or not names.isdisjoint(tools) for c, names in known["records"]):
            categories, tools = set(), set()
    return {"categories": tuple(sorted(categories)), "tools": tuple(sorted(tools))}


def focus_of(motive: str, failed_points: Sequence[Mapping], signals: Mapping, known: Mapping | None = None,
             category_of: Callable[[str], str] | None = None) -> dict[str, tuple]:
    """The categories and tools a motive points at, among those the corpus has (`known`)."""
    category_of = category_of or categorizer(None)
    categories, tools = set(), set()
    if motive == "rare":
        tools = {name for r in signals.get("rare") or () for name in r["pattern"].split(" → ") if not name.startswith("(")}
    elif motive in SIGNALS:
        categories = {category_of(t) for t in signals.get(motive) or ()}
    else:
        categories = {category_of(t) for p in failed_points if p.get("family") == motive for t in p.get("task_ids", ())}
    return narrowed(categories, tools, known)


# Motives whose weight counts something other than failed dev tasks: corpus records (a failed
# point read off the curated profile, e.g. `trained_failures`) or rare corpus patterns.
CORPUS_MOTIVES = ("rare",)


def motives(failed_points: Sequence[Mapping], signals: Mapping) -> list[tuple[str, int]]:
    """Families and fired signals with their weight, dev evidence first: failure families and the
    forgetting/boundary/broken signals count failed dev tasks — what J measures — and are ranked by
    that count; motives read off the corpus (a profile's failed point such as `trained_failures`,
    counted in records, and `rare`, in patterns) follow, ranked by their own counts. Counts in
    different units are never compared: 150 trained failures are not worth more than 33 dev tasks
    that call a tool where none was wanted."""
    counts: dict[str, int] = {}
    corpus: set[str] = set(CORPUS_MOTIVES)
    for p in failed_points:
        if p.get("family") in REMEDIES:
            counts[p["family"]] = counts.get(p["family"], 0) + int(p.get("count", 1))
            if p.get("source") in ("profile", "training"):   # counted in records or GRPO groups, not dev tasks
                corpus.add(p["family"])
    for name, n in (signals.get("families") or {}).items():
        if name in REMEDIES and name not in counts:
            counts[name] = int(n)
    for name in SIGNALS:
        if signals.get(name):
            counts[name] = len(signals[name])
    return sorted(counts.items(), key=lambda kv: (kv[0] in corpus, -kv[1], kv[0]))


def broken_tasks(outcomes: Sequence[Mapping]) -> list[str]:
    """Tasks the last accepted edit broke (brief.outcomes, oldest first)."""
    accepted = [d for d in outcomes if d.get("accepted")]
    return sorted({r["task"] for r in accepted[-1]["broken"]}) if accepted else []


def net_effect(outcomes: Sequence[Mapping]) -> dict[str, int]:
    """Per operator: tasks fixed minus tasks broken by the evaluated edits that touched it."""
    net: dict[str, int] = {}
    for d in outcomes:
        for op in {key[1:].split("(")[0] for key in d.get("edits") or ()}:
            net[op] = net.get(op, 0) + len(d.get("fixed") or ()) - len(d.get("broken") or ())
    return net


def with_outcomes(signals: Mapping, outcomes: Sequence[Mapping]) -> Mapping:
    """The signals with `broken`, the tasks the last accepted edit broke, when there are any."""
    broken = broken_tasks(outcomes)
    return {**signals, "broken": broken} if broken else signals


def _choices(op: str, focus: Mapping, rng: random.Random | None) -> list[dict]:
    """Parameter settings of `op`: its domain's product (shuffled by `rng`, else mildest first)."""
    domain = BY_NAME[op].domain
    settings = [dict(zip(domain, values)) for values in itertools.product(*domain.values())]
    if rng is not None:
        rng.shuffle(settings)
    if any("{" + name in code for name in FOCUS for code in BY_NAME[op].code.values()):
        if not any(focus.values()):
            return []      # nothing diagnosed to focus on: the operator would do nothing
        settings = [{**s, **focus} for s in settings]
    return settings


def _edits(remedy: str, motive: str, focus: Mapping, rng: random.Random | None) -> list[Edit]:
    sign, op = remedy[0], remedy[1:]
    if sign == "-":
        return [Edit(op, None, motive)]
    return [Edit(op, params, motive) for params in _choices(op, focus, rng)]


def lessons_of(rejected: Sequence[Mapping]) -> tuple[set[str], set[str], str]:
    """(operators not to add again, task ids whose data efficiency keeps, the commit note) from
    the lessons of rolled-back candidates: a candidate that broke more tasks than it fixed
    condemns the operators it added or retuned."""
    banned, broken, lines = set(), set(), []
    for lesson in rejected:
        broke, fixed = list(lesson.get("broke") or ()), list(lesson.get("fixed") or ())
        broken.update(broke)
        ops = sorted({m.group(1) for e in lesson.get("edits") or () if (m := re.match(r"\+(\w+)", e))})
        harmful = len(broke) > len(fixed) and ops
        if harmful:
            banned.update(ops)
        if broke or fixed:
            lines.append(f"- epoch {lesson.get('epoch')} ({', '.join(lesson.get('edits') or ()) or 'no operator edit'}) broke "
                         f"{len(broke)} dev task(s) the best solves ({', '.join(broke[:5])}{' …' if len(broke) > 5 else ''}) "
                         f"and fixed {len(fixed)}"
                         + (f" (per category fixed/broken: {trade_text(lesson['by_category'])})" if lesson.get("by_category") else "")
                         + (f": {', '.join(ops)} not proposed again." if harmful else "."))
    note = ("Lessons of rolled-back candidates (inputs/rejected.json):\n" + "\n".join(lines) + "\n\n") if lines else ""
    return banned, broken, note


class OfflineProposer:
    """Revisions as streams of candidates; `candidates(..., k)` keeps up to k that pass the dry run."""

    name = "offline"

    def revise(self, phase: str, brief: Brief, validate: Callable[[dict], Verdict], out_dir: Path | None = None) -> Outcome:
        """The first candidate of `phase` whose dry run changes the artifacts."""
        return self.candidates(phase, brief, validate, k=1)[0]

    def candidates(self, phase: str, brief: Brief, validate: Callable[[dict], Verdict], k: int = 1,
                   out_dir: Path | None = None) -> list[Outcome]:
        """Up to k distinct revisions that pass the dry run, best first; when none does, one
        Outcome without files that records the attempts (`out_dir`: unused, nothing is written)."""
        if k < 1:
            raise ValueError("k must be at least 1")
        known = vocabulary(brief.corpus)
        signals = with_outcomes(brief.signals, brief.outcomes)   # what the last accepted edit broke is a motive
        category_of = categorizer(brief.benchmark)
        stream = (self.effectiveness(brief.files, brief.failed_points, signals, brief.rejected_edits, brief.seed, known,
                                     net_effect(brief.outcomes), brief.rejected, category_of, brief.outcomes)
                  if phase == "effectiveness" else
                  self.efficiency(brief.files, brief.curation_stats, brief.lam, brief.failed_points, signals,
                                  brief.rejected_edits, known, brief.rejected, category_of, brief.outcomes))
        found, attempts = [], []
        for revision in stream:
            verdict = validate(revision.files)
            attempts.append({"edits": [e.key for e in revision.edits], "dry_run": verdict.kind,
                             **({"error": verdict.error} if verdict.error else {})})
            if verdict.ok:
                found.append(Outcome(revision.files, revision.message, tuple(e.key for e in revision.edits), attempts))
                attempts = []
                if len(found) == k:
                    break
        return found or [Outcome(None, attempts=attempts)]

    # ------------------------------------------------------------------ the two phases

    def effectiveness(self, files: Mapping[str, bytes], failed_points: Sequence[Mapping], signals: Mapping,
                      rejected: Sequence[str] = (), seed: int = 0, known: Mapping | None = None,
                      net: Mapping[str, int] | None = None, lessons: Sequence[Mapping] = (),
                      category_of: Callable[[str], str] | None = None,
                      outcomes: Sequence[Mapping] = ()) -> Iterator[Revision]:
        """Combined revisions over the top motives first (all of their first edits, then each pair),
        then every single edit, motive by motive.
        A diagnosed harm (HARMS) ranks first and bans the operators its remedies remove.
        Remedies whose operator's evaluated edits broke more dev tasks than they fixed (`net`, from
        the outcome deltas) are tried after the others; operators of a net-harmful rolled-back
        candidate (`lessons`, inputs/rejected.json) are not proposed again; a setting an accepted
        edit introduced (`outcomes`, evolver/proposers/protected.py) is not changed unless the
        diagnosis names it."""
        genome, note = self._parent(files)
        banned, _, learned = lessons_of(lessons)
        note += learned
        rng = random.Random(f"{seed}:effectiveness:{hashlib.sha256(compose(genome).encode()).hexdigest()}")
        ranked = motives(failed_points, signals)
        # a harm the parent's own operators caused comes first, and no other motive adds or retunes them
        harms = [m for m, _ in ranked if m in HARMS]
        banned = banned | {r[1:] for m in harms for r in REMEDIES[m]}
        ranked = [mc for mc in ranked if mc[0] in harms] + [mc for mc in ranked if mc[0] not in harms]
        won = won_settings(genome, outcomes)
        guard = Guard(won, frozenset(named(won, failed_points, signals, {r[1:] for m in harms for r in REMEDIES[m]})))
        note += guard.note()
        # per motive, per remedy: its applicable settings
        net = net or {}
        options = {m: [[e for e in _edits(remedy, m, focus_of(m, failed_points, signals, known, category_of), rng)
                        if e.key not in rejected and (e.params is None or e.op not in banned) and e.apply(genome) != genome
                        and guard.allows(e.op)]
                       for remedy in sorted(REMEDIES[m], key=lambda r: net.get(r[1:], 0) < 0)]
                   for m, _ in ranked}
        combined: list[Edit] = []
        for m, _ in ranked:
            first = next((e for settings in options[m] for e in settings if all(e.op != c.op for c in combined)), None)
            if first is not None and len(combined) < MAX_EDITS:
                combined.append(first)
        # then single edits: every remedy's first setting, motive by motive, before any second setting
        depth = max((len(settings) for m in options for settings in options[m]), default=0)
        singles = [[settings[d]] for d in range(depth) for m, _ in ranked for settings in options[m] if d < len(settings)]
        seen: set = set()
        plans = combinations(combined) + singles
        for edits in plans:
            revision = self._revision(files, genome, edits, "effectiveness", note, failed_points, signals, seen)
            if revision is not None:
                yield revision

    def efficiency(self, files: Mapping[str, bytes], curation_stats: Mapping, lam: float, failed_points: Sequence[Mapping] = (),
                   signals: Mapping | None = None, rejected: Sequence[str] = (), known: Mapping | None = None,
                   lessons: Sequence[Mapping] = (), category_of: Callable[[str], str] | None = None,
                   outcomes: Sequence[Mapping] = ()) -> Iterator[Revision]:
        """Single pruning edits, mildest first; focus_prune keeps what the diagnosis points at and
        what rolled-back candidates broke; a setting an accepted edit introduced is not changed
        unless the diagnosis names it."""
        if lam <= 0:
            return
        signals = signals or {}
        genome, note = self._parent(files)
        banned, broken, learned = lessons_of(lessons)
        won = won_settings(genome, outcomes)
        guard = Guard(won, frozenset(named(won, failed_points, signals)))
        note += learned + guard.note()
        category_of = category_of or categorizer(None)
        parts = [focus_of(m, failed_points, signals, known, category_of) for m, _ in motives(failed_points, signals)]
        focus = narrowed({c for f in parts for c in f["categories"]} | {category_of(t) for t in broken},
                         {t for f in parts for t in f["tools"]}, known)
        cost = (f"λ = {lam:g}; the parent curates Cost_train = {curation_stats.get('cost_train')} turns, "
                f"C = {curation_stats.get('C', 0):.4f}, so λ·C = {lam * curation_stats.get('C', 0):.4f} of J.\n\n")
        seen: set = set()
        for remedy in EFFICIENCY:
            for edit in _edits(remedy, "efficiency", focus, None):
                if edit.key in rejected or edit.op in banned or edit.apply(genome) == genome or not guard.allows(edit.op):
                    continue
                revision = self._revision(files, genome, [edit], "efficiency", note + cost, failed_points, signals, seen)
                if revision is not None:
                    yield revision

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _parent(files: Mapping[str, bytes]) -> tuple[dict, str]:
        genome = read_genome(files["strategy.py"].decode("utf-8"))
        if genome is not None:
            return genome, ""
        return {}, "The parent is not a composed strategy: the edits start from the composed template (ρ0's curation).\n\n"

    @staticmethod
    def _revision(files, genome, edits, phase, note, failed_points, signals, seen) -> Revision | None:
        new = genome
        for edit in edits:
            new = edit.apply(new)
        source = compose(new)
        if source in seen:
            return None
        seen.add(source)
        lines = []
        for e in edits:
            what = "remove" if e.params is None else ("retune" if e.op in genome else "add")
            lines.append(f"- {what} {e.key[1:]}: {BY_NAME[e.op].why}. {_motivation(e.motive, failed_points, signals)}")
        motives_named = ", ".join(dict.fromkeys(e.motive for e in edits))
        title = (f"{phase}: {edits[0].key}" if len(edits) == 1 else f"{phase}: {len(edits)} edits") + f" for {motives_named}"
        new_files = {k: v for k, v in files.items() if not k.startswith("inputs/")}
        new_files["strategy.py"] = source.encode("utf-8")
        return Revision(new_files, f"{title}\n\n{note}" + "\n".join(lines) + "\n", tuple(edits))


def combinations(firsts: Sequence[Edit]) -> list[list[Edit]]:
    """The combined plans of the top motives' first edits: all of them, then each pair (in motive
    order), so k candidates try remedies together before one at a time; [] for fewer than two."""
    if len(firsts) < 2:
        return []
    pairs = [list(p) for p in itertools.combinations(firsts, 2)] if len(firsts) > 2 else []
    return [list(firsts)] + pairs


def _motivation(motive: str, failed_points: Sequence[Mapping], signals: Mapping) -> str:
    if motive == "efficiency":
        return "Pays for λ·C."
    if motive == "broken":
        items = signals.get(motive) or ()
        return (f"The last accepted edit broke {len(items)} dev task(s) that passed before "
                f"({', '.join(items[:5])}{' …' if len(items) > 5 else ''}); their categories' data is repeated.")
    if motive in SIGNALS:
        items = signals.get(motive) or ()
        names = [r["pattern"] if isinstance(r, Mapping) else r for r in items]
        return f"Signal {motive}: {len(names)} ({', '.join(map(str, names[:5]))}{' …' if len(names) > 5 else ''})."
    points = [p for p in failed_points if p.get("family") == motive]
    count = sum(int(p.get("count", 1)) for p in points) or (signals.get("families") or {}).get(motive, 0)
    tasks = sorted({t for p in points for t in p.get("task_ids", ())})
    where = f" on {', '.join(tasks[:5])}{' …' if len(tasks) > 5 else ''}" if tasks else ""   # a signal may name no task
    return f"Motivated by {motive}: {count} failure(s){where}."

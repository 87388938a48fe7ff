"""What a proposer is told (Brief), what the loop's dry run answers (Verdict), and what a
revision returns (Outcome): the values both proposers share."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence


@dataclass(frozen=True)
class Brief:
    """What a proposer is told for one revision of the best strategy (paper §4.2's inputs)."""
    files: dict[str, bytes]          # the parent's files, inputs/ included
    failed_points: Sequence[Mapping]
    signals: Mapping
    curation_stats: Mapping          # the parent's curation stats Σ (its profile.json)
    lam: float
    rejected_edits: Sequence[str]    # edits of rolled-back epochs (offline proposer)
    history: Sequence[Mapping]       # rolled-back attempts: epoch, summary, diff, P, C, J (code agent)
    corpus: Any                      # corpora.Corpus: the strategy's view of the raw corpus
    seed: int
    score: Mapping | None = None     # the best strategy's dev score s_e: {"P", "C", "J", "epoch"}
    budget: Mapping | None = None    # ctx.budget: what the recipe trains on (trainer.recipe.curation_budget)
    outcomes: Sequence[Mapping] = () # per evaluated candidate: tasks fixed / broken, edits, records per operator (evolver/lineage.py)
    benchmark: str = ""              # the dev benchmark: its environment names the tasks' categories (base/registry.py)
    rejected: Sequence[Mapping] = () # inputs/rejected.json: what candidates rolled back since the best broke and
                                     # fixed (evolver.diagnose.rejected_lesson, with epoch, summary, edits, scores)


@dataclass(frozen=True)
class Verdict:
    """The loop's dry run of a candidate: ok, or why not; kind is changed | empty | failed."""
    ok: bool
    kind: str
    error: str | None = None


@dataclass
class Outcome:
    """One revision: the new strategy files (None: nothing acceptable), its commit message, the
    edits it made (offline), and a record of every attempt."""
    files: dict[str, bytes] | None
    message: str = ""
    edits: tuple[str, ...] = ()
    attempts: list[dict] = field(default_factory=list)
    budget_exhausted: bool = False

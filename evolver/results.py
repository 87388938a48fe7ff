"""What each stage of an epoch returns: one typed result per stage, with its journal form.

`journal()` is exactly the `result` the stage's `stage_done` event holds (so run directories and
the readers of the journal — `log`, `status`, the report, lineage — see what they always saw), and
`from_journal` reads it back when `resume` finds the stage done. A key a stage did not write is
absent from its journal form, not null, except where the form has always carried a null.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(kw_only=True)
class StageResult:
    llm: dict | None = None
    """The LLM usage the stage caused (calls, from_record, tokens, USD, wall time); None without calls."""

    def journal(self) -> dict:
        """The `result` of the stage's `stage_done` event (each stage class writes its own form)."""
        raise NotImplementedError(type(self).__name__)

    def _with_llm(self, body: dict) -> dict:
        return body if self.llm is None else {**body, "llm": self.llm}

    @classmethod
    def from_journal(cls, data: Mapping[str, Any]):
        """The result a `stage_done` event recorded (keys the class does not know are not kept)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(kw_only=True)
class Curation(StageResult):
    """The `curate` stage: the artifacts of the candidate tagged `epoch-<e>`, or why the host refused them."""
    commit: str
    failed: str | None = None
    """Why the execution failed the host's check; then nothing else is set and nothing is trained."""
    C: float | None = None
    """C as charged in this run (an ablated resource costs nothing)."""
    cost_train: int | None = None
    counts: dict = field(default_factory=dict)
    """Records per artifact file (`sft.jsonl` → n)."""
    curated: dict | None = None
    """The curated C and Cost_train, when an ablation charges less than was curated."""
    untrainable: bool = False
    """The host accepted the artifacts, but this run would train nothing on them (`failed` says why)."""

    def journal(self) -> dict:
        if self.failed is not None:
            return self._with_llm({"commit": self.commit, "failed": self.failed,
                                   **({"untrainable": True} if self.untrainable else {})})
        body = {"commit": self.commit, "C": self.C, "cost_train": self.cost_train, "counts": self.counts}
        return self._with_llm(body if self.curated is None else {**body, "curated": self.curated})


@dataclass(kw_only=True)
class Training(StageResult):
    """A `train-s<seed>` stage: the adapter trained on the epoch's artifacts (None: nothing to train)."""
    adapter: str | None
    trained: dict
    """What training used after the ablations and length limits: {"sft": examples, "rl": prompts}."""
    skipped: str | None = None
    length: dict | None = None
    summary: dict | None = None

    def journal(self) -> dict:
        if self.adapter is None:
            return self._with_llm({"adapter": None, "skipped": self.skipped, "trained": self.trained})
        return self._with_llm({"adapter": self.adapter, "trained": self.trained, "length": self.length,
                               "summary": self.summary})


@dataclass(kw_only=True)
class Evaluation(StageResult):
    """An `evaluate-s<seed>` (or `sample-s<seed>`) stage: P of the epoch's policy on the dev tasks."""
    P: float | None
    metrics: dict = field(default_factory=dict)
    dev: dict = field(default_factory=dict)
    """What the dev set held: tasks, episodes, step items."""
    gold_ll: float | None = None
    """The mean gold-call log-likelihood beside P (never part of J)."""
    gold_ll_per_category: dict | None = None

    def journal(self) -> dict:
        body = {"P": self.P, "metrics": self.metrics, "dev": self.dev}
        if self.gold_ll_per_category is not None:   # the policy has a model to score the gold calls with
            body.update(gold_ll=self.gold_ll, gold_ll_per_category=self.gold_ll_per_category)
        return self._with_llm(body)


@dataclass(kw_only=True)
class Decision(StageResult):
    """The `decide` stage: accepted or rolled back, with P, C, J and the reason in one sentence."""
    epoch: int
    commit: str | None = None
    accepted: bool = False
    reason: str = ""
    P: float | None = None
    C: float | None = None
    J: float | None = None
    edits: list = field(default_factory=list)
    """The edits of the candidate (or, with no candidate, the refused ones: not proposed again)."""
    c_only: bool = False
    """Accepted on a lower C alone, P unchanged."""
    dev: dict | None = None
    gold_ll: float | None = None
    no_candidate: bool = False
    """Every proposal was refused: nothing was evaluated."""
    budget_exhausted: bool = False
    """The run's LLM budget is spent: the run ends with this epoch."""

    def journal(self) -> dict:
        body = {"epoch": self.epoch, "commit": self.commit, "accepted": self.accepted, "reason": self.reason,
                "P": self.P, "J": self.J, "edits": self.edits}
        if self.P is not None or self.no_candidate:   # a failed curation has no C
            body["C"] = self.C
        if self.c_only:
            body["c_only"] = True
        if self.dev:
            body["dev"] = self.dev
        if self.gold_ll is not None:
            body["gold_ll"] = self.gold_ll
        if self.no_candidate:
            body["no_candidate"] = True
        if self.budget_exhausted:
            body["budget_exhausted"] = True
        return self._with_llm(body)

    def scores(self) -> dict:
        return {"epoch": self.epoch, "P": self.P, "C": self.C, "J": self.J}


@dataclass(kw_only=True)
class Diagnosis(StageResult):
    """The `diagnose` stage: which epoch's failures were diagnosed, and their families."""
    of_epoch: int
    families: dict
    llm_diagnosis: dict | None = None
    rejected: dict | None = None
    """Per rolled-back epoch since the best: how many dev tasks it broke and fixed."""

    def journal(self) -> dict:
        body = {"of_epoch": self.of_epoch, "families": self.families}
        body.update({k: getattr(self, k) for k in ("llm_diagnosis", "rejected") if getattr(self, k) is not None})
        return self._with_llm(body)


@dataclass(kw_only=True)
class Proposal(StageResult):
    """The `propose` stage: the candidate committed and tagged `epoch-<e+1>`, or why none was."""
    candidate: str | None
    edits: list = field(default_factory=list)
    dry_runs: int = 0
    refused: list | None = None
    """With no candidate: why the proposals were refused (distinct sentences with counts)."""
    refused_edits: list | None = None
    budget_exhausted: bool = False
    candidates: int | None = None
    """With k candidates: how many the proxy ranked, how many were asked for, and the chosen one."""
    proposed: int | None = None
    chosen: int | None = None

    def journal(self) -> dict:
        body = {"candidate": self.candidate, "edits": self.edits, "dry_runs": self.dry_runs}
        if self.refused is not None:
            body.update(refused=self.refused, refused_edits=self.refused_edits)
        if self.budget_exhausted:
            body["budget_exhausted"] = True
        if self.chosen is not None:
            body.update(candidates=self.candidates, proposed=self.proposed, chosen=self.chosen)
        return self._with_llm(body)


@dataclass(kw_only=True)
class Final(StageResult):
    """The run's final strategy, chosen by the run's final rule (evolver/final.py)."""
    epoch: int
    commit: str
    P: float
    C: float
    rule: str | None = None
    """The final rule that chose it (None: a run finished before the rules had names, by paper-best-dev)."""
    why: str | None = None
    """One sentence: why the rule chose this epoch."""

    def journal(self) -> dict:
        body = {"epoch": self.epoch, "commit": self.commit, "P": self.P, "C": self.C}
        if self.rule is not None:
            body.update(rule=self.rule, why=self.why)
        return self._with_llm(body)


def result_type(stage: str) -> type[StageResult]:
    """The result class of a stage by its journal name (`train-s0` → Training)."""
    return {"curate": Curation, "train": Training, "evaluate": Evaluation, "sample": Evaluation, "decide": Decision,
            "diagnose": Diagnosis, "propose": Proposal, "final": Final}[stage.split("-s")[0]]

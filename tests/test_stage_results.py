"""The stages' typed results: each journal form is what the journal has always recorded, and
reading a recorded result back gives the same form (what `resume` relies on)."""
from __future__ import annotations

import pytest

from base import registry
from evolver.results import Curation, Decision, Diagnosis, Evaluation, Final, Proposal, Training, result_type

# journal results as runs before the typed results wrote them (shapes of evolver/loop.py at 3354f4e)
RECORDED = {
    "curate": [{"commit": "c1", "C": 0.4, "cost_train": 120, "counts": {"sft.jsonl": 3, "rl.jsonl": 2}},
               {"commit": "c1", "C": 0.0, "cost_train": 0, "counts": {}, "curated": {"C": 0.4, "cost_train": 120}},
               {"commit": "c1", "failed": "timed out after 0.01 s"},
               {"commit": "c1", "C": 0.4, "cost_train": 120, "counts": {}, "llm": {"calls": 2, "usd": 0.01}}],
    "train-s0": [{"adapter": "/r/epochs/0/train-s0/adapter", "trained": {"sft": 3, "rl": 2}, "length": {"cut": 0},
                  "summary": {"wall_s": 1.0, "steps": 4, "sft": {}, "grpo": None}},
                 {"adapter": None, "skipped": "nothing to train", "trained": {"sft": 0, "rl": 0}}],
    "evaluate-s1": [{"P": 0.5, "metrics": {"task_success": 0.5}, "dev": {"tasks": 2}},
                    {"P": 0.5, "metrics": {}, "dev": {"tasks": 2}, "gold_ll": -1.5, "gold_ll_per_category": {"simple": -1.5}}],
    "decide": [{"epoch": 1, "commit": "c1", "accepted": True, "reason": "J up", "P": 0.5, "C": 0.4, "J": 0.38,
                "edits": ["+x"], "c_only": True, "dev": {"tasks": 2}, "gold_ll": -1.2},
               {"epoch": 2, "commit": "c2", "accepted": False, "reason": "curation failed: x", "P": None, "J": None,
                "edits": []},
               {"epoch": 3, "commit": None, "accepted": False, "no_candidate": True, "P": None, "C": None, "J": None,
                "reason": "no valid candidate: the run's LLM budget is spent", "edits": ["-y"], "budget_exhausted": True}],
    "diagnose": [{"of_epoch": 0, "families": {"bad_arguments": 2}},
                 {"of_epoch": 0, "families": {}, "llm_diagnosis": {"points": 1}, "rejected": {"1": {"broke": 2, "fixed": 1}}}],
    "propose": [{"candidate": "c3", "edits": ["+x"], "dry_runs": 2},
                {"candidate": None, "edits": [], "dry_runs": 3, "refused": ["dry run: empty (×3)"], "refused_edits": ["+z"],
                 "budget_exhausted": True},
                {"candidate": "c3", "edits": ["+x"], "dry_runs": 4, "candidates": 2, "proposed": 2, "chosen": 1}],
    "final": [{"epoch": 1, "commit": "c1", "P": 0.5, "C": 0.4}],
}


@pytest.mark.parametrize("stage,recorded", [(s, r) for s, forms in RECORDED.items() for r in forms])
def test_a_recorded_result_reads_back_to_the_same_journal_form(stage, recorded):
    assert result_type(stage).from_journal(recorded).journal() == recorded


def test_the_journal_forms_are_the_ones_the_stages_always_wrote():
    assert Curation(commit="c", failed="boom").journal() == {"commit": "c", "failed": "boom"}
    evaluated = Decision(epoch=1, commit="c", accepted=False, reason="r", P=0.2, C=0.4, J=0.08).journal()
    assert evaluated == {"epoch": 1, "commit": "c", "accepted": False, "reason": "r", "P": 0.2, "C": 0.4, "J": 0.08,
                         "edits": []}
    assert "C" not in Decision(epoch=1, commit="c", reason="curation failed: x").journal()   # nothing was charged
    assert Decision(epoch=2, no_candidate=True, reason="r").journal()["C"] is None
    assert Proposal(candidate="c", dry_runs=1).journal() == {"candidate": "c", "edits": [], "dry_runs": 1}
    assert Training(adapter=None, skipped="nothing to train", trained={}).journal()["adapter"] is None
    assert Evaluation(P=0.5).journal() == {"P": 0.5, "metrics": {}, "dev": {}}
    assert Diagnosis(of_epoch=0, families={}, llm={"calls": 1}).journal()["llm"] == {"calls": 1}
    assert Final(epoch=0, commit="c", P=0.1, C=0.2).journal() == {"epoch": 0, "commit": "c", "P": 0.1, "C": 0.2}


def test_the_environment_says_what_a_strategy_sees_and_how_a_dev_task_scores(sample_corpus):
    from corpora import load_corpus

    corpus = load_corpus([str(sample_corpus)])
    bfcl, next_call = registry.get("bfcl-single"), registry.get("next-call")
    assert bfcl.train_view(corpus) is corpus and bfcl.dev_corpus(["a.jsonl"]) is None
    held = next_call.train_view(corpus)
    assert held.holdout and 0 < len(held.records) < len(corpus.records)   # the dev tenth never reaches the sandbox
    assert next_call.dev_corpus(("a.jsonl",)) == ["a.jsonl"]
    trajectory = {"outcome": {"success": False, "reward": 0.5}}
    assert bfcl.task_score(trajectory) == 0.0 and next_call.task_score(trajectory) == 0.5


def test_a_training_result_reads_what_training_used_from_the_trainers_summary():
    from experiments.train_eval import TrainResult

    summary = {"wall_s": 2.0, "steps": 5, "sft": {"loss": 1.0}, "grpo": None, "seed": 0,
               "data": {"sft": {"examples": 3, "dropped": 1}, "rl": {"prompts": 2}}}
    result = TrainResult(summary=summary, length={"survivors": 5})
    assert result.trained == {"sft": 3, "rl": 2}
    assert result.brief == {"wall_s": 2.0, "steps": 5, "sft": {"loss": 1.0}, "grpo": None}
    assert TrainResult(summary={"data": {"sft": None}}, length={}).trained == {"sft": 0, "rl": 0}   # RL alone, SFT dropped

"""ctx.budget: a strategy knows what the recipe will train on, and choosing which records fill
it is a toolkit operation the offline proposer has; `log` shows how much of the curated set the
recipe trained."""
import json
import random

import pytest
from conftest import SAMPLE_CORPUS

from curation_strategies import toolkit as tk
from evolver.config import RunConfig
from evolver.proposers.operators import compose
from corpora import corpus_sha256, load_corpus
from sandbox.curate import execute
from sandbox.process_executor import ProcessExecutor
from sandbox.replay import replay
from trainer.recipe import RECIPE, curation_budget, get_profile
from trainer.sft import sft_steps

BUDGET_ECHO = """
import json

def curate(raw, ctx):
    tk = ctx.toolkit
    out = tk.Curated()
    kept = [t for t in raw if not tk.is_empty(t)]
    out.sft = [tk.sft_record(t, tags=["budget"]) for t in kept]
    out.sft = tk.fit_budget(out.sft, tk.budget_examples(ctx.budget, "once"), ctx.rng("fit"))
    out.memory = [tk.memory_record("budget", json.dumps(dict(ctx.budget), sort_keys=True), id="budget")]
    return out
"""


def test_the_budget_is_what_the_recipe_trains():
    for name in ("cpu-small", "paper", "test"):
        profile = get_profile(name)
        budget = curation_budget(profile)
        assert budget["sft_examples"] == profile.sft_max_steps * profile.sft_batch_size * profile.sft_grad_accum
        once, twice = budget["sft_examples"], budget["sft_examples_at_recipe_epochs"]
        # a curated set of `once` examples is trained once, one of `twice` the recipe's two passes
        assert sft_steps(RECIPE, profile, once) * profile.sft_batch_size * profile.sft_grad_accum / once >= 1
        assert sft_steps(RECIPE, profile, twice) * profile.sft_batch_size * profile.sft_grad_accum / twice == RECIPE.sft_epochs
        # one more example and some are never seen
        assert sft_steps(RECIPE, profile, once + 1) * profile.sft_batch_size * profile.sft_grad_accum < 2 * (once + 1)
    assert curation_budget(get_profile("cpu-small"))["sft_examples"] == 280


def test_a_strategy_sees_the_budget_it_fits_and_replay_gives_it_again(tmp_path, strategy):
    budget = curation_budget(get_profile("test").replace(sft_max_steps=3))   # 6 examples
    corpus = load_corpus([str(SAMPLE_CORPUS)])
    out = execute({"strategy.py": BUDGET_ECHO.encode()}, corpus, tmp_path / "out", executor=ProcessExecutor(),
                  budget=budget).out_dir
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["budget"] == budget and manifest["artifacts"]["sft.jsonl"]["count"] == budget["sft_examples"]
    (memory,) = [json.loads(line) for line in (out / "memory.jsonl").read_text().splitlines()]
    assert json.loads(memory["content"]) == budget
    assert replay(out, tmp_path / "again", executor=ProcessExecutor()).identical
    without = execute({"strategy.py": BUDGET_ECHO.replace("dict(ctx.budget)", "ctx.budget").encode()}, corpus,
                      tmp_path / "none", executor=ProcessExecutor())
    assert "budget" not in without.manifest.to_json() and without.manifest.counts()["sft.jsonl"] == len(corpus.records)


def test_the_runs_candidates_get_the_full_recipes_budget():
    corpus = (str(SAMPLE_CORPUS),)
    cfg = RunConfig(corpus=corpus, corpus_sha256=corpus_sha256(list(corpus)), profile="cpu-small", max_length=900)
    assert cfg.curation_budget == {**curation_budget(get_profile("cpu-small")), "max_length": 900,
                                   "sft_tokens": 280 * 900}


def test_fit_budget_balances_categories_keeps_order_and_is_seeded():
    records = [{"id": f"{c}{n}", "meta": {"category": c}} for c, k in (("a", 10), ("b", 3), ("c", 10)) for n in range(k)]
    kept = tk.fit_budget(records, 12, random.Random(0))
    cats = [r["meta"]["category"] for r in kept]
    assert len(kept) == 12 and cats.count("b") == 3 and sorted((cats.count("a"), cats.count("c"))) == [4, 5]
    assert [records.index(r) for r in kept] == sorted(records.index(r) for r in kept)
    assert tk.fit_budget(records, 12, random.Random(0)) == kept and tk.fit_budget(records, 12, random.Random(1)) != kept
    assert tk.fit_budget(records, 50, random.Random(0)) == records and tk.fit_budget(records, None, random.Random(0)) == records
    first = tk.fit_budget(records, 3, random.Random(0), priority=lambda r: r["id"] in ("a7", "c2"))
    assert {"a7", "c2"} <= {r["id"] for r in first}
    assert tk.budget_examples(None) is None and tk.budget_examples({"sft_examples": 8, "sft_examples_at_recipe_epochs": 4}) == 4
    with pytest.raises(ValueError):
        tk.budget_examples({"sft_examples": 8}, "thrice")


def test_recorded_success_ranks_records_by_their_origins_outcomes_and_fit_budget_keeps_successes_first():
    raws = [{"id": "ok", "outcome": {"success": True}}, {"id": "bad", "outcome": {"success": False}},
            {"id": "unknown"}]
    priority = tk.recorded_success(raws)
    assert [priority({"id": i, "meta": {"origin": [i]}}) for i in ("ok", "bad", "unknown", "elsewhere")] == [1, 0, 0.5, 0.5]
    assert priority({"id": "ok+bad#parallel", "meta": {"origin": ["ok", "bad"]}}) == 0.5   # made from both
    records = [{"id": f"r{n}", "meta": {"origin": [("ok", "bad", "unknown")[n % 3]], "category": "a"}} for n in range(9)]
    kept = tk.fit_budget(records, 4, random.Random(0), priority=priority)
    assert [r["meta"]["origin"][0] for r in kept].count("bad") == 0 and len(kept) == 4
    assert sum(r["meta"]["origin"][0] == "ok" for r in kept) == 3   # all successes, then unknown


def test_the_offline_proposers_fit_budget_operator_composes_and_leaves_rho0_alone(tmp_path):
    source = compose({"fit_budget": {"passes": "once"}})
    assert "tk.fit_budget(out.sft, tk.budget_examples(ctx.budget, 'once')" in source
    assert "fit_budget" not in compose({})
    corpus = load_corpus([str(SAMPLE_CORPUS)])
    budget = curation_budget(get_profile("test"))   # 6 examples once
    fitted = execute({"strategy.py": source.encode()}, corpus, tmp_path / "fit", executor=ProcessExecutor(), budget=budget)
    plain = execute({"strategy.py": compose({}).encode()}, corpus, tmp_path / "plain", executor=ProcessExecutor(),
                    budget=budget)
    assert fitted.manifest.counts()["sft.jsonl"] == 6
    # the budget keeps recorded successes first: with the outcomes inverted, the 3 successes of 45 all stay
    inverted = tmp_path / "inverted.jsonl"
    inverted.write_text("".join(json.dumps({**r, "outcome": {**r["outcome"], "success": not r["outcome"]["success"]}}) + "\n"
                                for r in corpus.records))
    flipped = load_corpus([str(inverted)])
    execute({"strategy.py": source.encode()}, flipped, tmp_path / "flip", executor=ProcessExecutor(), budget=budget)
    successes = {r["id"] for r in flipped.records if r["outcome"]["success"]}
    kept = {json.loads(line)["id"] for line in (tmp_path / "flip" / "sft.jsonl").read_text().splitlines()}
    assert len(successes) == 3 and successes <= kept and len(kept) == 6
    assert plain.manifest.counts()["sft.jsonl"] == len(corpus.records)

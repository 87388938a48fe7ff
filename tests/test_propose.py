"""The offline proposer: the diagnosis becomes operator edits, composed into a strategy's code
that really runs in the sandbox and changes the curated data."""
import itertools
from collections import Counter
import json
import random

import pytest

from evolver.proposers.brief import Brief, Verdict
from evolver.proposers.offline import EFFICIENCY, REMEDIES, TEMPLATE, OfflineProposer
from evolver.proposers.operators import BY_NAME, OPERATORS, compose, read_genome
from corpora import load_corpus
from sandbox.curate import execute
from sandbox.process_executor import ProcessExecutor
from workspace.repository import strategy_files

from conftest import SEED_STRATEGY, read_artifact

MULTI = [{"failed_point": "…", "evidence": "multi_turn:instance_state_mismatch", "curation_hint": "…",
          "family": "state_mismatch", "count": 5, "task_ids": ["multi_turn_base_3", "multi_turn_base_9"]},
         {"failed_point": "…", "evidence": "TypeError", "curation_hint": "…", "family": "bad_arguments", "count": 3,
          "task_ids": ["multi_turn_base_3"]}]
SINGLE = [{"failed_point": "…", "evidence": "ast_decoder:decoder_failed", "curation_hint": "…", "family": "missing_call",
           "count": 4, "task_ids": ["simple_python_3", "multiple_7"]},
          {"failed_point": "…", "evidence": "irrelevance_error:decoder_success", "curation_hint": "…",
           "family": "unwanted_call", "count": 2, "task_ids": ["irrelevance_1"]}]
NO_SIGNALS = {"forgetting": [], "boundary": [], "rare": []}
RARE = {"forgetting": [], "boundary": ["multi_turn_base_7"],
        "rare": [{"pattern": "cd → mv", "count": 2, "share": 0.01, "task_ids": ["multi_turn_base_7"]}]}
DIAGNOSES = {"multi-turn state and arguments": (MULTI, NO_SIGNALS), "single-turn calls": (SINGLE, NO_SIGNALS),
             "signals only": ([], RARE), "everything": (MULTI + SINGLE, RARE)}


def signals(points, extra):
    counts = {}
    for p in points:
        counts[p["family"]] = counts.get(p["family"], 0) + p["count"]
    return {"families": counts, **extra}


def curate(files, corpus, out):
    return execute(files, corpus, out, executor=ProcessExecutor())


def hashes(result):
    return result.manifest.hashes()


def records(path):
    out = []
    for record in read_artifact(path):
        record["meta"].pop("tags", None)
        out.append(record)
    return out


def brief(points=(), sigs=None, files=None, rejected=(), seed=0, lam=0.3, profile=None):
    return Brief(files=files or strategy_files(SEED_STRATEGY), failed_points=list(points), signals=sigs or signals(points, NO_SIGNALS),
                 curation_stats=profile or {"cost_train": 900, "C": 0.4}, lam=lam, rejected_edits=list(rejected), history=[],
                 corpus=None, seed=seed)


def test_the_template_is_the_empty_composition_and_curates_exactly_like_the_seed(sample_corpus, tmp_path):
    assert TEMPLATE.read_text() == compose({}) and read_genome(compose({})) == {}
    corpus = load_corpus([str(sample_corpus)])
    seed = curate(strategy_files(SEED_STRATEGY), corpus, tmp_path / "seed")
    planned = curate(strategy_files(TEMPLATE.parent), corpus, tmp_path / "planned")
    for name in ("sft.jsonl", "rl.jsonl", "memory.jsonl"):
        assert records(seed.out_dir / name) == records(planned.out_dir / name), name
    assert seed.manifest.cost_train == planned.manifest.cost_train


def test_generated_strategies_for_several_diagnoses_run_in_the_sandbox_and_pass_the_checker(sample_corpus, tmp_path):
    corpus = load_corpus([str(sample_corpus)])
    rho0 = curate(strategy_files(SEED_STRATEGY), corpus, tmp_path / "rho0")
    changed = 0
    for n, (label, (points, extra)) in enumerate(DIAGNOSES.items()):
        b = brief(points, signals(points, extra))
        revisions = list(itertools.islice(OfflineProposer().effectiveness(b.files, b.failed_points, b.signals), 2))
        revisions += list(itertools.islice(OfflineProposer().efficiency(revisions[0].files, b.curation_stats, b.lam,
                                                                         b.failed_points, b.signals), 1))
        for m, revision in enumerate(revisions):
            source = revision.files["strategy.py"].decode()
            assert "# op: " in source and "PLAN" not in source, "real code, not a dict of switches"
            result = curate(revision.files, corpus, tmp_path / f"{n}-{m}")   # raises if the checker refuses it
            changed += hashes(result) != hashes(rho0)
    assert changed >= 6


def test_an_effectiveness_revision_combines_the_top_motives_and_explains_every_edit():
    points = MULTI + SINGLE
    first = next(OfflineProposer().effectiveness(strategy_files(SEED_STRATEGY), points, signals(points, RARE)))
    assert 2 <= len(first.edits) <= 3
    assert [e.motive for e in first.edits] == ["state_mismatch", "missing_call", "bad_arguments"]
    body = first.message.split("\n\n", 2)[-1]
    for edit in first.edits:
        assert edit.key[1:] in body
    assert "state_mismatch: 5 failure(s) on multi_turn_base_3, multi_turn_base_9" in first.message
    genome = read_genome(first.files["strategy.py"].decode())
    assert set(genome) == {e.op for e in first.edits}


def test_motives_backed_by_failed_dev_tasks_rank_before_those_counted_in_corpus_records():
    """150 trained failures (corpus records) and 6 rare patterns do not outrank 33 dev tasks that
    call where no call is wanted: the counts are in different units (the 2026-11-27 run's epoch 1
    had dropped failures instead of adding irrelevance items)."""
    from evolver.diagnose import outcome_point
    from evolver.proposers.offline import motives

    trained = outcome_point({"raw": {"retained_outcomes": {"failure": 150}, "retained": 280,
                                     "outcomes": {"success": 130, "failure": 150}}})
    dev = [{**SINGLE[1], "count": 33, "source": "rules"}, {**SINGLE[0], "count": 48, "source": "rules"}]
    sigs = {"families": {"unwanted_call": 33, "missing_call": 48}, "forgetting": ["simple_python_4"], "boundary": [],
            "rare": [{"pattern": f"t{i}", "count": 1, "share": 0.01, "task_ids": []} for i in range(6)]}
    assert motives([*dev, trained], sigs) == [("missing_call", 48), ("unwanted_call", 33), ("forgetting", 1),
                                              ("trained_failures", 150), ("rare", 6)]
    first = next(OfflineProposer().effectiveness(strategy_files(SEED_STRATEGY), [*dev, trained], sigs))
    # forgetting's remedies are taken (repeat_focus) or change nothing here: a corpus motive fills the last slot
    assert [e.motive for e in first.edits] == ["missing_call", "unwanted_call", "trained_failures"]
    assert [e.op for e in first.edits][1] == "irrelevance_items"


def test_memory_that_misled_the_agent_is_removed_first_and_no_motive_puts_more_in():
    """evo3-dev186's epoch 1 diagnosis, in short: bad_arguments (53) would retune tool_signatures to
    every tool while 15 tasks called a tool that a hint named and the task did not offer."""
    from evolver.proposers.offline import motives

    parent = compose({"tool_signatures": {"only_called": True}, "irrelevance_items": {"k": 1, "limit": 400}})
    files = {**strategy_files(SEED_STRATEGY), "strategy.py": parent.encode()}
    points = [{"failed_point": "…", "evidence": "missing_required", "curation_hint": "…", "family": "bad_arguments",
               "count": 53, "task_ids": ["simple_python_3"], "source": "rules"},
              {"failed_point": "…", "evidence": "called find_roots: not offered, named in a memory hint", "curation_hint": "…",
               "family": "misled_by_memory", "count": 15, "task_ids": ["simple_python_205"], "source": "rules"}]
    sigs = signals(points, NO_SIGNALS)
    assert motives(points, sigs)[0] == ("bad_arguments", 53)
    revisions = list(OfflineProposer().effectiveness(files, points, sigs))
    first = revisions[0]
    assert first.edits[0].key == "-tool_signatures" and first.edits[0].motive == "misled_by_memory"
    assert "tool_signatures" not in read_genome(first.files["strategy.py"].decode())
    # no revision in the stream adds or retunes the operator the harm removes
    assert not any(e.op == "tool_signatures" and e.params is not None for r in revisions for e in r.edits)


def test_every_remedy_and_efficiency_edit_names_an_operator():
    for remedy in [r for rs in REMEDIES.values() for r in rs] + list(EFFICIENCY):
        assert remedy[0] in "+-" and remedy[1:] in BY_NAME, remedy


def test_the_reachable_space_is_thousands_of_distinct_strategies():
    reachable = {r[1:] for rs in REMEDIES.values() for r in rs if r[0] == "+"} | {r[1:] for r in EFFICIENCY}
    assert reachable == {o.name for o in OPERATORS}, "every operator can be reached"
    settings = {name: [dict(zip(BY_NAME[name].domain, v)) for v in itertools.product(*BY_NAME[name].domain.values())]
                for name in reachable}
    size = 1
    for name in reachable:
        size *= 1 + len(settings[name])
    assert size > 10_000, size
    rng = random.Random(7)
    focus = {"categories": ("base",), "tools": ("mv",)}
    sources = set()
    for _ in range(300):
        genome = {}
        for name in sorted(reachable):
            if rng.random() < 0.4:
                params = dict(rng.choice(settings[name]))
                if "{categories" in "".join(BY_NAME[name].code.values()):
                    params.update(focus)
                genome[name] = params
        source = compose(genome)
        compile(source, "strategy.py", "exec")
        assert read_genome(source) == genome
        sources.add(source)
    assert len(sources) > 290


def test_proposals_are_deterministic_under_the_seed_and_the_seed_matters():
    points = MULTI + SINGLE
    keys = lambda seed: [r.edits[0].key for r in OfflineProposer().effectiveness(
        strategy_files(SEED_STRATEGY), points, signals(points, RARE), seed=seed)]
    assert keys(3) == keys(3)
    assert any(keys(s) != keys(3) for s in range(4, 10))


def test_rejected_and_no_op_edits_are_not_proposed_again():
    files = strategy_files(SEED_STRATEGY)
    sig = signals(MULTI, NO_SIGNALS)
    first = next(r for r in OfflineProposer().effectiveness(files, MULTI, sig) if len(r.edits) == 1)
    again = [r.edits[0].key for r in OfflineProposer().effectiveness(first.files, MULTI, sig, rejected=["+tool_signatures(only_called=False)"])
             if len(r.edits) == 1]
    assert first.edits[0].key == "+drop_failed()"
    assert "+drop_failed()" not in again                       # already in the parent
    assert "+tool_signatures(only_called=False)" not in again  # tried in a rejected epoch
    assert "+tool_signatures(only_called=True)" in again       # a different setting is a different edit


def test_forgetting_undoes_pruning_and_trains_again_on_the_forgotten_category():
    pruned = compose({"near_dedup": {"threshold": 0.8}})
    files = {**strategy_files(SEED_STRATEGY), "strategy.py": pruned.encode()}
    sig = {"families": {}, "forgetting": ["multi_turn_base_4", "simple_python_2"], "boundary": [], "rare": []}
    keys = [r.edits[0].key for r in OfflineProposer().effectiveness(files, [], sig)]
    assert "-near_dedup" in keys
    assert any(k.startswith("+repeat_focus(categories=('base', 'simple_python')") for k in keys)


def test_efficiency_is_conditioned_on_the_diagnosis_and_shrinks_cost(sample_corpus, tmp_path):
    proposer = OfflineProposer()
    files = strategy_files(SEED_STRATEGY)
    assert list(proposer.efficiency(files, {"C": 0.5}, lam=0.0)) == []
    first = next(proposer.efficiency(files, {"cost_train": 900, "C": 0.4}, 0.3, [], RARE | {"families": {}}))
    assert first.edits[0].op == "focus_prune"
    assert first.edits[0].params["tools"] == ("cd", "mv") and first.edits[0].params["categories"] == ("base",)
    corpus = load_corpus([str(sample_corpus)])
    rho0 = curate(files, corpus, tmp_path / "rho0")
    # focused on the rare pattern's tools only: trajectories calling cd or mv, and recoveries, are all kept
    focus = {"cd"}
    genome = {"focus_prune": {"keep_share": 0.25, "categories": (), "tools": tuple(focus)}}
    pruned = curate({**files, "strategy.py": compose(genome).encode()}, corpus, tmp_path / "pruned")
    assert pruned.manifest.cost_train < rho0.manifest.cost_train
    kept = {r["id"] for r in records(pruned.out_dir / "sft.jsonl")}
    for raw in (json.loads(line) for line in sample_corpus.read_text().splitlines()):
        if any(c["function"]["name"] in focus for m in raw["messages"] for c in m.get("tool_calls") or ()):
            assert raw["id"] in kept


def test_k_candidates_are_distinct_and_k_1_is_the_single_revision():
    points = MULTI + SINGLE
    b = brief(points, signals(points, RARE))
    seen = []

    def validate(files):
        seen.append(files["strategy.py"])
        return Verdict(True, "changed")
    one = OfflineProposer().revise("effectiveness", b, validate)
    three = OfflineProposer().candidates("effectiveness", b, validate, k=3)
    assert len(three) == 3 and len({o.files["strategy.py"] for o in three}) == 3
    assert three[0].files == one.files and three[0].message == one.message and three[0].edits == one.edits
    nothing = OfflineProposer().candidates("effectiveness", b, lambda files: Verdict(False, "empty"), k=3)
    assert len(nothing) == 1 and nothing[0].files is None and nothing[0].attempts
    with pytest.raises(ValueError):
        OfflineProposer().candidates("effectiveness", b, validate, k=0)


def test_a_focus_is_what_the_corpus_has_so_no_candidate_is_a_no_op(sample_corpus):
    corpus = load_corpus([str(sample_corpus)])    # multi-turn "base" trajectories only
    single = brief(SINGLE, signals(SINGLE, NO_SIGNALS))
    seen = []

    def validate(files):
        seen.append(read_genome(files["strategy.py"].decode()))
        return Verdict(False, "empty")
    OfflineProposer().candidates("effectiveness", Brief(**{**single.__dict__, "corpus": corpus}), validate, k=1)
    assert seen and not any("repeat_focus" in g or "rl_focus" in g for g in seen)   # simple_python etc. are not there
    # a focus on "base" would hold every record of this corpus: no focus; a rare pattern's tools are one
    rare = {"forgetting": [], "boundary": ["multi_turn_base_7"],
            "rare": [{"pattern": "cancel_booking → cd", "count": 2, "share": 0.01, "task_ids": ["multi_turn_base_7"]}]}
    for motive, found in [("boundary", []), ("rare", [((), ("cancel_booking",))])]:
        seen.clear()
        sigs = {"families": {}, **rare, **{s: [] for s in ("boundary", "rare") if s != motive}}
        OfflineProposer().candidates("effectiveness", Brief(**{**brief([], sigs).__dict__, "corpus": corpus}), validate, k=1)
        focused = [(g[op]["categories"], g[op]["tools"]) for g in seen for op in ("rl_focus", "repeat_focus") if op in g]
        assert focused[:1] == found, motive


def test_a_missing_skill_is_answered_with_data_that_adds_it(tmp_path):
    """Parallel tasks failing on the call count → parallel items made from argument variants;
    unwanted calls on irrelevance tasks → irrelevance items: the composed strategy runs in the
    sandbox on real BFCL single-turn records and its SFT data holds items ρ0's does not."""
    from environments.bfcl import corpus_builder
    from corpora import write_corpus

    raws, _, _ = corpus_builder.build("bfcl-single", "wild", 0)
    path = tmp_path / "single.jsonl"
    write_corpus(raws[:300], path)
    corpus = load_corpus([str(path)])
    points = [{"failed_point": "…", "evidence": "parallel_function_checker_no_order:wrong_count", "curation_hint": "…",
               "family": "wrong_call_count", "count": 12, "task_ids": ["parallel_3", "parallel_9"]},
              {"failed_point": "…", "evidence": "irrelevance_error:decoder_success", "curation_hint": "…",
               "family": "unwanted_call", "count": 5, "task_ids": ["irrelevance_1"]}]
    first = next(OfflineProposer().effectiveness(strategy_files(SEED_STRATEGY), points, signals(points, NO_SIGNALS)))
    assert [e.op for e in first.edits] == ["parallel_variants", "irrelevance_items"]
    assert "add parallel_variants(" in first.message and "Motivated by wrong_call_count: 12 failure(s)" in first.message
    rho0 = curate(strategy_files(SEED_STRATEGY), corpus, tmp_path / "rho0")
    added = curate(first.files, corpus, tmp_path / "added")
    tags = Counter(t for r in read_artifact(added.out_dir / "sft.jsonl") for t in r["meta"]["tags"])
    assert tags["parallel"] > 0 and tags["variant"] > 0 and tags["irrelevance"] > 0
    assert len(read_artifact(added.out_dir / "sft.jsonl")) > len(read_artifact(rho0.out_dir / "sft.jsonl"))

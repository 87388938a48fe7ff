"""The offline proposer: diagnosed families become PLAN edits that really change the curated data."""
import json

from evolver.proposers.offline import TEMPLATE, OfflineProposer, format_plan, read_plan, write_plan
from sandbox.corpus import load_corpus
from sandbox.curate import execute
from sandbox.process_executor import ProcessExecutor
from sandbox.workspace import strategy_files

from conftest import SEED_STRATEGY

POINT = {"failed_point": "called get_flight_cost without travel_class", "evidence": "TypeError: missing 'travel_class'",
         "curation_hint": "show the signature", "family": "bad_arguments", "count": 3, "task_ids": ["multi_turn_base_3", "x"]}
SIGNALS = {"families": {"bad_arguments": 3, "state_mismatch": 5}, "forgetting": [], "boundary": [], "rare": []}


def curate_files(files, corpus, out):
    return execute(files, corpus, out, executor=ProcessExecutor())


def records(path):
    out = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        record["meta"].pop("tags", None)
        out.append(record)
    return out


def test_the_template_plan_round_trips_byte_for_byte():
    source = TEMPLATE.read_text()
    plan, _ = read_plan(source)
    assert write_plan(source, plan) == source
    assert format_plan(plan) in source


def test_the_planned_template_curates_exactly_like_the_seed(sample_corpus, tmp_path):
    corpus = load_corpus([str(sample_corpus)])
    seed = curate_files(strategy_files(SEED_STRATEGY), corpus, tmp_path / "seed")
    planned = curate_files(strategy_files(TEMPLATE.parent), corpus, tmp_path / "planned")
    for name in ("sft.jsonl", "rl.jsonl", "memory.jsonl"):
        assert records(seed.out_dir / name) == records(planned.out_dir / name), name
    assert seed.manifest["cost_train"] == planned.manifest["cost_train"]


def test_effectiveness_edits_follow_the_most_frequent_family_and_name_it():
    revisions = list(OfflineProposer().effectiveness(strategy_files(SEED_STRATEGY), [POINT], SIGNALS))
    first = revisions[0]
    assert first.message.startswith("effectiveness: stop training on trajectories that ended in a wrong state")
    assert "state_mismatch: 5 failure(s)" in first.message
    assert read_plan(first.files["strategy.py"].decode())[0]["filters"]["drop_failed"] is True
    assert "bad_arguments: 3 failure(s) on multi_turn_base_3, x" in revisions[1].message
    keys = [r.edits[0].key for r in revisions]
    assert len(keys) == len(set(keys)) and "filters.drop_failed=True" in keys


def test_rejected_and_no_op_edits_are_not_proposed_again():
    files = strategy_files(SEED_STRATEGY)
    first = next(OfflineProposer().effectiveness(files, [POINT], SIGNALS))
    again = list(OfflineProposer().effectiveness(first.files, [POINT], SIGNALS, rejected=["memory.tool_signatures=True"]))
    keys = [r.edits[0].key for r in again]
    assert "filters.drop_failed=True" not in keys          # already in the parent's PLAN
    assert "memory.tool_signatures=True" not in keys       # tried in a rejected epoch
    assert keys == ["sft.mask_corrected_errors=True"]


def test_efficiency_revisions_shrink_cost_train_and_need_lambda(sample_corpus, tmp_path):
    proposer = OfflineProposer()
    assert list(proposer.efficiency(strategy_files(SEED_STRATEGY), {"C": 0.5}, lam=0.0)) == []
    corpus = load_corpus([str(sample_corpus)])
    files = strategy_files(SEED_STRATEGY)
    result = curate_files(files, corpus, tmp_path / "e0")
    costs = [result.manifest["cost_train"]]
    for step in range(1, 4):
        revision = next(proposer.efficiency(files, result.profile, lam=0.3))
        assert "λ = 0.3" in revision.message
        candidate = curate_files(revision.files, corpus, tmp_path / f"e{step}")
        if candidate.manifest["cost_train"] < costs[-1]:
            files, result = revision.files, candidate
            costs.append(candidate.manifest["cost_train"])
        else:  # an edit that changes nothing on this corpus: the loop would reject it as empty
            files = revision.files
    assert costs[-1] < costs[0], costs

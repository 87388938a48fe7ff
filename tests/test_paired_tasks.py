"""The paired interval resamples tasks: where several scored records are trials of one task (the
next-call benchmark on tau-bench / tau2-bench corpora) the bootstrap draws tasks with their records
(base/paired.py), and `log`, `test` and the acceptance say records of tasks; where each task is one
record (BFCL) nothing moves."""
import json

import numpy as np
import pytest

from base.paired import paired_resamples
from evolver import tested
from evolver.acceptance import PairedBootstrap, Scores
from experiments.quality import stats


def _rows(n=40, seed=7):
    rng = np.random.default_rng(seed)
    return [{f"t{i:02d}": [float(x) for x in rng.integers(0, 2, 2)] for i in range(n)} for _ in range(3)]


def test_one_record_a_task_gives_the_numbers_it_gave_before_tasks_were_told_apart():
    """Pinned from the routine before `groups` existed: BFCL's intervals and verdicts do not move.
    The p-values are those of the resamples with ties rounded (base.paired.TIE_DECIMALS): before,
    they were the CPU's (p_not_better 0.5692 on one EPYC, 0.5622 on another; the exact count is 0.5773),
    and so were gap_recovered's (a resample's gap of 0 read as 1e-17 counted as positive)."""
    a, b, c = _rows()
    d = paired_resamples(a, b, 2000, 3)
    assert (d.value, float(d.resampled.sum()), float(d.resampled[17])) == \
        (-0.012499999999999956, -32.6375, -0.1)
    assert stats.paired_difference(a, b) == {
        "value": -0.0125, "low": -0.25, "high": 0.225, "method": "paired bootstrap over tasks × seeds", "tasks": 40,
        "p_not_better": 0.5773, "p_two_sided": 0.973903}
    assert stats.mean_interval(a).to_json() == {"value": 0.525, "low": 0.375, "high": 0.675,
                                                "method": "bootstrap over tasks × seeds"}
    assert stats.gap_recovered(a, b, c) == {"value": -0.5, "low": -5.5, "high": 4.0, "gap": 0.025, "gap_positive": 0.5643,
                                            "method": "paired bootstrap over tasks × seeds"}
    own = {t: f"task-{t}" for t in a}   # every id named, each its own task: the same draws
    assert np.array_equal(paired_resamples(a, b, 2000, 3, own).resampled, d.resampled)
    assert stats.paired_difference(a, b, groups=own) == stats.paired_difference(a, b)


def test_copies_of_each_task_resampled_as_their_task_give_the_tasks_interval():
    """Three records of each task, scored alike: the cluster bootstrap gives the interval of the tasks
    themselves; counted as independent tasks they would give a narrower one (the overstated certainty)."""
    a, b, _ = _rows(12)
    copies = lambda row: {f"{t}#{k}": v for t, v in row.items() for k in range(3)}   # noqa: E731
    groups = {f"{t}#{k}": t for t in a for k in range(3)}
    tasks = stats.paired_difference(a, b)
    grouped = stats.paired_difference(copies(a), copies(b), groups=groups)
    assert grouped["tasks"] == 12 and grouped["records"] == 36
    assert (grouped["low"], grouped["high"]) == pytest.approx((tasks["low"], tasks["high"]))
    assert np.allclose(paired_resamples(copies(a), copies(b), groups=groups).resampled,
                       paired_resamples(a, b).resampled, rtol=0, atol=1e-12)   # draw for draw
    naive = stats.paired_difference(copies(a), copies(b))
    assert naive["tasks"] == 36 and naive["high"] - naive["low"] < tasks["high"] - tasks["low"]
    assert stats.mean_interval(copies(a), groups=groups).low == pytest.approx(stats.mean_interval(a).low)


def test_acceptance_pairs_over_tasks_and_says_how_many_records():
    a, b, _ = _rows(6)
    per = lambda row: {f"{t}#{k}": v for t, v in row.items() for k in range(2)}   # noqa: E731
    groups = {f"{t}#{k}": t for t in a for k in range(2)}
    ruling = PairedBootstrap().decide(Scores(0.6, 0.0, 0.6, per(a), groups), Scores(0.5, 0.0, 0.5, per(b), groups), 0.0)
    assert ruling.reason.startswith("paired over 6 tasks (12 records): ")
    plain = PairedBootstrap().decide(Scores(0.6, 0.0, 0.6, a), Scores(0.5, 0.0, 0.5, b), 0.0)
    assert plain.reason.startswith("paired over 6 tasks: ")


def test_test_counts_records_of_tasks_and_a_single_task_of_several_records_has_no_interval():
    final = {"r1": [1.0], "r2": [1.0], "r3": [0.5], "r4": [0.0], "r5": [1.0], "r6": [1.0], "r7": [0.0]}
    rho0 = {"r1": [0.0], "r2": [0.5], "r3": [0.5], "r4": [0.0], "r5": [0.0], "r6": [1.0], "r7": [0.0]}
    groups = {"r1": "t1", "r2": "t1", "r3": "t2", "r4": "t2", "r5": "t3", "r6": "t3", "r7": "t3"}
    doc = tested.compare(final, rho0, {r: "airline" for r in final}, groups)
    assert (doc["tasks"], doc["records"]) == (3, 7)
    lines = tested.text(doc, "call_f1", 2).splitlines()
    assert lines[2].startswith("all ") and "3 (7 records)" in lines[2]
    one = tested.compare({"r1": [1.0], "r2": [0.0]}, {"r1": [0.0], "r2": [0.0]}, {"r1": "A", "r2": "A"},
                         {"r1": "t1", "r2": "t1"})
    assert one["tasks"] == 1 and one["records"] == 2 and one["difference"]["low"] is None
    assert one["difference"]["value"] == 0.5


def test_next_call_names_the_published_task_of_each_held_out_record(tmp_path):
    """tau-bench's trials of one task carry its id: each held-out record's Task and scored trajectory
    name the task it is a record of, and the log's dev line counts records of tasks."""
    from base.registry import get_benchmark
    from evolver.tables import dev_counted

    records = []
    for i in range(30):
        messages = [{"role": "user", "content": f"trial {i} words differ"},
                    {"role": "assistant", "content": None, "tool_calls": [{"id": "c0", "type": "function", "function": {
                        "name": "get_reservation", "arguments": json.dumps({"id": i % 3})}}]},
                    {"role": "tool", "tool_call_id": "c0", "content": "ok"},
                    {"role": "assistant", "content": "done"}]
        records.append({"id": f"r{i:02d}", "source": "tau-bench", "messages": messages,
                        "meta": {"extra": {"task_id": i % 10}},
                        "tools": [{"type": "function", "function": {"name": "get_reservation"}}]})
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    bench = get_benchmark("next-call", corpus=str(path))
    dev = bench.tasks("dev")
    assert len(dev) == 3 and len({t.meta["task_group"] for t in dev}) == 1   # three trials of one task
    assert {t.meta["published_task_id"] for t in dev} == {str(records[int(dev[0].id[1:])]["meta"]["extra"]["task_id"])}
    steps = [{"task_id": t.id, "index": 0, "gold": it.gold, "samples": [{"output": "", "calls": it.gold,
              "verdict": "right", "why": "", "tp": 1, "fp": 0, "fn": 0}]} for t in dev for it in bench.step_items(t)]
    scored = bench.episodes(dev, steps)
    assert {t["meta"]["task_group"] for t in scored} == {dev[0].meta["task_group"]}
    assert dev_counted({"tasks": 1, "records": 3}, {"benchmark": "next-call"}) == "3 record(s) of 1 task(s)"
    assert dev_counted({"tasks": 3}, {"benchmark": "next-call"}) == "3 record(s)"   # a run evaluated before
    assert dev_counted({"tasks": 60}, {"benchmark": "bfcl-single"}) == "60 task(s)"

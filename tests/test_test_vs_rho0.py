"""`curateevo test RUN` answers "did evolution help?": the final strategy against ρ0 (epoch 0) on
the test split, paired task by task, per category; `--seeds N` through `bench quality`'s cells.
A tiny run (test profile, tiny random model, process sandbox, two dev tasks)."""
import json
import shutil

import pytest
from conftest import SAMPLE_CORPUS, TINY_RUN_ARGS

from environments.tau2 import conversation
from evolver import cli, tested
from evolver.store import RunStore

pytestmark = [pytest.mark.usefixtures("trained_once"), pytest.mark.timeout(1200)]

ARGS = ["--profile", "test", "--base", "tiny-random", "--epochs", "2", "--tasks", "2", "--sandbox", "process",
        "--benchmark", "bfcl-single", "--corpus", str(SAMPLE_CORPUS), "--margin", "0.001", "--batch-size", "2",
        *TINY_RUN_ARGS]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    assert cli.main(["run", *ARGS, "--runs-dir", str(runs), "--name", "r"]) == 0
    return runs / "r"


def _copy(run, tmp_path):
    shutil.copytree(run, tmp_path / "r")
    return tmp_path / "r"


def _final_epoch(root) -> int:
    return [e.result for e in RunStore.open(root).journal.events()
            if e.is_done("final")][-1]["epoch"]


def test_test_scores_the_paper_s_held_out_benchmarks_with_rho0_beside_the_final(finished, tmp_path, capsys):
    root = _copy(finished, tmp_path)
    capsys.readouterr()
    assert cli.main(["test", str(root), "--tasks", "3", "--held-out", "acebench,tau2,bfcl-single"]) == 0
    out = capsys.readouterr().out
    assert "held-out benchmarks (the run never read them)" in out and "\nacebench by category:" in out
    held = json.loads((root / "test" / tested.HELD_OUT_FILE).read_text())
    ran = set(held["benchmarks"]) | {n for n in held["not_run"] if ", " not in n}
    assert ran == {"acebench", "tau2"}   # bfcl-single is the run's own
    assert held["not_run"]["tau2, its user-simulated tasks"] == \
        "they need an LLM playing the user: give --user-model MODEL --user-base-url URL"   # no endpoint named
    assert "acebench" in held["benchmarks"] and held["benchmarks"]["acebench"]["tasks"] == 3
    for name, doc in held["benchmarks"].items():
        assert f"\n{name} " in out and doc["rho0"]["value"] is not None and doc["final"]["value"] is not None
        final = json.loads((root / "test" / "held-out" / name / "final" / "metrics.json").read_text())
        assert final["benchmark"] == name and final["split"] == "test" and len(final["tasks"]) == 3
    tested_event = [e for e in RunStore.open(root).journal.events() if e.kind == "tested"][-1]
    assert set(tested_event.doc["held_out"]) == set(held["benchmarks"])
    assert tested.held_out_for("bfcl-single", None) == ["acebench", "tau2"] and tested.held_out_for("x", "none") == []


def test_test_prints_rho0_the_final_strategy_and_their_paired_difference_per_category(finished, tmp_path, capsys):
    root = _copy(finished, tmp_path)
    capsys.readouterr()
    assert cli.main(["test", str(root), "--tasks", "5", "--held-out", "none"]) == 0
    out = capsys.readouterr().out
    assert "against ρ0 (epoch 0, no curation) on the test split" in out
    assert "ρ0 P [95% CI]" in out and "final P [95% CI]" in out and "final − ρ0 [95% CI]" in out
    final = json.loads((root / "test" / "metrics.json").read_text())
    epoch = _final_epoch(root)
    if epoch:   # ρ0 was read with its own adapter, beside the final strategy's
        rho0 = json.loads((root / "test" / "rho0" / "metrics.json").read_text())
        assert rho0["tasks"] == final["tasks"] and rho0["policy"]["adapter"].endswith("epochs/0/train-s0/adapter")
        assert final["policy"]["adapter"].endswith(f"epochs/{epoch}/train-s0/adapter")
    else:
        assert "the final strategy is ρ0 itself" in out
        rho0 = final
    doc = tested.read(root)
    assert doc["tasks"] == 5 and doc["seeds"] == 1
    assert doc["final"]["value"] == pytest.approx(final["P"]) and doc["rho0"]["value"] == pytest.approx(rho0["P"])
    assert doc["difference"]["value"] == pytest.approx(final["P"] - rho0["P"])
    assert doc["difference"]["low"] <= doc["difference"]["value"] <= doc["difference"]["high"]
    assert set(doc["per_category"]) == set(final["per_category"])   # every category, each line printed
    for category, block in doc["per_category"].items():
        assert f"\n{category} " in out
        assert block["final"]["value"] == pytest.approx(final["per_category"][category]["task_success"])
    event = [e for e in RunStore.open(root).journal.events() if e.kind == "tested"][-1]
    assert event.doc["P_rho0"] == doc["rho0"]["value"] and event.doc["difference"]["value"] == doc["difference"]["value"]
    assert cli.main(["report", str(root)]) == 0                      # the report shows the answer
    page = (root / "report" / "index.html").read_text()
    assert "Did evolution help?" in page and "final − ρ0 [95% CI]" in page
    # the page a user reads of a run on an environment: the test size read, no per-tool table and why, gold calls
    assert "test split, never read by the loop; `curateevo test` read 5 of them" in page
    assert "No per-tool table: bfcl-single is scored by task_success per task" in page
    from base.registry import get_benchmark

    bench = get_benchmark("bfcl-single")
    failed = [t["meta"]["task_id"] for line in (root / "epochs" / "0" / "eval-s0" / "trajectories.jsonl").open()
              for t in [json.loads(line)] if not t["outcome"]["success"]]
    assert failed and "Failed dev tasks: the answer beside the gold call" in page
    for task in failed:
        gold = bench.gold(task)
        cell = f"<tr><td>{task}</td><td><code>"
        assert cell in page and (gold[0][0] if gold else "(no call: a reply)") in page.split(cell, 1)[1].split("</tr>")[0]


def test_the_comparison_pairs_tasks_and_says_per_category_what_moved():
    final = {"a1": [1.0], "a2": [1.0], "b1": [0.0], "b2": [1.0]}
    rho0 = {"a1": [0.0], "a2": [0.0], "b1": [0.0], "b2": [1.0]}
    doc = tested.compare(final, rho0, {"a1": "A", "a2": "A", "b1": "B", "b2": "B"})
    assert doc["difference"]["value"] == pytest.approx(0.5) and doc["tasks"] == 4
    assert doc["per_category"]["A"]["difference"]["value"] == 1.0 and doc["per_category"]["A"]["difference"]["low"] == 1.0
    assert doc["per_category"]["B"]["difference"] == {**doc["per_category"]["B"]["difference"], "value": 0.0,
                                                       "low": 0.0, "high": 0.0}
    assert "evolution helped" not in tested.text(doc, "task_success", 1)   # 4 tasks: [0, 1] includes 0
    lines = tested.text(doc, "task_success", 1).splitlines()
    assert lines[2].split()[:2] == ["all", "4"] and lines[3].split()[0] == "A" and "+100.0" in lines[3]


def test_a_one_task_test_split_says_no_interval_can_be_had():
    doc = tested.compare({"t1": [1.0]}, {"t1": [0.0]}, {"t1": "A"})
    assert doc["difference"]["value"] == 1.0 and doc["difference"]["low"] is doc["difference"]["high"] is None
    text = tested.text(doc, "task_success", 1)
    assert "+100.0 (no interval: 1 task)" in text and "[+100.0, +100.0]" not in text
    assert text.endswith("no interval can be had: the test split holds one task, and a paired difference needs two or "
                         "more to resample (test a run whose corpus holds out more tasks).")
    assert "evolution helped" not in text


def test_seeds_evaluates_as_the_run_did_or_is_one_sentence():
    from base.errors import UserError
    from environments.evaluate import EvalSpec

    run = EvalSpec(benchmark="bfcl-single", metric="task_success", max_new_tokens=64, threads=2)
    tested.same_evaluation(run, run.model_copy(update={"tasks": 3}))   # the tasks are test's own
    with pytest.raises(UserError, match=r"max_new_tokens \d+ \(the run: 64\)") as err:
        tested.same_evaluation(run, EvalSpec(benchmark="bfcl-single", metric="task_success", threads=2))
    assert "without --seeds" in str(err.value) and "\n" not in str(err.value)


def test_seeds_trains_the_missing_seeds_of_both_as_bench_quality_cells_and_adopts_the_runs(finished, tmp_path, capsys):
    root, cache = _copy(finished, tmp_path), tmp_path / "cache"
    capsys.readouterr()
    assert cli.main(["test", str(root), "--tasks", "3", "--seeds", "2", "--cache", str(cache), "--held-out", "none"]) == 0
    out = capsys.readouterr().out
    assert "2 training seed(s), paired over tasks × seeds" in out and "final − ρ0" in out
    doc = tested.read(root)
    assert doc["seeds"] == 2 and doc["tasks"] == 3 and doc["how"].startswith("bench quality's cells")
    # the cells are bench quality's: two rows × two seeds, seed 0 of each adopted from the run's own training
    cells = [json.loads(p.read_text()) for p in cache.glob("cells/*/cell.json")]
    epoch = _final_epoch(root)
    assert sorted(c["seed"] for c in cells) == ([0, 0, 1, 1] if epoch else [0, 1])
    adopted = sorted(json.loads(p.read_text())["from"] for p in cache.glob("trainings/*/adopted.json"))
    assert adopted == sorted({str(root / "epochs" / str(e) / "train-s0") for e in (0, epoch)})
    if epoch:   # the printed P are the cells' (each row's mean over its two seeds)
        assert sum(c["P"] for c in cells) / 4 == pytest.approx((doc["final"]["value"] + doc["rho0"]["value"]) / 2)


def test_test_scores_the_user_simulated_tasks_when_an_endpoint_plays_the_user(finished, tmp_path, capsys, model_server,
                                                                             monkeypatch):
    """`test --user-model --user-base-url`: τ²'s airline and retail join its held-out table, the user played
    by a real local server; the endpoint (never a key) is in the evaluation's metrics."""
    url, model = model_server
    root = _copy(finished, tmp_path)
    capsys.readouterr()
    # at most two user turns a task, not fifteen: the same seam (the agent's opening, the user's answers
    # from the server, the agent's replies) in a fifth of the time (140 s -> 27 s here)
    monkeypatch.setattr(conversation, "MAX_USER_TURNS", 2)
    assert cli.main(["test", str(root), "--tasks", "2", "--held-out", "tau2", "--user-model", model,
                     "--user-base-url", url, "--user-max-tokens", "8"]) == 0
    held = json.loads((root / "test" / tested.HELD_OUT_FILE).read_text())
    assert not [n for n in held["not_run"] if n.startswith("tau2")]
    final = json.loads((root / "test" / "held-out" / "tau2" / "final" / "metrics.json").read_text())
    assert {t.split("-")[1] for t in final["tasks"]} == {"airline", "retail"}   # the first two categories
    assert final["user"] == {"model": model, "base_url": url, "max_tokens": 8}
    readings = len([e for e in RunStore.open(root).journal.events() if e.kind == "tested"])
    assert cli.main(["test", str(root), "--again", "--held-out", "tau2", "--user-model", "nope",
                     "--user-base-url", url]) != 0   # refused before anything is evaluated
    assert "does not serve --user-model 'nope'" in capsys.readouterr().err
    assert len([e for e in RunStore.open(root).journal.events() if e.kind == "tested"]) == readings

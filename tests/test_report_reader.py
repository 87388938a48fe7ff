"""The report a user reads (`curateevo report RUN`): the corpus named by file, hash and record count
with the held-out sizes, the per-tool table, each failed dev task's answer beside its gold call, and
why a figure is missing where the table shows "—". A tiny run on the glaive corpus shipped here
(next-call benchmark: dev and test parts held out of the corpus). The page's HTML is checked here; a
browser's rendering of it is checked by hand (scripts/report-screenshot.sh, no browser in the suite)."""
import hashlib
import html
import json
import shutil

import pytest
from conftest import TINY_RUN_ARGS

from evolver import cli
from corpora import load_corpus
from corpora.split import partition

pytestmark = [pytest.mark.usefixtures("trained_once"), pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def glaive_run(tmp_path_factory):
    from sandbox.executor import PROJECT_ROOT

    corpus = PROJECT_ROOT / "examples" / "corpora" / "glaive-toolcall-40.json"
    runs = tmp_path_factory.mktemp("runs")
    assert cli.main(["run", "--corpus", str(corpus), "--profile", "test", "--base", "tiny-random", "--epochs", "2",
                     "--sandbox", "process", "--batch-size", "4", "--runs-dir", str(runs), "--name", "g",
                     *TINY_RUN_ARGS]) == 0
    return runs / "g", corpus


def _page(root) -> str:
    assert cli.main(["report", str(root)]) == 0
    return (root / "report" / "index.html").read_text()


def test_the_report_names_the_corpus_and_the_held_out_sizes(glaive_run):
    root, corpus = glaive_run
    page = _page(root)
    config = json.loads((root / "run.json").read_text())
    train, dev, test = partition(load_corpus([str(corpus)]).records, config["holdout"])
    assert "<h2>Corpus and held-out sizes</h2>" in page
    assert str(corpus) in page and hashlib.sha256(corpus.read_bytes()).hexdigest() in page
    assert config["corpus_sha256"] in page
    assert f"curated by every strategy: {len(train)} record(s)" in page
    assert f"held out for dev: {len(dev)} record(s)" in page and f"held out for test: {len(test)} record(s)" in page
    assert "not read yet" in page


def test_the_report_has_a_per_tool_table_and_each_failed_answer_beside_its_gold_call(glaive_run):
    root, _ = glaive_run
    page = _page(root)
    metrics = json.loads((root / "epochs" / "0" / "eval-s0" / "metrics.json").read_text())
    assert metrics["per_tool"] and "<h2>Per tool (call F1 on dev, seed 0)</h2>" in page
    for tool, m in metrics["per_tool"].items():
        assert f"<tr><td>{html.escape(tool)}</td><td class=\"n\">{m['recorded']}</td>" in page
    assert "<h2>Failed dev tasks: the answer beside the gold call</h2>" in page
    wrong = [(t["meta"]["task_id"], s) for line in (root / "epochs" / "0" / "eval-s0" / "trajectories.jsonl").open()
             for t in [json.loads(line)] for s in t["meta"]["steps"] if s["verdict"] != "right"]
    assert wrong, "the tiny random model answers some recorded call wrongly"
    for task, step in wrong:
        gold = "; ".join(f"{c['name']}({c['arguments']})" for c in step["gold"]) or "(no call: a reply)"
        answer = html.escape(repr(step["reply"]))[:200] if not step["calls"] else html.escape(
            step["calls"][0].get("name") or step["calls"][0]["function"]["name"])
        label = html.escape(f"{task} step {step['step']}")
        assert f"<tr><td>{label}</td><td><code>" in page and answer in page
        assert f"<code>{html.escape(gold[:400])}" in page and html.escape(step["verdict"]) in page


def test_a_missing_gold_ll_says_why(glaive_run, tmp_path):
    root = tmp_path / "g"
    shutil.copytree(glaive_run[0], root)
    # what an evaluation on a held-out part with no scorable call records: no item, no mean
    path = root / "epochs" / "1" / "eval-s0" / "metrics.json"
    metrics = json.loads(path.read_text())
    metrics["gold_log_likelihood"] = {"items": 0, "mean": None, "tasks": 0, "per_category": {}, "per_task": {}}
    path.write_text(json.dumps(metrics))
    journal = root / "journal.jsonl"
    events = [json.loads(line) for line in journal.read_text().splitlines()]
    for e in events:
        if e.get("stage") == "decide" and e.get("epoch") == 1 and e.get("event") == "stage_done":
            e["result"]["gold_ll"] = None
    journal.write_text("".join(json.dumps(e) + "\n" for e in events))
    page = _page(root)
    assert "epoch 1: gold LL is — because no dev task has a gold call to score" in page
    assert "epoch 0: gold LL is —" not in page
    del metrics["gold_log_likelihood"]   # a served model's evaluation computes none
    path.write_text(json.dumps(metrics))
    assert "epoch 1: gold LL is — because the evaluation computed none" in _page(root)


def test_test_seeds_on_a_corpus_without_environment_is_one_sentence(glaive_run, tmp_path, capsys):
    root = tmp_path / "g"
    shutil.copytree(glaive_run[0], root)
    assert cli.main(["test", str(root), "--seeds", "2", "--cache", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err
    assert "--seeds scores the test split as `bench quality` does" in err and err.count("\n") == 1
    assert not (root / "test").exists() and not (tmp_path / "cache").exists()
    assert cli.main(["test", str(root), "--held-out", "none"]) == 0                   # without --seeds: ρ0 and the final strategy, paired
    assert "each held-out record's own, averaged over the records" in capsys.readouterr().out
    assert "Did evolution help?" in _page(root) and "`curateevo test` read" in _page(root)

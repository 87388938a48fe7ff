"""A tiny evolution run on ScienceWorld, the second environment (test profile, the tiny random
model): curate → train → evaluate → diagnose → propose, and the epochs replay byte for byte."""
import json

from benchmarks.scienceworld import catalog, corpus
from evolver import cli


def test_a_tiny_run_on_scienceworld_goes_through_every_stage_and_replays(tmp_path, capsys):
    info = corpus.write(tmp_path / "corpus", "wild", seed=0, limit=2)
    args = ["run", "--corpus", str(tmp_path / "corpus" / corpus.CORPUS_FILE), "--benchmark", "scienceworld",
            "--profile", "test", "--epochs", "2", "--tasks", "1", "--sandbox", "process", "--batch-size", "2",
            "--runs-dir", str(tmp_path), "--name", "sw"]
    assert cli.main(args) == 0
    root = tmp_path / "sw"
    config = json.loads((root / "run.json").read_text())
    assert config["benchmark"] == "scienceworld" and config["metric"] == "task_success"
    done = {(e.get("epoch"), e["stage"]) for e in map(json.loads, (root / "journal.jsonl").read_text().splitlines())
            if e.get("event") == "stage_done"}
    for stage in ("curate", "train-s0", "evaluate-s0", "diagnose", "propose"):
        assert (0, stage) in done, stage
    assert (1, "curate") in done and (1, "evaluate-s0") in done
    metrics = json.loads((root / "epochs" / "0" / "eval-s0" / "metrics.json").read_text())
    assert set(metrics["tasks"]) <= set(catalog.split_ids("dev")) and 0.0 <= metrics["P"] <= 1.0
    episodes = [json.loads(line) for line in (root / "epochs" / "0" / "eval-s0" / "trajectories.jsonl").read_text().splitlines()]
    assert episodes and all(e["meta"]["env"]["benchmark"] == "scienceworld" for e in episodes)
    failed = json.loads((root / "epochs" / "0" / "diagnosis" / "failed_points.json").read_text())
    assert failed and all(p["family"] for p in failed)   # a random model fails: the diagnosis names how
    manifest = json.loads((root / "epochs" / "0" / "artifacts" / "manifest.json").read_text())
    assert manifest["corpus"]["records"] == info["records"]
    capsys.readouterr()
    for epoch in ("0", "1"):
        assert cli.main(["replay", str(root), "--epoch", epoch, "--sandbox", "process"]) == 0

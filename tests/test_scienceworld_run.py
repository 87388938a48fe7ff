"""A tiny evolution run on ScienceWorld, the second environment (test profile, the tiny random
model): curate → train → evaluate → diagnose → propose, and the epochs replay byte for byte.
The step items are not scored (eval_steps off): P is task success, and on this CPU each step item
of a ScienceWorld gold run costs a generation over a long prompt."""
import json

from environments.scienceworld import catalog, corpus
from evolver import cli
from evolver.config import RunConfig
from evolver.loop import run_epochs
from evolver.store import RunStore
from corpora import corpus_sha256

from conftest import TINY_MAX_NEW_TOKENS


def test_a_tiny_run_on_scienceworld_goes_through_every_stage_and_replays(tmp_path, capsys):
    # one train task: its 3 records (an exact duplicate among them) make ~65 RL decision points; two
    # tasks made 212, whose long prompts the trainer fits by re-tokenizing: most of the run's time
    info = corpus.write(tmp_path / "corpus", "wild", seed=0, limit=1)
    files = (str(tmp_path / "corpus" / corpus.CORPUS_FILE),)
    config = RunConfig(corpus=files, corpus_sha256=corpus_sha256(list(files)), benchmark="scienceworld",
                       metric="task_success", profile="test", base="tiny-random", sandbox="process", tasks=1,
                       epochs=2, batch_size=2, eval_steps=False, max_new_tokens=TINY_MAX_NEW_TOKENS)
    store = RunStore.create(tmp_path / "sw", config.to_json())
    run_epochs(store)
    root = tmp_path / "sw"
    done = {(e.get("epoch"), e["stage"]) for e in map(json.loads, (root / "journal.jsonl").read_text().splitlines())
            if e.get("event") == "stage_done"}
    for stage in ("curate", "train-s0", "evaluate-s0", "decide", "diagnose", "propose"):
        assert (0, stage) in done, stage
    assert (1, "curate") in done and (1, "evaluate-s0") in done and (1, "decide") in done
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

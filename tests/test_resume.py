"""Resume: a run killed at every stage boundary, or inside a training, ends with the same decisions
and artifact hashes as the uninterrupted run (the `test` profile, 3 epochs, with at least one accept
and one reject). Kills at random points are bench/resume_kills.py."""
import hashlib
import json
import re
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest

from evolver import cli
from evolver.store import RunStore

from conftest import SAMPLE_CORPUS, TINY_RUN_ARGS

pytestmark = pytest.mark.timeout(2400)   # three short evolution runs; minutes, not seconds

ARGS = ["--profile", "test", "--base", "tiny-random", "--epochs", "3", "--tasks", "2", "--sandbox", "process", "--benchmark", "bfcl-single",
        "--corpus", str(SAMPLE_CORPUS), "--margin", "0.001", "--batch-size", "2", *TINY_RUN_ARGS]


def fingerprint(root):
    """What must not depend on interruptions: decisions, commits, edits and every artifact's bytes."""
    store = RunStore.open(root)
    decisions = [{k: e.result.get(k) for k in ("epoch", "accepted", "P", "C", "J", "commit", "edits")}
                 for e in store.journal.events() if e.is_done("decide")]
    artifacts = {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
                 for p in sorted(root.glob("epochs/*/artifacts/*")) if p.is_file() and p.name != "execution.json"}
    final = [e.result for e in store.journal.events() if e.is_done("final")]
    return decisions, artifacts, final


@dataclass
class Reference:
    root: object
    fingerprint: tuple


@pytest.fixture(scope="module")
def reference(tmp_path_factory, trained_once) -> Reference:
    runs = tmp_path_factory.mktemp("reference")
    assert cli.main(["run", *ARGS, "--runs-dir", str(runs), "--name", "r"]) == 0
    decisions, artifacts, final = fingerprint(runs / "r")
    assert [d["accepted"] for d in decisions].count(True) >= 2 and False in [d["accepted"] for d in decisions]
    # sft, rl, memory, profile, manifest; and the toolkit's dropped.jsonl where an operator dropped records
    assert len([a for a in artifacts if not a.endswith("/dropped.jsonl")]) == 3 * 5 and len(final) == 1
    return Reference(runs / "r", (decisions, artifacts, final))


class Crash(Exception):
    pass


def test_crash_at_every_stage_boundary_then_resume(reference, tmp_path, monkeypatch):
    real_stage = RunStore.stage
    boundaries = []

    def crashing_stage(self, epoch, stage, run, outputs=()):
        done = self.done(epoch, stage)
        result = real_stage(self, epoch, stage, run, outputs)
        if done is None:   # this call did the work: crash right after its stage_done was written
            boundaries.append((epoch, stage))
            raise Crash(f"{epoch}/{stage}")
        return result

    monkeypatch.setattr(RunStore, "stage", crashing_stage)
    with pytest.raises(Crash):
        cli.main(["run", *ARGS, "--runs-dir", str(tmp_path), "--name", "c"])
    for _ in range(40):
        try:
            assert cli.main(["resume", str(tmp_path / "c")]) == 0
            break
        except Crash:
            continue
    else:
        pytest.fail("the run never finished")
    assert len(boundaries) >= 16 and len(set(boundaries)) == len(boundaries), boundaries
    assert fingerprint(tmp_path / "c") == reference.fingerprint


def first_epochs(fingerprint_: tuple, epochs: int) -> tuple:
    """A fingerprint's decisions and artifacts of epochs 0 … epochs-1 (what a shorter run shares with it)."""
    decisions, artifacts, _ = fingerprint_
    return ([d for d in decisions if d["epoch"] < epochs],
            {k: v for k, v in artifacts.items() if int(k.split("/")[1]) < epochs})


def test_a_run_killed_inside_a_training_resumes_to_the_same_result(reference, tmp_path):
    """One SIGKILL of the whole process group while epoch 0's training writes its stage folder (the
    longest stage, where a kill lands most often), then `resume`, in a 1-epoch run: its epoch is
    the reference's first, decided and curated alike, the curation done before the kill not done
    again. A resume into a later epoch (after an accept, a proposal, a commit) is
    test_crash_at_every_stage_boundary_then_resume's, with the final pick; the sweep over random
    kill points (several kills per run, some before the run folder is whole, in every epoch) is
    bench/resume_kills.py."""
    root = tmp_path / "k"
    args = [*ARGS]
    args[args.index("--epochs") + 1] = "1"
    proc = subprocess.Popen([sys.executable, "-m", "evolver.cli", "run", *args, "--runs-dir", str(tmp_path), "--name", "k"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 900
        while not (root / "epochs" / "0" / "train-s0" / "train.log").exists():
            assert proc.poll() is None, "the run ended before epoch 0's training started"
            assert time.monotonic() < deadline, "epoch 0's training never started"
            time.sleep(0.2)
        time.sleep(1.0)   # inside the training, not at its first byte
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert RunStore.open(root).done(0, "train-s0") is None   # killed inside the stage, not after it
    done = subprocess.run([sys.executable, "-m", "evolver.cli", "resume", str(root)], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    resumed = fingerprint(root)
    curated = [e for e in RunStore.open(root).journal.events() if e.is_done("curate")]
    assert len(curated) == 1   # done before the kill, not done again
    assert len(resumed[0]) == 1 and len(resumed[2]) == 1   # the epoch decided, the run finished
    assert first_epochs(resumed, 1) == first_epochs(reference.fingerprint, 1)


def test_log_status_diff_and_report_read_the_run(reference, capsys):
    root = reference.root
    # every training of the run was forked from the run's forkserver, its libraries imported once (trainer.warm)
    trainings = list(root.glob("epochs/*/train-s*/summary.json"))
    assert trainings and {json.loads(p.read_text())["started"] for p in trainings} == {"warm"}
    assert cli.main(["log", str(root)]) == 0
    out = capsys.readouterr().out
    assert "accepted" in out and "rejected" in out and "J" in out
    # how much of the curated SFT set the recipe trained: the test profile's 6 examples of those that fit
    assert "SFT seen" in out and "cur s/1K" in out
    # per epoch: passes over the curated SFT set, then curation wall seconds per 1K retained turns
    # SFT seen, RL 0-var (GRPO groups with zero reward variance, of all), curation s/1K, decision
    assert len(re.findall(r" \d+\.\d\d× +\d+/\d+ +\d+\.\d{3} (?:accepted|rejected|C only) ", out)) == 3
    from evolver.tables import epoch_rows
    for row in epoch_rows(RunStore.open(root)):
        cost = row["curation"]
        assert cost["retained_turns"] == row["cost_train"] and cost["seconds"] > 0
        assert cost["seconds_per_1k_turns"] == round(cost["seconds"] * 1000 / cost["retained_turns"], 4)
    assert cli.main(["status", str(root)]) == 0
    assert "finished" in capsys.readouterr().out
    assert cli.main(["diff", str(root), "0", "1"]) == 0
    assert "# op: " in capsys.readouterr().out
    assert cli.main(["report", str(root)]) == 0
    page = (root / "report" / "index.html").read_text()
    for name in ("objective.png", "scale.png", "families.png", "time.png"):
        assert (root / "report" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert name in page
    assert "<h2>Curation cost</h2>" in page and "s / 1K turns" in page
    assert "SFT seen" in page and "training.png" in page and "P per category" in page and "95% Wilson interval" in page
    assert "<h2>Strategy revisions</h2>" in page and "+++ b/strategy.py" in page and "# op:" in page
    assert "Failed trajectories" in page and 'href="../epochs/0/eval-s0/trajectories.jsonl"' in page


def test_the_final_strategy_is_tested_once(reference, capsys):
    root = reference.root
    # what an interrupted test left behind (no result was shown) does not count as a reading
    (root / "test").mkdir()
    (root / "test.partial").mkdir()
    (root / "test.partial" / "trajectories.jsonl").write_text("{}\n")
    assert cli.main(["test", str(root), "--tasks", "2", "--held-out", "none"]) == 0
    assert "test split" in capsys.readouterr().out
    assert not (root / "test.partial").exists()
    assert {"metrics.json", "trajectories.jsonl"} <= {p.name for p in (root / "test").iterdir()}
    metrics = json.loads((root / "test" / "metrics.json").read_text())
    assert metrics["split"] == "test" and len(metrics["tasks"]) == 2
    assert cli.main(["test", str(root), "--tasks", "2", "--held-out", "none"]) == 2   # the test split is read once per run
    assert "read once" in capsys.readouterr().err
    import shutil
    shutil.rmtree(root / "test")                                 # the journal is the record, not the files
    assert cli.main(["test", str(root), "--tasks", "2", "--held-out", "none"]) == 2
    assert "was read for" in capsys.readouterr().err and not (root / "test").exists()
    assert cli.main(["test", str(root), "--tasks", "2", "--again", "--held-out", "none"]) == 0   # a user who knows: journaled, reported
    readings = [e for e in RunStore.open(root).journal.events() if e.kind == "tested"]
    assert [e.reading for e in readings] == [1, 2]
    assert cli.main(["report", str(root)]) == 0
    assert "The test split was read 2 times" in (root / "report" / "index.html").read_text()


def test_a_run_whose_workspace_or_adapter_was_changed_is_refused(reference, tmp_path, capsys):
    import shutil

    root = tmp_path / "copy"
    shutil.copytree(reference.root, root, ignore=shutil.ignore_patterns("test", "test.partial"))   # not yet tested
    journal = root / "journal.jsonl"
    journal.write_text("".join(line for line in journal.read_text().splitlines(keepends=True) if '"tested"' not in line))
    final = [e.result for e in RunStore.open(root).journal.events()
             if e.is_done("final")][-1]
    adapter = root / "epochs" / str(final["epoch"]) / "train-s0" / "adapter"
    shutil.rmtree(adapter)
    assert cli.main(["test", str(root), "--tasks", "2", "--held-out", "none"]) == 2
    err = capsys.readouterr().err
    assert "adapter of epoch" in err and "evaluate something else" in err and err.count("\n") == 1
    assert not (root / "test").exists() and not (root / "test.partial").exists()
    # a tag moved behind the run's back: resume, diff and test refuse in one sentence
    subprocess.run(["git", "-C", str(root / "strategy"), "tag", "-f", "epoch-1", "epoch-0"], check=True,
                   capture_output=True)
    for argv in (["resume", str(root)], ["diff", str(root), "0", "1"], ["test", str(root)]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert "tag epoch-1 names" in err and "changed outside curateevo" in err and err.count("\n") == 1, err

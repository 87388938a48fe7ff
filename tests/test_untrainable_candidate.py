"""A candidate that would train nothing — every record over the length limits, or no SFT or RL record
at all — is a rejected candidate: recorded, rolled back unevaluated, and the run goes on; it is
never accepted, not even on a lower C."""
import html

import pytest

from evolver import cli
from evolver.proposers import PROPOSERS
from evolver.proposers.brief import Outcome
from evolver.store import RunStore

from conftest import SAMPLE_CORPUS

pytestmark = [pytest.mark.timeout(3000), pytest.mark.usefixtures("trained_once")]   # one short evolution run

ARGS = ["--profile", "test", "--base", "tiny-random", "--epochs", "3", "--tasks", "2", "--sandbox", "process",
        "--benchmark", "bfcl-single", "--corpus", str(SAMPLE_CORPUS), "--batch-size", "2", "--proposer", "scripted"]

# every SFT record's first trained turn starts after the profile's max_length (1024 tokens): each is
# cut and dropped; no RL record
OVER_THE_LIMITS = b'''
def curate(raw, ctx):
    tk = ctx.toolkit
    out = tk.Curated()
    for record in (tk.sft_record(t, tags=["long"]) for t in raw if not tk.is_empty(t)):
        first = next(i for i, m in enumerate(record["messages"]) if m["role"] == "user")
        record["messages"][first] = {**record["messages"][first],
                                     "content": record["messages"][first]["content"] + " padding" * 1500}
        out.sft.append(record)
    return out
'''

# memory alone: the host accepts it (it is not empty), but nothing trains and the cost is lowest
MEMORY_ALONE = b'''
def curate(raw, ctx):
    tk = ctx.toolkit
    out = tk.Curated()
    out.memory.append({"id": "m0", "key": "weather", "content": "call the tool the request names", "tags": [], "meta": {}})
    return out
'''


class ScriptedProposer:
    """Offers one fixed candidate per epoch: epoch 1 over the limits, epoch 2 memory alone."""
    name = "scripted"

    def __init__(self):
        self.offered = 0

    def revise(self, phase, brief, validate, out_dir):
        if phase != "effectiveness":
            return Outcome(None, attempts=[])
        code = (OVER_THE_LIMITS, MEMORY_ALONE)[self.offered]
        self.offered += 1
        files = {**brief.files, "strategy.py": code}
        verdict = validate(files)
        assert verdict.ok, verdict
        return Outcome(files, message=f"scripted candidate {self.offered}", edits=[f"scripted-{self.offered}"],
                       attempts=[{"edits": [f"scripted-{self.offered}"], "dry_run": verdict.kind}])


def test_a_candidate_that_would_train_nothing_is_rolled_back_and_the_run_finishes(tmp_path, monkeypatch, capsys):
    proposer = ScriptedProposer()
    monkeypatch.setitem(PROPOSERS, "scripted", lambda config, llm, executor: proposer)
    assert cli.main(["run", *ARGS, "--runs-dir", str(tmp_path), "--name", "r"]) == 0
    store = RunStore.open(tmp_path / "r")
    events = store.journal.events()
    decisions = {e.result["epoch"]: e.result for e in events if e.is_done("decide")}
    assert decisions[0]["accepted"] and decisions[0]["P"] is not None
    over, memory = decisions[1], decisions[2]
    assert not over["accepted"] and over["P"] is None and over["commit"]
    assert over["reason"].startswith("it would train nothing, so it is rolled back unevaluated: every record is over the "
                                     "length limits: SFT ") and "dropped at max_length 1024" in over["reason"]
    assert not memory["accepted"] and memory["P"] is None
    assert "it curates no SFT or RL record (memory alone)" in memory["reason"]
    trained = {e.epoch for e in events if e.is_done() and e.stage.startswith("train-s")}
    assert trained == {0}                                                   # neither candidate was trained
    final = [e.result for e in events if e.is_done("final")]
    assert final[0]["epoch"] == 0
    ws = store.root / "strategy"
    from workspace.repository import Workspace
    assert Workspace.open(ws).resolve("best") == Workspace.open(ws).resolve("epoch-0")   # rolled back twice

    capsys.readouterr()
    assert cli.main(["resume", str(tmp_path / "r")]) == 0                  # a finished run resumes to the same end
    assert cli.main(["log", str(tmp_path / "r")]) == 0
    assert "epoch 1: it would train nothing" in capsys.readouterr().out


def test_log_report_and_test_say_plainly_when_the_chosen_strategy_trains_nothing(tmp_path, capsys):
    args = [a for a in ARGS if a not in ("--proposer", "scripted")]
    args[args.index("--epochs") + 1] = "1"
    assert cli.main(["run", *args, "--ablate", "no-sft", "no-rl", "--runs-dir", str(tmp_path), "--name", "r"]) == 0
    said = "the chosen strategy (epoch 0) trains nothing: its training used no SFT example and no RL prompt, so its P is the base model's"
    capsys.readouterr()
    assert cli.main(["log", str(tmp_path / "r")]) == 0
    assert f"warning: {said}" in capsys.readouterr().out
    assert cli.main(["report", str(tmp_path / "r")]) == 0
    assert html.escape(said) in (tmp_path / "r" / "report" / "index.html").read_text()
    capsys.readouterr()
    assert cli.main(["test", str(tmp_path / "r"), "--tasks", "2", "--held-out", "none"]) == 0
    assert f"warning: {said}" in capsys.readouterr().out


def test_a_run_that_died_training_an_untrainable_candidate_resumes_to_the_end(tmp_path, monkeypatch, capsys):
    """A run made before this check died in epoch 1's training ("nothing would be trained"); `resume`
    finds epoch 1's curation done, rolls the candidate back unevaluated and finishes."""
    from evolver import loop

    proposer = ScriptedProposer()
    monkeypatch.setitem(PROPOSERS, "scripted", lambda config, llm, executor: proposer)
    monkeypatch.setattr(loop, "trainable", lambda run, epoch, curation: curation)   # as the run had it
    args = [*ARGS, "--runs-dir", str(tmp_path), "--name", "r"]
    args[args.index("--epochs") + 1] = "2"
    assert cli.main(["run", *args]) != 0
    assert "nothing would be trained" in capsys.readouterr().err
    monkeypatch.undo()
    monkeypatch.setitem(PROPOSERS, "scripted", lambda config, llm, executor: proposer)
    assert cli.main(["resume", str(tmp_path / "r")]) == 0
    events = RunStore.open(tmp_path / "r").journal.events()
    decided = {e.result["epoch"]: e.result for e in events if e.is_done("decide")}
    assert not decided[1]["accepted"] and decided[1]["reason"].startswith("it would train nothing")
    assert [e.result["epoch"] for e in events if e.is_done("final")] == [0]

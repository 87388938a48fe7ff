"""A run whose every proposal is refused (a .git inside the strategy, a change that alters no byte
of the artifacts, a strategy that fails the dry run) records each such epoch as "no valid
candidate" with the reasons, shows it in `log` and `report`, goes on proposing, and ends with 0."""
import json

import pytest

from evolver import cli
from evolver.proposers import PROPOSERS
from evolver.proposers.brief import Outcome
from evolver.store import RunStore

from conftest import SAMPLE_CORPUS

pytestmark = [pytest.mark.timeout(3000), pytest.mark.usefixtures("trained_once")]   # one short evolution run; minutes on a loaded machine

ARGS = ["--profile", "test", "--base", "tiny-random", "--epochs", "3", "--tasks", "2", "--sandbox", "process",
        "--benchmark", "bfcl-single", "--corpus", str(SAMPLE_CORPUS), "--batch-size", "2", "--proposer", "refused"]


class RefusedProposer:
    """Offers three candidates per revision, each of which the loop must refuse."""
    name = "refused"

    def __init__(self):
        self.briefs = []

    def revise(self, phase, brief, validate, out_dir):
        self.briefs.append(brief)
        strategy = brief.files["strategy.py"]
        offers = {"+git": {**brief.files, ".git/config": b"[core]\n\thooksPath = /tmp\n"},
                  "+comment": {**brief.files, "strategy.py": strategy + b"\n# a comment: no byte of the artifacts changes\n"},
                  "+raise": {**brief.files, "strategy.py": b"def curate(raw, ctx):\n    raise RuntimeError('refused')\n"}}
        attempts = []
        for edit, files in offers.items():
            verdict = validate(files)
            assert not verdict.ok, edit
            attempts.append({"edits": [f"{phase}{edit}"], "dry_run": verdict.kind, "error": verdict.error})
        return Outcome(None, attempts=attempts)


def test_every_proposal_refused_is_recorded_as_no_valid_candidate_and_the_run_goes_on(tmp_path, monkeypatch, capsys):
    proposer = RefusedProposer()
    monkeypatch.setitem(PROPOSERS, "refused", lambda config, llm, executor: proposer)
    assert cli.main(["run", *ARGS, "--runs-dir", str(tmp_path), "--name", "r"]) == 0
    store = RunStore.open(tmp_path / "r")
    decisions = [e.result for e in store.journal.events() if e.is_done("decide")]
    assert [d["epoch"] for d in decisions] == [0, 1, 2]
    assert decisions[0]["accepted"] and decisions[0]["P"] is not None
    for d in decisions[1:]:
        assert d["no_candidate"] and not d["accepted"] and d["P"] is None and d["commit"] is None
        assert d["reason"].startswith("no valid candidate: ")
        assert ".git" in d["reason"] and "byte-identical" in d["reason"] and "RuntimeError" in d["reason"]
    assert len(proposer.briefs) == 4   # it kept proposing: effectiveness and efficiency after epochs 0 and 1
    assert "effectiveness+git" in proposer.briefs[2].rejected_edits   # epoch 1's refused edits are not offered again
    final = [e.result for e in store.journal.events() if e.is_done("final")]
    assert final[0]["epoch"] == 0

    capsys.readouterr()
    assert cli.main(["log", str(tmp_path / "r")]) == 0
    log = capsys.readouterr().out
    table = [line.split()[0] for line in log.splitlines() if "no cand." in line]   # the epoch table's decision column
    assert table == ["1", "2"]
    assert "epoch 1: no valid candidate: " in log and "epoch 2: no valid candidate: " in log

    assert cli.main(["report", str(tmp_path / "r")]) == 0
    page = (tmp_path / "r" / "report" / "index.html").read_text()
    assert "epoch 2: no valid candidate: " in page
    assert json.loads((tmp_path / "r" / "epochs" / "1" / "evolve" / "proposals.json").read_text())


class SpentProposer:
    """Finds the run's LLM budget spent on its first revision."""
    name = "spent"

    def revise(self, phase, brief, validate, out_dir):
        return Outcome(None, attempts=[{"edits": [f"{phase}+x"], "error": "budget spent"}], budget_exhausted=True)


def test_a_spent_llm_budget_ends_the_run_with_the_epoch_that_found_no_candidate(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(PROPOSERS, "spent", lambda config, llm, executor: SpentProposer())
    args = [a if a != "refused" else "spent" for a in ARGS]
    assert cli.main(["run", *args, "--runs-dir", str(tmp_path), "--name", "r"]) == 0
    events = RunStore.open(tmp_path / "r").journal.events()
    decisions = [e.result for e in events if e.is_done("decide")]
    assert [d["epoch"] for d in decisions] == [0, 1] and decisions[1]["budget_exhausted"]
    assert decisions[1]["reason"] == "no valid candidate: the run's LLM budget is spent; budget spent"
    assert not [e for e in events if e.epoch == 2]   # epoch 2 never starts
    final = [e.result for e in events if e.is_done("final")]
    assert final[0]["epoch"] == 0
    assert "the run's LLM budget is spent; the run ends here" in capsys.readouterr().err

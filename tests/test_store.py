"""The run store: stages run once, resume skips intact work, a torn journal line is harmless."""
import json

import pytest

from base.errors import UserError
from base.files import atomic_write
from evolver.store import RunStore
from experiments.journal import event as journal_event


def test_a_done_stage_is_not_run_again_while_its_outputs_are_intact(tmp_path):
    store = RunStore.create(tmp_path / "run", {"lambda": 0.3})
    calls = []

    def work():
        calls.append(1)
        atomic_write(store.root / "epochs/0/out.txt", "P=0.4")
        return {"P": 0.4}

    out = [store.root / "epochs/0/out.txt"]
    assert store.stage(0, "evaluate", work, out) == {"P": 0.4}
    assert RunStore.open(store.root).stage(0, "evaluate", work, out) == {"P": 0.4}
    assert len(calls) == 1
    (store.root / "epochs/0/out.txt").write_text("tampered")
    assert store.stage(0, "evaluate", work, out) == {"P": 0.4}
    assert len(calls) == 2, "a changed output makes the stage run again"


def test_a_torn_last_journal_line_is_ignored(tmp_path):
    store = RunStore.create(tmp_path / "run", {})
    store.stage(0, "curate", lambda: {"n": 1})
    with open(store.journal.path, "ab") as f:
        f.write(b'{"event": "stage_done", "epoch": 0, "stage": "tra')
    assert [e.stage for e in store.journal.events()] == ["curate", "curate"]
    assert store.done(0, "train") is None


def test_started_without_done_runs_again(tmp_path):
    store = RunStore.create(tmp_path / "run", {})
    store.journal.append(journal_event({"event": "stage_started", "epoch": 1, "stage": "train"}))
    ran = []
    store.stage(1, "train", lambda: ran.append(1) or {"ok": True})
    assert ran == [1]


def test_create_refuses_an_existing_run_and_open_refuses_a_non_run(tmp_path):
    RunStore.create(tmp_path / "run", {"a": 1})
    with pytest.raises(UserError, match="resume"):
        RunStore.create(tmp_path / "run", {"a": 1})
    with pytest.raises(UserError, match="not a run directory"):
        RunStore.open(tmp_path)
    assert json.loads((tmp_path / "run" / "run.json").read_text()) == {"a": 1}

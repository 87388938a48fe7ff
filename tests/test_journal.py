"""A run's journal, typed (experiments/journal.py): the store writes the events it always wrote,
the one reader gives each line its class, and no module of the project parses journal.jsonl
itself (the bench's loop-identity script compares two runs' journals as text and is named)."""
from __future__ import annotations

import ast
import json

from evolver.store import RunStore
from experiments import journal
from test_layering import PACKAGES, ROOT

HOME = "experiments/journal.py"
TEXT_ONLY = {"bench/loop_identity.py": "compares two runs' journals as text, times set aside"}


def test_the_store_writes_each_stage_event_as_it_always_did(tmp_path):
    store = RunStore.create(tmp_path / "run", {})
    store.stage(0, "curate", lambda: {"commit": "c1"})
    try:
        store.stage(0, "train-s0", lambda: 1 / 0)
    except ZeroDivisionError:
        pass
    lines = [json.loads(line) for line in store.journal.path.read_text().splitlines()]
    assert [sorted(doc) for doc in lines] == [["epoch", "event", "stage", "time"],
                                              ["epoch", "event", "outputs", "result", "stage", "time"],
                                              ["epoch", "event", "stage", "time"],
                                              ["epoch", "error", "event", "stage", "time"]]
    assert lines[1] | {"time": None} == {"event": "stage_done", "epoch": 0, "stage": "curate", "outputs": {},
                                         "result": {"commit": "c1"}, "time": None}
    assert lines[3]["error"] == "ZeroDivisionError: division by zero"
    events = store.journal.events()
    assert [type(e) for e in events] == [journal.StageStarted, journal.StageDone, journal.StageStarted,
                                         journal.StageFailed]
    assert [e.doc for e in events] == lines   # each event keeps its object as written
    assert events[1].result == {"commit": "c1"} and events[3].error == lines[3]["error"]


def test_the_reader_types_each_kind_and_keeps_an_unknown_one_as_an_event():
    tested = journal.event({"event": "tested", "epoch": 2, "P": 0.5, "metric": "task_success", "reading": 1,
                            "P_rho0": 0.4})
    assert isinstance(tested, journal.Tested) and (tested.P, tested.reading, tested.doc["P_rho0"]) == (0.5, 1, 0.4)
    assert journal.Tested.of(2, 0.5, "task_success", 1, P_rho0=0.4).doc == tested.doc
    assert journal.event({"event": "preflight", "llm": {"calls": 1}}).llm == {"calls": 1}
    note = journal.event({"event": "note"})
    assert type(note) is journal.Event and note.kind == "note" and not note.is_done()
    done = journal.event({"event": "stage_done", "epoch": 1, "stage": "decide", "result": {"llm": {"calls": 2}}})
    assert done.is_done("decide") and not done.is_done("final") and done.llm == {"calls": 2} and done.outputs == {}
    events = [note, done, journal.event({"event": "stage_done", "epoch": 2, "stage": "decide", "result": None})]
    assert journal.results(events, "decide") == [{"llm": {"calls": 2}}]   # a done stage without a result is left out


def raw_journal_reads(root, packages=PACKAGES) -> list[str]:
    """`file:line` of every spelling of journal.jsonl outside the journal's module (and the store's docstrings)."""
    found = []
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel == HOME or rel in TEXT_ONLY:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            docs = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef))
                    and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
            found += sorted({f"{rel}:{n.lineno}" for n in ast.walk(tree) if isinstance(n, ast.Constant)
                             and isinstance(n.value, str) and "journal.jsonl" in n.value and id(n) not in docs})
    return found


def test_the_scan_finds_a_module_that_opens_the_journal_itself(tmp_path):
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "rows.py").write_text(
        '"""Reads RUN/journal.jsonl (a docstring may name it)."""\n'
        'import json\n'
        'def finals(run):\n'
        '    return [json.loads(l) for l in (run / "journal.jsonl").read_text().splitlines()]\n')
    assert raw_journal_reads(tmp_path, ("experiments",)) == ["experiments/rows.py:4"]


def test_no_module_parses_the_journal_but_through_its_one_reader():
    assert raw_journal_reads(ROOT) == [], "read it with experiments.journal.read (or RunStore.journal.events())"

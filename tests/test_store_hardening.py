"""A damaged run directory is one sentence or one warning, never a traceback; one writer at a time."""
import json
import subprocess
import sys

import pytest

from evolver import cli
from base.errors import UserError
from evolver.store import RunStore
from experiments.journal import Event, event as journal_event

from conftest import ROOT


def test_a_corrupt_line_in_the_middle_of_the_journal_is_refused_naming_it(tmp_path, capsys):
    from conftest import SAMPLE_CORPUS
    from evolver.config import RunConfig
    from corpora import corpus_sha256

    corpus = (str(SAMPLE_CORPUS),)
    config = RunConfig(corpus=corpus, corpus_sha256=corpus_sha256(list(corpus)), profile="test", base="tiny-random")
    store = RunStore.create(tmp_path / "run", config.to_json())
    store.stage(0, "curate", lambda: {"n": 1})
    with open(store.journal.path, "ab") as f:
        f.write(b'<html>oops</html>\n')
    store.journal.append(Event({"event": "note"}))
    with pytest.raises(UserError, match=r"journal\.jsonl:3 is not a journal event: the journal was damaged in the middle"):
        RunStore.open(store.root).journal.events()
    for command in ("log", "status", "resume"):
        assert cli.main([command, str(store.root)]) == 2
        err = capsys.readouterr().err
        assert "journal.jsonl:3 is not a journal event" in err and err.count("\n") == 1
    assert not (store.root / "strategy").exists()   # resume refused before it made anything


def test_a_torn_last_line_is_truncated_by_the_next_writer_saying_so(tmp_path, capsys):
    root = tmp_path / "run"
    subprocess.run([sys.executable, "-c", f"""
from evolver.store import RunStore
store = RunStore.create({str(root)!r}, {{}})
store.stage(0, "curate", lambda: {{"n": 1}})
"""], check=True)
    with open(root / "journal.jsonl", "ab") as f:   # a kill during the write of the next event
        f.write(b'{"event": "stage_done", "epoch": 0, "stage": "tra')
    store = RunStore.open(root)
    assert [e.stage for e in store.journal.events()] == ["curate", "curate"]   # readers: no event, no error
    store.stage(0, "train", lambda: {"n": 2})                                       # the next writer cuts it
    assert "ended in a torn line (49 bytes, a kill during a write); truncated" in capsys.readouterr().err
    lines = (root / "journal.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(json.loads(line) for line in lines[:-1])
    assert [e.stage for e in RunStore.open(root).journal.events()] == ["curate", "curate", "train", "train"]


def test_a_corrupt_run_json_is_one_sentence(tmp_path, capsys):
    store = RunStore.create(tmp_path / "run", {"epochs": 2})
    (store.root / "run.json").write_bytes(b'{"epochs": 2, "lam')
    with pytest.raises(UserError, match=r"run.json cannot be read as JSON \(.*\): the run's configuration is damaged"):
        RunStore.open(store.root)
    (store.root / "run.json").write_text("[1, 2]")
    with pytest.raises(UserError, match="holds list, not the run's configuration object"):
        RunStore.open(store.root)
    assert cli.main(["status", str(store.root)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("curateevo: error: ")


SECOND_WRITER = """
import sys
sys.path.insert(0, sys.argv[1])
from base.errors import UserError
from evolver.store import RunStore
store = RunStore.open(sys.argv[2])
print(len(store.journal.events()))     # reading needs no lock
try:
    store.stage(0, "curate", lambda: {"n": 2})
except UserError as exc:
    print(exc)
    sys.exit(2)
"""


def test_a_second_writer_of_a_run_refuses_in_one_line(tmp_path):
    store = RunStore.create(tmp_path / "run", {})
    store.journal.append(journal_event({"event": "stage_started", "epoch": 0, "stage": "curate"}))   # this process writes
    done = subprocess.run([sys.executable, "-c", SECOND_WRITER, str(ROOT), str(store.root)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    count, message = done.stdout.splitlines()
    assert count == "1"
    assert message == (f"{store.root} is being written by another curateevo process (pid {__import__('os').getpid()}); "
                       "wait for it to end or stop it before resuming")
    assert len(store.journal.events()) == 1, "the refused writer wrote nothing"


def test_the_lock_dies_with_its_process(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text("{}")   # made by hand: this process holds no lock on it
    store = RunStore.open(tmp_path / "run")
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.path.insert(0, sys.argv[1]);"
                               "from evolver.store import RunStore; RunStore.open(sys.argv[2]).lock();"
                               "print('held', flush=True); time.sleep(60)", str(ROOT), str(store.root)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        probe = [sys.executable, "-c", SECOND_WRITER, str(ROOT), str(store.root)]
        assert subprocess.run(probe, capture_output=True, timeout=60).returncode == 2
    finally:
        holder.kill()
        holder.wait()
    assert subprocess.run(probe, capture_output=True, timeout=60).returncode == 0


def test_a_second_resume_refuses_at_once_while_another_process_writes(tmp_path, capsys):
    """Two resumes of one run: the second refuses in one line before it touches anything."""
    import subprocess
    import sys
    import time

    from conftest import SAMPLE_CORPUS
    from evolver import cli

    root = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", f"""
import sys, time
from evolver.config import RunConfig
from evolver.store import RunStore
from corpora import corpus_sha256
corpus = ({str(SAMPLE_CORPUS)!r},)
cfg = RunConfig(corpus=corpus, corpus_sha256=corpus_sha256(list(corpus)), profile="test", base="tiny-random")
RunStore.create({str(root)!r}, cfg.to_json())
print("holding", flush=True)
time.sleep(60)
"""], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        before = sorted(p.name for p in root.iterdir())
        started = time.monotonic()
        assert cli.main(["resume", str(root)]) == 2
        err = capsys.readouterr().err
        assert "is being written by another curateevo process" in err and err.count("\n") == 1
        assert time.monotonic() - started < 5 and sorted(p.name for p in root.iterdir()) == before
    finally:
        holder.kill()
        holder.wait()

"""A process asks for the same corpus several times (a run: at launch, for the dev check, for the
curation, for evaluation; at 10^6 trajectories each load took minutes): the same bytes with the
same choices give the same loaded corpus, anything else a fresh load; a long load says how far it is."""
import json
import os
import shutil
import tempfile

from bench import scale_corpus
from corpora import load_corpus, loader
from evolver import cli, run_cli

from conftest import SAMPLE_CORPUS
from test_run_creation import CHEAP


def counted(monkeypatch) -> list:
    """The loads that parse files (not those answered from the process's recent corpora)."""
    parsed, real = [], loader._load
    monkeypatch.setattr(loader, "_load", lambda *a, **k: parsed.append(a[0]) or real(*a, **k))
    return parsed


def test_the_same_bytes_are_parsed_once_and_changed_bytes_again(tmp_path, monkeypatch):
    parsed = counted(monkeypatch)
    corpus = tmp_path / "corpus.jsonl"
    shutil.copyfile(SAMPLE_CORPUS, corpus)
    first = load_corpus([str(corpus)])
    assert load_corpus([str(corpus)]) is first and len(parsed) == 1
    record = first.records[0]
    record["id"] = "changed by a caller"   # records are decoded afresh: no caller sees another's change
    assert load_corpus([str(corpus)]).records[0]["id"] != "changed by a caller"

    stat = corpus.stat()   # the same size and time stamps, one byte different: parsed again
    text = corpus.read_bytes()
    at = text.index(b'"content":"') + len(b'"content":"')
    corpus.write_bytes(text[:at] + (b"X" if text[at:at + 1] != b"X" else b"Y") + text[at + 1:])
    os.utime(corpus, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    changed = load_corpus([str(corpus)])
    assert changed is not first and changed.sha256 != first.sha256 and len(parsed) == 2

    assert load_corpus([str(corpus)], on_error="skip") is not changed   # another choice
    other = tmp_path / "other-tmp"   # records kept in another temporary directory: loaded there
    other.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(other))
    assert load_corpus([str(corpus)]) is not changed and len(parsed) == 4
    assert len(loader._recent) <= loader.RECENT


def test_a_long_load_says_how_far_it_is(tmp_path, monkeypatch):
    corpus = tmp_path / "corpus.jsonl"
    lines = SAMPLE_CORPUS.read_text().splitlines()
    with corpus.open("w") as out:   # 2,500 records of different ids
        for n in range(2500):
            record = json.loads(lines[n % len(lines)])
            out.write(json.dumps({**record, "id": f"r{n}"}) + "\n")
    monkeypatch.setattr(loader, "PROGRESS_EVERY_S", 0.0)
    said = []
    load_corpus([str(corpus)], on_progress=said.append)
    size = corpus.stat().st_size / 2**30
    assert [line.split(" records")[0] for line in said] == ["loading the corpus: 0", "loading the corpus: 1,000",
                                                            "loading the corpus: 2,000"], said
    assert all(f"of {size:.2f} GiB read (" in line for line in said), said


def test_a_run_parses_its_corpus_once_before_it_starts(tmp_path, monkeypatch, capsys):
    """and builds its next-call benchmark (the split, the dev and test sizes: every record read) once."""
    from environments.next_call import benchmark

    parsed, built, real = counted(monkeypatch), [], benchmark.NextCallBenchmark.__init__
    monkeypatch.setattr(benchmark.NextCallBenchmark, "__init__", lambda self, *a, **k: built.append(1) or real(self, *a, **k))
    corpus = tmp_path / "corpus.jsonl"
    scale_corpus.write(corpus, "short", 300)   # records of no environment: the next-call benchmark holds out parts
    args = cli.build_parser().parse_args(["run", *CHEAP[:-6], "--corpus", str(corpus), "--runs-dir",
                                          str(tmp_path / "runs"), "--name", "r"])
    store = run_cli.create_run(run_cli.run_options(args))   # loading, the dev check, the lengths, the prompts
    assert store.root.is_dir() and len(parsed) == 1 and len(built) == 1, (parsed, built)

"""`bench quality` on a user's corpus (`--benchmark next-call --corpus FILE`): the rows curate the
corpus's nine tenths that are not held out, the cells score the held-out tenth with call_f1 as the
loop does, and the calibration compares the corpus with its poisoned copy, or the records whose
outcome is a success with those whose outcome is a failure where the corpus says which."""
import json
from pathlib import Path

import pytest

from base.errors import UserError
from experiments.quality import calibration
from experiments.quality import rows as rows_mod
from evolver.cli import main
from corpora import corpus_sha256, load_corpus, write_corpus
from corpora.split import partition

EXTERNAL = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "external"
GLAIVE = EXTERNAL / "llamafactory-glaive_toolcall_en_demo.json"   # LLaMA-Factory's ShareGPT tool-call demo
pytestmark = pytest.mark.usefixtures("trained_once")   # the rows' tiny trainings, each trained once (ρ0's is test_user_corpus_run's epoch 0)


def bench(cache: Path, *extra: str) -> int:
    return main(["bench", "quality", "--benchmark", "next-call", "--profile", "test", "--sandbox", "process",
                 "--batch-size", "4", "--cache", str(cache), *extra])


def test_calibration_on_a_users_corpus_compares_it_with_its_poisoned_copy_on_its_held_out_tenth(tmp_path, capsys):
    assert GLAIVE.is_file(), "the external fixtures are part of the test data (../shared/fixtures/external)"
    cache = tmp_path / "cache"
    assert bench(cache, "--corpus", str(GLAIVE), "--calibrate", "--seeds", "1") == 0
    captured = capsys.readouterr()
    assert "no record carries a success outcome" in captured.err
    records = load_corpus([str(GLAIVE)]).records
    train_ids, dev_ids, test_ids = partition(records)   # the loop's parts: the test part is curated by no row either
    (train_dir,) = (cache / "corpora").glob("next-call-*")
    assert sorted(r["id"] for r in load_corpus([str(train_dir / "corpus.jsonl")]).records) == sorted(train_ids)
    doc = json.loads((cache / "report-dev" / "quality.json").read_text())
    assert [r["id"] for r in doc["rows"]] == ["rho0-wild", "poisoned", "augment"]
    assert doc["rows"][0]["label"] == "ρ0 on your corpus (no curation)"
    cells = [json.loads(p.read_text()) for p in (cache / "cells").glob("*/cell.json")]
    # the held-out records with a call step are scored (call_f1), as the loop scores them
    scored = {tuple(sorted(c["scores"])) for c in cells}
    assert len(cells) == 3 and all(c["metric"] == "call_f1" for c in cells) and len(scored) == 1
    (scored,) = scored
    # the dev part is drawn from records that call tools first: every one of them is scored
    assert set(scored) == set(dev_ids) and doc["tasks"] == len(scored) >= 20
    for artifacts in (cache / "curations").iterdir():   # the held-out tenth never reached a strategy
        text = "".join(p.read_text() for p in artifacts.glob("*.jsonl"))
        assert not [i for i in dev_ids + test_ids if f'"{i}"' in text]
    (path,) = (cache / "calibrations").iterdir()
    cal = json.loads(path.read_text())
    assert cal["must_differ"] == ["rho0-wild", "poisoned"] and cal["setting"]["corpus_sha256"] == corpus_sha256([str(GLAIVE)])
    assert "the corpus from its poisoned copy" in cal["verdict"] and cal["verdict"] in captured.out
    assert cal["minimal_detectable_difference"]["value"] > 0.1   # 20 tasks resolve nothing small, even at P = 0
    note = calibration.run_note(cache, benchmark="next-call", profile="test", base="tiny-random", tasks=None, seeds=1,
                                margin=0.0, corpus=(str(GLAIVE),), corpus_sha256=corpus_sha256([str(GLAIVE)]))
    assert note.startswith("instrument (") and "the corpus from its poisoned copy" in note
    other = calibration.run_note(cache, benchmark="next-call", profile="test", base="tiny-random", tasks=None, seeds=1,
                                 margin=0.0, corpus=("other.jsonl",), corpus_sha256="0" * 64)
    assert "no calibration of test" in other and "--benchmark next-call --corpus other.jsonl" in other


def test_records_labelled_by_their_outcome_make_the_oracle_and_its_complement(tmp_path):
    records = list(load_corpus([str(GLAIVE)]).records[:12])   # a list: each read of a loaded corpus is a fresh copy
    for i, record in enumerate(records):
        record["outcome"] = {"success": None if i % 4 == 3 else i % 2 == 0, "reward": None}
    write_corpus(records, tmp_path / "labelled" / "corpus.jsonl")
    assert rows_mod.labels_of(tmp_path / "labelled") == "success"
    oracle = load_corpus([str(rows_mod.oracle_corpus(tmp_path / "labelled", tmp_path))]).records
    noisy = load_corpus([str(rows_mod.noisy_corpus(tmp_path / "labelled", tmp_path))]).records
    assert [r["id"] for r in oracle] == [r["id"] for i, r in enumerate(records) if i % 4 != 3 and i % 2 == 0]
    assert [r["id"] for r in noisy] == [r["id"] for i, r in enumerate(records) if i % 4 != 3 and i % 2 == 1]
    (oracle_row, noisy_row) = rows_mod.table_rows(("oracle", "noisy"), tmp_path / "labelled", None, [], tmp_path, None)
    assert oracle_row.label == "oracle: ρ0 on the records whose outcome is a success"
    assert noisy_row.label.startswith("ρ0 on the records whose outcome is a failure")
    write_corpus(load_corpus([str(GLAIVE)]).records[:12], tmp_path / "plain" / "corpus.jsonl")
    assert rows_mod.labels_of(tmp_path / "plain") is None
    with pytest.raises(UserError, match="no record of .* carries a success outcome; the oracle row needs"):
        rows_mod.oracle_corpus(tmp_path / "plain", tmp_path)


@pytest.mark.parametrize("extra, says", [
    ([], "--benchmark next-call needs --corpus FILE"),
    (["--corpus", str(GLAIVE), "--split", "test"], "has no test split and no --wild/--labeled corpora"),
    (["--corpus", str(GLAIVE), "--proxy", "1"], "--proxy scores episodes; --benchmark next-call has none"),
])
def test_what_a_user_gets_wrong_on_their_corpus_is_one_sentence_before_any_work(tmp_path, capsys, extra, says):
    assert bench(tmp_path / "c", *extra) == 2
    assert says in capsys.readouterr().err and not (tmp_path / "c").exists()


def test_a_corpus_is_for_next_call_only(tmp_path, capsys):
    assert main(["bench", "quality", "--benchmark", "bfcl-single", "--corpus", str(GLAIVE), "--cache",
                 str(tmp_path / "c"), "--quiet"]) == 2
    assert "--corpus and --tools are for --benchmark next-call" in capsys.readouterr().err

"""The next-call benchmark was named "replay" before issue 61 ("replay" is now only re-executing a curation
and comparing its bytes). The old name still works: on a command line with one note on stderr, and
silently in what was stored under it — a run.json (which loads and resumes), a config file, a quality
bench cell cached under a key made with it (new keys name next-call), and the error types of the records it scored."""
import dataclasses
import json
from pathlib import Path

from base import registry
from experiments.quality import rows as rows_mod
from experiments.quality.cells import Cells, Setting
from corpora import corpus_sha256
from evolver import cli
from evolver.config import RunConfig
from evolver.diagnose import primary_family
from evolver.run_cli import create_run, run_options
from evolver.store import RunStore
from sandbox.process_executor import ProcessExecutor
from trainer.train import TrainSpec

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "examples" / "corpora" / "glaive-toolcall-40.json"
NOTE = "note: --benchmark replay is the old spelling of --benchmark next-call\n"


def test_eval_with_the_old_name_says_the_new_one_once_and_scores_next_call(tmp_path, capsys):
    code = cli.main(["eval", "--benchmark", "replay", "--corpus", str(SHIPPED), "--base", "tiny-random",
                     "--max-new-tokens", "4", "--threads", "2", "--tasks", "1", "--out", str(tmp_path / "e"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert err.count(NOTE) == 1 and "replay" not in err.replace(NOTE, "")
    doc = json.loads((tmp_path / "e" / "metrics.json").read_text())
    assert doc["benchmark"] == "next-call" and doc["metric"] == "call_f1"
    episodes = [json.loads(line) for line in (tmp_path / "e" / "trajectories.jsonl").read_text().splitlines()]
    assert episodes and {e["meta"]["benchmark"] for e in episodes} == {"next-call"}


def test_run_and_bench_quality_with_the_old_name_are_refused_as_next_call_would_be(tmp_path, capsys):
    # without --corpus: the same one-sentence refusal as for next-call, the note before it, nothing made
    assert cli.main(["run", "--benchmark", "replay", "--profile", "test", "--runs-dir", str(tmp_path),
                     "--name", "r"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(NOTE) and "--benchmark next-call scores held-out records" in err and not (tmp_path / "r").exists()
    assert cli.main(["bench", "quality", "--benchmark", "replay", "--profile", "test", "--cache", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(NOTE) and "--benchmark next-call needs --corpus FILE" in err and not (tmp_path / "c").exists()


def test_a_config_file_with_the_old_name_reads_as_next_call(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text("benchmark: replay\n")
    options = run_options(cli.build_parser().parse_args(["run", "--config", str(config)]))
    assert options["benchmark"] == "next-call" and capsys.readouterr().err == NOTE


def test_an_old_run_json_naming_replay_loads_and_resumes_on_next_call(tmp_path, capsys):
    args = cli.build_parser().parse_args(["run", "--corpus", str(SHIPPED), "--profile", "test", "--base", "tiny-random",
                                          "--epochs", "1", "--sandbox", "process", "--batch-size", "4",
                                          "--runs-dir", str(tmp_path), "--name", "old"])
    root = create_run(run_options(args)).root
    doc = json.loads((root / "run.json").read_text())
    assert doc["benchmark"] == "next-call"
    (root / "run.json").write_text(json.dumps({**doc, "benchmark": "replay"}, indent=2, sort_keys=True) + "\n")
    capsys.readouterr()
    # every reader of run.json sees the new name: the typed config and the store's raw one
    assert RunConfig.from_json(json.loads((root / "run.json").read_text())).benchmark == "next-call"
    assert RunStore.open(root).config["benchmark"] == "next-call"
    assert cli.main(["status", str(root)]) == 0
    assert cli.main(["resume", str(root)]) == 0, capsys.readouterr().err
    metrics = json.loads((root / "epochs" / "0" / "eval-s0" / "metrics.json").read_text())
    assert metrics["benchmark"] == "next-call" and metrics["metric"] == "call_f1"
    assert cli.main(["log", str(root)]) == 0


def test_records_scored_under_the_old_name_keep_their_failure_families():
    # a trajectory a next-call evaluation wrote before issue 61: its error type names the family as "replay:<family>"
    for prefix in ("next-call:", "replay:"):
        trajectory = {"messages": [], "tools": [], "meta": {"feedback": {"error_type": f"{prefix}bad_arguments",
                                                                          "checker_message": "x differs"}}}
        assert primary_family(trajectory) == ("bad_arguments", "x differs")


# the key this cell had in a cache made before the rename (computed by the code at b1d151a, which
# still wrote "replay" into new keys): such a cell must still be found
KEY_UNDER_THE_OLD_NAME = "cd6dd9bb2f7bdd300e5ca361"


def test_a_new_quality_cell_of_next_call_is_keyed_by_its_name_and_an_old_cached_one_still_hits(tmp_path):
    corpus = (str(SHIPPED),)
    setting = Setting(benchmark="next-call", split="dev", tasks=None, train=TrainSpec(profile="test", base="tiny-random"),
                      seeds=(0,),
                      metric="call_f1", corpus=corpus, corpus_sha256=corpus_sha256(list(corpus)))
    cells = Cells(tmp_path / "cache", setting, ProcessExecutor())
    wild = rows_mod.held_out_train_dir(corpus, None, tmp_path / "cache")
    (row,) = rows_mod.table_rows(("rho0-wild",), wild, None, [], tmp_path / "cache", None,
                                 source_sha256=setting.corpus_sha256)
    key = cells.cell_key(row, 0)
    assert key != KEY_UNDER_THE_OLD_NAME and cells.cell_keys(row, 0) == (key, KEY_UNDER_THE_OLD_NAME)
    cells.setting = dataclasses.replace(setting, benchmark="replay")   # a setting by the old name: the same keys
    assert cells.cell_keys(row, 0) == (key, KEY_UNDER_THE_OLD_NAME)
    cells.setting = dataclasses.replace(setting, benchmark="bfcl-single")   # the benchmark is part of the key
    assert cells.cell_key(row, 0) != key and len(cells.cell_keys(row, 0)) == 1
    cells.setting = setting
    assert cells.cached(row, 0) is None
    old = tmp_path / "cache" / "cells" / KEY_UNDER_THE_OLD_NAME
    old.mkdir(parents=True)
    (old / "cell.json").write_text(json.dumps({"key": KEY_UNDER_THE_OLD_NAME, "seed": 0, "P": 0.5}))
    assert cells.cached(row, 0) == {"key": KEY_UNDER_THE_OLD_NAME, "seed": 0, "P": 0.5}   # a hit: not computed again
    new = tmp_path / "cache" / "cells" / key
    new.mkdir()
    (new / "cell.json").write_text(json.dumps({"key": key, "seed": 0, "P": 0.25}))
    assert cells.cached(row, 0)["key"] == key   # today's key first
    assert registry.OLD_NAMES == {"replay": "next-call"} and "replay" not in registry.names()

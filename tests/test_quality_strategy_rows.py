"""`bench quality --strategy DIR`: a researcher's own strategy directory as a row of the table, on
tiny real corpora (the first 40 bfcl-single train tasks), the `test` profile and five test tasks."""
import importlib.util
import json
import sys

import pytest
from conftest import ROOT, bench_quality, write_strategy

from base.files import sha256_files
from sandbox.strategy_files import strategy_files

pytestmark = pytest.mark.usefixtures("trained_once")

# keeps every other record: a strategy of the researcher's own, neither ρ0 nor a shipped reference
HALF = """
def curate(raw, ctx):
    kept = [r for i, r in enumerate(raw) if i % 2 == 0 and any(m["role"] == "assistant" for m in r["messages"])]
    sft = [{"id": r["id"], "messages": r["messages"], "tools": r.get("tools", []), "meta": {"origin": [r["id"]]}}
           for r in kept]
    return ctx.toolkit.Curated(sft=sft, rl=[], memory=[])
"""


def test_a_strategy_directory_is_a_row_paired_with_rho0_and_the_best_and_a_second_call_is_cached(
        quality_corpora, tmp_path, monkeypatch, capsys):
    mine = write_strategy(tmp_path / "halves", HALF)
    cache, results = tmp_path / "cache", tmp_path / "results"
    argv = ("--rows", "rho0-wild", "--seeds", "1", "--strategy", str(mine), "--results", str(results))
    assert bench_quality(quality_corpora, cache, *argv) == 0
    printed = capsys.readouterr().out
    doc = json.loads((cache / "report-test" / "quality.json").read_text())
    assert [r["id"] for r in doc["rows"]] == ["rho0-wild", "strategy:halves"]
    row = doc["rows"][1]
    assert not row.get("pending") and row["table"] == 1 and row["label"].startswith("strategy halves (")
    assert row["vs_rho0_wild"]["tasks"] == 5                      # paired over the same five test tasks
    assert row["vs_best"]["row"] == "rho0-wild" and doc["rows"][0]["vs_best"]["row"] == "strategy:halves"
    assert "strategy:halves: P " in printed and "vs ρ0 wild" in printed
    raw_files = sorted(results.glob("quality-bfcl-single-test-test-*.json"))
    assert len(raw_files) == 1 and f"raw result: {raw_files[0]}" in printed
    raw = json.loads(raw_files[0].read_text())
    assert raw["date"] and raw["command"].startswith("curateevo bench quality ") and "--strategy" in raw["command"]
    assert raw["commit"] is None or len(raw["commit"].removesuffix("+dirty")) == 40
    assert {r["id"]: r["strategy_sha256"] for r in raw["rows"]}["strategy:halves"] == sha256_files(strategy_files(mine))
    assert [r["id"] for r in raw["rows"]] == ["rho0-wild", "strategy:halves"] and raw["setting"]["tasks"] == 5
    spec = importlib.util.spec_from_file_location("leaderboard_reads", ROOT / "bench" / "leaderboard.py")
    leaderboard = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = leaderboard   # its dataclasses resolve their annotations through it
    spec.loader.exec_module(leaderboard)
    kind = leaderboard.kind_of(raw)                              # the leaderboard takes it as a quality table's row
    assert kind.name == "quality" and "strategy:halves" in kind.result(raw)
    cells = sorted(p.name for p in (cache / "cells").iterdir())

    def no_work(*args, **kwargs):
        raise AssertionError("a cached cell was computed again")

    monkeypatch.setattr("trainer.train.train", no_work)
    monkeypatch.setattr("environments.evaluate.evaluate_to_dir", no_work)
    monkeypatch.setattr("sandbox.curate.execute", no_work)
    monkeypatch.setattr("experiments.quality.cells.execute", no_work)
    assert bench_quality(quality_corpora, cache, *argv) == 0           # the second call: every cell from the cache
    assert json.loads((cache / "report-test" / "quality.json").read_text()) == doc
    assert sorted(p.name for p in (cache / "cells").iterdir()) == cells
    assert sorted(results.glob("*.json")) == raw_files                 # the same table is the same raw file


def test_a_directory_that_is_no_strategy_is_one_sentence_before_any_work(quality_corpora, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert bench_quality(quality_corpora, tmp_path / "cache", "--strategy", str(tmp_path / "empty"),
                         "--results", str(tmp_path / "results")) == 2
    err = capsys.readouterr().err
    assert "has no strategy.py" in err and err.count("\n") == 1
    twins = [write_strategy(tmp_path / d / "same", HALF) for d in ("a", "b")]
    assert bench_quality(quality_corpora, tmp_path / "cache", "--strategy", *map(str, twins)) == 2
    assert "both named 'same'" in capsys.readouterr().err
    nothing = write_strategy(tmp_path / "nothing", "def curate(raw, ctx):\n    return ctx.toolkit.Curated(sft=[], rl=[], memory=[])\n")
    assert bench_quality(quality_corpora, tmp_path / "cache", "--rows", "rho0-wild", "--strategy", str(nothing)) == 2
    err = capsys.readouterr().err
    assert f"--strategy {nothing} curates no record at all" in err and err.count("\n") == 1
    broken = write_strategy(tmp_path / "broken", "def curate(raw, ctx):\n    raise ValueError('no way')\n")
    assert bench_quality(quality_corpora, tmp_path / "cache", "--rows", "rho0-wild", "--strategy", str(broken)) == 2
    err = capsys.readouterr().err
    assert f"--strategy {broken}: its curation failed" in err and "no way" in err and err.count("\n") == 1
    assert not (tmp_path / "results").exists() and not (tmp_path / "cache" / "cells").exists()

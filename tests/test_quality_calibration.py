"""`bench quality --calibrate` on the `test` profile: the rows that must differ are trained and
scored through the real code path, the paired differences, the minimal detectable difference and
one verdict are written and cached, and `run` reads the calibration of its setting."""
import json
import shutil

import pytest
from conftest import bench_quality

from experiments.quality import CALIBRATION, calibration
from experiments.quality.poison import KINDS, poison
from corpora import load_corpus

pytestmark = pytest.mark.usefixtures("trained_once")   # the rows' tiny trainings, each trained once


def test_the_poisoned_copy_corrupts_every_record_one_way_seeded(quality_corpora):
    wild = load_corpus([str(quality_corpora[0] / "corpus.jsonl")]).records
    copy, kinds = poison(wild, seed=0)
    again, _ = poison(wild, seed=0)
    assert copy == again and [r["id"] for r in copy] == [r["id"] for r in wild]
    assert set(kinds.values()) <= set(KINDS) and len(set(kinds.values())) == 3
    changed = sum(a != b for a, b in zip(copy, wild))
    assert changed >= len(wild) - 1          # a lone record of its kind may have nothing to swap with
    for before, after in zip(wild, copy):
        kind = kinds[before["id"]]
        calls = lambda r: [c["function"] for m in r["messages"] for c in m.get("tool_calls") or []]
        if kind == "wrong_tool":
            assert [c["name"] for c in calls(after)] != [c["name"] for c in calls(before)]
        elif kind == "shuffled_arguments":
            assert [c["name"] for c in calls(after)] == [c["name"] for c in calls(before)]
        else:
            user = lambda r: next(m["content"] for m in r["messages"] if m["role"] == "user")
            assert user(after) != user(before) and calls(after) == calls(before)
    assert poison(wild, seed=1)[0] != copy


def test_calibration_trains_the_rows_that_must_differ_and_says_what_it_resolves(quality_corpora, tmp_path, capsys):
    """Computed as two shards in two caches (as processes or machines share a setting), merged by
    copying cells/, then reported without the adapters: each shard scored its cells' gold calls."""
    cache, other = tmp_path / "cache", tmp_path / "other"
    assert bench_quality(quality_corpora, cache, "--calibrate", "--seeds", "1", "--shard", "0/2") == 0
    assert bench_quality(quality_corpora, other, "--calibrate", "--seeds", "1", "--shard", "1/2") == 0
    shards = [sorted(c.name for c in (root / "cells").iterdir()) for root in (cache, other)]
    assert [len(s) for s in shards] == [3, 2] and not set(shards[0]) & set(shards[1])
    for cell in (other / "cells").iterdir():
        shutil.copytree(cell, cache / "cells" / cell.name)
    for root in (cache, other):
        assert len(list((root / "cells").glob("*/gold.json"))) == len(list((root / "cells").iterdir()))
        shutil.rmtree(root / "trainings")
    capsys.readouterr()
    assert bench_quality(quality_corpora, cache, "--calibrate", "--gold", "--seeds", "1", "--report-only") == 0
    printed = capsys.readouterr().out
    doc = json.loads((cache / "report-dev" / "quality.json").read_text())
    for row in doc["rows"]:   # --gold: what bench/rank_agreement.py resamples, from the cached gold.json
        assert len(row["per_task_P"]) == 5 and abs(sum(row["per_task_P"].values()) / 5 - row["P"]["value"]) < 1e-6
        assert row["per_task_gold"] and all(v < 0 for v in row["per_task_gold"].values())
        assert row["gold_ll"]["low"] <= row["gold_ll"]["value"] <= row["gold_ll"]["high"]
        if row["id"] != "rho0-wild":   # the continuous signal paired with ρ0 wild on the same tasks, as P is
            wild = next(r for r in doc["rows"] if r["id"] == "rho0-wild")["per_task_gold"]
            mine, vs = row["per_task_gold"], row["gold_vs_rho0_wild"]
            common = sorted(set(mine) & set(wild))
            assert vs["tasks"] == len(common) and vs["low"] <= vs["value"] <= vs["high"]
            assert abs(vs["value"] - sum(mine[t] - wild[t] for t in common) / len(common)) < 1e-5
    assert "**Gold-call log-likelihood**" in (cache / "report-dev" / "quality.md").read_text()
    assert [r["id"] for r in doc["rows"]] == list(CALIBRATION) and doc["setting"]["split"] == "dev"
    (path,) = (cache / "calibrations").iterdir()
    cal = json.loads(path.read_text())
    assert [(p["a"], p["b"]) for p in cal["pairs"]] == [(a, b) for a, b, _ in calibration.PAIRS]
    for p in cal["pairs"]:
        assert p["low"] <= p["value"] <= p["high"] and p["resolved"] == (p["low"] > 0 or p["high"] < 0)
    assert cal["sees_poison"] is (cal["pairs"][0]["low"] > 0)
    for rid in CALIBRATION:   # the low-variance signal beside P, per row and per pair
        assert cal["rows"][rid]["gold_ll"]["value"] < 0 and (cache / "cells").glob("*/gold.json")
    for p in cal["pairs"]:
        assert p["gold"]["low"] <= p["gold"]["value"] <= p["gold"]["high"]
    assert cal["gold_vs_P_spearman"]["rows"] == 5 and "Δ gold LL" in printed
    assert cal["minimal_detectable_difference"]["value"] > 0.5     # 5 tasks × 1 seed resolve nothing small
    assert cal["verdict"].startswith("calibration of test / ") and "clean from poisoned data" in cal["verdict"]
    # each pair says what a comparison on the same tasks resolves; the verdict gives their median
    assert all(0 <= p["mdd_paired"] for p in cal["pairs"]) and cal["paired_mdd"]["pairs"] == len(cal["pairs"])
    assert "on the same tasks (the loop's comparison" in cal["verdict"]
    assert cal["verdict"] in printed and "| clean vs poisoned (must differ) (oracle − poisoned) |" in printed

    note = calibration.run_note(cache, benchmark="bfcl-single", profile="test", base="tiny-random", tasks=60,
                                seeds=1, margin=0.0)
    assert note.startswith("instrument (") and "above the acceptance margin 0" in note
    assert "at least the" in calibration.run_note(cache, benchmark="bfcl-single", profile="test", base="tiny-random",
                                                  tasks=60, seeds=1, margin=1.0)
    assert "no calibration of cpu-small" in calibration.run_note(cache, benchmark="bfcl-single", profile="cpu-small",
                                                                 base="smollm2-135m", tasks=60, seeds=1, margin=0.0)

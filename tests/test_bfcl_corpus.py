"""The default raw corpora (`curateevo corpus build`) and the shipped splits."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

os.environ.setdefault("BFCL_PROJECT_ROOT", str(Path(tempfile.gettempdir()) / "curateevo-bfcl"))

import pytest  # noqa: E402

from base.registry import get_benchmark  # noqa: E402
from environments.bfcl import corpus_builder as cb  # noqa: E402
from environments.bfcl import multi_turn as mt  # noqa: E402
from environments.bfcl import single_turn as st  # noqa: E402
from environments.bfcl import splits  # noqa: E402
from environments.bfcl.splits import SPLIT_ORDER_TASKS as SAMPLE_TASKS  # noqa: E402  (the sample the splits were cut with)
from evolver.cli import main as cli_main  # noqa: E402
from corpora import load_corpus  # noqa: E402
from base.schemas import check_raw  # noqa: E402

MT_LIMIT = 10   # train tasks per multi-turn build in these tests (base first, then the others)
ST_LIMIT = 60


@pytest.fixture
def train_only(monkeypatch):
    """Make every way to a dev or test task raise."""
    train_numbers = set(splits.multi_turn_split("train"))
    train_single = {i for c in st.CATEGORIES for i in splits.single_turn_split(c, "train")}
    real_mt, real_st = splits.multi_turn_split, splits.single_turn_split

    def mt_split(split, path=None):
        if split != "train":
            raise AssertionError(f"the builder asked for the {split} split")
        return real_mt(split, path)

    def st_split(category, split, path=None):
        if split != "train":
            raise AssertionError(f"the builder asked for the {split} split")
        return real_st(category, split, path)

    monkeypatch.setattr(splits, "multi_turn_split", mt_split)
    monkeypatch.setattr(splits, "single_turn_split", st_split)
    for cls, name in ((mt.MultiTurnBenchmark, "_entry"), (mt.MultiTurnBenchmark, "_ground_truth")):
        real = getattr(cls, name)

        def guarded(self, tid, _real=real):
            if mt.parse_task_id(tid)[1] not in train_numbers:
                raise AssertionError(f"the builder read {tid}, which is not a train task")
            return _real(self, tid)
        monkeypatch.setattr(cls, name, guarded)
    for name in ("_entry", "_answer"):
        real = getattr(st.SingleTurnBenchmark, name)

        def guarded_st(self, tid, _real=real):
            if tid not in train_single:
                raise AssertionError(f"the builder read {tid}, which is not a train item")
            return _real(self, tid)
        monkeypatch.setattr(st.SingleTurnBenchmark, name, guarded_st)


def _build(benchmark, setting, seed=0):
    if benchmark == "bfcl":
        records, labels = [], {}
        for v in mt.VARIANTS:  # a few tasks of every variant
            r, lab, _ = cb.build("bfcl", setting, seed, variants=[v], limit=3)
            records += r
            labels.update(lab)
        return records, labels
    records, labels, _ = cb.build("bfcl-single", setting, seed, limit=ST_LIMIT)
    return records, labels


# ------------------------------------------------------------------------------ builders


@pytest.mark.parametrize("benchmark", ["bfcl", "bfcl-single"])
def test_labeled_corpus_is_executed_ground_truth_from_train_only(benchmark, train_only):
    records, labels = _build(benchmark, "labeled")
    assert records and labels == {}
    for rec in records:
        assert check_raw(rec) is None
        assert rec["outcome"] == {"success": True, "reward": 1.0}
        env = rec["meta"]["env"]
        assert env["task_id"] and env["variant"] and env["benchmark"] in ("bfcl_multi_turn", "bfcl_single_turn")
    if benchmark == "bfcl":
        assert {r["meta"]["env"]["variant"] for r in records} == set(mt.VARIANTS)
        rec = records[0]
        tool_msgs = [m for m in rec["messages"] if m["role"] == "tool"]
        assert tool_msgs and all(isinstance(m["content"], str) for m in tool_msgs)
        # every user turn is closed by a short assistant reply
        roles = [m["role"] for m in rec["messages"]]
        assert roles[-1] == "assistant" and not rec["messages"][-1].get("tool_calls")


@pytest.mark.parametrize("benchmark", ["bfcl", "bfcl-single"])
def test_wild_corpus_outcomes_are_the_checker_verdicts_and_labels_stay_outside(benchmark, train_only):
    records, labels = _build(benchmark, "wild")
    assert set(labels) == {r["id"] for r in records}
    assert len({r["id"] for r in records}) == len(records)
    bench = get_benchmark(benchmark)
    kinds = set()
    for rec in records:
        assert check_raw(rec) is None
        label = labels[rec["id"]]
        kinds.add(label["noise"])
        assert label["noise"] not in rec["id"] and "noise" not in rec["meta"]
        task = bench.make_task(rec["meta"]["env"]["task_id"])
        verdict = bench.score(task, rec["messages"])
        assert rec["outcome"]["success"] == verdict.success, (rec["id"], label)
        if label["noise"] in ("abandoned", "wrong_end_state", "wrong_type", "missing_required",
                              "hallucinated_function", "unparseable_call", "unwanted_call"):
            assert not verdict.success, label
        if label["noise"] in ("clean", "redundant_read", "off_task_chatter"):
            assert verdict.success, label
        if label["noise"] == "exact_duplicate":
            original = next(r for r in records if r["id"] == label["duplicate_of"])
            assert {**original, "id": None} == {**rec, "id": None}
        assert rec["meta"]["split"] == "train"
    assert len(kinds) >= 4, kinds


def test_wild_multi_turn_noise_is_made_by_real_execution():
    records, labels, _ = cb.build("bfcl", "wild", 0, variants=["base"], limit=40)
    by_kind = {}
    for rec in records:
        by_kind.setdefault(labels[rec["id"]]["noise"], []).append(rec)
    for kind in ("wrong_call_recovery", "malformed_arguments"):
        assert kind in by_kind, sorted(by_kind)
        for rec in by_kind[kind]:
            errors = [m for m in rec["messages"] if m["role"] == "tool" and m["content"].startswith("Error") or
                      m["role"] == "tool" and '"error"' in m["content"]]
            assert errors, rec["id"]


def test_builds_are_byte_deterministic_and_seeded(tmp_path):
    a = cb.write(tmp_path / "a", "bfcl", "wild", 3, limit=MT_LIMIT)
    b = cb.write(tmp_path / "b", "bfcl", "wild", 3, limit=MT_LIMIT)
    for name in (cb.CORPUS_FILE, cb.LABELS_FILE, cb.BUILD_FILE):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert a["corpus_sha256"] == b["corpus_sha256"]
    c = cb.write(tmp_path / "c", "bfcl", "wild", 4, limit=MT_LIMIT)
    assert c["corpus_sha256"] != a["corpus_sha256"]
    s1, _, _ = cb.build("bfcl-single", "wild", 0, limit=ST_LIMIT)
    s2, _, _ = cb.build("bfcl-single", "wild", 0, limit=ST_LIMIT)
    assert cb.render(s1) == cb.render(s2)
    loaded = load_corpus([tmp_path / "a" / cb.CORPUS_FILE])
    assert len(loaded.records) == a["records"]


def test_cli_corpus_build(tmp_path, capsys):
    out = tmp_path / "corpus"
    assert cli_main(["corpus", "build", "bfcl-single", "--setting", "labeled", "--out", str(out),
                     "--limit", "20", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "20 records" in text
    assert (out / "corpus.jsonl").is_file() and (out / "build.json").is_file()
    assert not (out / "noise_labels.json").exists()
    info = json.loads((out / "build.json").read_text())
    assert info["split"] == "train" and info["setting"] == "labeled"
    assert cli_main(["corpus", "build", "bfcl", "--setting", "wild", "--out", str(out),
                     "--categories", "nope", "--quiet"]) == 2


# ------------------------------------------------------------------------------ splits


def test_shipped_splits_equal_a_fresh_generation():
    assert splits.render(splits.build()) == splits.SPLITS_PATH.read_text(encoding="utf-8")


def test_multi_turn_splits_keep_groups_and_strata():
    doc = splits.load()["bfcl"]
    parts = {s: set(doc[s]) for s in ("train", "dev", "test")}
    assert sorted(parts["train"] | parts["dev"] | parts["test"]) == list(range(200))
    assert sum(map(len, parts.values())) == 200
    for group in splits.KNOWN_GROUPS:
        assert sum(1 for p in parts.values() if p & set(group)) == 1, group
    assert [tuple(g) for g in doc["groups"]] == sorted(splits.KNOWN_GROUPS)
    travel = set(range(150, 200))  # all TravelAPI scenarios
    assert parts["dev"] & travel and parts["test"] & travel
    for name, counts in doc["strata"].items():
        if sum(counts.values()) >= 7:
            assert counts["dev"] and counts["test"], name
    assert 130 <= len(parts["train"]) <= 145 and 27 <= len(parts["dev"]) <= 33


def test_sample_corpus_overlap_with_dev_and_test_is_reported():
    doc = splits.load()["bfcl"]
    reported = doc["sample_corpus_in_dev_test"]
    for s in ("dev", "test"):
        assert reported[s] == sorted(set(SAMPLE_TASKS) & set(doc[s]))
    # kept to the unavoidable: a handful, never most of the held-out travel scenarios
    assert len(reported["dev"]) + len(reported["test"]) <= 6


def test_the_train_only_guard_does_catch_dev_and_test_reads(train_only):
    dev_number = splits.load()["bfcl"]["dev"][0]
    with pytest.raises(AssertionError):
        get_benchmark("bfcl").tasks("dev")
    with pytest.raises(AssertionError):
        get_benchmark("bfcl").make_task(mt.task_id("base", dev_number))
    with pytest.raises(AssertionError):
        get_benchmark("bfcl-single").tasks("dev")
    dev_item = splits.load()["bfcl-single"]["categories"]["simple_python"]["dev"][0]
    with pytest.raises(AssertionError):
        get_benchmark("bfcl-single").make_task(dev_item)

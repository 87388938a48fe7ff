"""The tuning slice (bfcl-single split "tune") on which a profile's learning rates are chosen:
train-split tasks that neither the default corpus, dev nor test holds."""
from __future__ import annotations

import pytest

from base.errors import UserError
from environments.bfcl import splits
from base.registry import get_benchmark
from trainer.recipe import curation_budget, get_profile

TRAINED = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")


def test_the_tuning_slice_is_train_tasks_outside_dev_test_and_the_default_corpus():
    from environments.bfcl.corpus_builder import build

    bench = get_benchmark("bfcl-single", allow_test=True)
    tune = {t.id for t in bench.tasks("tune")}
    assert len(tune) == len(TRAINED) * splits.TUNE_PER_CATEGORY
    for category in TRAINED:
        ids = set(splits.tuning_slice(category))
        assert len(ids) == splits.TUNE_PER_CATEGORY and ids <= set(splits.single_turn_split(category, "train"))
    assert not tune & {t.id for t in bench.tasks("dev")} and not tune & {t.id for t in bench.tasks("test")}
    # the default corpus at the CPU profiles' budgets (what `run` and `bench quality` build) holds none
    for profile in ("cpu-small", "test"):
        records, _, _ = build("bfcl-single", "wild", 0, max_records=curation_budget(get_profile(profile))["sft_examples"])
        assert records and not tune & {r["meta"]["env"]["task_id"] for r in records}


def test_only_bfcl_single_has_a_tuning_slice():
    with pytest.raises(UserError, match="no tuning slice"):
        get_benchmark("bfcl").tasks("tune")
    assert splits.tuning_slice("live_simple") == []

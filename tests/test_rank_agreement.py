"""The rank agreement of a dev reading with test P (experiments/quality/rank.py, bench/rank_agreement.py):
Spearman's ρ with a bootstrap interval over tasks, the verdict against the issue's 0.8 bar, and
`bench quality --gold` writing the per-task scores it resamples (test_quality_calibration)."""
import random

from experiments.quality import rank


def doc(rows: dict[str, tuple[list[float], list[float] | None]]) -> dict:
    """A quality.json with per-task P (and gold LL) per row."""
    out = []
    for rid, (p, gold) in rows.items():
        entry = {"id": rid, "per_task_P": {f"t{i}": v for i, v in enumerate(p)}}
        if gold is not None:
            entry["per_task_gold"] = {f"g{i}": v for i, v in enumerate(gold)}
        out.append(entry)
    return {"rows": out}


def test_gold_that_orders_rows_as_test_p_does_ranks_at_one_where_a_noisy_dev_p_does_not():
    rng = random.Random(0)
    quality = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]     # each row's true success rate
    rows = [f"r{i}" for i in range(len(quality))]
    test = doc({r: ([float(rng.random() < q) for _ in range(400)], None) for r, q in zip(rows, quality)})
    dev_p = [0.5, 0.1, 0.6, 0.2, 0.4, 0.3, 0.0]          # dev P scrambles the order
    dev = doc({r: ([float(rng.random() < p) for _ in range(60)], [q - 1 + rng.gauss(0, 0.01) for _ in range(60)])
               for r, q, p in zip(rows, quality, dev_p)})
    out = rank.agreement(dev, test, resamples=300)
    assert out["rows"] == rows and out["dev_tasks"] == 60 and out["test_tasks"] == 400
    gold, p = out["dev_gold_ll"], out["dev_P"]
    assert gold["spearman"] == 1.0 and gold["low"] >= 0.8 and gold["low"] <= gold["spearman"] <= gold["high"]
    assert p["spearman"] < 0.5 and p["low"] <= p["spearman"] <= p["high"]
    assert "may decide acceptance" in out["verdict"]
    assert out["per_row"]["r6"]["test_P"] > out["per_row"]["r0"]["test_P"]
    text = rank.markdown(out)
    assert "| gold-call log-likelihood | +1.000 |" in text and out["verdict"] in text
    assert "60 dev tasks, 400 test tasks" in text
    # bench/rank_agreement.py records each reading's seeds (the loop reads dev at one)
    assert "60 dev tasks × 1 seed(s), 400 test tasks × 3 seed(s)" in rank.markdown({**out, "dev_seeds": 1, "test_seeds": 3})


def test_a_gold_reading_that_ranks_against_test_p_keeps_p_and_too_few_rows_are_said():
    test = doc({"a": ([1.0, 1.0, 0.0], None), "b": ([1.0, 0.0, 0.0], None), "c": ([0.0, 0.0, 0.0], None)})
    dev = doc({"a": ([1.0, 0.0], [-3.0, -3.0]), "b": ([0.0, 1.0], [-2.0, -2.0]), "c": ([0.0, 0.0], [-1.0, -1.0])})
    out = rank.agreement(dev, test, resamples=50)
    assert out["dev_gold_ll"]["spearman"] == -1.0
    assert "P stays the acceptance signal" in out["verdict"] and "at least 6" in out["verdict"]
    two = rank.agreement(doc({"a": ([1.0], [-1.0]), "b": ([0.0], [-2.0])}), doc({"a": ([1.0], None), "b": ([0.0], None)}))
    assert "at least 3 are needed" in two["verdict"] and "per_row" not in two
    assert "at least 3 are needed" in rank.markdown(two)


def test_rows_are_compared_on_the_tasks_every_row_scored():
    dev = doc({"a": ([1.0, 0.0, 1.0], [-1.0, -1.0]), "b": ([0.0, 0.0], [-2.0, -2.0, -9.0]), "c": ([0.0], [-3.0, -3.0])})
    test = doc({"a": ([1.0, 1.0], None), "b": ([1.0, 0.0], None), "c": ([0.0, 0.0], None)})
    out = rank.agreement(dev, test, resamples=20)
    assert out["dev_tasks"] == 1 and out["per_row"]["b"]["dev_gold_ll"] == -2.0   # g2 only b scored: left out

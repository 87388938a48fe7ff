"""The quality benchmark's report from cells (the cell.json format of experiments/quality/cells.py):
table rows, pending rows, the seed spread and the margin it implies, the minimal detectable
difference."""
import pytest

from base import paired
from experiments.quality import stats, table
from experiments.quality.cells import Row, Setting

CATEGORY = {**{f"simple_python_{i}": "simple_python" for i in range(20)},
            **{f"irrelevance_{i}": "irrelevance" for i in range(20)}}


def cell(seed: int, solved: set[str]) -> dict:
    scores = {t: float(t in solved) for t in CATEGORY}
    return {"seed": seed, "P": sum(scores.values()) / len(scores), "scores": scores, "category": CATEGORY}


def first(n: int, category: str) -> set[str]:
    return {f"{category}_{i}" for i in range(n)}


ROWS = [Row("rho0-wild", "ρ0 on the wild corpus (no curation)", {}, None),
        Row("oracle", "oracle: ρ0 on the records labelled clean", {}, None),
        Row("rho0-labeled", "ρ0 on the labeled corpus (clean reference)", {}, None),
        Row("agentrefine", "AgentRefine reference strategy", {}, None)]
ROWS.append(ROWS[0].ablated("no-memory"))
CELLS = {
    # seed 0 solves 8 of 40, seed 1 solves 12: P 0.2 and 0.3
    "rho0-wild": [cell(0, first(8, "simple_python")), cell(1, first(12, "simple_python"))],
    "oracle": [cell(0, first(12, "simple_python")), cell(1, first(16, "simple_python"))],
    "rho0-labeled": [cell(0, first(16, "simple_python")), cell(1, first(20, "simple_python"))],
    "agentrefine": [],   # not computed yet
    "rho0-wild no-memory": [cell(0, first(6, "simple_python")), cell(1, first(10, "simple_python"))],
}


@pytest.fixture(scope="module")
def doc():
    return table.summarize(ROWS, CELLS, Setting(tasks=40, seeds=(0, 1)), n_tasks=40)


def test_each_row_has_its_mean_interval_per_seed_p_and_categories(doc):
    wild, oracle, labeled, pending, no_memory = doc["rows"]
    assert no_memory["table"] == 2 and no_memory["label"] == "ρ0 on the wild corpus (no curation) w/o memory at evaluation"
    assert no_memory["vs_rho0_wild"]["value"] == pytest.approx(-0.05)
    assert wild["P"]["value"] == pytest.approx(0.25) and wild["per_seed_P"] == [0.2, 0.3]
    assert wild["P"]["low"] < 0.2 and wild["P"]["high"] > 0.3
    assert wild["per_category"]["irrelevance"]["value"] == 0.0
    assert wild["per_category"]["simple_python"]["value"] == pytest.approx(0.5)
    assert oracle["gap_recovered"]["value"] == pytest.approx(0.5)
    assert "gap_recovered" not in labeled and "gap_recovered" not in wild   # 1 and 0 by definition
    assert oracle["vs_rho0_wild"]["value"] == pytest.approx(0.1)
    assert pending == {"id": "agentrefine", "label": "AgentRefine reference strategy", "table": 1,
                       "ablations": [], "pending": True}


def test_the_markdown_table_shows_intervals_and_pending_rows(doc):
    text = table.markdown(doc)
    assert "| ρ0 on the wild corpus (no curation) | 25.0 [" in text
    assert "| AgentRefine reference strategy | pending |" in text
    assert "| 0 (reference) |" in text and "| 1 (reference) |" in text
    table2 = text.split("**Table 2 (ablations)**")[1]
    assert table2.index("| ρ0 on the wild corpus (no curation) |") < table2.index("w/o memory at evaluation |")
    assert "minimal detectable difference" in text and "measured seed spread 0.071" in text


def test_each_table_1_row_is_paired_with_the_oracle_the_bar_an_evolved_strategy_must_match(doc):
    wild, oracle, labeled, pending, no_memory = doc["rows"]
    assert labeled["vs_oracle"]["value"] == pytest.approx(0.1)    # 18 vs 14 of 40, seed means
    assert wild["vs_oracle"]["value"] == pytest.approx(-0.1)
    assert "vs_oracle" not in oracle and "vs_oracle" not in no_memory   # itself; Table 2 pairs with its full row
    text = table.markdown(doc)
    table1, table2 = text.split("**Table 2 (ablations)**")
    assert "| Δ vs oracle [95% CI] |" in table1 and "Δ vs oracle" not in table2
    assert "| 1 (reference) | 10.0 [" in table1          # ρ0 labeled − oracle, in points
    assert "| AgentRefine reference strategy | pending |" + " |" * 5 in table1   # as many cells as the header


def test_every_pair_of_table_1_rows_is_compared_and_the_report_says_which_p_tells_apart(doc):
    pairs = {(p["a"], p["b"]): p for p in doc["pairs"]}
    assert set(pairs) == {("oracle", "rho0-wild"), ("rho0-labeled", "rho0-wild"), ("rho0-labeled", "oracle")}
    assert pairs[("rho0-labeled", "rho0-wild")]["value"] == pytest.approx(0.2)      # 18 vs 10 of 40
    assert pairs[("rho0-labeled", "oracle")] == {**doc["rows"][2]["vs_oracle"], "a": "rho0-labeled",
                                                 "b": "oracle", "apart": pairs[("rho0-labeled", "oracle")]["apart"],
                                                 "apart_holm": pairs[("rho0-labeled", "oracle")]["apart_holm"]}
    for p in pairs.values():
        assert p["apart"] == (p["low"] > 0 or p["high"] < 0)
        assert p["apart_holm"] <= p["apart"] and 0 < p["p_two_sided"] <= 1
    assert pairs[("rho0-labeled", "rho0-wild")]["apart"]    # 8 more tasks solved on both seeds, none fewer
    text = table.markdown(doc).split("**Which Table 1 rows P tells apart**")[1]
    assert "| row − column | rho0-wild | oracle |" in text
    assert "| rho0-labeled | **+20.0 [" in text
    holm = sum(p["apart_holm"] for p in pairs.values())
    assert f"{sum(p['apart'] for p in pairs.values())} of 3 pairs told apart (each interval on its own); {holm} of " \
           "them also with Holm's correction for the 3 comparisons" in text
    assert pairs[("rho0-labeled", "rho0-wild")]["apart_holm"] and "| rho0-labeled | **+20.0 [+" in text
    assert text.count("]** †") == holm


def test_the_spread_is_the_sd_of_p_between_seeds_and_sets_the_acceptance_margin(doc):
    result = table.spread(doc)
    wild = result["rows"]["rho0-wild"]
    assert wild["sd"] == pytest.approx(0.0707107, abs=1e-6)   # sd of (0.2, 0.3)
    assert result["pooled_sd"] == pytest.approx(0.0707107, abs=1e-6)
    assert "rho0-wild: P per seed 0.200, 0.300; sd 0.071" in table.spread_text(result, doc)
    # every row gains 4 tasks from seed 0 to seed 1: all of the seed noise is shared, none is left
    # between two rows trained at the same seed
    assert result["shared"] == 1.0 and wild["margin_for_seeds"][2] == 0.0
    assert "shared by the 3 Table 1 rows at the same seed: 100% of the seed variance" in table.spread_text(result, doc)
    # one row alone: no shared part can be measured, the margin treats seeds as independent draws
    alone = table.summarize(ROWS[:1], {"rho0-wild": CELLS["rho0-wild"]}, Setting(tasks=40, seeds=(0, 1)), n_tasks=40)
    lone = table.spread(alone)
    assert lone["seed_effect"] is None and lone["rows"]["rho0-wild"]["margin_for_seeds"][2] == pytest.approx(
        paired.acceptance_margin(0.0707107, 2, 0.9), abs=1e-6)
    assert "not measured" in table.spread_text(lone, alone)


def test_the_minimal_detectable_difference_uses_the_measured_base_rate_and_spread(doc):
    m = doc["minimal_detectable_difference"]
    assert m["base_rate"] == pytest.approx(0.25) and m["seed_sd_measured"]
    # seed 1 solves 4 more tasks than seed 0 in every computed Table 1 row: the seed effect is all
    # shared, so two rows trained at the same seeds differ by none of it
    e = doc["seed_effect"]
    assert e["rows"] == ["oracle", "rho0-labeled", "rho0-wild"] and e["shared"] == 1.0 and m["shared"] == 1.0
    assert m["value"] == pytest.approx(stats.minimal_detectable_difference(40, 2, 0.25, 0.0707107, shared=1.0), abs=1e-6)
    assert m["value"] < stats.minimal_detectable_difference(40, 2, 0.25, 0.0707107)
    assert "100% of its variance shared by rows at the same seed" in table.mdd_sentence(doc)
    assert e["F"] is None and "every row moved alike between seeds" in table.mdd_sentence(doc)


def test_the_report_files_are_written_whole(doc, tmp_path):
    paths = table.write(doc, tmp_path / "out")
    assert paths["png"].read_bytes()[:4] == b"\x89PNG"
    assert paths["markdown"].read_text() == table.markdown(doc)


def test_a_table_with_nothing_computed_yet_is_still_a_well_formed_table():
    doc = table.summarize(ROWS, {r.id: [] for r in ROWS}, Setting(tasks=40, seeds=(0, 1)), n_tasks=40)
    rows = [line for line in table.markdown(doc).splitlines() if line.startswith("|")]
    assert len({line.count("|") for line in rows}) == 1
    assert doc["minimal_detectable_difference"]["value"] == pytest.approx(stats.minimal_detectable_difference(40, 2))


def test_a_table_2_row_is_paired_with_its_full_row_what_the_component_is_worth(doc):
    no_memory = doc["rows"][4]
    # full (ρ0 wild: 8 and 12 of 40) minus w/o memory (6 and 10): +2 tasks a seed, on both seeds
    assert no_memory["full_minus_this"]["value"] == pytest.approx(0.05)
    assert 0 <= no_memory["full_minus_this"]["low"] < 0.05 < no_memory["full_minus_this"]["high"]
    assert all("full_minus_this" not in r for r in doc["rows"][:4])
    table2 = table.markdown(doc).split("**Table 2 (ablations)**")[1].split("\n\n")[1]
    assert "| full − row [95% CI] |" in table2
    assert " | +5.0 [+" in table2.splitlines()[-1] and table2.splitlines()[-2].endswith(" — |")


def test_a_difference_is_split_into_the_tasks_that_want_a_call_and_those_that_want_none():
    """A row that declines more and calls worse gains overall: the split shows where (BFCL's
    irrelevance tasks want no call), for Δ vs ρ0, for full − row and for a strategy's Δ vs the best."""
    from experiments.quality import strategy_rows

    calls_worse = first(4, "simple_python") | first(10, "irrelevance")
    rows = [ROWS[0], ROWS[1], ROWS[0].ablated("no-memory")]
    cells = {"rho0-wild": [cell(0, first(8, "simple_python")), cell(1, first(8, "simple_python"))],
             "oracle": [cell(0, calls_worse), cell(1, calls_worse)],
             "rho0-wild no-memory": [cell(0, first(8, "simple_python") | first(2, "irrelevance"))] * 2}
    doc = table.summarize(rows, cells, Setting(tasks=40, seeds=(0, 1)), n_tasks=40)
    wild, oracle, no_memory = doc["rows"]
    assert oracle["vs_rho0_wild"]["value"] == pytest.approx(0.15)
    split = oracle["vs_rho0_wild_by_kind"]
    assert (split["calling"]["n"], split["declining"]["n"]) == (20, 20)
    assert split["calling"]["value"] == pytest.approx(-0.2) and split["calling"]["high"] < 0
    assert split["declining"]["value"] == pytest.approx(0.5) and split["declining"]["low"] > 0
    assert no_memory["full_minus_this_by_kind"]["calling"]["value"] == pytest.approx(0.0)
    assert no_memory["full_minus_this_by_kind"]["declining"]["value"] == pytest.approx(-0.1)
    text = table.markdown(doc)
    assert "**Calling and declining**" in text and "the 20 tasks that want a call" in text
    assert "| oracle: ρ0 on the records labelled clean | row − ρ0 wild | -20.0 [" in text
    scores = {r: table.row_scores(c) for r, c in cells.items()}
    best = strategy_rows.add_vs_best(doc, scores, CATEGORY)
    assert best == "oracle" and wild["vs_best_by_kind"]["calling"]["value"] == pytest.approx(0.2)
    # one kind of task only (another environment's categories): no split, no section
    only = {t: "simple_python" for t in CATEGORY}
    assert table.by_kind(scores["oracle"], scores["rho0-wild"], only) is None


def test_the_no_call_categories_are_the_ones_the_official_checker_scores_as_declines():
    from environments.bfcl.single_turn import check_calls
    from environments.bfcl.single_turn_data import CATEGORIES, NO_CALL

    assert set(NO_CALL) < set(CATEGORIES)
    for category in NO_CALL:
        assert check_calls(category, [], None, None)["valid"]
        assert not check_calls(category, [], [("f", {})], None)["valid"]

"""Docs that cannot drift: every figure the docs quote between generated-block markers equals what
bench/leaderboard.py makes of its raw file under bench/results/ or of the code's defaults, and the
check really fails on a copy of the tree where a figure, a raw file or a default was changed."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "leaderboard.py"
COPIED = ("README.md", "trainer", "docs", "bench", "evolver", "base", "sandbox", "corpora", "chat_format", "workspace",
          "environments", "experiments", "curation_strategies")


def _module():
    spec = importlib.util.spec_from_file_location("leaderboard_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # its dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    return module


def check(tree: Path) -> subprocess.CompletedProcess:
    """`bench/leaderboard.py --check` of TREE, with TREE's own code on the path (its defaults are read from it)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([sys.executable, str(tree / "bench" / "leaderboard.py"), "--check"], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the checkout's documents, raw results and code, free to tamper with."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "runs")
    for name in COPIED:
        source = ROOT / name
        (shutil.copytree(source, tmp_path / name, ignore=ignore) if source.is_dir()
         else shutil.copy2(source, tmp_path / name))
    return tmp_path


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{path}: {old!r} appears {text.count(old)} times"
    path.write_text(text.replace(old, new), encoding="utf-8")


def lines_of(result: subprocess.CompletedProcess) -> list[str]:
    return result.stderr.strip().splitlines()


def test_every_quoted_figure_and_default_in_the_checkout_agrees_with_its_source(capsys):
    assert _module().main(["--check"]) == 0, capsys.readouterr().err


def test_the_leaderboard_has_a_row_for_every_raw_file_with_its_date_command_and_commit():
    board = (ROOT / "docs" / "leaderboard.md").read_text(encoding="utf-8")
    rows = [line for line in board.splitlines() if line.startswith("| 20")]
    raws = sorted(p.name for p in (ROOT / "bench" / "results").glob("*.json"))
    assert sorted(re.search(r"\[([^\]]+\.json)\]", row).group(1) for row in rows) == raws
    for row in rows:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]
        date, _, result, command, commit, _ = cells
        assert re.fullmatch(r"20\d\d-\d\d-\d\d", date) and command.startswith("`") and commit and result, row


def quoted_suite(readme: str) -> tuple[str, str]:
    """The raw suite file the README quotes and the passed count it quotes from it."""
    found = re.search(r"<!-- gen raw:(suite-[^:]+\.json):passed\|n -->([\d,]+)<!-- /gen -->", readme)
    assert found, "the README quotes no suite figure"
    return found.group(1), found.group(2)


def test_the_readme_quotes_the_suite_and_the_default_margin_from_their_sources():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    name, quoted = quoted_suite(readme)
    suite = json.loads((ROOT / "bench" / "results" / name).read_text(encoding="utf-8"))
    assert quoted == f"{suite['passed']:,}"
    assert "<!-- gen margin -->0.030<!-- /gen -->" in readme
    assert "[docs/leaderboard.md](docs/leaderboard.md)" in readme


def test_a_figure_changed_in_a_document_fails_the_check_naming_its_line(tree: Path):
    name, quoted = quoted_suite((tree / "README.md").read_text(encoding="utf-8"))
    edit(tree / "README.md", f"{name}:passed|n -->{quoted}<", f"{name}:passed|n -->1,119<")
    result = check(tree)
    line = next(n for n, text in enumerate((tree / "README.md").read_text().splitlines(), 1) if "1,119" in text)
    assert result.returncode == 1
    assert lines_of(result) == [f"README.md:{line}: raw:{name}:passed|n reads '1,119', "
                                f"its source gives '{quoted}' (run bench/leaderboard.py)"]


def test_a_raw_result_changed_fails_every_document_that_quotes_it(tree: Path):
    raw = tree / "bench" / "results" / "main-job-default-quiet-2026-11-29.json"
    edit(raw, '"wall_s": 2724', '"wall_s": 2900')
    found = lines_of(check(tree))
    assert any(x.startswith("README.md:") and "45 min 24 s" in x and "48 min 20 s" in x for x in found), found
    assert any(x.startswith("docs/results/evolution.md:") and "wall_s|dur" in x for x in found), found
    assert any(x.startswith("docs/leaderboard.md:") for x in found), found   # its row's result


def test_a_default_changed_in_the_code_fails_the_documents_that_quote_it(tree: Path):
    edit(tree / "trainer" / "recipe.py", 'name="cpu-small", base="smollm2-135m", sft_max_steps=140,',
         'name="cpu-small", base="smollm2-135m", sft_max_steps=120,')
    edit(tree / "evolver" / "config.py", 'Flag("epochs, ρ0\'s included")] = 3', 'Flag("epochs, ρ0\'s included")] = 4')
    result = check(tree)
    found = lines_of(result)
    assert result.returncode == 1
    steps = [x for x in found if "profile:cpu-small:sft_max_steps reads '140', its source gives '120'" in x]
    assert {x.split(":")[0] for x in steps} == {"README.md", "trainer/README.md"}, found
    epochs = [x for x in found if "run:epochs reads '3', its source gives '4'" in x]
    assert {x.split(":")[0] for x in epochs} == {"README.md", "docs/running.md"}, found


def test_the_margin_quoted_is_the_one_the_code_derives(tree: Path):
    edit(tree / "evolver" / "acceptance.py", '("cpu-small", "smollm2-135m", "bfcl-single", 186): 0.0202',
         '("cpu-small", "smollm2-135m", "bfcl-single", 186): 0.0302')
    found = lines_of(check(tree))
    assert any(x.startswith("docs/running.md:") and "margin reads '0.030'" in x for x in found), found


def test_a_figure_written_into_the_readme_by_hand_fails_the_check(tree: Path):
    edit(tree / "README.md", "## Your own corpus\n", "## Your own corpus\n\nThe suite took 10 min 58 s.\n")
    found = lines_of(check(tree))
    assert len(found) == 1 and re.match(r"README\.md:\d+: the figure '10 min' is not generated", found[0]), found


def test_a_raw_file_without_its_provenance_fails_and_a_new_one_of_a_known_kind_becomes_a_row(tree: Path):
    results = tree / "bench" / "results"
    table = json.loads((results / "evolution-table2-test-cpu-small-2026-11-28.json").read_text(encoding="utf-8"))
    (results / "quality-mine-2026-12-01.json").write_text(json.dumps(table), encoding="utf-8")
    found = lines_of(check(tree))
    assert found == ["bench/results/quality-mine-2026-12-01.json: no command, commit (write them as top-level keys "
                     "of the file, or in bench/results/provenance.toml under [\"quality-mine-2026-12-01.json\"]; "
                     "\"—\" where unknown)"], found
    table.update(date="2026-12-01", command="curateevo bench quality --strategy mine", commit="abc1234",
                 what="my strategy on test")
    (results / "quality-mine-2026-12-01.json").write_text(json.dumps(table), encoding="utf-8")
    assert check(tree).returncode == 1   # the leaderboard lacks its row until it is regenerated
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, str(tree / "bench" / "leaderboard.py")], cwd=tree, env=env, check=True, timeout=300)
    assert check(tree).returncode == 0
    row = next(line for line in (tree / "docs" / "leaderboard.md").read_text().splitlines() if "quality-mine" in line)
    assert row.startswith("| 2026-12-01 | [my strategy on test](results/quality.md) | P run:evo4-dev186 30.8 [22.8, 39.4]")
    assert "`curateevo bench quality --strategy mine`" in row and "| abc1234 |" in row


def test_a_path_into_a_raw_file_reads_keys_list_items_and_items_by_field():
    module = _module()
    doc = {"rows": [{"id": "a", "P": {"value": 0.25, "low": 0.1, "high": 0.4}}], "runs": [{"wall_s": 61}]}
    assert module.FORMATS["ci"](module.walk(doc, "rows[id=a].P")) == "25.0 [10.0, 40.0]"
    assert module.FORMATS["dur"](module.walk(doc, "runs[0].wall_s")) == "1 min 1 s"
    assert [module._number(x) for x in (186, 1127, 0.3, 2e-4, 2.5e-5)] == ["186", "1,127", "0.3", "2e-4", "2.5e-5"]
    assert module.FORMATS["gib"](2366176) == "2.3"   # /usr/bin/time's KiB, written in GiB
    assert module.FORMATS["size_mib"](3036237824) == "2,896 MiB" and module.FORMATS["size_gib"](4605671083) == "4.29 GiB"


def test_a_setting_is_read_from_the_code_that_declares_it():
    module = _module()
    from sandbox.artifact_records import OutputCaps
    from sandbox.checker import SPLIT_BYTES
    assert module.default("const:sandbox.artifact_records:OutputCaps.max_records") == f"{OutputCaps.max_records:,}"
    assert module.default("const:sandbox.checker:SPLIT_BYTES|mib") == module._number(SPLIT_BYTES / 2**20)


def test_a_table_of_flat_records_keeps_their_order_or_the_columns_named(monkeypatch):
    module = _module()
    rows = [{"b": 2, "a": 1}, {"a": 3, "c": 4}]
    monkeypatch.setattr(module, "load", lambda name: {"epochs": rows})
    assert module.table("x.json", "epochs").splitlines()[0] == "| b | a | c |"
    named = module.table("x.json", "epochs|c,a").splitlines()
    assert named[0] == "| c | a |" and named[2:] == ["| — | 1 |", "| 4 | 3 |"]


def test_a_quality_table_shows_where_a_difference_is_when_the_raw_file_splits_it(monkeypatch):
    module = _module()
    d = {"value": 0.1, "low": 0.05, "high": 0.2}
    rows = [{"id": "rho0-wild", "label": "ρ0", "P": d},
            {"id": "x", "label": "x", "P": d, "vs_rho0_wild_by_kind": {"calling": d, "declining": {**d, "value": -0.1}}}]
    monkeypatch.setattr(module, "load", lambda name: {"rows": rows, "pairs": [{"a": "x", "b": "rho0-wild", **d}]})
    head, _, wild, x = module.quality_table("x.json").splitlines()
    assert head.endswith("| Δ vs ρ0 wild, calling tasks | Δ vs ρ0 wild, declining tasks |")
    assert wild.endswith("| — | — |") and x.endswith("| +10.0 [+5.0, +20.0] | -10.0 [+5.0, +20.0] |")
    monkeypatch.setattr(module, "load", lambda name: {"rows": rows[:1], "pairs": []})
    assert module.quality_table("x.json").splitlines()[0] == "| row | P [95% CI] | Δ vs ρ0 wild [95% CI] |"


def test_a_figure_written_into_a_docs_page_by_hand_fails_the_check_naming_its_line(tree: Path):
    page = tree / "docs" / "results" / "held-out.md"
    text = page.read_text(encoding="utf-8")
    page.write_text(text + "\nThe telecom run took 12 min 5 s and scored 31.2% [24.0, 40.1].\n", encoding="utf-8")
    line = len(page.read_text(encoding="utf-8").splitlines())
    found = lines_of(check(tree))
    assert found == [f"docs/results/held-out.md:{line}: the figure '12 min' is not generated (quote it between "
                     "<!-- gen … --> markers from its raw file, or link the leaderboard)"], found


def test_dates_in_file_names_and_headings_and_confidence_levels_are_not_figures(tree: Path):
    page = tree / "docs" / "results" / "held-out.md"
    page.write_text(page.read_text(encoding="utf-8") + "\n### A section (2026-12-06)\n\nRaw: "
                    "held-out-bfcl-120-seed0-epyc-cpu-small-2026-12-06.json, img/x-2026-12-06.png, each with "
                    "its 95% interval at 90% one-sided confidence.\n", encoding="utf-8")
    assert check(tree).returncode == 0, lines_of(check(tree))
    page.write_text(page.read_text(encoding="utf-8") + "Measured 2026-12-06.\n", encoding="utf-8")
    assert any("the figure '2026-12-06' is not generated" in x for x in lines_of(check(tree)))


def test_every_page_is_checked_none_exempt():
    module = _module()
    assert not hasattr(module, "PENDING") and not hasattr(module, "UNCONVERTED")   # no page is skipped
    pages = {p.relative_to(ROOT).as_posix() for p in module.documents()}
    assert {"docs/results/training.md", "docs/results/quality.md", "docs/results/instrument.md"} <= pages
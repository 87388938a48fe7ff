"""bench/paired_cells.py: rows of two `bench quality` reports paired over their common tasks."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / "bench" / "paired_cells.py"


def module():
    spec = importlib.util.spec_from_file_location("paired_cells", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def report(path: Path, per_task: dict, split="tune", seeds=(0,)) -> Path:
    p = sum(per_task.values()) / len(per_task)
    path.write_text(json.dumps({"setting": {"benchmark": "bfcl-single", "split": split, "seeds": list(seeds)}, "rows": [
        {"id": "run:x", "label": "run x", "P": {"value": p}, "per_task_P": per_task}]}))
    return path


def test_two_reports_rows_are_paired_per_task_and_counted_per_category(tmp_path):
    on = report(tmp_path / "on.json", {"irrelevance_1": 0.0, "irrelevance_2": 0.0, "multiple_1": 1.0, "multiple_2": 1.0})
    off = report(tmp_path / "off.json", {"irrelevance_1": 1.0, "irrelevance_2": 1.0, "multiple_1": 1.0, "multiple_2": 0.0})
    out = tmp_path / "pairs.json"
    assert module().main(["--pair", f"on − off={on}:run:x,{off}:run:x", "--command", "c", "--out", str(out)]) == 0
    [c] = json.loads(out.read_text())["comparisons"]
    assert c["difference"]["value"] == pytest.approx(-0.25) and c["changed_tasks"] == 3
    assert c["per_category"]["irrelevance"] == {"a": 0.0, "b": 2.0, "tasks": 2, "changed": 2}
    assert c["per_category"]["multiple"] == {"a": 2.0, "b": 1.0, "tasks": 2, "changed": 1}
    other = report(tmp_path / "test.json", {"irrelevance_1": 1.0}, split="test")
    with pytest.raises(SystemExit, match="different splits"):
        module().main(["--pair", f"x={on}:run:x,{other}:run:x", "--command", "c", "--out", str(tmp_path / "no.json")])
    with pytest.raises(SystemExit, match="no row 'run:y'"):
        module().main(["--pair", f"x={on}:run:y,{off}:run:x", "--command", "c", "--out", str(tmp_path / "no.json")])
    assert not (tmp_path / "no.json").exists()

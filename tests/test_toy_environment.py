"""The narrow environment seam: an environment that defines only `name` and `benchmark` (tasks with
split and category, episodes, scoring) runs through `curateevo eval` and a tiny `curateevo run`, and a
command that needs a capability it does not declare is refused in one sentence before any work."""
import json
from pathlib import Path

import pytest

from base.errors import UserError
from base import registry
from base.benchmark import Task, Verdict
from base.environment import require
from conftest import ROOT, TINY_MAX_NEW_TOKENS
from evolver import cli

ADD = {"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}


class ToyEpisode:
    def __init__(self, task):
        self.task, self.given = task, False

    def next_turn(self):
        if self.given:
            return None
        self.given = True
        return list(self.task.turns[0])

    def offered_tools(self):
        return [ADD]

    def execute(self, calls):
        return ["recorded"] * len(calls)


class ToyBenchmark:
    name = "toy"

    def __init__(self, allow_test=False):
        self.allow_test = allow_test

    def tasks(self, split, limit=None, categories=None):
        pairs = [(a, b) for a in range(3) for b in range(2)]
        return [Task(id=f"add_{a}_{b}", benchmark="toy", category="small" if a + b < 2 else "big", tools=[ADD],
                     turns=[[{"role": "user", "content": f"What is {a} plus {b}?"}]],
                     meta={"env": {"benchmark": "toy", "task_id": f"add_{a}_{b}"}, "max_steps_per_turn": 1, "split": split})
                for a, b in pairs if (a + b) % 2 == (split == "test")][:limit]

    def episode(self, task):
        return ToyEpisode(task)

    def score(self, task, messages):
        calls = [c["function"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
        _, a, b = task.id.split("_")
        ok = [(c["name"], json.loads(c["arguments"])) for c in calls] == [("add", {"a": int(a), "b": int(b)})]
        return Verdict(success=ok, reward=float(ok), turn_pass=[ok], feedback={"error_type": None if ok else "toy:wrong"})


class ToyEnvironment:
    name = "toy"

    def benchmark(self, **options):
        return ToyBenchmark(**options)


@pytest.fixture
def toy():
    registry.register("toy", f"{__name__}:ToyEnvironment")
    yield registry.get("toy")
    registry.ENVIRONMENTS.pop("toy", None)


def test_a_two_member_environment_is_declared_with_the_defaults(toy):
    assert not toy.declares("corpus") and not toy.declares("leakage") and toy.executable
    assert list(toy.leakage_rows()) == [] and toy.checker_rules() == () and toy.category_of("add_1_2") == "add_1"
    with pytest.raises(UserError, match=r"`corpus build` needs an environment that builds a raw corpus .* toy does not declare it"):
        toy.build_corpus(Path("x"), "wild", 0)
    with pytest.raises(UserError, match="state_match reward needs"):
        require(toy, "reward", "the state_match reward")


def test_eval_and_a_tiny_run_go_through_the_toy_environment(toy, tmp_path, capsys):
    out = tmp_path / "e"
    assert cli.main(["eval", "--benchmark", "toy", "--base", "tiny-random", "--out", str(out),
                     "--max-new-tokens", str(TINY_MAX_NEW_TOKENS)]) == 0
    doc = json.loads((out / "metrics.json").read_text())
    assert doc["benchmark"] == "toy" and len(doc["tasks"]) == 3 and set(doc["per_category"]) <= {"small", "big"}
    corpus = ROOT / "examples" / "corpora" / "glaive-toolcall-40.json"
    assert cli.main(["run", "--benchmark", "toy", "--corpus", str(corpus), "--profile", "test", "--base", "tiny-random",
                     "--epochs", "1", "--sandbox", "process", "--runs-dir", str(tmp_path / "runs"), "--name", "r",
                     "--max-new-tokens", str(TINY_MAX_NEW_TOKENS)]) == 0
    metrics = json.loads((tmp_path / "runs" / "r" / "epochs" / "0" / "eval-s0" / "metrics.json").read_text())
    assert metrics["benchmark"] == "toy" and metrics["tasks"] == ["add_0_0", "add_1_1", "add_2_0"]


def test_a_run_whose_dev_prompts_cannot_fit_the_cap_is_refused_before_its_directory_exists(tmp_path, capsys):
    corpus = ROOT / "examples" / "corpora" / "glaive-toolcall-40.json"
    code = cli.main(["run", "--benchmark", "bfcl-single", "--corpus", str(corpus), "--profile", "test", "--base", "tiny-random",
                     "--max-prompt-tokens", "40", "--runs-dir", str(tmp_path / "runs"), "--name", "r"])
    err = capsys.readouterr().err
    assert code == 2 and "prompts do not fit the prompt cap of 40 tokens" in err and "give --max-prompt-tokens" in err
    assert not (tmp_path / "runs" / "r").exists()

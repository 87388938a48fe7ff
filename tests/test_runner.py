"""The agent runner: lockstep batches by task id, turn and step handling, format errors, memory,
records; and the real BFCL benchmarks driven by oracle and silent policies."""
import json

import pytest

from trainer import memory as mem
from environments import metrics, runner
from base.benchmark import StepItem, Task, Verdict
from base.registry import get_benchmark
from environments.policies.scripted import OraclePolicy, ScriptedPolicy, SilentPolicy, conversation_key
from base.schemas import canonical_json, check_raw
from chat_format import chat_format as cf

TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add to the counter.",
                                           "parameters": {"type": "object", "properties": {"n": {"type": "integer"}},
                                                          "required": ["n"]}}}]


class CounterEpisode:
    def __init__(self, task):
        self.task, self.turn, self.total = task, -1, 0

    def next_turn(self):
        self.turn += 1
        return None if self.turn >= len(self.task.turns) else [dict(m) for m in self.task.turns[self.turn]]

    def offered_tools(self):
        return TOOLS

    def execute(self, calls):
        out = []
        for c in calls:
            if c["name"] != "add":
                out.append(f"Error during execution: name '{c['name']}' is not defined")
                continue
            self.total += json.loads(c["arguments"])["n"]
            out.append(str(self.total))
        return out


class CounterBenchmark:
    """Each turn asks to add a number; success when the counter ends at the sum asked."""

    name = "counter"

    def __init__(self, n_tasks=3, turns=2):
        self._tasks = [Task(id=f"t{i}", benchmark="counter", category="c" + str(i % 2), tools=TOOLS,
                            turns=[[{"role": "user", "content": f"task {i}: add {i + k + 1}"}] for k in range(turns)],
                            meta={"env": {"benchmark": "counter", "task_id": f"t{i}", "variant": "c"}})
                       for i in range(n_tasks)]

    def tasks(self, split, limit=None, categories=None):
        return self._tasks[:limit]

    def episode(self, task):
        return CounterEpisode(task)

    def score(self, task, messages):
        total, passes, turn = 0, [], -1
        for m in messages:
            if m["role"] == "user":
                turn += 1
                passes.append(False)
            for c in m.get("tool_calls") or []:
                total += json.loads(c["function"]["arguments"]).get("n", 0)
            if m["role"] == "tool" and turn >= 0:
                want = sum(int(t[0]["content"].split("add ")[1]) for t in task.turns[:turn + 1])
                passes[turn] = total == want
        ok = total == sum(int(t[0]["content"].split("add ")[1]) for t in task.turns) and len(passes) == len(task.turns)
        return Verdict(success=ok, reward=float(ok), turn_pass=passes, feedback={"total": total, "odd": {1, 2}})

    def step_items(self, task):
        return [StepItem(task_id=task.id, index=k, messages=[dict(t[0])], tools=TOOLS,
                         gold=[{"name": "add", "arguments": json.dumps({"n": int(t[0]["content"].split("add ")[1])})}],
                         meta={}) for k, t in enumerate(task.turns)]

    def judge_step(self, item, calls):
        return [(c["name"], json.loads(c["arguments"])) for c in calls] == \
               [(g["name"], json.loads(g["arguments"])) for g in item.gold]


def solver(messages, tools):
    """Adds what the last user message asks, then replies."""
    if messages[-1]["role"] != "user":
        return "Added."
    n = int(messages[-1]["content"].split("add ")[1])
    return cf.render_tool_call({"name": "add", "arguments": {"n": n}})


class Recording(ScriptedPolicy):
    def __init__(self, fn):
        super().__init__(fn)
        self.batches = []

    def generate(self, prompts, n=1, temperature=0.0, seed=None):
        self.batches.append([cf.render_prompt(m, t) for m, t in prompts])
        return super().generate(prompts, n, temperature, seed)


def test_episodes_run_in_fixed_lockstep_groups_by_task_id():
    bench = CounterBenchmark(n_tasks=3)
    policy = Recording(solver)
    records = runner.run_episodes(bench, bench.tasks("dev"), policy, batch_size=2, group=2)
    assert [r["id"] for r in records] == ["t0", "t1", "t2"]
    assert all(r["outcome"] == {"success": True, "reward": 1.0} for r in records)
    assert [len(b) for b in policy.batches] == [2, 2, 2, 2, 1, 1, 1, 1]   # group {t0,t1}, then {t2}
    # by default the policy gets at least runner.GROUP episodes at once (it batches them itself)
    default = Recording(solver)
    assert runner.run_episodes(bench, bench.tasks("dev"), default, batch_size=2) == records
    assert [len(b) for b in default.batches] == [3, 3, 3, 3] and runner.group_size(2) == runner.GROUP
    assert "task 0: add 1" in policy.batches[0][0] and "task 1: add 2" in policy.batches[0][1]
    r = records[0]
    assert [m["role"] for m in r["messages"]] == ["user", "assistant", "tool", "assistant"] * 2
    assert r["messages"][1]["tool_calls"][0]["id"] == "call_0_0_0" and r["messages"][2]["tool_call_id"] == "call_0_0_0"
    assert r["meta"]["turn_pass"] == [True, True] and r["meta"]["generations"] == 4 and r["meta"]["calls"] == 2
    assert r["meta"]["feedback"] == {"total": 3, "odd": [1, 2]}                # made JSON-safe
    assert r["task"] == "task 0: add 1" and r["source"] == "counter" and r["tools"] == TOOLS
    assert all(check_raw(rec) is None for rec in records)
    canonical_json(records)  # no NaN, only JSON values


def test_same_inputs_same_records_and_group_independence():
    bench = CounterBenchmark(n_tasks=5)
    a = runner.run_episodes(bench, bench.tasks("dev"), ScriptedPolicy(solver), batch_size=2)
    b = runner.run_episodes(bench, bench.tasks("dev"), ScriptedPolicy(solver), batch_size=2)
    assert canonical_json(a) == canonical_json(b)
    seeds = []

    class SeedSpy(ScriptedPolicy):
        def generate(self, prompts, n=1, temperature=0.0, seed=None):
            seeds.append(seed)
            return super().generate(prompts, n, temperature, seed)

    runner.run_episodes(bench, bench.tasks("dev"), SeedSpy(solver), batch_size=2, group=2, seed=7)
    first = list(seeds)
    seeds.clear()
    runner.run_episodes(bench, bench.tasks("dev")[:2], SeedSpy(solver), batch_size=2, group=2, seed=7)
    assert seeds == first[:len(seeds)]          # a group's seeds depend on its own task ids only


def test_format_error_is_kept_as_text_and_ends_the_turn():
    bench = CounterBenchmark(n_tasks=1)
    bad = '<tool_call>{"name": "add", "arguments": {"n": </tool_call>'
    records = runner.run_episodes(bench, bench.tasks("dev"), ScriptedPolicy(lambda m, t: bad))
    r = records[0]
    assert [m["role"] for m in r["messages"]] == ["user", "assistant", "user", "assistant"]
    assert r["messages"][1] == {"role": "assistant", "content": bad}
    assert [e["turn"] for e in r["meta"]["format_errors"]] == [0, 1]
    assert "not valid JSON" in r["meta"]["format_errors"][0]["error"]
    summary = metrics.summarize(records, [])["metrics"]
    assert summary["format_error_rate"] == 1.0 and summary["task_success"] == 0.0


def test_python_call_with_non_json_literal_is_a_format_error_not_a_crash():
    bench = CounterBenchmark(n_tasks=1, turns=1)
    records = runner.run_episodes(bench, bench.tasks("dev"), ScriptedPolicy(lambda m, t: "[add(n={1, 2})]"))
    assert records[0]["meta"]["format_errors"] and check_raw(records[0]) is None


def test_step_limit_force_terminates_the_episode_like_bfcl():
    bench = CounterBenchmark(n_tasks=1, turns=3)
    always = ScriptedPolicy(lambda m, t: cf.render_tool_call({"name": "add", "arguments": {"n": 0}}))
    r = runner.run_episodes(bench, bench.tasks("dev"), always, max_steps=3)[0]
    assert r["meta"]["step_limit_turn"] == 0 and r["meta"]["generations"] == 3 and r["meta"]["max_steps"] == 3
    assert sum(1 for m in r["messages"] if m["role"] == "user") == 1
    assert r["outcome"]["success"] is False


def test_task_max_steps_comes_from_the_task_and_is_only_lowered():
    task = CounterBenchmark(1).tasks("dev")[0]
    assert runner.task_max_steps(task) == runner.DEFAULT_MAX_STEPS
    one = Task(id="x", benchmark="b", category="c", tools=[], turns=[], meta={"max_steps_per_turn": 1})
    assert runner.task_max_steps(one, 5) == 1 and runner.task_max_steps(task, 5) == 5


def test_unknown_tool_is_called_and_answered_with_an_error():
    bench = CounterBenchmark(n_tasks=1, turns=1)
    policy = ScriptedPolicy(lambda m, t: "Ok." if m[-1]["role"] == "tool" else '[rm(path="/")]')
    r = runner.run_episodes(bench, bench.tasks("dev"), policy)[0]
    assert r["messages"][2]["content"].startswith("Error during execution: name 'rm'")
    assert check_raw(r) is not None  # honest record: the call names a tool that was not offered


def test_memory_hints_go_into_the_system_prompt():
    bench = CounterBenchmark(n_tasks=2, turns=1)
    index = mem.MemoryIndex([{"id": "hint-add", "key": "add numbers task", "content": "Call add once."}])
    policy = Recording(solver)
    records = runner.run_episodes(bench, bench.tasks("dev"), policy, memory=index)
    assert records[0]["messages"][0]["role"] == "system" and "Call add once." in records[0]["messages"][0]["content"]
    assert records[0]["meta"]["memory"] == ["hint-add"]
    assert "Call add once." in policy.batches[0][0]
    steps = runner.run_steps(bench, bench.tasks("dev"), Recording(solver), memory=index)
    assert all(s["correct"] == 1.0 for s in steps)


def test_episodes_and_steps_get_no_hint_about_a_tool_the_task_does_not_offer():
    bench = CounterBenchmark(n_tasks=1, turns=1)
    index = mem.MemoryIndex([{"id": "sig-mul", "key": "add numbers task", "content": "mul(n) multiplies.", "meta": {"tool": "mul"}},
                             {"id": "sig-add", "key": "add task", "content": "add(n) adds.", "meta": {"tool": "add"}}])
    policy = Recording(solver)
    record = runner.run_episodes(bench, bench.tasks("dev"), policy, memory=index)[0]
    assert record["meta"]["memory"] == ["sig-add"]          # mul is not offered: its signature stays out
    assert "mul(n)" not in policy.batches[0][0] and "add(n) adds." in policy.batches[0][0]
    steps_policy = Recording(solver)
    runner.run_steps(bench, bench.tasks("dev"), steps_policy, memory=index)
    assert "mul(n)" not in steps_policy.batches[0][0] and "add(n) adds." in steps_policy.batches[0][0]


def test_steps_judge_each_sample_and_count_format_errors():
    bench = CounterBenchmark(n_tasks=2)
    answers = iter([solver, lambda m, t: "<tool_call>oops</tool_call>"] * 10)
    policy = ScriptedPolicy(lambda m, t: next(answers)(m, t))
    rows = runner.run_steps(bench, bench.tasks("dev"), policy, samples=2, temperature=1.0, batch_size=3)
    assert [(r["task_id"], r["index"]) for r in rows] == [("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)]
    assert all(r["correct"] == 0.5 for r in rows)
    m = metrics.summarize([], rows)["metrics"]
    assert m["step_accuracy"] == 0.5 and m["format_error_rate"] == 0.5 and m["task_success"] is None


def test_metrics_are_deterministic_and_split_by_category():
    bench = CounterBenchmark(n_tasks=4)
    trajectories = runner.run_episodes(bench, bench.tasks("dev"), ScriptedPolicy(solver))
    trajectories[1]["outcome"]["success"] = False
    trajectories[1]["meta"]["turn_pass"] = [True, False]
    s = metrics.summarize(trajectories, [], {"episodes_s": 30.0})
    assert s["metrics"]["task_success"] == 0.75 and s["metrics"]["turn_pass"] == 0.875
    assert s["per_category"]["c1"]["task_success"] == 0.5 and s["per_category"]["c0"]["task_success"] == 1.0
    assert s["timing"]["episodes_per_minute"] == 8.0
    assert metrics.summarize(trajectories, []) == metrics.summarize(trajectories, [])


# ---------------------------------------------------------------------------------------------
# the real BFCL benchmarks


@pytest.fixture(scope="module")
def bfcl():
    return get_benchmark("bfcl")


def _oracle(bench, tasks):
    gold = lambda t: [[{"name": n, "arguments": a} for n, a, _ in turn] for turn in bench.gold_turns(t)]
    return OraclePolicy.for_tasks(bench, tasks, gold)


@pytest.mark.parametrize("category", ["base", "miss_func", "miss_param", "long_context"])
def test_bfcl_oracle_passes_and_silent_fails_every_multi_turn_category(bfcl, category):
    tasks = bfcl.tasks("dev", limit=3, categories=[category])
    oracle = runner.run_episodes(bfcl, tasks, _oracle(bfcl, tasks), batch_size=2)
    assert [r["outcome"]["success"] for r in oracle] == [True] * 3
    assert all(all(r["meta"]["turn_pass"]) for r in oracle)
    assert all(check_raw(r) is None for r in oracle)
    assert all(r["meta"]["env"]["variant"] == category for r in oracle)
    silent = runner.run_episodes(bfcl, tasks, SilentPolicy(), batch_size=2)
    assert [r["outcome"]["success"] for r in silent] == [False] * 3
    assert all(r["meta"]["feedback"]["error_type"] for r in silent)
    if category == "miss_func":   # the revealed function is recorded among the tools
        assert any(len(r["tools"]) > len(t.tools) for r, t in zip(oracle, tasks))


def test_bfcl_step_items_with_the_gold_action_are_all_right(bfcl):
    tasks = bfcl.tasks("dev", limit=2)
    items = runner.step_items(bfcl, tasks)
    table = {conversation_key(i.messages, i.tools): i.gold for i in items}
    gold_policy = ScriptedPolicy(lambda m, t: cf.render_assistant(
        {"content": "" if table[conversation_key(m, t)] else "Done.",
         "tool_calls": cf.to_openai_tool_calls(table[conversation_key(m, t)])}))
    rows = runner.run_steps(bfcl, tasks, gold_policy, items=items, batch_size=4)
    assert len(rows) == len(items) and all(r["correct"] == 1.0 for r in rows)
    silent = runner.run_steps(bfcl, tasks, SilentPolicy(), items=items, batch_size=4)
    closing = sum(1 for i in items if not i.gold)
    assert metrics.step_accuracy(silent) == pytest.approx(closing / len(items))
    assert metrics.step_accuracy_split(silent) == (0.0, 1.0)     # the floor a silent policy gets


def test_bfcl_single_oracle_and_silent():
    bench = get_benchmark("bfcl-single")
    tasks = [t for c in ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")
             for t in bench.tasks("dev", limit=2, categories=[c])]
    oracle = OraclePolicy.for_tasks(bench, tasks, lambda t: [[{"name": n, "arguments": a} for n, a in bench.gold(t.id)]])
    records = runner.run_episodes(bench, tasks, oracle, batch_size=4)
    assert all(r["outcome"]["success"] for r in records)
    assert all(r["meta"]["generations"] == 1 for r in records)   # single-turn: one answer, calls or not
    silent = runner.run_episodes(bench, tasks, SilentPolicy(), batch_size=4)
    assert [r["outcome"]["success"] for r in silent] == [t.category == "irrelevance" for t in tasks]

"""ACEBench agent_multi_turn: our Travel class answers as the official one on every pinned call sequence
(tests/fixtures/acebench/travel_official.json); our loop, execution and scoring give the official
routing, execution messages, milestones, end state and verdict on every pinned conversation
(multiturn_official.jsonl, both pinned by running the official code: multiturn_README.md), replayed
from the trajectory and driven live through the runner; every item reaches its ground truth; the
benchmark refuses the category without a user; bad answers and a failing user are scored failures;
and one conversation runs against a real local server (`transformers serve` over SmolLM2-135M)."""
from __future__ import annotations

import ast
import copy
import hashlib
import inspect
import json
import types
from pathlib import Path

import pytest

from base.errors import UserError
from environments import runner
from environments.acebench import data, multiturn
from environments.acebench.agent import rendered
from environments.acebench.benchmark import ACEBenchBenchmark
from environments.acebench.conversation import Conversation
from environments.acebench.multiturn import EXECUTION
from environments.acebench.scenarios.travel import Travel
from environments.policies.scripted import ScriptedPolicy
from environments.user_sim import FLAGS, USER_ERROR, UserEndpoint
from chat_format import chat_format as cf

FIXTURES = Path(__file__).parent / "fixtures" / "acebench"
CAT = "agent_multi_turn"


class ScriptedUser:
    """An endpoint whose user model answers with `lines` in order (then "finish conversation"), or raises."""

    model, max_tokens = "scripted-user", 16

    def __init__(self, lines=(), fail_at: int | None = None):
        self.lines, self.fail_at, self.asked = list(lines), fail_at, []

    def record(self):
        return {"model": self.model, "base_url": "http://scripted.invalid/v1", "max_tokens": self.max_tokens}

    def client(self):
        def create(**kwargs):
            self.asked.append(kwargs)
            if self.fail_at is not None and len(self.asked) > self.fail_at:
                raise ConnectionError("the user server went away")
            text = self.lines.pop(0) if self.lines else "finish conversation"
            return types.SimpleNamespace(choices=[types.SimpleNamespace(message=types.SimpleNamespace(content=text))])
        return types.SimpleNamespace(chat=types.SimpleNamespace(completions=types.SimpleNamespace(create=create)))


@pytest.fixture(scope="module")
def bench():
    return ACEBenchBenchmark(allow_test=True, user=ScriptedUser())


def _rows(name):
    return [json.loads(line) for line in (FIXTURES / name).read_text(encoding="utf-8").splitlines() if line.strip()]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def test_travel_agrees_with_the_official_class_on_every_pinned_sequence():
    doc = json.loads((FIXTURES / "travel_official.json").read_text(encoding="utf-8"))
    ours = {n: list(inspect.signature(m).parameters) for n, m in inspect.getmembers(Travel(), inspect.ismethod)
            if not n.startswith("_")}
    assert ours == doc["methods"]
    sequences = doc["sequences"]
    assert len(sequences) >= 250 and sum(len(s["calls"]) for s in sequences) >= 1000
    assert {s["id"] for s in sequences if s["kind"] == "milestone" and s["reaches_ground_truth"]} == {
        f"agent_multi_turn_{i}" for i in range(20, 30)}
    disagreements = []
    for seq in sequences:
        inst = Travel()
        inst._load_scenario({})
        results = []
        for call in seq["calls"]:
            try:
                value = getattr(inst, call["name"])(**copy.deepcopy(call["args"]))
            except Exception as exc:  # noqa: BLE001
                results.append({"raises": type(exc).__name__, "message": str(exc)})
                continue
            text = rendered(value)
            results.append({"type": type(value).__name__, **({"text": text} if len(text) <= 300 else {"sha": _digest(text)})})
        state = json.loads(json.dumps({"users": inst.users, "reservations": inst.reservations,
                                       "seats": [f["seats_available"] for f in inst.flights]}))
        if results != seq["results"] or _digest(json.dumps(state, sort_keys=True)) != seq["state_sha"] \
                or state != seq.get("state", state):
            disagreements.append((seq["kind"], seq["calls"]))
    assert not disagreements, f"{len(disagreements)} of {len(sequences)} disagree: {disagreements[:2]}"


def _trajectory(row):
    """The conversation as our trajectory: the opening, then the agent texts and user lines in the
    official order (execution messages are the replay's own)."""
    agent, user = list(row["agent"]), list(row["user"])
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": user.pop(0)}]
    for route in row["route"]:
        if route[0] == "a":
            messages.append({"role": "assistant", "content": agent.pop(0) if agent else "finish conversation"})
        elif route[0] == "u":
            messages.append({"role": "user", "content": user.pop(0) if user else "finish conversation"})
    return messages


def _official_text(observations):
    """An execution message as the official loop shows it: str() of its parsed results (an error: the
    error string's characters)."""
    if observations[:1] == [multiturn.ERROR]:
        return str(list(multiturn.ERROR))
    parsed = []
    for o in observations:
        try:
            parsed.append(json.loads(o))
        except ValueError:
            parsed.append(o)
    return str(parsed)


def test_the_loop_agrees_with_the_official_one_on_every_pinned_conversation(bench):
    rows = _rows("multiturn_official.jsonl")
    assert len(rows) >= 400 and {r["id"] for r in rows} == set(data.items(CAT))
    assert {r["valid"] for r in rows} == {True, False}
    disagreements = []
    for row in rows:
        messages = _trajectory(row)
        loop = multiturn.replay(multiturn.item_of(row["id"]), messages)
        verdict = bench.score(bench.make_task(row["id"], "test"), messages)
        got = (verdict.success, verdict.reward, loop.route, loop.milestones,
               [_digest(_official_text(o)) for o in loop.executions],
               _digest(json.dumps(loop.world.state(), sort_keys=True)))
        want = (row["valid"], row["process_accuracy"], row["route"], row["process"], row["executions_sha"],
                row["result_sha"])
        if got != want:
            disagreements.append((row["id"], row["kind"], [k for k, (a, b) in enumerate(zip(got, want)) if a != b]))
    assert not disagreements, f"{len(disagreements)} of {len(rows)} disagree: {disagreements[:5]}"


def _runner_reads_as_written(text: str) -> bool:
    """Whether the runner keeps this agent text as the official loop reads it: plain text, or calls
    whose rendering is the text itself and which the official loop sends to execution. (The runner
    reads calls more leniently: "[send_message(sender_name={'a': 1})]" is a call there, an execution
    step that fails here, while the official agent cannot render its dict and sends it to the user.)"""
    parsed = cf.parse_tool_calls(text, [])
    if parsed.error or not parsed.calls:
        return True
    return multiturn.agent.render([(c.name, dict(c.arguments)) for c in parsed.calls]) == text \
        and multiturn.routed_calls(text) is not None


def test_the_runner_drives_a_conversation_as_the_official_loop(bench):
    rows = [r for r in _rows("multiturn_official.jsonl") if all(_runner_reads_as_written(t) for t in r["agent"])]
    assert len(rows) >= 350
    disagreements = []
    for row in rows:
        user = ScriptedUser(row["user"])
        live = ACEBenchBenchmark(allow_test=True, categories=[CAT], user=user)
        task = live.make_task(row["id"], "test")
        said = iter(row["agent"])
        record = runner.run_episodes(live, [task], ScriptedPolicy(lambda m, t: next(said, "finish conversation")))[0]
        loop = multiturn.replay(multiturn.item_of(row["id"]), record["messages"])
        got = (record["outcome"]["success"], record["outcome"]["reward"], loop.route, loop.milestones)
        if got != (row["valid"], row["process_accuracy"], row["route"], row["process"]):
            disagreements.append((row["id"], row["kind"], got))
        if row["kind"] == "dialogue":   # the user model saw its own lines as system turns, the agent's as user turns
            roles = [m["role"] for m in user.asked[-1]["messages"]]
            assert roles[:3] == ["system", "user", "system"] and set(roles[3::2]) == {"user"}
    assert not disagreements, f"{len(disagreements)} of {len(rows)} disagree: {disagreements[:3]}"


def _gold_calls(tid):
    """The item's milestone calls, one message each, as tool calls: an apostrophe inside single quotes
    (merchant_name='Domino's', items 8-15) escaped. Item 6 cannot reach its ground truth on its
    milestones: its device starts logged out, the ground truth has it logged in, and no milestone
    logs it in; the device is logged in first there."""
    steps = []
    for stone in data.answer(tid)["mile_stone"]:
        body = stone.strip().replace("'Domino's'", '"Domino\'s"')
        tree = ast.parse(body, mode="eval").body
        steps.append([(ast.unparse(c.func), {k.arg: ast.literal_eval(k.value) for k in c.keywords})
                      for c in (tree.elts if isinstance(tree, ast.List) else [tree])])
    if tid == "agent_multi_turn_6":
        steps.insert(0, [("login_device", {})])
    return [[{"name": n, "arguments": json.dumps(a)} for n, a in step] for step in steps]


def test_every_item_reaches_its_ground_truth_through_the_episode(bench):
    verbatim = set()
    for tid in data.items(CAT):
        task = bench.make_task(tid, "test")
        episode = Conversation(task, ScriptedUser(["I need help."]))
        messages = list(episode.next_turn())
        assert messages[0]["role"] == "system" and messages[-1]["content"].endswith("user:I need help.\n")
        for k, calls in enumerate(_gold_calls(tid)):
            tool_calls = [{"id": f"c{k}_{j}", "type": "function", "function": c} for j, c in enumerate(calls)]
            messages.append({"role": "assistant", "content": "", "tool_calls": tool_calls})
            observations = episode.execute(calls)
            assert len(observations) == len(calls) and multiturn.ERROR not in observations, (tid, observations)
            messages += [{"role": "tool", "tool_call_id": t["id"], "content": o} for t, o in zip(tool_calls, observations)]
        verdict = bench.score(task, messages)
        assert verdict.success and verdict.reward == 1.0 and verdict.feedback["error_type"] is None, (tid, verdict.feedback)
        assert multiturn.agent.end_state_errors(episode.loop.world.state(), data.answer(tid)["ground_truth"]) == (None, [])
        # the milestone texts themselves, as text answers
        texts = [{"role": "user", "content": "open"}] + [{"role": "assistant", "content": s} for s in data.answer(tid)["mile_stone"]]
        if bench.score(task, texts).success:
            verbatim.add(int(tid.rsplit("_", 1)[1]))
    # verbatim, items 8-15 fail: "merchant_name='Domino's'" reads as no call (the message goes to the user)
    assert verbatim == set(range(30)) - {6, 8, 9, 10, 11, 12, 13, 14, 15}


def test_without_a_user_the_category_is_refused_and_nothing_else_changes():
    with pytest.raises(UserError) as err:
        ACEBenchBenchmark(categories=[CAT])
    assert str(err.value) == f"ACEBench {CAT} needs an LLM user simulator: give {FLAGS}"
    plain = ACEBenchBenchmark(allow_test=True)
    assert CAT not in plain.categories and plain.describe()["not_run"] == {CAT: "needs an LLM user"}
    with_user = ACEBenchBenchmark(allow_test=True, user=ScriptedUser())
    assert with_user.categories == plain.categories + (CAT,) and with_user.describe()["not_run"] == {}
    for split in ("dev", "test"):
        tasks = with_user.tasks(split)
        assert [t for t in tasks if t.category != CAT] == plain.tasks(split)
        ours = [t for t in tasks if t.category == CAT]
        assert ours and all(t.meta["split"] == split for t in ours)
    assert len(with_user.tasks("dev", categories=[CAT]) + with_user.tasks("test", categories=[CAT])) == 30
    task = with_user.make_task("agent_multi_turn_20", "test")
    with pytest.raises(UserError, match="needs an LLM user simulator"):
        plain.episode(task)
    system = task.turns[0][0]["content"]
    assert len(task.turns) == 1 and len(task.turns[0]) == 1 and "airline agent" in system and "mobile assistant" not in system
    assert task.meta["max_steps_per_turn"] == 20 and task.meta["env"]["user"]["model"] == "scripted-user"
    from environments.acebench.environment import ACEBenchEnvironment

    assert ACEBenchEnvironment.user_simulated is True


def test_malformed_answers_and_a_failing_user_are_scored_failures(bench):
    task = bench.make_task("agent_multi_turn_3", "test")
    episode = Conversation(task, ScriptedUser(["Please send a message for me."]))
    episode.next_turn()
    assert episode.execute([{"name": "send_message", "arguments": "{not json"}]) == [multiturn.ERROR]
    assert episode.execute(["garbage", None]) == [multiturn.ERROR] * 2
    assert episode.execute([{"name": "nope", "arguments": "{}"}]) == [multiturn.ERROR]
    assert episode.execute([{"name": "delete_message", "arguments": '{"message_id": "x", "extra": 1}'}]) == [multiturn.ERROR]
    assert episode.loop.world.state() == []   # no step completed: the official result lists no class
    episode.hear("[get_latest_message_id()]")   # a text answer the official loop sends to execution
    shown = episode.next_turn()
    assert shown[0]["name"] == EXECUTION and shown[0]["content"].startswith("execution:[")
    messages = [{"role": "user", "content": "open"},
                {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "send_message", "arguments": "{x"}}]},
                {"role": "assistant", "content": None}, {"role": "assistant", "content": "", "tool_calls": "bad"}]
    verdict = bench.score(task, messages)
    assert verdict.success is False and verdict.reward == 0.0 and verdict.turn_pass == [False]
    assert verdict.feedback["error_type"] == f"acebench:{CAT}:wrong_number_of_classes"
    assert bench.score(task, []).success is False
    # a user that fails: the episode ends with the reason as its closing, scored 0 whatever was done
    user = ScriptedUser(["Send 'Are you free tomorrow to have lunch with me?' to Frank, I am Grace."], fail_at=1)
    live = ACEBenchBenchmark(allow_test=True, categories=[CAT], user=user)
    said = iter(["Which message should I delete?"])
    record = runner.run_episodes(live, [live.make_task("agent_multi_turn_3", "test")],
                                 ScriptedPolicy(lambda m, t: next(said, "finish conversation")))[0]
    assert record["messages"][-1]["content"].startswith(USER_ERROR) and "went away" in record["messages"][-1]["content"]
    assert record["outcome"] == {"success": False, "reward": 0.0}
    assert record["meta"]["feedback"]["error_type"] == f"acebench:{CAT}:user_error"
    first = Conversation(task, ScriptedUser(fail_at=0))
    assert first.next_turn() is None and first.closing[0]["content"].startswith(USER_ERROR)


def test_a_conversation_with_a_real_user_server(model_server, monkeypatch):
    url, model = model_server
    monkeypatch.setenv("CURATEEVO_USER_API_KEY", "sk-never-recorded")
    user = UserEndpoint(model, url, max_tokens=16)
    bench = ACEBenchBenchmark(allow_test=True, categories=[CAT], user=user)
    task = bench.make_task("agent_multi_turn_20", "test")
    said = iter(["Could you tell me your user id and password?",
                 "[get_flight_details(origin='Beijing', destination='Shanghai')]",
                 "Which flight would you like?"])
    record = runner.run_episodes(bench, [task], ScriptedPolicy(lambda m, t: next(said, "finish conversation")))[0]
    messages = record["messages"]
    assert [m["role"] for m in messages[:2]] == ["system", "user"]
    replies = [m["content"] for m in messages[2:] if m["role"] == "user" and m.get("name") != EXECUTION]
    assert len(replies) >= 2 and all(isinstance(r, str) for r in replies) and any(r.strip() for r in replies)
    assert not any(r.startswith(USER_ERROR) for r in replies), replies
    assert messages[1]["content"].startswith("Below is the list of APIs you can use:")
    assert any(m.get("tool_calls") for m in messages)   # the flight search ran on the world
    assert record["outcome"]["success"] is False and 0.0 <= record["outcome"]["reward"] <= 1.0
    assert record["meta"]["feedback"]["steps"] == ["[get_flight_details(origin='Beijing', destination='Shanghai')]"]
    assert record["meta"]["env"]["user"] == {"model": model, "base_url": url, "max_tokens": 16}
    assert "sk-never-recorded" not in json.dumps(record)


def test_the_leakage_guard_knows_the_multi_turn_items():
    from base import registry

    rows = {r.task_id: r for r in registry.get("acebench").leakage_rows() if r.task_id.startswith(CAT)}
    assert len(rows) == 30 and all(r.texts == [data.items(CAT)[t]["question"]] for t, r in rows.items())

"""τ²-bench airline and retail with a simulated user: the package's `UserSimulator` over a real local
OpenAI-compatible server (`transformers serve` over the embedded SmolLM2-135M, trainer/serve.py), the
package's non-solo evaluator, and the sentences a wrong endpoint gets (environments/user_sim.py)."""
from __future__ import annotations

import json

import pytest

from base.errors import UserError
from environments import runner
from environments.policies.scripted import ScriptedPolicy
from environments.tau2 import conversation
from environments.tau2 import package as pkg
from environments.tau2.benchmark import Tau2Benchmark
from environments.user_sim import FLAGS, USER_ERROR, UserEndpoint, endpoint
from conftest import free_port


@pytest.fixture(scope="module")
def offline():
    """The user domains' tasks, built without a server (scoring never asks one)."""
    return Tau2Benchmark(allow_test=True, domains=("airline", "retail"), user=UserEndpoint("m", "http://localhost:9/v1"))


def gold_conversation(bench, task, stop: str | None = "###STOP###") -> list[dict]:
    """The opening, a user request, the gold actions run on the package's environment, an agent message
    that says every piece of information the task says must be communicated, the user's stop."""
    ptask = pkg.package_task(task.meta["env"]["variant"], task.meta["env"]["task_id"])
    calls = [{"name": a.name, "arguments": json.dumps(a.arguments)} for a in ptask.evaluation_criteria.actions or []]
    messages = bench.run_calls(task, [[c] for c in calls])
    messages.insert(len(task.turns[0]), {"role": "user", "content": "I need help with my reservation."})
    info = ptask.evaluation_criteria.communicate_info or []
    messages.append({"role": "assistant", "content": "Done. " + " ".join(str(i) for i in info)})
    if stop is not None:
        messages.append({"role": "user", "content": stop})
    return messages


def test_the_user_domains_split_and_open_as_the_package_does(offline):
    dev, test = offline.tasks("dev"), offline.tasks("test")
    assert (len(dev), len(test)) == (30 + 74, 20 + 40)
    assert not {t.id for t in dev} & {t.id for t in test}
    task = test[0]
    system, greeting = task.turns[0]
    assert "<policy>" in system["content"] and greeting == {"role": "assistant", "content": "Hi! How can I help you today?"}
    assert "done" not in [s["function"]["name"] for s in task.tools]
    assert task.meta["env"]["user"] == {"model": "m", "base_url": "http://localhost:9/v1", "max_tokens": 256}
    assert offline.step_items(task) == []


def test_every_gold_conversation_scores_one_and_its_breaks_score_below(offline):
    tasks = offline.tasks("test")   # the dev split's 104 score 1.0 too (~1 s a task here: left to the benchmark run)
    assert len(tasks) == 60   # none has an NL assertion in its reward basis (an LLM judge EvaluationType.ALL skips)
    for task in tasks:
        verdict = offline.score(task, gold_conversation(offline, task))
        assert verdict.reward == 1.0 and verdict.feedback["termination_reason"] == "user_stop", (task.id, verdict.feedback)
    writes = ("book_", "cancel_", "update_", "exchange_", "return_", "modify_")
    task = next(t for t in tasks if len(actions := pkg.package_task(t.meta["env"]["variant"], t.meta["env"]["task_id"])
                                        .evaluation_criteria.actions or []) >= 2 and actions[-1].name.startswith(writes))
    unfinished = offline.score(task, gold_conversation(offline, task, stop=None))
    assert unfinished.reward == 0 and unfinished.feedback["termination_reason"] == "max_steps"
    failed = offline.score(task, gold_conversation(offline, task, stop=f"{USER_ERROR} APIConnectionError: gone"))
    assert failed.reward == 0 and failed.feedback["termination_reason"] == "user_error"
    assert "APIConnectionError" in failed.feedback["user_error"]
    messages = gold_conversation(offline, task)
    last_call = max(i for i, m in enumerate(messages) if m.get("tool_calls"))   # the gold's last write
    dropped = offline.score(task, messages[:last_call] + messages[last_call + 2:])
    assert dropped.reward < 1 and dropped.feedback["error_type"].startswith("tau2:")


def test_user_domains_without_an_endpoint_name_the_flags():
    with pytest.raises(UserError) as err:
        Tau2Benchmark(domains=("airline",))
    assert str(err.value) == f"tau2 airline needs an LLM user simulator: give {FLAGS}"
    assert Tau2Benchmark().domains == ("telecom",)
    assert endpoint(None, None) is None
    with pytest.raises(UserError, match="needs both"):
        endpoint("m", None)
    with pytest.raises(UserError, match="not an http"):
        endpoint("m", "localhost:8000")


def test_a_wrong_endpoint_gets_one_sentence(model_server):
    url, model = model_server
    down = UserEndpoint(model, f"http://localhost:{free_port()}/v1")
    with pytest.raises(UserError, match=r"^no server answers at --user-base-url .*: start one"):
        down.check()
    with pytest.raises(UserError, match=r"does not serve --user-model 'nope' \(it serves: "):
        UserEndpoint("nope", url).check()
    with pytest.raises(UserError, match=r"/models is not found: the base URL .* usually ends in /v1"):
        UserEndpoint(model, url.removesuffix("/v1") + "/v2").check()
    UserEndpoint(model, url).check()


def test_an_airline_conversation_with_a_real_server(model_server, monkeypatch):
    url, model = model_server
    monkeypatch.setenv("CURATEEVO_USER_API_KEY", "sk-never-recorded")
    # three user turns, not the product's 15: each is a prefill of the airline policy on one CPU thread
    monkeypatch.setattr(conversation, "MAX_USER_TURNS", 3)
    user = UserEndpoint(model, url, max_tokens=12)
    bench = Tau2Benchmark(allow_test=True, domains=("airline",), user=user)
    task = bench.tasks("test", limit=1)[0]
    said = iter(["Could you tell me your user id?", "Thank you, anything else?"])
    policy = ScriptedPolicy(lambda messages, tools: next(said, "Goodbye."))
    record = runner.run_episodes(bench, [task], policy)[0]
    roles = [m["role"] for m in record["messages"]]
    assert roles[:3] == ["system", "assistant", "user"] and roles.count("user") >= 3
    users = [m["content"] for m in record["messages"] if m["role"] == "user"]
    assert all(isinstance(u, str) for u in users) and any(u.strip() for u in users)
    assert record["outcome"]["reward"] == 0.0
    assert record["meta"]["feedback"]["termination_reason"] in ("max_steps", "user_stop")
    assert record["meta"]["env"]["user"] == {"model": model, "base_url": url, "max_tokens": 12}
    assert "sk-never-recorded" not in json.dumps(record)

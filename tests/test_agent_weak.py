"""The code agent against a real weak model (the local `transformers serve` over SmolLM2-135M): what it
does — replies with no command block, a conversation past its context window — ends the revision as
rejected with its reason, in the words the propose stage journals; the proposer returns, it never raises."""
import json
from types import SimpleNamespace

from evolver.proposers.agent import AgentLimits
from evolver.propose import refused_reasons

from test_agent import executor, make, parent  # noqa: F401  (fixtures)


def test_a_weak_real_agent_is_rejected_with_its_reasons(model_server, executor, parent, tmp_path):  # noqa: F811
    url, model = model_server
    proposer, brief, validate, llm = make(SimpleNamespace(openai_url=url), executor, parent, tmp_path,
                                          limits=AgentLimits(step_limit=2, repairs=1), model=model, max_tokens=24)
    outcome = proposer.revise("effectiveness", brief, validate, tmp_path / "out")
    assert outcome.files is None and not outcome.budget_exhausted
    assert sum(a.get("model_calls", 0) for a in outcome.attempts) == llm.usage()["calls"] <= 2
    # greedy decoding: 24 tokens a call never make a submitted edit, so the step limit ends the revision
    assert refused_reasons(outcome.attempts) == ["the agent stopped without submitting (LimitsExceeded)"]
    trajectory = json.loads((tmp_path / "out" / "effectiveness" / "attempt-0.traj.json").read_text())
    replies = [m for m in trajectory["messages"] if m["role"] == "assistant"]
    assert replies and all(len(m["content"]) < 400 for m in replies), "each reply stopped at 24 tokens"
    assert llm.usage()["cut"] >= 1 and llm.usage()["unpriced"]


def test_an_agent_prompt_past_the_window_ends_the_revision_not_the_run(model_server, executor, parent, tmp_path):  # noqa: F811
    url, model = model_server
    proposer, brief, validate, llm = make(SimpleNamespace(openai_url=url), executor, parent, tmp_path,
                                          model=model, max_tokens=24, context_window=512)
    outcome = proposer.revise("effectiveness", brief, validate, tmp_path / "out")
    assert outcome.files is None and outcome.attempts[-1]["exit_status"] == "ContextExceeded"
    assert llm.usage()["calls"] == 0, "nothing was sent"
    assert refused_reasons(outcome.attempts)[0].endswith("context window of 512 tokens (the llm.context_window setting)")

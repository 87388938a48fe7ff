"""The code agent proposer: mini-swe-agent's DefaultAgent over our LLM layer (real HTTP to a
scripted server) with its commands in the Docker sandbox, and the host's validation of what it
leaves behind. Hostile or broken agents are rejected; the proposer returns, it never raises."""
import json
from pathlib import Path

import pytest

from evolver.proposers.agent import AgentLimits, AgentProposer, code_fault, stats_summary
from evolver.llm import LLM, LLMConfig
from evolver.candidate import artifact_hashes, check_candidate
from evolver.proposers.brief import Brief
from corpora import load_corpus
from sandbox.curate import execute
from sandbox.docker_executor import DockerExecutor, docker_client
from sandbox.executor import PROJECT_ROOT
from workspace.repository import strategy_files

from llm_server import llm_server  # noqa: F401  (fixture)

SEED = PROJECT_ROOT / "curation_strategies" / "seed"
SUBMIT = "printf 'COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\\nHalve the clean RL steps.\\nFiles: strategy.py\\n'"
EDIT = ("cp /opt/curateevo/curation_strategies/planned/strategy.py strategy.py && "
        "sed -i 's/steps = tk.tool_call_steps(trajectory)$/steps = tk.tool_call_steps(trajectory)[::2]/' strategy.py")


def bash(command: str, thought: str = "Next step.") -> str:
    return f"{thought}\n\n```bash\n{command}\n```\n"


@pytest.fixture(scope="module")
def executor():
    executor = DockerExecutor(docker_client())
    executor.image  # builds or finds the sandbox image
    return executor


@pytest.fixture(scope="module")
def parent(executor, sample_corpus, tmp_path_factory):
    """ρ0 and the hashes of its artifacts on the sample corpus."""
    corpus = load_corpus([str(sample_corpus)])
    files = {**strategy_files(SEED), "inputs/failed_points.json": b"[]\n", "inputs/params.json": b'{"lambda": 0.3}\n'}
    out = tmp_path_factory.mktemp("parent") / "out"
    execute(files, corpus, out, executor=executor)
    return corpus, files, artifact_hashes(out)


def make(server, executor, parent, tmp_path, *, limits=AgentLimits(step_limit=8, repairs=0), signals=None, score=None,
         **config):
    corpus, files, hashes = parent
    llm = LLM(LLMConfig.from_mapping({"provider": "openai", "model": "scripted", "base_url": server.openai_url,
                                      "max_retries": 2, **config}), tmp_path / "llm")
    proposer = AgentProposer(llm, executor, limits)
    brief = Brief(files=files, failed_points=[{"family": "bad_arguments", "count": 3, "task_ids": ["t1", "t2"],
                                               "failed_point": "wrong argument types", "evidence": "x='3'",
                                               "curation_hint": "mask corrected calls"}],
                  signals=signals or {}, curation_stats={"cost_train": 400, "C": 0.42, "counts": {"sft.jsonl": 48}}, lam=0.3,
                  rejected_edits=[], history=[], corpus=corpus, seed=0, score=score)

    def validate(candidate):
        out = tmp_path / "dry-runs" / str(len(list((tmp_path / "dry-runs").glob("*"))) if (tmp_path / "dry-runs").exists() else 0)
        return check_candidate(candidate, corpus, executor, hashes, out, seed=0, n_ref=1e5, timeout_s=120)[0]

    return proposer, brief, validate, llm


def test_an_agent_edit_is_validated_and_becomes_the_revision(llm_server, executor, parent, tmp_path):
    llm_server.script(bash("sed -n 1,20p strategy.py; head -c 300 context/corpus_sample.jsonl", "Read first."),
                      bash(EDIT, "Send half of the clean steps to RL."), bash("python3 -m sandbox.dry_run"), bash(SUBMIT))
    proposer, brief, validate, llm = make(llm_server, executor, parent, tmp_path)
    outcome = proposer.revise("effectiveness", brief, validate, tmp_path / "evolve")
    assert outcome.files is not None, outcome.attempts
    assert b"steps = tk.tool_call_steps(trajectory)[::2]" in outcome.files["strategy.py"]
    assert set(outcome.files) == {"strategy.py"}
    assert outcome.message.startswith("effectiveness: Halve the clean RL steps.")
    # the agent saw the real files and the real dry run
    seen = [r.messages[-1]["content"] for r in llm_server.requests]
    assert "def curate(raw, ctx)" in seen[1] and '"messages"' in seen[1]
    assert "DRY RUN OK" in seen[3]
    # the prompts are ours: failed points, profile and λ reach the agent
    first = llm_server.requests[0].messages
    assert "wrong argument types" in first[1]["content"] and "C = 0.4200" in first[1]["content"]
    assert (tmp_path / "evolve" / "effectiveness" / "attempt-0.traj.json").is_file()
    assert llm.usage()["calls"] == 4 and outcome.attempts[-1]["validated"] is True


def test_a_failed_validation_goes_back_to_the_agent(llm_server, executor, parent, tmp_path):
    llm_server.script(bash("echo '# tidier' >> strategy.py"), bash(SUBMIT),
                      lambda req: bash(EDIT) if "only comments" in req.messages[1]["content"] else "the error was not shown",
                      bash(SUBMIT))
    proposer, brief, validate, _ = make(llm_server, executor, parent, tmp_path, limits=AgentLimits(step_limit=8, repairs=1))
    outcome = proposer.revise("effectiveness", brief, validate, tmp_path / "evolve")
    assert outcome.files is not None, outcome.attempts
    assert [a["validated"] for a in outcome.attempts] == [False, True]
    assert "only comments" in outcome.attempts[0]["error"]


HOSTILE = {
    "garbage output": (["I would change the filters.", "Still thinking, no command.", "{not a command}"], "RepeatedFormatError"),
    "a file outside the strategy": ([bash("echo hi > notes.txt"), bash(SUBMIT)], "outside the strategy files"),
    "a host-owned input edited": ([bash("echo [{}] > inputs/failed_points.json"), bash(SUBMIT)], "host-owned"),
    "the context deleted": ([bash("rm context/rejected.json"), bash(SUBMIT)], "deleted"),
    "a write into .git hooks": ([bash("mkdir -p .git/hooks && printf '#!/bin/sh\\nid\\n' > .git/hooks/post-commit"), bash(SUBMIT)], ".git"),
    "a symlink": ([bash("ln -s /etc/passwd helper.py"), bash(SUBMIT)], "symbolic link"),
    "a comment-only diff": ([bash("sed -i '1i # reformatted' strategy.py"), bash(SUBMIT)], "only comments"),
    "a strategy that crashes the dry run": ([bash("echo 'raise RuntimeError(\"boom\")' >> strategy.py"), bash(SUBMIT)], "boom"),
    "an edit that changes no artifact": ([bash("sed -i 's/tags=\\[\"seed\"\\]/tags=[\"seed\"] /' strategy.py && sed -i '1i X = 1' strategy.py"),
                                          bash(SUBMIT)], "byte-identical"),
    "a syntax error": ([bash("echo 'def broken(:' >> strategy.py"), bash(SUBMIT)], "does not compile"),
    "an agent that never submits": ([bash("ls")] * 5, "LimitsExceeded"),
}


@pytest.mark.parametrize("case", HOSTILE, ids=list(HOSTILE))
def test_hostile_or_broken_agents_are_rejected(case, llm_server, executor, parent, tmp_path):
    replies, expected = HOSTILE[case]
    llm_server.script(*replies)
    proposer, brief, validate, _ = make(llm_server, executor, parent, tmp_path, limits=AgentLimits(step_limit=3, repairs=0))
    outcome = proposer.revise("effectiveness", brief, validate, tmp_path / "evolve")
    assert outcome.files is None
    last = outcome.attempts[-1]
    assert expected in f"{last.get('exit_status')} {last.get('error')}", last
    assert not (Path(tmp_path) / "strategy").exists()


@pytest.mark.parametrize("fault", ["500", "timeout"])
def test_a_failing_server_rejects_the_revision_and_returns(fault, llm_server, executor, parent, tmp_path):
    if fault == "500":
        llm_server.fail(500, times=10)
    else:
        llm_server.stall(3.0, times=10)
    proposer, brief, validate, _ = make(llm_server, executor, parent, tmp_path, timeout_s=0.5)
    outcome = proposer.revise("effectiveness", brief, validate, tmp_path / "evolve")
    assert outcome.files is None and outcome.attempts[-1]["exit_status"] == "LLMError"
    assert len(llm_server.requests) == 3   # the first try and max_retries = 2


def test_rate_limits_are_waited_out(llm_server, executor, parent, tmp_path):
    llm_server.fail(429, times=2, retry_after=0)
    llm_server.script(bash(EDIT), bash(SUBMIT))
    proposer, brief, validate, _ = make(llm_server, executor, parent, tmp_path)
    assert proposer.revise("efficiency", brief, validate, tmp_path / "evolve").files is not None


def test_a_spent_budget_stops_proposing(llm_server, executor, parent, tmp_path):
    llm_server.script(bash("ls"), bash("ls"))
    proposer, brief, validate, _ = make(llm_server, executor, parent, tmp_path, budget_tokens=50)
    outcome = proposer.revise("effectiveness", brief, validate, tmp_path / "evolve")
    assert outcome.files is None and outcome.budget_exhausted
    assert len(llm_server.requests) == 0   # the system prompt alone is over the budget: no call was made


def test_no_key_reaches_the_sandbox_the_prompts_or_the_files(llm_server, executor, parent, tmp_path, monkeypatch):
    canary = "sk-canary-agent-5f3a9"
    monkeypatch.setenv("OPENAI_API_KEY", canary)
    monkeypatch.setenv("ANTHROPIC_API_KEY", canary + "-anthropic")
    llm_server.script(bash("env; cat /proc/self/environ | tr '\\0' '\\n'"), bash(EDIT), bash(SUBMIT))
    proposer, brief, validate, _ = make(llm_server, executor, parent, tmp_path)
    assert proposer.revise("effectiveness", brief, validate, tmp_path / "evolve").files is not None
    assert "PYTHONHASHSEED" in llm_server.requests[1].messages[-1]["content"]   # the agent did see an environment
    assert all(canary not in str(r.body) for r in llm_server.requests)
    assert all(r.headers["authorization"] == f"Bearer {canary}" for r in llm_server.requests)   # the key was used
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert canary.encode() not in path.read_bytes(), path


def test_code_fault_tells_comments_from_code():
    parent = {"strategy.py": b"def curate(raw, ctx):\n    return {}\n", "inputs/params.json": b"{}"}
    assert code_fault({"strategy.py": parent["strategy.py"]}, parent) == "no strategy file changed"
    assert "only comments" in code_fault({"strategy.py": b"# hi\ndef curate(raw, ctx):\n    return {}  # x\n"}, parent)
    assert code_fault({"strategy.py": b"def curate(raw, ctx):\n    return {'sft': []}\n"}, parent) is None
    assert "removed" in code_fault({"helper.py": b"x = 1\n"}, parent)


def test_the_brief_states_the_curated_scale_of_the_parents_profile(tmp_path):
    from evolver.cli import SAMPLE_CORPUS, SEED_STRATEGY
    from sandbox.curate import execute, make_executor
    from workspace.repository import strategy_files

    execute(strategy_files(SEED_STRATEGY), load_corpus([str(SAMPLE_CORPUS)]), tmp_path / "out", seed=0,
            executor=make_executor("process"))
    profile = json.loads((tmp_path / "out" / "profile.json").read_text())
    assert stats_summary(profile) == (f"sft {profile['sft']['records']} records, rl {profile['rl']['records']} records, "
                                        f"memory 0 records, 45 of 45 raw trajectories retained")
    assert stats_summary({}) == "no profile"


def test_the_signals_and_the_current_dev_score_reach_the_agent(llm_server, executor, parent, tmp_path):
    """Paper §4.2: the agent is given the diagnosis, CoEvolve's signals and s_e."""
    signals = {"families": {"bad_arguments": 3}, "forgetting": ["multi_turn_base_12"], "boundary": ["simple_python_4"],
               "rare": [{"pattern": "cd → mv", "count": 2, "task_ids": ["multi_turn_base_7"]}]}
    llm_server.script(bash(EDIT), bash(SUBMIT))
    proposer, brief, validate, _ = make(llm_server, executor, parent, tmp_path, signals=signals,
                                        score={"P": 0.125, "C": 0.42, "J": -0.001, "epoch": 2})
    assert proposer.revise("effectiveness", brief, validate, tmp_path / "evolve").files is not None
    prompt = llm_server.requests[0].messages[1]["content"]
    assert "epoch 2" in prompt and "P = 0.125" in prompt and "J = -0.001" in prompt
    assert "forgetting" in prompt and "multi_turn_base_12" in prompt
    assert "boundary" in prompt and "simple_python_4" in prompt
    assert "'cd → mv'" in prompt and "multi_turn_base_7" in prompt
    assert "signals.json" in llm_server.requests[0].messages[0]["content"]
    llm_server.script(bash(EDIT), bash(SUBMIT))
    proposer, brief, validate, _ = make(llm_server, executor, parent, tmp_path / "quiet")
    proposer.revise("effectiveness", brief, validate, tmp_path / "quiet" / "evolve")
    assert "none fired" in llm_server.requests[-2].messages[1]["content"]


def test_the_agents_config_folder_is_not_left_in_tmpdir(tmp_path):
    """mini-swe-agent's global config folder lives in $TMPDIR for the process only."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "MSWEA_GLOBAL_CONFIG_DIR"}
    env["TMPDIR"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-c", "from evolver.proposers.agent import _minisweagent; _minisweagent(); "
                           "import os; print(os.environ['MSWEA_GLOBAL_CONFIG_DIR'])"],
                          capture_output=True, text=True, env=env, cwd=os.getcwd())
    assert done.returncode == 0, done.stderr
    folder = done.stdout.strip().splitlines()[-1]
    assert folder.startswith(str(tmp_path)) and not os.path.exists(folder) and list(tmp_path.iterdir()) == []

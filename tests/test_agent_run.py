"""An evolution run with the code agent, end to end through real HTTP: a scripted server speaking
the OpenAI (and Anthropic) API answers the LLM diagnosis and the agent's turns; the agent edits
the strategy in the Docker sandbox, the host validates, the edit is trained, evaluated, and
accepted or rolled back; a offline rerun reproduces the run with the server gone; no key
value lands anywhere under the run directory.

A server that dies mid-run (issue 73): the scripted LLM server of a 2-epoch agent run stops
answering — its connection dropped, its port closed — after the preflight, epoch 0's diagnosis and
the agent's effectiveness revision (validated by its dry run), at the efficiency revision's first
step. The run ends non-zero with one sentence, the journal records the propose stage's failure with
the reason, nothing of epoch 1's candidate is kept (no branch, no tag, no artifacts: not even the
validated revision), no key lands in the run directory; `resume --base-url` with a server answering again
at another address finishes the run and decides as the uninterrupted run did. A server that dies
during the LLM diagnosis leaves the rule-based failed points standing in, the reason recorded.
(Here beside the uninterrupted run it is compared with, which the module makes once.)"""
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from base.errors import RunFailed
from evolver import cli
from evolver.store import RunStore
from experiments.journal import LLMMoved, StageFailed
from workspace.repository import Workspace

from conftest import SAMPLE_CORPUS
from llm_server import DIES, LLMServer

pytestmark = [pytest.mark.timeout(1800), pytest.mark.usefixtures("trained_once")]

CANARY = "sk-canary-run-7d1e"
ARGS = ["--profile", "test", "--base", "tiny-random", "--epochs", "2", "--tasks", "2", "--sandbox", "docker", "--benchmark", "bfcl-single",
        "--corpus", str(SAMPLE_CORPUS), "--batch-size", "2", "--model", "scripted-agent", "--agent-steps", "12"]
SUBMIT = "printf 'COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\\n{}\\nFiles: strategy.py\\n'"


def bash(command: str) -> str:
    return f"One step.\n\n```bash\n{command}\n```\n"


POINTS = json.dumps([{"failed_point": "the agent passes wrong argument types", "evidence": "x='3' for an int",
                      "curation_hint": "mask corrected calls and keep signatures in memory"}])
EFFICIENCY = [bash("sed -i 's/    return kept$/    return tk.exact_dedup(tk.drop_abandoned(kept))/' strategy.py"),
              bash(SUBMIT.format("Exact dedup and no abandoned trajectories"))]


def every_other_rl_step(start: str = "") -> str:
    return bash("cp /opt/curateevo/curation_strategies/planned/strategy.py strategy.py && sed -i "
                f"'s/steps = tk.tool_call_steps(trajectory)$/steps = tk.tool_call_steps(trajectory)[{start}::2]/' strategy.py")


def agent_turn(req) -> tuple[str, int] | None:
    """An agent request's task text and how many replies its conversation holds (None: a diagnosis request)."""
    messages = req.messages
    if "research engineer who improves the code" not in messages[0]["content"]:
        return None
    return messages[1]["content"], sum(m["role"] == "assistant" for m in messages)


def scripted(req) -> str:
    """The whole run's LLM: diagnosis requests get failed points; the agent gets a script by
    phase and by how far its conversation is (a first attempt that only adds a comment is
    rejected by the host and repaired on the second attempt)."""
    if agent_turn(req) is None:
        return POINTS
    task, steps = agent_turn(req)
    if "EFFECTIVENESS" in task:
        if "previous attempt" not in task:
            return [bash("env; echo '# clearer' >> strategy.py"), bash(SUBMIT.format("Comment"))][min(steps, 1)]
        return [every_other_rl_step(), bash("python3 -m sandbox.dry_run"),
                bash(SUBMIT.format("Half of the clean RL steps"))][min(steps, 2)]
    return EFFICIENCY[min(steps, 1)]


def fingerprint(root):
    store = RunStore.open(root)
    decisions = [{k: e.result.get(k) for k in ("epoch", "accepted", "P", "C", "J", "commit")}
                 for e in store.journal.events() if e.is_done("decide")]
    artifacts = {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
                 for p in sorted(root.glob("epochs/*/artifacts/*")) if p.is_file() and p.name != "execution.json"}
    return decisions, artifacts, (root / "epochs" / "0" / "diagnosis" / "failed_points.json").read_text()


@dataclass
class AgentRun:
    provider: str
    root: Path
    url: str      # the scripted server's, gone once the run is done
    served: int   # requests it answered


def agent_run(provider: str, runs: Path) -> AgentRun:
    """A 2-epoch agent run against the scripted server speaking `provider`'s API, with the canary as the key."""
    with pytest.MonkeyPatch.context() as patch, LLMServer() as server:
        patch.setenv("OPENAI_API_KEY", CANARY)
        patch.setenv("ANTHROPIC_API_KEY", CANARY)
        # no usage block: the client counts tokens with tiktoken, so the run's numbers are real prompt sizes
        server.script(*[lambda req: {"text": scripted(req), "usage": None}] * 40)
        url = server.openai_url if provider == "openai" else server.anthropic_url
        assert cli.main(["run", *ARGS, "--provider", provider, "--base-url", url,
                         "--runs-dir", str(runs), "--name", "a"]) == 0
        return AgentRun(provider, runs / "a", url, len(server.requests))


@pytest.fixture(scope="module")
def openai_run(tmp_path_factory, trained_once) -> AgentRun:
    """The OpenAI-API run, shared: one test reads it, the offline rerun reproduces it."""
    return agent_run("openai", tmp_path_factory.mktemp("openai"))


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_an_agent_run_edits_validates_evaluates_and_decides(provider, request, tmp_path, capsys):
    run = request.getfixturevalue("openai_run") if provider == "openai" else agent_run(provider, tmp_path)
    root = run.root
    decisions, artifacts, failed_points = fingerprint(root)
    assert [d["epoch"] for d in decisions] == [0, 1] and decisions[1]["accepted"] in (True, False)
    assert '"source": "llm"' in failed_points and '"source": "rules"' in failed_points
    proposals = json.loads((root / "epochs" / "0" / "evolve" / "proposals.json").read_text())
    assert [(p["phase"], p.get("validated")) for p in proposals] == [
        ("effectiveness", False), ("effectiveness", True), ("efficiency", True)]
    assert "only comments" in proposals[0]["error"]
    store = RunStore.open(root)
    files = Workspace.open(root / "strategy").files("epoch-1")
    assert b"tool_call_steps(trajectory)[::2]" in files["strategy.py"]
    assert b"return tk.exact_dedup(tk.drop_abandoned(kept))" in files["strategy.py"]
    # the journal carries LLM usage per stage; log shows it
    usage = {e.stage: e.llm for e in store.journal.events()
             if e.is_done() and e.llm}
    assert set(usage) == {"diagnose", "propose"} and usage["propose"]["calls"] == 7
    preflight = [e for e in store.journal.events() if e.kind == "preflight"]   # one request before epoch 0
    assert len(preflight) == 1 and sum(u["calls"] for u in usage.values()) + 1 == run.served
    capsys.readouterr()
    assert cli.main(["log", str(root)]) == 0
    log = capsys.readouterr().out
    assert "LLM tokens" in log and "propose" in log
    assert cli.main(["report", str(root)]) == 0
    page = (root / "report" / "index.html").read_text()
    assert "scripted-agent" in page and "Time and LLM usage per stage" in page
    # no key value anywhere under the run
    for path in root.rglob("*"):
        if path.is_file():
            assert CANARY.encode() not in path.read_bytes(), path


def test_an_offline_rerun_decides_the_same_with_the_server_gone(openai_run, tmp_path, monkeypatch):
    """The rerun reads the first run's record (no key, no server) and decides and curates the same."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert cli.main(["run", *ARGS, "--provider", "openai", "--base-url", openai_run.url, "--runs-dir", str(tmp_path),
                     "--name", "b", "--llm-mode", "offline", "--llm-records", str(openai_run.root / "llm")]) == 0
    assert fingerprint(tmp_path / "b") == fingerprint(openai_run.root)


def two_candidates(req) -> str:
    """Candidate 1 (the LLM's temperature, no seed) keeps every other clean RL step from the first,
    candidate 2 (seed 1) from the second; both then get the same efficiency revision."""
    if agent_turn(req) is None:
        return POINTS
    task, steps = agent_turn(req)
    if "EFFECTIVENESS" in task:
        start = {None: "", 1: "1"}[req.body.get("seed")]
        return [every_other_rl_step(start), bash(SUBMIT.format(f"Every other clean RL step from {start or 0}"))][min(steps, 1)]
    return EFFICIENCY[min(steps, 1)]


@pytest.mark.timeout(3600)   # a run with four agent revisions, four dry runs and two proxy trainings
def test_k_agent_candidates_are_sampled_apart_dry_run_ranked_by_the_proxy_and_recorded(tmp_path, monkeypatch):
    """`--candidates 2 --model …`: two agent runs from the same brief (the second at
    --agent-temperature with seed = --seed + 1), each dry-run with its efficiency revision, ranked
    by the proxy; the best is committed and evaluated; every request is recorded with its
    temperature and seed, so a offline rerun finds each one (tests/test_llm.py)."""
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    args = [*ARGS, "--candidates", "2", "--agent-temperature", "0.7"]
    with LLMServer() as server:
        server.script(*[lambda req: {"text": two_candidates(req), "usage": None}] * 40)
        assert cli.main(["run", *args, "--base-url", server.openai_url, "--runs-dir", str(tmp_path), "--name", "a"]) == 0
        agent = [r.body for r in server.requests if "research engineer" in r.messages[0]["content"]]
    # the second effectiveness run sampled apart, every one of its requests; the rest as one revision would
    effectiveness = [b for b in agent if "EFFECTIVENESS" in b["messages"][1]["content"]]
    assert [(b["temperature"], b.get("seed")) for b in effectiveness] == [(0.0, None)] * 2 + [(0.7, 1)] * 2
    assert all("seed" not in b and b["temperature"] == 0.0 for b in agent if b not in effectiveness)
    root = tmp_path / "a"
    store = RunStore.open(root)
    result = store.done(0, "propose").result
    assert result["proposed"] == 2 and result["candidates"] == 2 and result["chosen"] in (0, 1)
    assert result["dry_runs"] == 4   # two effectiveness and two efficiency revisions, each dry-run once
    proposals = json.loads((root / "epochs" / "0" / "evolve" / "proposals.json").read_text())
    assert [(a["candidate"], a["phase"], a.get("validated"), a.get("temperature"), a.get("seed"))
            for a in proposals["attempts"]] == [
        (0, "effectiveness", True, None, None), (1, "effectiveness", True, 0.7, 1),
        (0, "efficiency", True, None, None), (1, "efficiency", True, None, None)]
    (rung,) = proposals["rungs"]
    assert set(rung["scores"]) == {"0", "1"} and rung["survivors"] == [proposals["chosen"]] == [result["chosen"]]
    for i in (0, 1):
        for phase in ("effectiveness", "efficiency"):
            assert (root / "epochs" / "0" / "evolve" / f"candidate-{i}" / phase / "attempt-0.traj.json").is_file()
    # the chosen pair is what epoch 1 trained and evaluated
    ws = Workspace.open(root / "strategy")
    start = "" if result["chosen"] == 0 else "1"
    assert f"tool_call_steps(trajectory)[{start}::2]".encode() in ws.files("epoch-1")["strategy.py"]
    first = ws.log("epoch-1")[1]["message"].splitlines()[0]
    assert first.startswith("effectiveness (candidate 2 of 2, temperature 0.7, seed 1): " if result["chosen"] else
                            "effectiveness (candidate 1 of 2): ")
    decisions, _, _ = fingerprint(root)
    assert [d["epoch"] for d in decisions] == [0, 1]
    # each agent request is in the record with the temperature and seed it was sent with
    recorded = [json.loads(p.read_text())["request"] for p in sorted((root / "llm").glob("*-*.json"))]
    sent = sorted((b["temperature"], b.get("seed", -1)) for b in agent)
    assert sorted((r["temperature"], r.get("seed", -1)) for r in recorded
                  if "research engineer" in r["messages"][0]["content"]) == sent


def served(dies_at=lambda req: False):
    """test_agent_run's replies, the server dying at the first request `dies_at` picks."""
    return lambda req: DIES if dies_at(req) else {"text": scripted(req), "usage": None}


def interrupted(runs: Path, dies_at, capsys) -> tuple[Path, str, str]:
    """A run whose server dies at the first request `dies_at` picks: (its directory, what it said last on
    stderr, the server's URL, gone now)."""
    with pytest.MonkeyPatch.context() as patch, LLMServer() as server:
        patch.setenv("OPENAI_API_KEY", CANARY)
        server.script(*[served(dies_at)] * 40)
        capsys.readouterr()
        code = cli.main(["run", *ARGS, "--provider", "openai", "--base-url", server.openai_url,
                         "--runs-dir", str(runs), "--name", "a"])
    assert code == RunFailed.exit_code
    return runs / "a", capsys.readouterr().err.strip().splitlines()[-1], server.openai_url


def keyless(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            assert CANARY.encode() not in path.read_bytes(), path


def test_a_server_dying_while_proposing_fails_the_stage_and_resume_finishes_the_run_as_if_uninterrupted(
        openai_run, tmp_path, capsys):
    root, said, gone = interrupted(tmp_path / "cut", lambda req: "EFFICIENCY" in (agent_turn(req) or ("",))[0], capsys)
    assert said.startswith("curateevo: failed: the LLM failed while proposing the candidate of epoch 1 (openai model "
                           f"scripted-agent at {gone} failed 5 times, last: connection failed")
    assert f"`curateevo resume {root}` proposes again (add --base-url URL if its address changed)" in said
    store = RunStore.open(root)
    (failed,) = [e for e in store.journal.events() if isinstance(e, StageFailed)]
    assert (failed.epoch, failed.stage) == (0, "propose") and "Connection refused" in failed.error
    assert store.done(0, "diagnose") and not store.done(0, "propose")
    proposals = json.loads((root / "epochs" / "0" / "evolve" / "proposals.json").read_text())
    assert [(p["phase"], p.get("validated"), p.get("exit_status")) for p in proposals] == [
        ("effectiveness", False, "Submitted"), ("effectiveness", True, "Submitted"), ("efficiency", None, "LLMError")]
    # nothing of epoch 1's candidate: no branch, no tag, no artifacts
    assert not [r for r in Workspace.open(root / "strategy").refs() if "epoch-1" in r]
    assert not (root / "epochs" / "1").exists()
    assert cli.main(["status", str(root)]) == 0
    assert "failed: epoch 0 · propose: RunFailed: the LLM failed while proposing" in capsys.readouterr().out
    keyless(root)

    with pytest.MonkeyPatch.context() as patch, LLMServer() as server:   # back, at another port
        patch.setenv("OPENAI_API_KEY", CANARY)
        assert cli.main(["resume", str(root), "--base-url", "localhost:8000/v1"]) == 2
        assert "--base-url must be an http:// or https:// URL" in capsys.readouterr().err
        assert cli.main(["resume", str(root), "--base-url", "http://127.0.0.1:9/v1"]) == 2   # nothing listens there
        assert "nothing was run" in capsys.readouterr().err
        assert not [e for e in RunStore.open(root).journal.events() if isinstance(e, LLMMoved)]
        server.script(*[served()] * 40)
        assert cli.main(["resume", str(root), "--base-url", server.openai_url]) == 0
        back = server.openai_url
    (moved,) = [e for e in RunStore.open(root).journal.events() if isinstance(e, LLMMoved)]
    assert (moved.doc["was"], moved.base_url) == (gone, back)
    keyless(root)
    assert fingerprint(root) == fingerprint(openai_run.root)   # the same replies, the server up throughout


def test_a_server_dying_during_the_diagnosis_leaves_the_rule_based_failed_points_with_the_reason(tmp_path, capsys):
    preflight = "Reply with the single word OK."
    root, said, _ = interrupted(tmp_path, lambda req: agent_turn(req) is None and
                                preflight not in req.messages[-1]["content"], capsys)
    assert "the LLM failed while proposing the candidate of epoch 1" in said   # the server is still gone then
    diagnosis = RunStore.open(root).done(0, "diagnose").result["llm_diagnosis"]
    assert diagnosis["stopped"].startswith("LLMUnavailable: ") and "failed 5 times" in diagnosis["stopped"]
    assert diagnosis["diagnosed"] == 0
    points = (root / "epochs" / "0" / "diagnosis" / "failed_points.json").read_text()
    assert '"source": "rules"' in points and '"source": "llm"' not in points

"""An evolution run with the code agent, end to end through real HTTP: a scripted server speaking
the OpenAI (and Anthropic) API answers the LLM diagnosis and the agent's turns; the agent edits
the strategy in the Docker sandbox, the host validates, the edit is trained, evaluated, and
accepted or rolled back; a replay-only rerun reproduces the run with the server gone; no key
value lands anywhere under the run directory."""
import hashlib
import json

import pytest

from evolver import cli
from evolver.store import RunStore

from conftest import SAMPLE_CORPUS
from llm_server import LLMServer

pytestmark = pytest.mark.timeout(1800)

CANARY = "sk-canary-run-7d1e"
ARGS = ["--profile", "test", "--base", "tiny-random", "--epochs", "2", "--tasks", "2", "--sandbox", "docker", "--benchmark", "bfcl-single",
        "--corpus", str(SAMPLE_CORPUS), "--batch-size", "2", "--model", "scripted-agent", "--agent-steps", "12"]
SUBMIT = "printf 'COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\\n{}\\nFiles: strategy.py\\n'"


def bash(command: str) -> str:
    return f"One step.\n\n```bash\n{command}\n```\n"


def scripted(req) -> str:
    """The whole run's LLM: diagnosis requests get failed points; the agent gets a script by
    phase and by how far its conversation is (a first attempt that only adds a comment is
    rejected by the host and repaired on the second attempt)."""
    messages = req.messages
    if "research engineer who improves the code" not in messages[0]["content"]:
        return json.dumps([{"failed_point": "the agent passes wrong argument types", "evidence": "x='3' for an int",
                            "curation_hint": "mask corrected calls and keep signatures in memory"}])
    task, steps = messages[1]["content"], sum(m["role"] == "assistant" for m in messages)
    if "EFFECTIVENESS" in task:
        if "previous attempt" not in task:
            return [bash("env; echo '# clearer' >> strategy.py"), bash(SUBMIT.format("Comment"))][min(steps, 1)]
        return [bash("cp /opt/curateevo/curation_strategies/planned/strategy.py strategy.py && "
                     "sed -i 's/\"rest_fraction\": 1.0/\"rest_fraction\": 0.5/' strategy.py"),
                bash("python3 -m sandbox.dry_run"), bash(SUBMIT.format("Half of the clean RL steps"))][min(steps, 2)]
    return [bash("sed -i 's/\"exact\": False/\"exact\": True/; s/\"drop_abandoned\": False/\"drop_abandoned\": True/' strategy.py"),
            bash(SUBMIT.format("Exact dedup and no abandoned trajectories"))][min(steps, 1)]


def fingerprint(root):
    store = RunStore.open(root)
    decisions = [{k: e["result"].get(k) for k in ("epoch", "accepted", "P", "C", "J", "commit")}
                 for e in store.journal.events() if e.get("event") == "stage_done" and e["stage"] == "decide"]
    artifacts = {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
                 for p in sorted(root.glob("epochs/*/artifacts/*")) if p.is_file() and p.name != "execution.json"}
    return decisions, artifacts, (root / "epochs" / "0" / "diagnosis" / "failed_points.json").read_text()


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_an_agent_run_edits_validates_evaluates_decides_and_replays(provider, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", CANARY)
    with LLMServer() as server:
        # no usage block: the client counts tokens with tiktoken, so the run's numbers are real prompt sizes
        server.script(*[lambda req: {"text": scripted(req), "usage": None}] * 40)
        url = server.openai_url if provider == "openai" else server.anthropic_url
        assert cli.main(["run", *ARGS, "--provider", provider, "--base-url", url,
                         "--runs-dir", str(tmp_path), "--name", "a"]) == 0
        served = len(server.requests)
    root = tmp_path / "a"
    decisions, artifacts, failed_points = fingerprint(root)
    assert [d["epoch"] for d in decisions] == [0, 1] and decisions[1]["accepted"] in (True, False)
    assert '"source": "llm"' in failed_points and '"source": "rules"' in failed_points
    proposals = json.loads((root / "epochs" / "0" / "evolve" / "proposals.json").read_text())
    assert [(p["phase"], p.get("validated")) for p in proposals] == [
        ("effectiveness", False), ("effectiveness", True), ("efficiency", True)]
    assert "only comments" in proposals[0]["error"]
    store = RunStore.open(root)
    from sandbox.workspace import Workspace

    files = Workspace.open(root / "strategy").files("epoch-1")
    assert b'"rest_fraction": 0.5' in files["strategy.py"] and b'"exact": True' in files["strategy.py"]
    # the journal carries LLM usage per stage; log shows it
    usage = {e["stage"]: e["result"]["llm"] for e in store.journal.events()
             if e.get("event") == "stage_done" and isinstance(e.get("result"), dict) and "llm" in e["result"]}
    assert set(usage) == {"diagnose", "propose"} and usage["propose"]["calls"] == 7
    assert sum(u["calls"] for u in usage.values()) == served
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
    if provider == "anthropic":
        return
    # replay-only: the server is gone; the rerun reads the first run's record and decides the same
    monkeypatch.delenv("OPENAI_API_KEY")
    assert cli.main(["run", *ARGS, "--provider", provider, "--base-url", url, "--runs-dir", str(tmp_path),
                     "--name", "b", "--llm-mode", "replay", "--llm-records", str(root / "llm")]) == 0
    assert fingerprint(tmp_path / "b") == (decisions, {k: v for k, v in artifacts.items()}, failed_points)

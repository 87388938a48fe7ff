"""A server that dies mid-run (issue 73): the scripted LLM server of a 2-epoch agent run stops
answering — its connection dropped, its port closed — after the preflight, epoch 0's diagnosis and
the agent's effectiveness revision (validated by its dry run), at the efficiency revision's first
step. The run ends non-zero with one sentence, the journal records the propose stage's failure with
the reason, nothing of epoch 1's candidate is kept (no branch, no tag, no artifacts: not even the
validated revision), no key lands in the run directory; `resume --base-url` with a server answering again
at another address finishes the run and decides as the uninterrupted run did. A server that dies
during the LLM diagnosis leaves the rule-based failed points standing in, the reason recorded."""
import json
from pathlib import Path

import pytest

from base.errors import RunFailed
from evolver import cli
from evolver.store import RunStore
from experiments.journal import LLMMoved, StageFailed
from workspace.repository import Workspace

from llm_server import DIES, LLMServer
from test_agent_run import ARGS, CANARY, agent_run, agent_turn, fingerprint, scripted

pytestmark = [pytest.mark.timeout(1800), pytest.mark.usefixtures("trained_once")]


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
        tmp_path, capsys):
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
    whole = agent_run("openai", tmp_path / "whole")   # the same replies, the server up throughout
    assert fingerprint(root) == fingerprint(whole.root)


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

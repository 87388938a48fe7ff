"""`curateevo run --strategy DIR` (issue 74 item 7c): a user's own strategy is checked as any
candidate before anything is trained, committed as epoch 0's candidate instead of the seed ρ0, and
recorded in run.json, so that epoch 0 curates it, and resume and replay read it from the run alone."""
import json
import shutil

import pytest

from base.errors import UserError
from evolver import cli, run_cli
from evolver.candidate import curate_candidate
from evolver.context import RunContext
from evolver.own_strategy import SEED_STRATEGY
from workspace.repository import Workspace

from conftest import SAMPLE_CORPUS

CHEAP = ["run", "--profile", "test", "--base", "tiny-random", "--epochs", "1", "--tasks", "2", "--sandbox", "process",
         "--benchmark", "bfcl-single", "--corpus", str(SAMPLE_CORPUS)]

OWN = '''"""Only the trajectories that make a tool call, each as one SFT record (no RL, no memory)."""


def curate(raw, ctx):
    tk = ctx.toolkit
    out = tk.Curated()
    for trajectory in raw:
        if tk.tool_call_steps(trajectory):
            out.sft.append(tk.sft_record(trajectory, tags=["own"]))
    return out
'''


def created(tmp_path, strategy, name="r"):
    args = cli.build_parser().parse_args([*CHEAP, "--strategy", str(strategy), "--runs-dir", str(tmp_path / "runs"),
                                          "--name", name])
    return run_cli.create_run(run_cli.run_options(args))


def test_a_users_strategy_is_epoch_0s_candidate_and_the_run_keeps_it(tmp_path, capsys):
    own = tmp_path / "mine"
    own.mkdir()
    (own / "strategy.py").write_text(OWN)
    store = created(tmp_path, own)
    config = json.loads((store.root / "run.json").read_text())
    assert config["strategy"] == str(own.resolve()) and len(config["strategy_sha256"]) == 64
    ws = Workspace.open(store.root / "strategy")
    assert ws.files("epoch-0")["strategy.py"] == OWN.encode() and ws.resolve("best") == ws.resolve("epoch-0")
    assert "inputs/params.json" in ws.files("epoch-0")
    shutil.rmtree(own)   # the run no longer needs the directory: epoch 0 curates, and replays, from the workspace
    run = RunContext(store)
    curation = run.stage(0, "curate", lambda: curate_candidate(run, 0))
    sft = [json.loads(line) for line in (store.epoch_dir(0) / "artifacts" / "sft.jsonl").read_text().splitlines()]
    meta = [m if isinstance(m, dict) else json.loads(m) for m in (r["meta"] for r in sft)]
    assert sft and all("own" in m["tags"] for m in meta) and curation.commit == ws.resolve("epoch-0")
    assert not (store.epoch_dir(0) / "artifacts" / "rl.jsonl").read_text().strip()
    capsys.readouterr()
    assert cli.main(["replay", str(store.root), "--epoch", "0", "--sandbox", "process"]) == 0
    assert "replay identical" in capsys.readouterr().out


def test_a_run_without_strategy_still_starts_from_the_seed(tmp_path):
    args = cli.build_parser().parse_args([*CHEAP, "--runs-dir", str(tmp_path / "runs"), "--name", "seed"])
    store = run_cli.create_run(run_cli.run_options(args))
    assert json.loads((store.root / "run.json").read_text())["strategy"] == ""
    RunContext(store)   # the workspace is made from ρ0 when the loop first opens the run
    seed = (SEED_STRATEGY / "strategy.py").read_bytes()
    assert Workspace.open(store.root / "strategy").files("epoch-0")["strategy.py"] == seed


@pytest.mark.parametrize("case", ["missing", "no strategy.py", "raises", "curates nothing"])
def test_a_strategy_that_cannot_be_epoch_0_is_one_sentence_and_no_run(tmp_path, case):
    own = tmp_path / "mine"
    if case != "missing":
        own.mkdir()
        (own / "helper.py").write_text("X = 1\n")
    body = {"raises": "def curate(raw, ctx):\n    raise ValueError('no such field')\n",
            "curates nothing": "def curate(raw, ctx):\n    return ctx.toolkit.Curated()\n"}.get(case)
    if body:
        (own / "strategy.py").write_text(body)
    with pytest.raises(UserError) as caught:
        created(tmp_path, own)
    said = str(caught.value)
    assert "\n" not in said.strip()   # one sentence, the strategy's own error in it
    expected = {"missing": "does not exist or is not a directory", "no strategy.py": "has no strategy.py",
                "raises": "fails the checks every candidate passes", "curates nothing": "curates no record at all"}[case]
    assert expected in said and str(own) in said
    assert not (tmp_path / "runs" / "r").exists()

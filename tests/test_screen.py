"""The screen (issue 60, item 1): k candidates ranked by the real proxy (a short SFT of the tiny
model on each candidate's dry run and a small dev subset, J = P − λ·C) through successive halving,
every scored cell kept, so a run killed mid-screen resumes to the same choice; and the benchmark's
statistic (bench/screen_agreement.py): Spearman's ρ with a bootstrap interval over candidates."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corpora import corpus_sha256
from evolver import candidate as gate
from evolver import cli, evaluation
from evolver.config import RunConfig
from evolver.context import RunContext
from evolver.proposers.brief import Outcome
from evolver.screen import screen
from evolver.store import RunStore

from conftest import ROOT, SAMPLE_CORPUS, TINY_RUN_ARGS

sys.path.insert(0, str(ROOT / "bench"))
import screen_agreement  # noqa: E402

pytestmark = pytest.mark.timeout(1800)

# ρ0's records, each repeated n times: the same data at n times the training cost
REPEATED = '''
def curate(raw, ctx):
    tk = ctx.toolkit
    kept = [t for t in raw if not tk.is_empty(t)]
    return tk.Curated(sft=[tk.sft_record(t, id=f"{{t['id']}}#{{i}}", tags=["seed"]) for t in kept for i in range({n})])
'''


def test_the_screen_ranks_candidates_of_known_quality_in_their_order_and_keeps_every_cell(tmp_path, monkeypatch):
    """Three candidates carry the same trajectories 1, 2 and 3 times: the same data at a growing
    Cost_train, so their J = P − λ·C is known to fall in that order (the 1.6M-parameter random
    model cannot be taught to call a tool in a proxy's steps — measured: 34 SFT steps at lr 1e-2
    leave every candidate at the same P — so at this size what separates candidates is what J
    charges for them). Listed worst first, the screen must still keep the cheapest one: each rung
    trains and evaluates the tiny model for real, and the second rung, at the same units, reads the
    first rung's kept cells instead of training again."""
    corpus = (str(SAMPLE_CORPUS),)
    config = RunConfig(corpus=corpus, corpus_sha256=corpus_sha256(list(corpus)), profile="test", base="tiny-random",
                       sandbox="process", tasks=2, epochs=2, benchmark="bfcl-single", proxy_sft_steps=1, proxy_tasks=2,
                       max_new_tokens=16)
    run = RunContext(RunStore.create(tmp_path / "run", config.to_json()))
    inputs = {k: v for k, v in run.ws.files("epoch-0").items() if k.startswith("inputs/")}
    dry = gate.DryRuns(tmp_path / "dry", inputs, run.corpus, run.executor, run.cfg, {}, None)
    chains = []
    for n in (3, 2, 1):   # worst first: the proposer's order must not decide
        files = {**run.ws.files("epoch-0"), "strategy.py": REPEATED.format(n=n).encode()}
        assert dry.validate(files).ok
        chains.append([Outcome(files, f"×{n}", (f"repeat-{n}",))])
    real, scored = evaluation.proxy_scores, []

    def observed(run_, dry_, group, units):
        scored.extend((chain[-1].edits[0], units) for chain in group)
        return real(run_, dry_, group, units)

    monkeypatch.setattr(evaluation, "proxy_scores", observed)
    folder = tmp_path / "screen"
    chosen = screen(chains, 6, folder=folder, run=run, dry=dry)
    first = chosen.rungs[0]["scores"]
    assert first[2] > first[1] > first[0]                      # J in the known order: ×1, ×2, ×3
    assert chosen.index == 2 and chosen.best[-1].edits == ("repeat-1",)
    assert [r["survivors"] for r in chosen.rungs] == [[1, 2], [2]]
    assert sorted(scored) == [("repeat-1", 1), ("repeat-2", 1), ("repeat-3", 1)]   # rung 2 read the kept cells
    cells = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    assert len(cells) == 3 and {tuple(c["edits"]) for c in cells} == {("repeat-1",), ("repeat-2",), ("repeat-3",)}
    # asked again, the screen trains nothing and reaches the same choice
    scored.clear()
    again = screen(chains, 6, folder=folder, run=run, dry=dry)
    assert scored == [] and again.index == chosen.index and again.rungs == chosen.rungs


ARGS = ["--profile", "test", "--base", "tiny-random", "--epochs", "2", "--tasks", "4", "--sandbox", "process",
        "--benchmark", "bfcl-single", "--batch-size", "2", "--candidates", "3", "--proxy-sft-steps", "1",
        "--proxy-tasks", "2", *TINY_RUN_ARGS]


def choice(root: Path) -> tuple:
    """What the screen decided and what came of it: the proposal's choice and rungs, epoch 1's decision."""
    store = RunStore.open(root)
    proposals = json.loads((root / "epochs" / "0" / "evolve" / "proposals.json").read_text())
    decided = [{k: e.result.get(k) for k in ("epoch", "accepted", "P", "C", "J", "edits")}
               for e in store.journal.events() if e.is_done("decide")]
    return proposals["chosen"], proposals["rungs"], decided


def test_k_candidates_resume_after_a_kill_mid_screen_to_the_same_choice(tmp_path, quality_corpora):
    """`run --candidates 3` on a wild BFCL corpus, killed (SIGKILL of its process group) once the
    screen has kept its first cell and before the propose stage is done; `resume` scores only the
    cells not kept, and the run reaches the uninterrupted run's choice, rungs and decisions."""
    args = [*ARGS, "--corpus", str(quality_corpora[0] / "corpus.jsonl")]
    assert cli.main(["run", *args, "--runs-dir", str(tmp_path), "--name", "reference"]) == 0
    reference = choice(tmp_path / "reference")
    # the offline proposer's candidates, all screened; those whose artifacts differ are scored apart
    screened_n = len(list((tmp_path / "reference" / "epochs" / "0" / "screen").glob("*.json")))
    assert len(reference[1][0]["scores"]) >= screened_n >= 2

    root = tmp_path / "killed"
    screened = root / "epochs" / "0" / "screen"
    proc = subprocess.Popen([sys.executable, "-m", "evolver.cli", "run", *args, "--runs-dir", str(tmp_path), "--name", "killed"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + 1200
        while not (screened.is_dir() and any(screened.glob("*.json"))):
            assert proc.poll() is None, "the run ended before the screen kept a cell"
            assert time.monotonic() < deadline, "the screen never kept a cell"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    kept = {p.name: p.read_bytes() for p in screened.glob("*.json")}
    assert 1 <= len(kept) < screened_n and RunStore.open(root).done(0, "propose") is None   # killed mid-screen
    done = subprocess.run([sys.executable, "-m", "evolver.cli", "resume", str(root)], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=1200, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert choice(root) == reference
    assert all((screened / name).read_bytes() == data for name, data in kept.items())   # kept cells not scored again
    assert len(list(screened.glob("*.json"))) == screened_n


def test_the_benchmark_reads_rank_agreement_with_an_interval_over_candidates_and_the_halvings_pick():
    ids = [f"c{i}" for i in range(8)]
    full = {i: {"P": 0.1 * n, "C": 0.3, "J": 0.1 * n - 0.09} for n, i in enumerate(ids)}
    same = {i: {"1": {"P": 0.01 * n, "J": 0.01 * n}, "2": {"P": 0.02 * n, "J": 0.02 * n}} for n, i in enumerate(ids)}
    doc = {"definition": "d", "rows": {i: {"full": full[i], "proxy": same[i]} for i in ids}}
    out = screen_agreement.agreement(doc, resamples=400)
    for u in ("1", "2"):
        a = out["per_units"][u]["P"]
        assert a["n"] == 8 and a["spearman"] == pytest.approx(1) and a["low"] == pytest.approx(1) and a["draws"] > 300
    assert out["halving"] == {"picked": "c7", "full_rank": 1, "full_best": "c7", "regret_J": 0}
    assert "ranks like full dev P" in out["verdict"]
    # a proxy that orders the candidates the other way round, but for the best at the last rung
    flipped = {i: {"1": {"P": -0.01 * n, "J": -0.01 * n}, "2": {"P": -0.02 * n, "J": -0.02 * n}} for n, i in enumerate(ids)}
    bad = screen_agreement.agreement({"definition": "d", "rows": {i: {"full": full[i], "proxy": flipped[i]} for i in ids}},
                                     resamples=400)
    assert bad["per_units"]["1"]["P"]["spearman"] == pytest.approx(-1) and bad["per_units"]["1"]["P"]["high"] < 0
    assert bad["halving"]["picked"] == "c0" and bad["halving"]["full_rank"] == 8
    assert "no proxy reaches" in bad["verdict"]
    few = screen_agreement.agreement({"definition": "d", "rows": {i: doc["rows"][i] for i in ids[:5]}}, resamples=50)
    assert few["verdict"].startswith("only 5 candidates")
    noisy = {i: {"1": {"P": v, "J": v}} for i, v in zip(ids, (0.3, 0.1, 0.2, 0.5, 0.4, 0.7, 0.6, 0.8))}
    mid = screen_agreement.agreement({"definition": "d", "rows": {i: {"full": full[i], "proxy": noisy[i]} for i in ids}},
                                     resamples=1000)["per_units"]["1"]["P"]
    assert 0.5 < mid["spearman"] < 1 and mid["low"] < mid["spearman"] <= mid["high"]

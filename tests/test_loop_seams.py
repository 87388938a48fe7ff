"""The loop's seams: a candidate flows one way (its dry run with this epoch's inputs is its
artifacts, curated once), the run config is data, and executors and proposers plug in by name."""
from __future__ import annotations

import json
import sys

import pytest

from evolver import candidate, cli, evaluation, loop
from evolver.config import RunConfig
from evolver.candidate import curate_candidate
from evolver.context import RunContext
from evolver.propose import propose
from evolver.stages import train_epoch
from evolver.proposers import PROPOSERS
from evolver.proposers.brief import Outcome
from evolver.store import RunStore
from sandbox import executor as executor_mod
from corpora import corpus_sha256, load_corpus
from sandbox.curate import execute
from sandbox.replay import replay

from conftest import SAMPLE_CORPUS

# A strategy whose output depends on its inputs: ρ0's SFT records plus one memory record per
# failed point of inputs/failed_points.json (so a dry run on other inputs gives other bytes).
READS_INPUTS = b'''
def curate(raw, ctx):
    points = ctx.inputs["failed_points.json"]
    memory = [{"id": f"fp-{i}", "key": p["failed_point"], "content": p["curation_hint"], "tags": ["diagnosis"],
               "meta": {"origin": []}} for i, p in enumerate(points)]
    sft = [{"id": r["id"], "messages": r["messages"], "tools": r.get("tools", []),
            "meta": {"origin": [r["id"]]}} for r in raw if (r.get("outcome") or {}).get("success")]
    return ctx.toolkit.Curated(sft=sft, rl=[], memory=memory)
'''
POINTS = [{"failed_point": "called the tool with a string where an integer was wanted", "evidence": "x='3'",
           "curation_hint": "keep calls whose argument types match the schema", "family": "bad_arguments",
           "task_ids": ["simple_python_3"], "count": 2}]


class ScriptedProposer:
    """A proposer for tests: the effectiveness revision is READS_INPUTS, the efficiency one proposes nothing."""
    name = "scripted"

    def revise(self, phase, brief, validate, out_dir):
        if phase != "effectiveness":
            return Outcome(None)
        files = {**brief.files, "strategy.py": READS_INPUTS}
        verdict = validate(files)
        return Outcome(files if verdict.ok else None, "effectiveness: memory from the failed points",
                       ("reads-inputs",), [{"dry_run": verdict.kind}])


@pytest.fixture
def counted(monkeypatch):
    """Every execution of a strategy by the loop, counted."""
    calls = []

    def counting(files, *args, **kwargs):
        calls.append(files)
        return execute(files, *args, **kwargs)

    monkeypatch.setattr(candidate, "execute", counting)   # the curate stage and the dry runs
    return calls


def new_run(tmp_path, **changes) -> RunStore:
    corpus = (str(SAMPLE_CORPUS),)
    settings = dict(profile="test", base="tiny-random", sandbox="process", tasks=2, epochs=2)
    config = RunConfig(corpus=corpus, corpus_sha256=corpus_sha256(list(corpus)), **{**settings, **changes})
    return RunStore.create(tmp_path / "run", config.to_json())


def evaluated(ep: RunContext, epoch: int, P: float = 0.5) -> None:
    """Epoch `epoch` decided and diagnosed as if trained and evaluated (no training in this test)."""
    curation = ep.stage(epoch, "curate", lambda: curate_candidate(ep, epoch))
    ep.store.stage(epoch, "decide", lambda: {"epoch": epoch, "accepted": True, "P": P, "C": curation.C,
                                             "J": P - 0.3 * curation.C, "commit": curation.commit, "edits": [],
                                             "reason": "test"})
    diag = ep.store.epoch_dir(epoch) / "diagnosis"
    diag.mkdir(parents=True)
    (diag / "failed_points.json").write_text(json.dumps(POINTS))
    (diag / "signals.json").write_text(json.dumps({"families": {"bad_arguments": 2}, "forgetting": [], "boundary": [],
                                                   "rare": []}))


def test_seed_strategy_has_every_input_a_strategy_may_read(tmp_path):
    ep = RunContext(new_run(tmp_path))
    files = ep.ws.files("epoch-0")
    assert json.loads(files["inputs/failed_points.json"]) == [] and json.loads(files["inputs/params.json"])["lambda"] == 0.3
    assert set(json.loads(files["inputs/signals.json"])) == {"families", "forgetting", "boundary", "rare"}


def test_a_candidate_is_curated_once_on_the_inputs_it_is_committed_and_replayed_with(tmp_path, monkeypatch, counted):
    monkeypatch.setitem(PROPOSERS, "scripted", lambda config, llm, executor: ScriptedProposer())
    ep = RunContext(new_run(tmp_path, proposer="scripted"))
    evaluated(ep, 0)
    assert len(counted) == 1                                   # ρ0: executed by the curate stage
    result = ep.stage(0, "propose", lambda: propose(ep, 0))
    assert result.dry_runs == 1 and len(counted) == 2       # the candidate: its dry run only
    sha = ep.ws.resolve("epoch-1")
    assert ep.ws.files(sha)["inputs/failed_points.json"] == (json.dumps(POINTS, sort_keys=True, separators=(",", ":"))
                                                              + "\n").encode()
    curation = ep.stage(1, "curate", lambda: curate_candidate(ep, 1))
    assert len(counted) == 2 and curation.commit == sha     # the dry run's artifacts are the epoch's
    artifacts = ep.store.epoch_dir(1) / "artifacts"
    memory = [json.loads(line) for line in (artifacts / "memory.jsonl").read_text().splitlines()]
    assert [m["key"] for m in memory] == [POINTS[0]["failed_point"]]   # it read this epoch's inputs
    assert json.loads((artifacts / "manifest.json").read_text())["strategy"]["commit"] == sha
    # executing the committed candidate again, and replaying the epoch, give the same bytes
    again = execute(ep.ws.files(sha), load_corpus([str(SAMPLE_CORPUS)]), tmp_path / "again", seed=0,
                    executor=ep.executor, commit=sha, budget=ep.cfg.curation_budget)
    for name in ("sft.jsonl", "rl.jsonl", "memory.jsonl", "profile.json", "manifest.json"):
        assert (again.out_dir / name).read_bytes() == (artifacts / name).read_bytes(), name
    assert replay(artifacts, tmp_path / "replayed", executor=ep.executor).identical
    # a resumed run finds the propose stage and the curated epoch done: nothing runs again
    ep2 = RunContext(RunStore.open(ep.store.root))
    ep2.stage(0, "propose", lambda: pytest.fail("propose ran again"))
    ep2.stage(1, "curate", lambda: pytest.fail("curate ran again"))


def test_lost_dry_run_artifacts_are_curated_again_from_the_commit(tmp_path, monkeypatch, counted):
    monkeypatch.setitem(PROPOSERS, "scripted", lambda config, llm, executor: ScriptedProposer())
    ep = RunContext(new_run(tmp_path, proposer="scripted"))
    evaluated(ep, 0)
    ep.stage(0, "propose", lambda: propose(ep, 0))
    kept = (ep.store.epoch_dir(1) / "artifacts" / "memory.jsonl").read_bytes()
    (ep.store.epoch_dir(1) / "artifacts" / "manifest.json").unlink()
    curate_candidate(ep, 1)
    assert len(counted) == 3 and (ep.store.epoch_dir(1) / "artifacts" / "memory.jsonl").read_bytes() == kept


def test_an_executor_is_one_module_and_one_registry_line(tmp_path, monkeypatch, sample_corpus):
    (tmp_path / "inline_executor.py").write_text(
        "from sandbox.process_executor import ProcessExecutor\n\n\n"
        "class InlineExecutor(ProcessExecutor):\n    name = 'inline'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(executor_mod.EXECUTORS, "inline", "inline_executor:InlineExecutor")
    made = executor_mod.make_executor("inline")
    result = execute({"strategy.py": READS_INPUTS, "inputs/failed_points.json": json.dumps(POINTS).encode()},
                     load_corpus([str(sample_corpus)]), tmp_path / "out", executor=made)
    assert result.execution["execution"]["executor"] == "inline" and result.manifest.counts()["memory.jsonl"] == 1
    assert RunConfig(sandbox="inline").sandbox == "inline"
    assert "inline" in cli.build_parser().parse_args(["curate", "--sandbox", "inline"]).sandbox
    sys.modules.pop("inline_executor", None)


def test_auto_falls_back_along_the_registry_with_a_warning(monkeypatch):
    def no_engine():
        raise executor_mod.RunFailed("no Docker engine answers")

    class Dead:
        def __new__(cls):
            no_engine()

    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(executor_mod, "executor_class", lambda name: Dead if name == "docker" else
                        __import__("sandbox.process_executor", fromlist=["x"]).ProcessExecutor)
    said = []
    assert executor_mod.make_executor("auto", warn=said.append).name == "process"
    assert "Falling back to the process executor" in said[0]


def test_replay_retrain_of_an_agent_run_needs_no_docker_and_no_agent(tmp_path, monkeypatch, capsys):
    llm = {"provider": "openai", "model": "scripted", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "NO_KEY"}
    store = new_run(tmp_path, proposer="agent", llm=llm, diagnosis="rules+llm", sandbox="docker", epochs=1)
    ep = RunContext(store)
    art = store.epoch_dir(0) / "artifacts"
    execute(ep.ws.files("epoch-0"), load_corpus([str(SAMPLE_CORPUS)]), art, executor=executor_mod.make_executor("process"),
            commit=ep.ws.resolve("epoch-0"))
    train_epoch(ep.cfg, art, store.epoch_dir(0) / "train-s0", 0)

    def no_docker(*args, **kwargs):
        raise executor_mod.RunFailed("no Docker engine answers")

    monkeypatch.setattr("sandbox.docker_executor.docker_client", no_docker)
    monkeypatch.setattr("evolver.proposers.agent.AgentProposer.__init__", lambda *a, **k: pytest.fail("agent made"))
    assert cli.main(["replay", str(store.root), "--epoch", "0", "--retrain", "--sandbox", "process"]) == 0
    out = capsys.readouterr().out
    assert "identical" in out and "retrain seed 0: adapter weights identical" in out


def test_replay_reeval_names_a_changed_memory_retrieval_rule(tmp_path, capsys, monkeypatch):
    from base.files import read_jsonl
    from trainer import memory as memory_mod
    from evolver.proposers.operators import compose
    from evolver.stages import evaluate_epoch

    ep = RunContext(new_run(tmp_path, epochs=1))
    files = {**ep.ws.files("epoch-0"), "strategy.py": compose({"tool_signatures": {"only_called": False}}).encode()}
    ep.ws.tag_epoch(1, ep.ws.commit_candidate(1, files, "memory: every tool's signature"))
    ep.stage(1, "curate", lambda: curate_candidate(ep, 1))
    # recorded under the rule before: every hint the request matches, whether its tool is offered or not
    keep = memory_mod.MemoryIndex.retrieve
    with monkeypatch.context() as m:
        m.setattr(memory_mod.MemoryIndex, "retrieve", lambda self, query, k=None, offered=None, exclude=frozenset(): keep(self, query, k))
        m.setattr(memory_mod, "RETRIEVAL", "bm25s")
        evaluate_epoch(ep.cfg, ep.store.epoch_dir(1) / "artifacts", ep.store.epoch_dir(1) / "eval-s0", 0, None)
    recorded = read_jsonl(ep.store.epoch_dir(1) / "eval-s0" / "trajectories.jsonl")
    offered = [{t["function"]["name"] for t in r["tools"]} for r in recorded]
    assert any(hint.removeprefix("mem-tool-") not in names for r, names in zip(recorded, offered) for hint in r["meta"]["memory"])
    assert cli.main(["replay", str(ep.store.root), "--epoch", "1", "--reeval", "--sandbox", "process"]) == 1
    out = capsys.readouterr().out
    assert "reeval seed 0" in out and "DIFFER" in out
    assert "the record retrieved its memory by 'bm25s', this replay by 'bm25s, offered tools only, own task and origins excluded'" in out


def test_k_candidates_are_ranked_by_the_proxy_and_only_the_best_is_committed(tmp_path, monkeypatch, counted):
    ep = RunContext(new_run(tmp_path, candidates=2, benchmark="bfcl-single", proxy_sft_steps=1, proxy_tasks=2))
    evaluated(ep, 0)
    scored = []
    real_proxies = evaluation.proxy_scores

    def proxies(run, dry, chains, units):   # the real proxy (a short SFT and a small dev subset), observed
        scored.extend((tuple(e for o in chain for e in o.edits), units) for chain in chains)
        return real_proxies(run, dry, chains, units)

    monkeypatch.setattr(evaluation, "proxy_scores", proxies)
    result = ep.stage(0, "propose", lambda: propose(ep, 0))
    assert result.candidates == 2 and len(scored) == 2 and {u for _, u in scored} == {1}
    proposals = json.loads((ep.store.epoch_dir(0) / "evolve" / "proposals.json").read_text())
    assert proposals["rungs"][0]["survivors"] == [result.chosen]
    chosen_edits = scored[result.chosen][0]
    assert tuple(result.edits) == chosen_edits and ep.ws.resolve("epoch-1") == result.candidate
    assert ep.stage(1, "curate", lambda: curate_candidate(ep, 1)).commit == result.candidate   # no new execution
    assert len(counted) == 1 + result.dry_runs


def test_an_ablated_resource_is_not_charged_in_c(tmp_path):
    """C and Cost_train count what the recipe consumes in the run: an all-ablated run charges 0,
    a run without RL data its SFT turns only; the curated figures stay beside them."""
    full = curate_candidate(RunContext(new_run(tmp_path / "full")), 0)
    none = curate_candidate(RunContext(new_run(tmp_path / "none", ablations=("no-memory", "no-rl", "no-sft"))), 0)
    assert none.C == 0 and none.cost_train == 0
    assert none.curated == {"C": full.C, "cost_train": full.cost_train} and full.cost_train > 0
    sft_only = RunContext(new_run(tmp_path / "sft", ablations=("no-rl",)))
    curation = curate_candidate(sft_only, 0)
    profile = json.loads((sft_only.store.epoch_dir(0) / "artifacts" / "profile.json").read_text())
    assert curation.cost_train == profile["sft"]["turns"] < full.cost_train
    assert 0 < curation.C < full.C
    assert curate_candidate(RunContext(new_run(tmp_path / "mem", ablations=("no-memory",))), 0).curated is None


def test_resume_refuses_a_curated_epochs_artifact_deleted_or_edited(tmp_path):
    from base.errors import UserError

    ep = RunContext(new_run(tmp_path))
    ep.stage(0, "curate", lambda: curate_candidate(ep, 0))
    artifacts = ep.store.epoch_dir(0) / "artifacts"
    RunContext(RunStore.open(ep.store.root))                       # intact: opens
    sft = artifacts / "sft.jsonl"
    original = sft.read_bytes()
    sft.write_bytes(original.replace(b'"user"', b'"user" ', 1))  # edited in place
    with pytest.raises(UserError, match=r"sft\.jsonl changed after epoch 0 was curated \(sha256 [0-9a-f]{12}… recorded"):
        RunContext(RunStore.open(ep.store.root))
    sft.unlink()                                               # deleted
    with pytest.raises(UserError, match=r"sft\.jsonl was deleted after epoch 0 was curated"):
        RunContext(RunStore.open(ep.store.root))
    sft.write_bytes(original)
    (artifacts / "manifest.json").write_text("{")
    with pytest.raises(UserError, match=r"manifest\.json is missing or damaged, though epoch 0 was curated"):
        RunContext(RunStore.open(ep.store.root))


def test_an_epoch_whose_curation_fails_is_rejected_with_the_reason_not_a_crash(tmp_path, counted):
    """The curate stage of a candidate that fails (here: past a 0.01 s curation limit, less than the
    sandbox's interpreter takes to start; at 0.2 s the sample's curation once finished in time on
    a quiet machine) leaves no artifacts folder; the stage is journaled without outputs and the
    epoch is decided rejected."""
    ep = RunContext(new_run(tmp_path, curation_timeout_s=0.01))
    loop.evaluate_candidate(ep, 0)
    curate, decide = ep.store.done(0, "curate"), ep.store.done(0, "decide")
    assert "timed out" in curate.result["failed"] and curate.outputs == {}
    assert not (ep.store.epoch_dir(0) / "artifacts").exists() and ep.store.done(0, "train-s0") is None
    assert decide.result["accepted"] is False and decide.result["reason"].startswith("curation failed: ")


def test_the_eta_is_the_finished_epochs_pace_less_what_the_current_epoch_has_spent(monkeypatch):
    """Measured on the default run: 15 min epochs showed `ETA 61 min` at the end of epoch 1 of 3,
    when the elapsed time of the epoch under way counted as pace and not as spent."""
    import types
    from evolver import context

    clock = [0.0]
    monkeypatch.setattr(context.time, "monotonic", lambda: clock[0])
    ctx = object.__new__(RunContext)
    ctx.cfg = types.SimpleNamespace(epochs=3)
    ctx._t0, ctx._ran, ctx._timed = 0.0, {0, 1, 2}, []
    assert ctx.progress(0) == "epoch 0 (1/3)"
    clock[0] = 900.0
    ctx.finished(0)   # 15 min an epoch; two left
    assert ctx.progress(1) == "epoch 1 (2/3, ETA 30 min)"
    clock[0] = 1740.0   # 14 min into epoch 1
    assert ctx.progress(1) == "epoch 1 (2/3, ETA 16 min)"
    clock[0] = 3000.0   # late: nothing left at this pace, not a negative time
    assert ctx.progress(1) == "epoch 1 (2/3, ETA 0 min)"
    ctx.finished(1)   # 50 min for 2 epochs: 25 an epoch
    assert ctx.progress(2) == "epoch 2 (3/3, ETA 25 min)"
    ctx.finished(2)
    assert ctx.progress(2) == "epoch 2 (3/3, ETA 0 min)"


def test_an_epochs_training_takes_over_an_earlier_epochs_sft_stage_when_it_would_repeat_it(tmp_path):
    """An edit that leaves the SFT data as it was (here: the same artifacts again) trains no second
    SFT stage: an epoch's training jobs offer the run's earlier trainings (trainer.sft_reuse)."""
    store = new_run(tmp_path)
    ep = RunContext(store)
    art = store.epoch_dir(0) / "artifacts"
    execute(ep.ws.files("epoch-0"), load_corpus([str(SAMPLE_CORPUS)]), art, executor=executor_mod.make_executor("process"),
            commit=ep.ws.resolve("epoch-0"))
    first = train_epoch(ep.cfg, art, store.epoch_dir(0) / "train-s0", 0)
    assert [j.kwargs["reuse_sft"] for j in ep.jobs.pending(0, samples=False)[0] if j.key == "train-s0"] == [[]]
    offered = [j.kwargs["reuse_sft"] for j in ep.jobs.pending(1, samples=False)[0] if j.key == "train-s0"]
    assert offered == [[str(store.epoch_dir(0) / "train-s0")]]
    again = train_epoch(ep.cfg, art, store.epoch_dir(1) / "train-s0", 0, reuse_sft=offered[0])
    assert again["summary"]["sft"] == {**first["summary"]["sft"], "reused_from": str((store.epoch_dir(0) / "train-s0").resolve())}
    assert (store.epoch_dir(1) / "train-s0" / "adapter" / "adapter_model.safetensors").read_bytes() == \
        (store.epoch_dir(0) / "train-s0" / "adapter" / "adapter_model.safetensors").read_bytes()

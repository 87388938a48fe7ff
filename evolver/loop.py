"""The epoch loop (paper §4): one call per stage into the package that owns it.

    execute ρ_e in the sandbox → train π_e → evaluate on dev with memory → P, C, J
    → accept or roll back (git) → diagnose the best strategy's failures
    → effectiveness revision → efficiency revision → commit ρ_{e+1} with its inputs/

Every stage goes through `RunStore.stage`, so `resume` skips what is done and intact and
reaches the same decisions.
"""
from __future__ import annotations

import dataclasses
import shutil
import sys
import tempfile
import time
from pathlib import Path
from statistics import fmean

from evolver.diagnose import diagnose
from evolver.files import atomic_json, read_json, read_jsonl
from evolver.objective import accept, accept_paired, final_choice, objective
from evolver.proposers.brief import Brief, Verdict
from evolver.proposers.offline import OfflineProposer
from evolver.store import RunStore
from sandbox.corpus import load_corpus
from sandbox.curate import CurationFailed, execute, make_executor
from sandbox.executor import PROJECT_ROOT, Limits
from sandbox.workspace import Workspace


SEED_STRATEGY = PROJECT_ROOT / "curation_strategies" / "seed"


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class Epochs:
    """One run's stages; each method is one stage of one epoch and returns its journal result."""

    def __init__(self, store: RunStore):
        self.store, self.cfg = store, store.config
        if not (store.root / "strategy").exists():   # created here, so a kill right after run.json is harmless
            Workspace.create(store.root / "strategy", SEED_STRATEGY, params=self.params())
        self.ws = Workspace.open(store.root / "strategy")
        self.corpus = load_corpus(self.cfg["corpus"], on_error=self.cfg.get("on_error", "abort"))
        self.executor = make_executor(self.cfg["sandbox"], warn=say)
        self.llm = self._llm()
        if self.cfg.get("proposer", "offline") == "agent":
            from evolver.proposers.agent import AgentLimits, AgentProposer

            self.proposer = AgentProposer(self.llm, self.executor, AgentLimits.from_mapping(self.cfg.get("agent")))
        else:
            self.proposer = OfflineProposer()

    def _llm(self):
        """The run's LLM (None without one), its budgets reduced by what earlier stages spent."""
        if not self.cfg.get("llm"):
            return None
        from evolver.llm import LLM, LLMConfig

        config = LLMConfig.from_mapping(self.cfg["llm"])
        spent = llm_spent(self.store)
        if config.budget_tokens is not None:
            config = dataclasses.replace(config, budget_tokens=max(0, config.budget_tokens - spent["tokens"]))
        if config.budget_usd is not None:
            config = dataclasses.replace(config, budget_usd=max(0.0, config.budget_usd - spent["usd"]))
        return LLM(config, self.store.root / "llm")

    def dir(self, epoch: int, name: str) -> Path:
        path = self.store.epoch_dir(epoch) / name
        shutil.rmtree(path, ignore_errors=True)   # a stage runs again only when it is not done: start clean
        return path

    def stage(self, epoch: int, name: str, run, outputs=()):
        done = self.store.done(epoch, name)
        if done is not None:
            return done.get("result")
        t0 = time.monotonic()
        say(f"epoch {epoch} · {name} …")
        if self.llm is not None:
            run = self._metered(run)
        result = self.store.stage(epoch, name, run, outputs)
        say(f"epoch {epoch} · {name} done in {time.monotonic() - t0:.1f} s")
        return result

    def _metered(self, run):
        """`run` with the LLM usage it caused added to its result (tokens, USD, calls, time)."""
        def metered():
            before = self.llm.usage()
            result = run()
            after = self.llm.usage()
            delta = {k: after[k] - before[k] for k in ("calls", "replayed", "prompt_tokens", "completion_tokens", "usd", "wall_s")}
            if delta["calls"] and isinstance(result, dict):
                result = {**result, "llm": {**delta, "usd": round(delta["usd"], 6), "wall_s": round(delta["wall_s"], 3)}}
            return result
        return metered

    # ------------------------------------------------------------------ the stages

    def curate(self, epoch: int) -> dict:
        out = self.dir(epoch, "artifacts")
        sha = self.ws.resolve(f"epoch-{epoch}")
        files = self.ws.files(sha)
        try:
            result = execute(files, self.corpus, out, seed=self.cfg["seed"], executor=self.executor,
                             limits=Limits(timeout_s=self.cfg["curation_timeout_s"]), commit=sha, n_ref=self.cfg["n_ref"])
        except CurationFailed as exc:
            return {"commit": sha, "failed": exc.reason}
        return {"commit": sha, "C": result.manifest["C"], "cost_train": result.manifest["cost_train"],
                "counts": {k: v["count"] for k, v in result.manifest["artifacts"].items() if "count" in v}}

    def train(self, epoch: int, seed: int) -> dict:
        from trainer.train import train

        art, out = self.store.epoch_dir(epoch) / "artifacts", self.dir(epoch, f"train-s{seed}")
        sft = None if "no-sft" in self.cfg["ablations"] or not _count(art / "sft.jsonl") else art / "sft.jsonl"
        rl = None if "no-rl" in self.cfg["ablations"] or not _count(art / "rl.jsonl") else art / "rl.jsonl"
        if sft is None and rl is None:
            return {"adapter": None, "skipped": "nothing to train"}
        summary = train(sft, rl, out, base=self.cfg["base"], profile=self.cfg["profile"], seed=seed,
                        echo=sys.stderr, progress=True, **self.cfg["train_budget"])
        return {"adapter": str(out / "adapter"), "summary": {k: summary.get(k) for k in ("wall_s", "steps", "sft", "grpo")}}

    def evaluate(self, epoch: int, seed: int, adapter: str | None) -> dict:
        from benchmarks.eval_cli import evaluate_to_dir

        memory = self.store.epoch_dir(epoch) / "artifacts" / "memory.jsonl"
        use_memory = "no-memory" not in self.cfg["ablations"] and _count(memory)
        doc = evaluate_to_dir(self.cfg["benchmark"], "dev", self.dir(epoch, f"eval-s{seed}"), tasks=self.cfg["tasks"],
                              metric=self.cfg["metric"], memory=str(memory) if use_memory else None, seed=seed,
                              policy_options={"base": self.cfg["base"], "adapter": adapter}, progress=True,
                              **self.cfg["eval_options"])
        return {"P": doc["P"], "metrics": doc["metrics"]}

    def decide(self, epoch: int, curation: dict, scores: list[dict], edits: list[str]) -> dict:
        sha = curation["commit"]
        if "failed" in curation:
            decision = {"accepted": False, "reason": f"curation failed: {curation['failed']}", "P": None, "J": None}
        else:
            p = fmean(s["P"] for s in scores)
            j = objective(p, curation["C"], self.cfg["lambda"])
            decision = {"P": p, "C": curation["C"], "J": j}
            best = self.best()
            if best is None:
                decision.update(accepted=True, reason="the seed strategy ρ0 is the first best")
            elif len(scores) > 1:
                verdict = accept_paired(self._per_task(epoch), self._per_task(best["epoch"]), curation["C"], best["C"],
                                        self.cfg["lambda"], self.cfg["margin"], seed=self.cfg["seed"])
                decision.update(accepted=verdict.accepted, reason=verdict.reason)
            else:
                verdict = accept(j, best["J"], self.cfg["margin"])
                decision.update(accepted=verdict.accepted, reason=verdict.reason)
        message = (f"epoch {epoch}: {'accepted' if decision['accepted'] else 'rejected'} — {decision['reason']}\n\n"
                   f"P = {decision['P']}, C = {decision.get('C')}, J = {decision['J']}")
        if epoch == 0:
            pass  # ρ0 is best at creation
        elif decision["accepted"]:
            self.ws.accept(sha, message, epoch=epoch)
        else:
            self.ws.reject(sha, message, epoch=epoch)
        return {**decision, "epoch": epoch, "commit": sha, "edits": edits}

    def diagnose(self, epoch: int) -> dict:
        best = self.best()
        trajectories = [t for s in self.cfg["seeds"] for t in read_jsonl(self.store.epoch_dir(best["epoch"]) / f"eval-s{s}" / "trajectories.jsonl")]
        passed_before = {t["meta"]["task_id"] for d in self.decisions() if d["accepted"] and d["epoch"] < best["epoch"]
                         for s in self.cfg["seeds"] for t in read_jsonl(self.store.epoch_dir(d["epoch"]) / f"eval-s{s}" / "trajectories.jsonl")
                         if t["outcome"]["success"]}
        failed_points, signals = diagnose(trajectories, passed_before)
        result = {"of_epoch": best["epoch"], "families": signals["families"]}
        if self.llm is not None and self.cfg.get("diagnosis", "rules+llm") == "rules+llm":
            from evolver.llm_diagnose import llm_diagnose

            points, stats = llm_diagnose(trajectories, self.llm, self.store.root / "llm" / "diagnosis-cache", progress=True)
            failed_points += points
            result["llm_diagnosis"] = stats
        out = self.dir(epoch, "diagnosis")
        atomic_json(out / "failed_points.json", failed_points)
        atomic_json(out / "signals.json", signals)
        return result

    def propose(self, epoch: int) -> dict:
        """Effectiveness, then efficiency revision of `best`, committed as the candidate of epoch + 1."""
        best = self.best()
        diag = self.store.epoch_dir(epoch) / "diagnosis"
        failed_points, signals = read_json(diag / "failed_points.json"), read_json(diag / "signals.json")
        profile = read_json(self.store.epoch_dir(best["epoch"]) / "artifacts" / "profile.json")
        rejected = [k for d in self.decisions() if not d["accepted"] for k in d.get("edits", [])]
        inputs = {"failed_points": failed_points, "signals": signals, "profile": profile, "params": self.params()}
        brief = Brief(files=self.ws.files("best"), failed_points=failed_points, signals=signals, profile=profile,
                      lam=self.cfg["lambda"], rejected_edits=rejected, history=self.history(), corpus=self.corpus,
                      seed=self.cfg["seed"])
        parent_hashes, candidate_hashes = _artifact_hashes(self.store.epoch_dir(best["epoch"]) / "artifacts"), None
        out = self.dir(epoch, "evolve")
        phases = [p for p in ("effectiveness", "efficiency") if f"no-{p}" not in self.cfg["ablations"]]
        sha, edits, log, exhausted = None, [], [], False
        for phase in phases:
            def validate(files: dict) -> Verdict:
                nonlocal candidate_hashes
                verdict, candidate_hashes = check_candidate(files, self.corpus, self.executor, parent_hashes, seed=self.cfg["seed"],
                                                            n_ref=self.cfg["n_ref"], timeout_s=self.cfg["curation_timeout_s"])
                return verdict

            outcome = self.proposer.revise(phase, brief, validate, out)
            log += [{"phase": phase, **attempt} for attempt in outcome.attempts]
            if outcome.budget_exhausted:
                say(f"epoch {epoch}: the run's LLM budget is spent; no more proposals")
                exhausted = True
                break
            if outcome.files is None:
                continue
            sha = self._commit(epoch + 1, outcome.files, outcome.message, inputs)
            new_files = {**{k: v for k, v in brief.files.items() if k.startswith("inputs/")},
                         **{k: v for k, v in outcome.files.items() if not k.startswith("inputs/")}}
            brief, parent_hashes = dataclasses.replace(brief, files=new_files), candidate_hashes
            edits += outcome.edits
        atomic_json(out / "proposals.json", log)
        if sha is not None:
            self.ws.tag_epoch(epoch + 1, sha)
        return {"candidate": sha, "edits": edits, **({"budget_exhausted": True} if exhausted else {})}

    # ------------------------------------------------------------------ helpers

    def params(self) -> dict:
        return {"lambda": self.cfg["lambda"], "n_ref": self.cfg["n_ref"], "seed": self.cfg["seed"]}

    def _commit(self, epoch: int, files: dict, message: str, inputs: dict) -> str:
        with tempfile.TemporaryDirectory(prefix="curateevo-rev-") as tmp:
            for name, data in files.items():
                (Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
                (Path(tmp) / name).write_bytes(data)
            return self.ws.commit_candidate(epoch, tmp, inputs, message, parent="best")

    def history(self) -> list[dict]:
        """The rolled-back attempts, for the code agent: what each changed and how it scored."""
        rows, best_j = [], None
        for d in self.decisions():
            if not d["accepted"] and d["epoch"] > 0:
                message = self.ws.log(d["commit"])[0]["message"] if d.get("commit") else ""
                rows.append({"epoch": d["epoch"], "summary": message.splitlines()[0] if message else "",
                             "diff": self.ws.diff_summary("best", d["commit"]), "P": d.get("P"), "C": d.get("C"),
                             "J": d.get("J"), "best_J": best_j, "reason": d.get("reason")})
            elif d["accepted"]:
                best_j = d.get("J")
        return rows

    def decisions(self) -> list[dict]:
        return [d for d in (e.get("result") for e in self.store.journal.events()
                            if e.get("event") == "stage_done" and e.get("stage") == "decide") if d]

    def best(self) -> dict | None:
        accepted = [d for d in self.decisions() if d["accepted"]]
        return accepted[-1] if accepted else None

    def _per_task(self, epoch: int) -> dict[str, list[float]]:
        scores: dict[str, list[float]] = {}
        for s in self.cfg["seeds"]:
            for t in read_jsonl(self.store.epoch_dir(epoch) / f"eval-s{s}" / "trajectories.jsonl"):
                scores.setdefault(t["meta"]["task_id"], []).append(float(t["outcome"]["success"]))
        return scores


def run_epochs(store: RunStore) -> dict:
    """Run (or resume) every epoch of the run in `store`; returns the final choice."""
    ep = Epochs(store)
    for epoch in range(ep.cfg["epochs"]):
        if ep.ws.epochs().get(epoch) is None:
            say(f"epoch {epoch}: no candidate was proposed; the run ends here")
            break
        curation = ep.stage(epoch, "curate", lambda: ep.curate(epoch), [store.epoch_dir(epoch) / "artifacts"])
        scores = []
        if "failed" not in curation:
            for seed in ep.cfg["seeds"]:
                trained = ep.stage(epoch, f"train-s{seed}", lambda: ep.train(epoch, seed))
                scores.append(ep.stage(epoch, f"evaluate-s{seed}", lambda: ep.evaluate(epoch, seed, trained["adapter"]),
                                       [store.epoch_dir(epoch) / f"eval-s{seed}"]))
        proposal = store.done(epoch - 1, "propose") if epoch else None
        edits = (proposal or {}).get("result", {}).get("edits", []) if proposal else []
        decision = ep.stage(epoch, "decide", lambda: ep.decide(epoch, curation, scores, edits))
        say(f"epoch {epoch}: {'ACCEPTED' if decision['accepted'] else 'rejected'} — {decision['reason']}")
        if epoch + 1 < ep.cfg["epochs"]:
            ep.stage(epoch, "diagnose", lambda: ep.diagnose(epoch), [store.epoch_dir(epoch) / "diagnosis"])
            ep.stage(epoch, "propose", lambda: ep.propose(epoch), [store.epoch_dir(epoch) / "evolve"])
    evaluated = [d for d in ep.decisions() if d.get("P") is not None]
    final = final_choice(evaluated)
    return ep.stage(-1, "final", lambda: {"epoch": final["epoch"], "commit": final["commit"], "P": final["P"], "C": final["C"]})


def check_candidate(files: dict, corpus, executor, parent: dict, *, seed: int, n_ref: float,
                    timeout_s: float) -> tuple[Verdict, dict | None]:
    """The dry run of a candidate: its strategy curates the whole corpus in the sandbox and the
    host checker accepts the output (else `failed`), and the artifacts differ from the parent's
    `parent` hashes (else `empty`). Returns the verdict and the artifact hashes."""
    with tempfile.TemporaryDirectory(prefix="curateevo-dry-") as tmp:
        try:
            execute(files, corpus, Path(tmp) / "out", seed=seed, executor=executor,
                    limits=Limits(timeout_s=timeout_s), n_ref=n_ref)
        except CurationFailed as exc:
            return Verdict(False, "failed", f"the dry run on the whole corpus failed the host's check: {exc.reason}"), None
        hashes = _artifact_hashes(Path(tmp) / "out")
    if hashes == parent:
        return Verdict(False, "empty", "the dry run's artifacts are byte-identical to the parent's: the change "
                                       "alters nothing the trainer or the agent would see"), hashes
    return Verdict(True, "changed"), hashes


def llm_spent(store: RunStore) -> dict:
    """Tokens and USD the run's finished stages spent on LLM calls (for budgets across resume)."""
    tokens, usd = 0, 0.0
    for event in store.journal.events():
        usage = (event.get("result") or {}).get("llm") if event.get("event") == "stage_done" else None
        if usage:
            tokens += usage["prompt_tokens"] + usage["completion_tokens"]
            usd += usage["usd"]
    return {"tokens": tokens, "usd": usd}


def _count(path: Path) -> int:
    if not path.exists():
        return 0
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def _artifact_hashes(folder: Path) -> dict:
    manifest = read_json(folder / "manifest.json")
    return {name: a["sha256"] for name, a in manifest["artifacts"].items() if name != "profile.json"}

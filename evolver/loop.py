"""The epoch loop (paper §4): one call per stage into the package that owns it.

    execute ρ_e in the sandbox → train π_e → evaluate on dev with memory → P, C, J
    → accept or roll back (git) → diagnose the best strategy's failures
    → effectiveness revision → efficiency revision → commit ρ_{e+1} with its inputs/

A candidate flows one way: the proposer returns files → the loop adds this epoch's `inputs/` →
the dry run executes exactly those files in the sandbox → they are committed on the candidate
branch → the dry run's artifacts, bound to that commit, are the next epoch's artifacts (the
`curate` stage executes only what has no such artifacts: ρ0, or a resumed run that lost them).

Every stage goes through `RunStore.stage`, so `resume` skips what is done and intact and
reaches the same decisions.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from statistics import fmean

from benchmarks import registry
from evolver.acceptance import Scores, make_rule
from evolver.backends import make_backend
from evolver.config import RunConfig
from evolver.epoch_jobs import EpochJobs
from evolver.diagnose import diagnose, rejected_lesson
from evolver.lineage import annotate, brief_of, outcome_deltas
from evolver.signals import summarize
from base.errors import RunFailed
from base.files import atomic_json, read_json, read_jsonl
from base.objective import objective
from evolver.objective import c_only, charged_cost, final_choice
from evolver.proposers import make_proposer
from evolver.proposers.brief import Brief
from evolver.selection import select
from evolver.integrity import check_artifacts, check_workspace
from evolver.stages import DryRuns, _artifact_hashes, channel_answer
from evolver.store import RunStore
from sandbox.corpus import load_corpus, train_part
from sandbox.checker import cost_c
from sandbox.curate import CurationFailed, bind_commit, execute, runtime_sha256
from sandbox.executor import PROJECT_ROOT, Limits, make_executor
from sandbox.strategy_files import inputs_files
from sandbox.workspace import Workspace

SEED_STRATEGY = PROJECT_ROOT / "curation_strategies" / "seed"
# ρ0's inputs: no diagnosis yet, but every file a strategy may read is there
EMPTY_DIAGNOSIS = {"failed_points": [], "signals": {"families": {}, "forgetting": [], "boundary": [], "rare": []},
                   "profile": {}, "rejected": []}
LESSONS = 3   # rolled-back candidates since the best whose lessons the next brief carries (most recent)


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class Epochs:
    """One run's stages; each method is one stage of one epoch and returns its journal result."""

    def __init__(self, store: RunStore, backend=None):
        self.store = store
        if backend is not None:
            self.backend = backend
        self.cfg = RunConfig.from_json(store.config, where=str(store.root / "run.json"))
        if not (store.root / "strategy").exists():   # created here, so a kill right after run.json is harmless
            Workspace.create(store.root / "strategy", SEED_STRATEGY, params=self.cfg.params(), inputs=EMPTY_DIAGNOSIS)
        self.ws = Workspace.open(store.root / "strategy")
        check_workspace(store, self.ws)
        check_artifacts(store)
        self.rule = make_rule(self.cfg)
        self._t0, self._ran, self._timed = None, set(), []

    # what only some stages need is made when first used (a retrain needs no sandbox, no agent)
    @functools.cached_property
    def corpus(self):
        """What the strategy sees: the raw corpus, less its held-out dev tenth when the dev
        benchmark is the corpus's own (an environment that is not executable, replay): those records
        never reach the sandbox."""
        corpus = load_corpus(list(self.cfg.corpus), on_error=self.cfg.on_error, tools=self.cfg.tools or None)
        return corpus if registry.get(self.cfg.benchmark).executable else train_part(corpus)

    @functools.cached_property
    def executor(self):
        return make_executor(self.cfg.sandbox, warn=say)

    @functools.cached_property
    def proposer(self):
        return make_proposer(self.cfg.proposer, self.cfg, self.llm, self.executor)

    @functools.cached_property
    def llm(self):
        """The run's LLM (None without one), its budgets reduced by what earlier stages spent."""
        if not self.cfg.llm:
            return None
        from evolver.llm import LLM, LLMConfig

        config = LLMConfig.from_mapping(self.cfg.llm)
        spent = llm_spent(self.store)
        if config.budget_tokens is not None:
            config = dataclasses.replace(config, budget_tokens=max(0, config.budget_tokens - spent["tokens"]))
        if config.budget_usd is not None:
            config = dataclasses.replace(config, budget_usd=max(0.0, config.budget_usd - spent["usd"]))
        return LLM(config, self.store.root / "llm")

    @functools.cached_property
    def curation_llm(self):
        """What answers a strategy's ctx.llm: the run's LLM layer (None without one)."""
        return None if self.llm is None else channel_answer(self.llm)

    def dir(self, epoch: int, name: str) -> Path:
        path = self.store.epoch_dir(epoch) / name
        shutil.rmtree(path, ignore_errors=True)   # a stage runs again only when it is not done: start clean
        return path

    def stage(self, epoch: int, name: str, run, outputs=()):
        done = self.store.done(epoch, name)
        if done is not None:
            return done.get("result")
        t0 = time.monotonic()
        self._t0 = self._t0 or t0
        self._ran.add(epoch)
        say(f"{self.progress(epoch)} · {name} …")
        if self.llm is not None:
            run = self._metered(run)
        result = self.store.stage(epoch, name, run, outputs)
        say(f"{self.progress(epoch)} · {name} done in {time.monotonic() - t0:.1f} s")
        return result

    def progress(self, epoch: int) -> str:
        """`epoch 1 (2/3, ETA 25 min)`: where the run is, and when it should end at the pace of
        the epochs this process ran (a resumed run's skipped stages do not count)."""
        if epoch < 0:
            return "run"
        eta = ""
        if self._timed:
            per_epoch = (time.monotonic() - self._t0) / len(self._timed)
            eta = f", ETA {per_epoch * max(0, self.cfg.epochs - 1 - self._timed[-1]) / 60:.0f} min"
        return f"epoch {epoch} ({epoch + 1}/{self.cfg.epochs}{eta})"

    def finished(self, epoch: int) -> None:
        """Epoch `epoch` is done (decided, diagnosed, proposed on): if it ran here, it times the ETA."""
        if epoch in self._ran:
            self._timed.append(epoch)

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
        """The artifacts of the candidate tagged `epoch-<e>`: its dry run's when they are there and
        bound to this commit, corpus, seed and runtime; else executed now."""
        sha = self.ws.resolve(f"epoch-{epoch}")
        folder = self.store.epoch_dir(epoch) / "artifacts"
        manifest = self._bound_manifest(folder, sha)
        if manifest is None:
            out = self.dir(epoch, "artifacts")
            try:
                manifest = execute(self.ws.files(sha), self.corpus, out, seed=self.cfg.seed, executor=self.executor,
                                   limits=Limits(timeout_s=self.cfg.curation_timeout_s), commit=sha,
                                   n_ref=self.cfg.n_ref, llm=self.curation_llm, budget=self.cfg.curation_budget).manifest
            except CurationFailed as exc:
                return {"commit": sha, "failed": exc.reason}
        counts = {k: v["count"] for k, v in manifest["artifacts"].items() if "count" in v}
        if not {"no-sft", "no-rl"} & set(self.cfg.ablations):
            return {"commit": sha, "C": manifest["C"], "cost_train": manifest["cost_train"], "counts": counts}
        # an ablated resource costs nothing: C counts what the recipe consumes in this run
        charged = charged_cost(read_json(self.store.epoch_dir(epoch) / "artifacts" / "profile.json"), self.cfg.ablations)
        return {"commit": sha, "C": round(cost_c(charged, self.cfg.n_ref), 12), "cost_train": charged, "counts": counts,
                "curated": {"C": manifest["C"], "cost_train": manifest["cost_train"]}}

    def _bound_manifest(self, folder: Path, sha: str) -> dict | None:
        if not (folder / "manifest.json").is_file():
            return None
        manifest = read_json(folder / "manifest.json")
        same = (manifest["strategy"]["commit"] == sha and manifest["corpus"]["sha256"] == self.cfg.corpus_sha256
                and manifest["corpus"].get("holdout") == self.corpus.holdout
                and manifest["seed"] == self.cfg.seed and manifest["runtime_sha256"] == runtime_sha256()
                and manifest.get("budget") == self.cfg.curation_budget)
        return manifest if same else None

    # ------------------------------------------------------------------ trainings and evaluations

    @functools.cached_property
    def backend(self):
        """Where trainings and evaluations run (evolver/backends/): this machine, or a Ray cluster."""
        return make_backend(self.cfg, self.store.root)

    @functools.cached_property
    def needs(self):
        return self.backend.prepare(self.cfg)

    @functools.cached_property
    def jobs(self) -> EpochJobs:
        return EpochJobs(self.store, self.cfg, self.needs)

    def train_and_evaluate(self, epoch: int) -> list[dict]:
        """Every seed's training, evaluation (and boundary rollouts) of the epoch, submitted to the
        backend at once and journaled in seed order, whatever order they finish in."""
        jobs, adopted = self.jobs.pending(epoch, self.samples(epoch))
        batch = self.backend.submit(jobs, landed=lambda job, result: self.jobs.land(epoch, job, result))

        def take(key: str):
            return lambda: adopted[key] if key in adopted else batch.result(key)

        folder, scores = self.store.epoch_dir(epoch), []
        for seed in self.cfg.seeds:
            self.stage(epoch, f"train-s{seed}", take(f"train-s{seed}"),
                       lambda result: [Path(result["adapter"])] if result["adapter"] else [])
            scores.append(self.stage(epoch, f"evaluate-s{seed}", take(f"evaluate-s{seed}"), [folder / f"eval-s{seed}"]))
            if self.samples(epoch):
                self.stage(epoch, f"sample-s{seed}", take(f"sample-s{seed}"), [folder / f"sample-s{seed}"])
        return scores

    def samples(self, epoch: int) -> bool:
        """Whether the epoch samples K rollouts per dev task for the boundary signal (only a diagnosis
        reads them; an environment that is not executable, replay, has no episodes)."""
        return (self.cfg.boundary_samples > 1 and registry.get(self.cfg.benchmark).executable
                and epoch + 1 < self.cfg.epochs)

    def decide(self, epoch: int, curation: dict, scores: list[dict], edits: list[str]) -> dict:
        sha = curation["commit"]
        if "failed" in curation:
            decision = {"accepted": False, "reason": f"curation failed: {curation['failed']}", "P": None, "J": None}
        else:
            if any(s["P"] is None for s in scores):   # nothing was scored: no P to decide on
                raise RunFailed(f"epoch {epoch}: the evaluation scored nothing (dev {scores[0].get('dev')}), so P is "
                                f"undefined; the dev set gives no {self.cfg.metric} item for this run")
            p = fmean(s["P"] for s in scores)
            candidate = Scores(p, curation["C"], objective(p, curation["C"], self.cfg.lam), self._per_task(epoch))
            best = self.best()
            verdict = self.rule.decide(candidate, None if best is None else
                                       Scores(best["P"], best["C"], best["J"], self._per_task(best["epoch"])), self.cfg.lam)
            decision = {"P": p, "C": curation["C"], "J": candidate.J, "accepted": verdict.accepted, "reason": verdict.reason}
            cheaper = c_only(p, curation["C"], best) if verdict.accepted else None
            if cheaper:   # said so wherever the decision is shown (commit message, log, report)
                decision["c_only"], decision["reason"] = True, f"{decision['reason']}; {cheaper}"
            if scores[0].get("dev"):
                decision["dev"] = scores[0]["dev"]
            gold = [s["gold_ll"] for s in scores if s.get("gold_ll") is not None]
            if gold:   # the low-variance signal beside P (benchmarks/gold_likelihood.py); not part of J
                decision["gold_ll"] = round(fmean(gold), 6)
        message = (f"epoch {epoch}: {'accepted' if decision['accepted'] else 'rejected'} — {decision['reason']}\n\n"
                   f"P = {decision['P']}, C = {decision.get('C')}, J = {decision['J']}")
        if epoch > 0:   # ρ0 is best from the workspace's creation
            (self.ws.accept if decision["accepted"] else self.ws.reject)(sha, message, epoch=epoch)
        self._track(epoch, decision, curation)
        return {**decision, "epoch": epoch, "commit": sha, "edits": edits}

    def no_candidate(self, epoch: int) -> dict:
        """The decision of an epoch for which every proposal was refused: not evaluated, nothing
        committed, the reasons recorded; its refused edits are not proposed again."""
        proposed = (self.store.done(epoch - 1, "propose") or {}).get("result") or {}
        reasons = proposed.get("refused") or ["the proposer offered no candidate"]
        spent = {"budget_exhausted": True} if proposed.get("budget_exhausted") else {}
        if spent:
            reasons = ["the run's LLM budget is spent", *reasons]
        return {"epoch": epoch, "commit": None, "accepted": False, "no_candidate": True, "P": None, "C": None,
                "J": None, "reason": "no valid candidate: " + "; ".join(reasons),
                "edits": proposed.get("refused_edits", []), **spent}

    def _track(self, epoch: int, decision: dict, curation: dict) -> None:
        """P, C, J, the decision, P per category and the curated scale of the epoch, to the run's trackers."""
        from trainer.tracking import log_epoch_metrics

        per_category: dict[str, list[float]] = {}
        for s in self.cfg.seeds:
            path = self.store.epoch_dir(epoch) / f"eval-s{s}" / "metrics.json"
            if path.is_file():
                for name, m in read_json(path)["per_category"].items():
                    if m.get(self.cfg.metric) is not None:
                        per_category.setdefault(name, []).append(m[self.cfg.metric])
        log_epoch_metrics(self.cfg.report_to, self.store.root, epoch, {
            "P": decision["P"], "C": decision.get("C"), "J": decision["J"], "accepted": decision["accepted"],
            "P_per_category": {k: fmean(v) for k, v in per_category.items()},
            "scale": {k.split(".")[0]: v for k, v in (curation.get("counts") or {}).items()}})

    def diagnose(self, epoch: int) -> dict:
        best = self.best()
        trajectories = self._evaluated(best["epoch"])
        # every policy evaluated before the diagnosed one, rejected ones too (each was a trained policy)
        history = [summarize(self._evaluated(d["epoch"])) for d in self.decisions()
                   if d["epoch"] < best["epoch"] and d.get("P") is not None]
        profile = self.store.epoch_dir(best["epoch"]) / "artifacts" / "profile.json"
        failed_points, signals = diagnose(trajectories, history=history, sampled=self._evaluated(best["epoch"], "sample"),
                                          params=self.cfg.signal_params(),
                                          profile=read_json(profile) if profile.is_file() else None)
        result = {"of_epoch": best["epoch"], "families": signals["families"]}
        if self.llm is not None and self.cfg.diagnosis == "rules+llm":
            from evolver.llm_diagnose import llm_diagnose

            points, stats = llm_diagnose(trajectories, self.llm, self.store.root / "llm" / "diagnosis-cache", progress=True)
            failed_points += points
            result["llm_diagnosis"] = stats
        lessons = self.lessons(best)
        if lessons:
            result["rejected"] = {str(x["epoch"]): {"broke": len(x["broke"]), "fixed": len(x["fixed"])} for x in lessons}
        out = self.dir(epoch, "diagnosis")
        deltas = outcome_deltas(self.store, self.cfg.seeds, until=epoch)   # what each evaluated edit fixed and broke
        atomic_json(out / "failed_points.json", annotate(failed_points, deltas))
        atomic_json(out / "signals.json", signals)
        atomic_json(out / "outcomes.json", brief_of(deltas))
        atomic_json(out / "rejected.json", lessons)
        return result

    def lessons(self, best: dict) -> list[dict]:
        """What the candidates rolled back since `best` was accepted teach (the last LESSONS of
        them, oldest first): each one's evaluation against the best's (diagnose.rejected_lesson:
        the tasks it broke and fixed, its failures, its own signals), with its edits and scores."""
        best_trajectories, lessons = self._evaluated(best["epoch"]), []
        for d in self.decisions():
            if d["accepted"] or d["epoch"] <= best["epoch"] or d.get("P") is None:
                continue
            message = self.ws.log(d["commit"])[0]["message"] if d.get("commit") else ""
            lesson = rejected_lesson(self._evaluated(d["epoch"]), best_trajectories,
                                     sampled=self._evaluated(d["epoch"], "sample"), params=self.cfg.signal_params())
            lessons.append({"epoch": d["epoch"], "summary": message.splitlines()[0] if message else "",
                            "edits": list(d.get("edits", [])), **{k: d.get(k) for k in ("P", "C", "J", "reason")},
                            "against": {k: best[k] for k in ("epoch", "P", "C", "J")}, **lesson})
        return lessons[-LESSONS:]

    def propose(self, epoch: int) -> dict:
        """Effectiveness, then efficiency revision of `best`: each dry-run with this epoch's
        inputs, committed on `candidates/epoch-(e+1)`; the last one is tagged `epoch-(e+1)` and
        its dry run's artifacts become epoch e+1's."""
        best = self.best()
        diag = self.store.epoch_dir(epoch) / "diagnosis"
        failed_points, signals = read_json(diag / "failed_points.json"), read_json(diag / "signals.json")
        lessons = read_json(diag / "rejected.json") if (diag / "rejected.json").is_file() else []   # older runs: none
        profile = read_json(self.store.epoch_dir(best["epoch"]) / "artifacts" / "profile.json")
        inputs = inputs_files({"failed_points": failed_points, "signals": signals, "profile": profile,
                               "rejected": lessons, "params": self.cfg.params()})
        parent = {k: v for k, v in self.ws.files("best").items() if not k.startswith("inputs/")}
        rejected = [k for d in self.decisions() if not d["accepted"] for k in d.get("edits", [])]
        brief = Brief(files={**parent, **inputs}, failed_points=failed_points, signals=signals, profile=profile,
                      lam=self.cfg.lam, rejected_edits=rejected, history=self.history(), corpus=self.corpus,
                      seed=self.cfg.seed, score={k: best[k] for k in ("epoch", "P", "C", "J")},
                      budget=self.cfg.curation_budget,
                      outcomes=read_json(diag / "outcomes.json") if (diag / "outcomes.json").is_file() else (),
                      rejected=lessons, benchmark=self.cfg.benchmark)
        out, artifacts = self.dir(epoch, "evolve"), self.dir(epoch + 1, "artifacts")
        out.mkdir(parents=True)
        phases = [p for p in ("effectiveness", "efficiency") if f"no-{p}" not in self.cfg.ablations]
        k = self.cfg.candidates if hasattr(self.proposer, "candidates") and phases[:1] == ["effectiveness"] else 1
        sha, edits, selection = None, [], None
        with tempfile.TemporaryDirectory(prefix=".dry-runs-", dir=self.store.root) as tmp:
            dry = DryRuns(Path(tmp), inputs, self.corpus, self.executor, self.cfg,
                          _artifact_hashes(self.store.epoch_dir(best["epoch"]) / "artifacts"), self.curation_llm)
            if k > 1:   # k effectiveness revisions, each with its efficiency revision; the proxy picks one pair
                firsts = self.proposer.candidates("effectiveness", brief, dry.validate, k, out)
                log = [{"phase": "effectiveness", **a, "candidate": i} for i, o in enumerate(firsts) for a in o.attempts]
                exhausted = any(o.budget_exhausted for o in firsts)
                pairs = {}   # candidate number → (chain, attempt log, budget exhausted)
                for i, first in enumerate(firsts):
                    if first.files:
                        pairs[i] = self._revise(brief, dry, out / f"candidate-{i}", phases[1:], [first])
                log += [{**row, "candidate": i} for i, (_, rows, _) in pairs.items() for row in rows]
                exhausted = exhausted or any(e for _, _, e in pairs.values())
                chain, numbers = [], list(pairs)
                if pairs:
                    selection = select([pairs[i][0] for i in numbers], budget=self.cfg.proxy_budget or
                                       len(pairs) * max(1, math.ceil(math.log2(len(pairs)))),
                                       proxy_scores=lambda chains, units: self._proxies(dry, chains, units))
                    chain = selection.best
                    # rungs and the choice by candidate number (a candidate that found nothing is not ranked)
                    selection.index = numbers[selection.index]
                    selection.rungs = [{**r, "scores": {numbers[i]: v for i, v in r["scores"].items()},
                                        "survivors": [numbers[i] for i in r["survivors"]]} for r in selection.rungs]
            else:
                chain, log, exhausted = self._revise(brief, dry, out, phases, [])
            for outcome in chain:   # the chosen revisions, committed in order on the candidate branch
                files = dry.candidate(outcome.files)
                sha = self.ws.commit_candidate(epoch + 1, files, outcome.message, parent="best")
                edits += outcome.edits
            if sha is not None:
                artifacts.parent.mkdir(parents=True, exist_ok=True)
                os.rename(dry.output(files), artifacts)
                bind_commit(artifacts, sha, self.ws.files(sha))
                self.ws.tag_epoch(epoch + 1, sha)
        atomic_json(out / "proposals.json", log if selection is None else {"attempts": log, "rungs": selection.rungs,
                                                                           "chosen": selection.index})
        llm_error = next((a["error"] for a in log if a.get("exit_status") == "LLMError"), None)
        if llm_error and sha is None:   # not a rejected proposal: the run cannot go on as asked
            raise RunFailed(f"the LLM failed while proposing the candidate of epoch {epoch + 1} "
                            f"({' '.join(llm_error.split())[:200]}); fix the endpoint and `curateevo resume "
                            f"{self.store.root}` proposes again")
        refused = {} if sha is not None else {"refused": refused_reasons(log), "refused_edits": sorted(
            {e for a in log for e in a.get("edits", ())})}
        return {"candidate": sha, "edits": edits, "dry_runs": dry.count, **refused,
                **({"budget_exhausted": True} if exhausted else {}),
                **({"candidates": len(selection.rungs[0]["scores"]) if selection.rungs else 1,
                    "proposed": k, "chosen": selection.index} if selection else {})}

    def _revise(self, brief: Brief, dry: "DryRuns", out: Path, phases: list[str], chain: list) -> tuple[list, list, bool]:
        """The revisions of `phases` in order, each from the last one of `chain` (validated
        outcomes): (chain, attempt log, LLM budget exhausted)."""
        chain, log = list(chain), []
        for phase in phases:
            if chain:
                files = dry.candidate(chain[-1].files)
                brief, dry.parent = dataclasses.replace(brief, files=files), _artifact_hashes(dry.output(files))
            outcome = self.proposer.revise(phase, brief, dry.validate, out)
            log += [{"phase": phase, **attempt} for attempt in outcome.attempts]
            if outcome.budget_exhausted:
                say("the run's LLM budget is spent; no more proposals")
                return chain, log, True
            if outcome.files is not None:
                chain.append(outcome)
        return chain, log, False

    def _proxies(self, dry: "DryRuns", chains: list[list], units: int) -> list[float]:
        """The cheap estimates of candidates' J, submitted to the backend at once: a short SFT on each
        one's dry-run artifacts (no RL) and a small balanced dev subset, both scaled by `units`."""
        cfg = self.cfg.replace(train_budget={**self.cfg.train_budget, "sft_max_steps": self.cfg.proxy_sft_steps * units},
                               ablations=tuple(sorted({*self.cfg.ablations, "no-rl"})))
        common = {"cfg": cfg, "seed": self.cfg.seeds[0]}
        with tempfile.TemporaryDirectory(prefix=".proxy-", dir=self.store.root) as tmp:
            jobs, costs = [], []
            for i, chain in enumerate(chains):
                folder = dry.output(dry.candidate(chain[-1].files))
                costs.append(self._proxy_cost(folder))
                jobs += [self.jobs.job(f"proxy-train-c{i}", Path(tmp) / str(i) / "train", None, artifacts=folder, **common),
                         self.jobs.job(f"proxy-evaluate-c{i}", Path(tmp) / str(i) / "eval", None, artifacts=folder, **common,
                                  after={"adapter": (f"proxy-train-c{i}", "adapter")},
                                  tasks=min(self.cfg.tasks, self.cfg.proxy_tasks * units))]
            batch = self.backend.submit(jobs)
            return [objective(batch.result(f"proxy-evaluate-c{i}")["P"], c, self.cfg.lam) for i, c in enumerate(costs)]

    def _proxy_cost(self, folder: Path) -> float:
        """C of a candidate's dry run, charged as the full recipe will be (curate)."""
        if {"no-sft", "no-rl"} & set(self.cfg.ablations):
            return cost_c(charged_cost(read_json(folder / "profile.json"), self.cfg.ablations), self.cfg.n_ref)
        return read_json(folder / "manifest.json")["C"]

    # ------------------------------------------------------------------ helpers

    def history(self) -> list[dict]:
        """The rolled-back attempts, for the code agent: what each changed and how it scored."""
        rows, best_j = [], None
        for d in self.decisions():
            if not d["accepted"] and d["epoch"] > 0:
                message = self.ws.log(d["commit"])[0]["message"] if d.get("commit") else ""
                rows.append({"epoch": d["epoch"], "summary": message.splitlines()[0] if message else "",
                             "diff": self.ws.diff_summary("best", d["commit"]) if d.get("commit") else "",
                             "P": d.get("P"), "C": d.get("C"), "J": d.get("J"), "best_J": best_j, "reason": d.get("reason")})
            elif d["accepted"]:
                best_j = d.get("J")
        return rows

    def decisions(self) -> list[dict]:
        return [d for d in (e.get("result") for e in self.store.journal.events()
                            if e.get("event") == "stage_done" and e.get("stage") == "decide") if d]

    def best(self) -> dict | None:
        accepted = [d for d in self.decisions() if d["accepted"]]
        return accepted[-1] if accepted else None

    def _evaluated(self, epoch: int, kind: str = "eval") -> list[dict]:
        paths = [self.store.epoch_dir(epoch) / f"{kind}-s{s}" / "trajectories.jsonl" for s in self.cfg.seeds]
        return [t for p in paths if p.is_file() for t in read_jsonl(p)]

    def _per_task(self, epoch: int) -> dict[str, list[float]]:
        # call_f1 (replay): a held-out record's own call F1 is its reward; else the checker's success
        key = "reward" if self.cfg.metric == "call_f1" else "success"
        scores: dict[str, list[float]] = {}
        for s in self.cfg.seeds:
            for t in read_jsonl(self.store.epoch_dir(epoch) / f"eval-s{s}" / "trajectories.jsonl"):
                scores.setdefault(t["meta"]["task_id"], []).append(float(t["outcome"][key]))
        return scores


def run_epochs(store: RunStore, backend=None) -> dict:
    """Run (or resume) every epoch of the run in `store` (trainings and evaluations on `backend`,
    else the run's own); returns the final choice."""
    ep = Epochs(store, backend)
    try:
        return _epochs(ep, store)
    finally:
        ep.backend.close()


def _epochs(ep: "Epochs", store: RunStore) -> dict:
    _ = ep.needs   # a cluster that cannot run the profile's stages is refused before any work
    for epoch in range(ep.cfg.epochs):
        if epoch and ep.ws.epochs().get(epoch) is None:   # every proposal was refused: recorded, and on to the next
            decision = ep.stage(epoch, "decide", lambda: ep.no_candidate(epoch))
            say(f"epoch {epoch}: {decision['reason']}")
            if decision.get("budget_exhausted"):   # nothing more can be proposed within the run's budget
                say("the run's LLM budget is spent; the run ends here")
                ep.finished(epoch)
                break
        else:
            evaluate_candidate(ep, epoch)
        if epoch + 1 < ep.cfg.epochs:
            ep.stage(epoch, "diagnose", lambda: ep.diagnose(epoch), [store.epoch_dir(epoch) / "diagnosis"])
            ep.stage(epoch, "propose", lambda: ep.propose(epoch),
                     lambda result: [store.epoch_dir(epoch) / "evolve"] +
                     ([store.epoch_dir(epoch + 1) / "artifacts"] if result.get("candidate") else []))
        ep.finished(epoch)
    evaluated = [d for d in ep.decisions() if d.get("P") is not None]
    final = final_choice(evaluated)
    return ep.stage(-1, "final", lambda: {"epoch": final["epoch"], "commit": final["commit"], "P": final["P"], "C": final["C"]})


def evaluate_candidate(ep: Epochs, epoch: int) -> None:
    """Curate, train, evaluate and decide the candidate tagged `epoch-<e>`."""
    store = ep.store
    curation = ep.stage(epoch, "curate", lambda: ep.curate(epoch),   # a failed curation leaves no artifacts
                        lambda result: [] if "failed" in result else [store.epoch_dir(epoch) / "artifacts"])
    scores = ep.train_and_evaluate(epoch) if "failed" not in curation else []
    proposal = store.done(epoch - 1, "propose") if epoch else None
    edits = (proposal or {}).get("result", {}).get("edits", []) if proposal else []
    decision = ep.stage(epoch, "decide", lambda: ep.decide(epoch, curation, scores, edits))
    say(f"epoch {epoch}: {'ACCEPTED' if decision['accepted'] else 'rejected'} — {decision['reason']}")


def refused_reasons(attempts: list[dict], most: int = 5) -> list[str]:
    """Why the proposals of a propose stage were refused, as distinct sentences with their counts
    (the dry run's verdict, the host's refusal of a file, the agent's stop), at most `most`."""
    counts: dict[str, int] = {}
    for attempt in attempts:
        reason = attempt.get("error") or (f"dry run: {attempt['dry_run']}" if attempt.get("dry_run") else None)
        if reason:
            reason = " ".join(str(reason).split())[:300]
            counts[reason] = counts.get(reason, 0) + 1
    shown = [f"{reason} (×{n})" if n > 1 else reason for reason, n in counts.items()]
    return shown[:most] + ([f"{len(shown) - most} other reasons"] if len(shown) > most else [])


def llm_spent(store: RunStore) -> dict:
    """Tokens and USD the run's finished stages spent on LLM calls (for budgets across resume)."""
    tokens, usd = 0, 0.0
    for event in store.journal.events():
        usage = (event.get("result") or {}).get("llm") if event.get("event") == "stage_done" else None
        if usage:
            tokens += usage["prompt_tokens"] + usage["completion_tokens"]
            usd += usage["usd"]
    return {"tokens": tokens, "usd": usd}

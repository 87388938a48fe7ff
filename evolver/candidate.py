"""The candidate gate: one candidate from the proposer's files to its decision.

    validate          the files with this epoch's inputs/ pass the host's file check and a dry run on the
                      whole corpus in the sandbox (`DryRuns.validate`, the proposers' one callback)
    commit            the chosen revisions on `candidates/epoch-<e>`, tagged `epoch-<e>`
    bind              the dry run's artifacts become epoch e's, their manifest naming that commit
    curate_candidate  the epoch's artifacts: the bound dry run's, else the tagged commit executed now
    settle_in_git     accepted: `main` fast-forwards and `best` moves; rejected: the rollback, recorded

The sandbox executes and checks (`sandbox.curate.execute`); the workspace keeps the git
mechanics; what is decided about a candidate is decided here.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from base.errors import RunFailed, UserError
from base.files import read_json, sha256_files
from evolver.config import RunConfig
from evolver.final_rules import charged_cost
from evolver.proposers.brief import Verdict
from evolver.results import Curation, Decision
from evolver.context import RunContext, say
from sandbox.checker import cost_c
from sandbox.manifest import CURATION_STATS_FILE, Manifest
from sandbox.curate import CurationFailed, execute, runtime_sha256
from sandbox.executor import Limits
from sandbox.strategy_files import check_files


class DryRuns:
    """The dry runs of one propose stage: each candidate's files plus the epoch's inputs, executed
    once on the whole corpus into `folder`; the outputs are kept by the hash of the files."""

    def __init__(self, folder: Path, inputs: dict[str, bytes], corpus, executor, cfg: RunConfig, parent: dict,
                 llm=None):
        self.folder, self.inputs, self.corpus, self.executor, self.cfg = folder, inputs, corpus, executor, cfg
        self.parent, self.count, self.outputs, self.llm = parent, 0, {}, llm

    def candidate(self, files: dict[str, bytes]) -> dict[str, bytes]:
        """The proposer's strategy files with this epoch's inputs (a proposer's own inputs/ are not taken)."""
        return {**{k: v for k, v in files.items() if not k.startswith("inputs/")}, **self.inputs}

    def output(self, files: dict[str, bytes]) -> Path:
        return self.outputs[sha256_files(files)]

    def validate(self, files: dict[str, bytes]) -> Verdict:
        """The dry run: the candidate curates the whole corpus in the sandbox and the host checker
        accepts the output (else `failed`), and the artifacts differ from the parent's (else `empty`)."""
        try:   # what cannot be committed is refused before it runs (a .git, a path outside the strategy)
            full = check_files(self.candidate(files))
        except UserError as exc:
            return Verdict(False, "failed", f"the candidate's files are refused: {exc}")
        self.count += 1
        out = self.folder / str(self.count)
        verdict, hashes = check_candidate(full, self.corpus, self.executor, self.parent, out, seed=self.cfg.seed,
                                          n_ref=self.cfg.n_ref, timeout_s=self.cfg.curation_timeout_s, llm=self.llm,
                                          budget=self.cfg.curation_budget)
        if verdict.ok:
            self.outputs[sha256_files(full)] = out
        return verdict


def check_candidate(files: dict, corpus, executor, parent: dict, out: Path, *, seed: int, n_ref: float,
                    timeout_s: float, llm=None, budget=None) -> tuple[Verdict, dict | None]:
    """Execute `files` on the whole corpus into `out`, its progress said as it runs: the host checker
    must accept the output (else `failed`), and the artifacts must differ from the parent's `parent`
    hashes (else `empty`). Returns the verdict and the artifact hashes."""
    try:
        execute(files, corpus, out, seed=seed, executor=executor, limits=Limits(timeout_s=timeout_s), n_ref=n_ref, llm=llm,
                budget=budget, on_progress=say)
    except CurationFailed as exc:
        return Verdict(False, "failed", f"the dry run on the whole corpus failed the host's check: {exc.reason}"), None
    hashes = artifact_hashes(out)
    if not any(Manifest.read(out).counts().values()):   # e.g. an outcome filter on a corpus whose train part recorded failures only
        return Verdict(False, "failed", "the dry run curates no record at all (SFT, RL and memory are empty), so "
                                        "nothing would be trained and P would measure the base model"), hashes
    if hashes == parent:
        return Verdict(False, "empty", "the dry run's artifacts are byte-identical to the parent's: the change "
                                       "alters nothing the trainer or the agent would see"), hashes
    return Verdict(True, "changed"), hashes


def artifact_hashes(folder: Path) -> dict:
    """Artifact file → sha256, from a curation's manifest (the curation stats aside: they describe, not feed)."""
    return Manifest.read(folder).hashes()


def commit(run: RunContext, epoch: int, chain: list, dry: DryRuns) -> tuple[str | None, list[str]]:
    """The chosen revisions (validated outcomes), committed in order on `candidates/epoch-<e>`; the
    last one is tagged `epoch-<e>` and its dry run's artifacts become epoch e's, bound to it.
    Returns (the tagged commit, or None when there is no revision; the revisions' edits)."""
    sha, edits, files = None, [], None
    for outcome in chain:
        files = dry.candidate(outcome.files)
        sha = run.ws.commit_candidate(epoch, files, outcome.message, parent="best")
        edits += outcome.edits
    if sha is not None:
        artifacts = run.store.epoch_dir(epoch) / "artifacts"
        artifacts.parent.mkdir(parents=True, exist_ok=True)
        os.rename(dry.output(files), artifacts)
        bind_commit(artifacts, sha, run.ws.files(sha))
        run.ws.tag_epoch(epoch, sha)
    return sha, edits


def bind_commit(out_dir: Path, commit: str, files: dict[str, bytes]) -> Manifest:
    """Name the workspace commit of a dry run's artifacts, once the validated files are committed.

    The dry run executed `files` before their commit existed; binding checks that the commit's
    files are exactly the executed ones (the manifest's `files_sha256`) and records the commit in
    the manifest, so the artifacts are those of that commit (a replay re-executes it to the same
    bytes). Returns the manifest."""
    manifest = Manifest.read(out_dir)
    if manifest.strategy.files_sha256 != sha256_files(files):
        raise RunFailed(f"{out_dir}: the dry run executed other files than commit {commit[:12]} holds")
    if manifest.strategy.commit not in (None, commit):
        raise RunFailed(f"{out_dir}: the artifacts already belong to commit {manifest.strategy.commit[:12]}")
    manifest = manifest.bound_to(commit)
    manifest.write(out_dir)
    return manifest


def bound_manifest(run: RunContext, folder: Path, sha: str) -> Manifest | None:
    """The manifest of the artifacts in `folder` when they are bound to commit `sha` and to this
    run's corpus (and held-out part), seed, runtime and curation budget; else None."""
    if not Manifest.exists(folder):
        return None
    manifest = Manifest.read(folder)
    same = (manifest.strategy.commit == sha and manifest.corpus.sha256 == run.cfg.corpus_sha256
            and manifest.corpus.holdout == run.corpus.holdout
            and manifest.seed == run.cfg.seed and manifest.runtime_sha256 == runtime_sha256()
            and manifest.budget == run.cfg.curation_budget)
    return manifest if same else None


@dataclass(frozen=True)
class Candidate:
    """One candidate of the run, from its commit to its decision: the commit tagged `epoch-<e>`
    (`tag`), the folder of the epoch's artifacts (`folder`: its manifest binds them to the
    commit), the strategy files the commit holds (`files`), and the decide stage's result once
    the epoch is decided (`decision`, None before)."""
    epoch: int
    commit: str
    folder: Path
    files: Mapping[str, bytes]
    decision: Decision | None = None

    @property
    def tag(self) -> str:
        return f"epoch-{self.epoch}"

    @classmethod
    def of(cls, run: RunContext, epoch: int) -> "Candidate":
        """The candidate the run tagged for `epoch`, with its decision when one is journaled."""
        sha = run.ws.resolve(f"epoch-{epoch}")
        decided = next((d for d in run.decisions() if d.epoch == epoch and d.commit == sha), None)
        return cls(epoch=epoch, commit=sha, folder=run.store.epoch_dir(epoch) / "artifacts", files=run.ws.files(sha),
                   decision=decided)

    def manifest(self, run: RunContext) -> Manifest | None:
        """The manifest of `folder` when it is bound to this commit and this run's corpus (and
        held-out part), seed, runtime and curation budget (`bound_manifest`); else None."""
        return bound_manifest(run, self.folder, self.commit)


def curate_candidate(run: RunContext, epoch: int) -> Curation:
    """The artifacts of the candidate tagged `epoch-<e>`: its dry run's when they are there and
    bound to this commit, corpus, seed and runtime; else executed now."""
    cfg, candidate = run.cfg, Candidate.of(run, epoch)
    sha, manifest = candidate.commit, candidate.manifest(run)
    if manifest is None:
        out = run.fresh_dir(epoch, "artifacts")
        try:
            manifest = execute(candidate.files, run.corpus, out, seed=cfg.seed, executor=run.executor,
                               limits=Limits(timeout_s=cfg.curation_timeout_s), commit=sha,
                               n_ref=cfg.n_ref, llm=run.curation_llm, budget=cfg.curation_budget,
                               on_progress=say).manifest
        except CurationFailed as exc:
            return Curation(commit=sha, failed=exc.reason)
    counts = manifest.counts()
    if not {"no-sft", "no-rl"} & set(cfg.ablations):
        return Curation(commit=sha, C=manifest.C, cost_train=manifest.cost_train, counts=counts)
    # an ablated resource costs nothing: C counts what the recipe consumes in this run
    charged = charged_cost(read_json(candidate.folder / CURATION_STATS_FILE), cfg.ablations)
    return Curation(commit=sha, C=round(cost_c(charged, cfg.n_ref), 12), cost_train=charged, counts=counts,
                    curated={"C": manifest.C, "cost_train": manifest.cost_train})


def trainable(run: RunContext, epoch: int, curation: Curation) -> Curation:
    """`curation`, or when its artifacts would train nothing in this run (no SFT or RL record left after
    the ablations and the length limits) the same candidate refused like a failed curation: rolled
    back unevaluated, since its P would be the base model's and could win on C alone. ρ0 (epoch 0) is
    measured before the run starts (evolver.launch.check_run_lengths)."""
    from evolver.stages import trains_nothing

    if curation.failed is not None or epoch == 0:
        return curation
    why = trains_nothing(run.cfg, run.store.epoch_dir(epoch) / "artifacts")
    return curation if why is None else Curation(commit=curation.commit, failed=why, untrainable=True, llm=curation.llm)


def settle_in_git(run: RunContext, decision: Decision) -> None:
    """The decision in git: accepted, `main` fast-forwards to the candidate and `best` moves;
    rejected, both stay (the rollback). The commit message carries P, C, J and the reason. ρ0 is
    best from the workspace's creation, so epoch 0 has nothing to settle."""
    if decision.epoch == 0:
        return
    message = (f"epoch {decision.epoch}: {'accepted' if decision.accepted else 'rejected'} — {decision.reason}\n\n"
               f"P = {decision.P}, C = {decision.C}, J = {decision.J}")
    (run.ws.accept if decision.accepted else run.ws.reject)(decision.commit, message, epoch=decision.epoch)

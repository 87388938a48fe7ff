"""`curateevo repair RUN [--epoch E]`: rebuild a curated epoch's damaged artifacts (issue 46).

Curation is deterministic and the journal recorded the hash of every curated epoch's artifacts
folder, so a file deleted or edited there can be made again: the epoch's committed strategy is
executed in the sandbox once more, on the run's corpus, seed and budget, its ctx.llm answered
from the run's LLM records only (no network). The rebuilt folder (with the recorded
execution.json, which says when and where the curation ran and is no function of its inputs)
must hash as the journal recorded; only then are the damaged files replaced, each atomically.
Otherwise nothing changes and one sentence names the file that cannot be rebuilt and why.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from base.errors import UserError
from experiments import journal
from base.files import atomic_write, sha256_file, sha256_tree
from evolver.store import RunStore
from sandbox.manifest import Manifest, manifest_path

UNREBUILDABLE = "execution.json"   # when, where and how long the curation ran


def curated_epochs(store: RunStore) -> dict[int, tuple[str, str]]:
    """epoch → (commit, recorded sha256 of its artifacts folder), from the last curate event of each."""
    found = {}
    for event in journal.done(store.journal.events(), "curate"):
        result = event.result or {}
        if isinstance(event.epoch, int) and isinstance(result, dict) and not result.get("failed"):
            digest = event.outputs.get(f"epochs/{event.epoch}/artifacts")
            if digest and result.get("commit"):
                found[event.epoch] = (result["commit"], digest)
    return found


def _files(folder: Path) -> dict[str, Path]:
    return {f.relative_to(folder).as_posix(): f for f in sorted(folder.rglob("*")) if f.is_file()} \
        if folder.is_dir() else {}


def _rebuild(store: RunStore, epoch: int, commit: str, into: Path, sandbox: str | None) -> None:
    """The loop's curate stage again (evolver.candidate.curate_candidate), into `into`, LLM answers read from the run's records."""
    from base import registry
    from evolver.integrity import check_workspace
    from evolver.llm import LLM
    from evolver.run_cli import run_config
    from evolver.stages import channel_answer
    from corpora import corpus_sha256, load_corpus
    from sandbox.curate import CurationFailed, execute
    from sandbox.executor import Limits, make_executor
    from workspace.repository import Workspace

    cfg = run_config(store)
    if corpus_sha256(list(cfg.corpus)) != cfg.corpus_sha256:
        raise UserError(f"the corpus of {store.root} changed since the run started, so epoch {epoch} cannot be "
                        "rebuilt from it; restore the corpus; nothing was changed")
    ws = Workspace.open(store.root / "strategy")
    check_workspace(store, ws)
    corpus = registry.get(cfg.benchmark).train_view(load_corpus(list(cfg.corpus), on_error=cfg.on_error,
                                                                tools=cfg.tools or None), cfg.effective_holdout)
    llm = None
    if cfg.llm is not None:
        config = cfg.llm.model_copy(update={"mode": "offline"})   # the records only
        llm = channel_answer(LLM(config, store.root / "llm"))
    try:
        execute(ws.files(commit), corpus, into, seed=cfg.seed, executor=make_executor(sandbox or cfg.sandbox),
                limits=Limits(timeout_s=cfg.curation_timeout_s), commit=commit, n_ref=cfg.n_ref, llm=llm,
                budget=cfg.curation_budget)
    except CurationFailed as exc:
        raise UserError(f"epoch {epoch} cannot be rebuilt: executing its strategy again failed ({exc.reason}); "
                        "nothing was changed") from None


def _culprit(folder: Path, rebuilt: Path) -> str:
    """Which recorded file the rebuild cannot reproduce, and why (the rebuilt folder hashed otherwise)."""
    old, new = Manifest.found(folder), Manifest.read(rebuilt)
    if old is None:
        return (f"{manifest_path(folder)} is missing or damaged, and the one executing the strategy again writes "
                f"does not make the folder hash as the journal recorded (the runtime changed, or {UNREBUILDABLE} did)")
    if manifest_path(folder).read_bytes() != manifest_path(rebuilt).read_bytes():
        for name, entry in sorted(old.artifacts.items()):
            now = new.artifacts.get(name, {}).get("sha256")
            if isinstance(entry, dict) and entry.get("sha256") != now:
                return (f"{folder / name} cannot be rebuilt: executing the committed strategy again gives sha256 "
                        f"{str(now)[:12]}…, manifest.json recorded {str(entry.get('sha256'))[:12]}…")
        if old.runtime_sha256 != new.runtime_sha256:
            return (f"{manifest_path(folder)} cannot be rebuilt: the runtime changed since the epoch was curated "
                    f"(runtime_sha256 {str(old.runtime_sha256)[:12]}… recorded, {new.runtime_sha256[:12]}… now)")
        return f"{manifest_path(folder)} cannot be rebuilt: it differs from the one executing the strategy again writes"
    return (f"{folder / UNREBUILDABLE} was changed and cannot be rebuilt: it records when, where and how long the "
            "curation ran, no function of its inputs")


def repair_epoch(store: RunStore, epoch: int, commit: str, recorded: str, sandbox: str | None = None) -> str:
    """Rebuild epoch `epoch`'s artifacts when they no longer hash as recorded; one line saying what
    was done, or UserError naming the file that cannot be rebuilt (nothing changed then)."""
    folder = store.epoch_dir(epoch) / "artifacts"
    if folder.is_dir() and sha256_tree(folder) == recorded:
        return f"epoch {epoch}: intact, nothing to repair"
    if not (folder / UNREBUILDABLE).is_file():
        raise UserError(f"{folder / UNREBUILDABLE} is missing and cannot be rebuilt: it records when, where and how "
                        "long the curation ran, no function of its inputs; restore it from a backup; nothing was changed")
    with tempfile.TemporaryDirectory(prefix=".repair-", dir=store.epoch_dir(epoch)) as tmp:
        rebuilt = Path(tmp) / "artifacts"
        _rebuild(store, epoch, commit, rebuilt, sandbox)
        shutil.copyfile(folder / UNREBUILDABLE, rebuilt / UNREBUILDABLE)
        if sha256_tree(rebuilt) != recorded:
            raise UserError(f"{_culprit(folder, rebuilt)}; restore it from a backup; nothing was changed")
        old, new = _files(folder), _files(rebuilt)
        changed = [rel for rel, path in new.items() if rel not in old or sha256_file(old[rel]) != sha256_file(path)]
        for rel in changed:
            atomic_write(folder / rel, (rebuilt / rel).read_bytes())
        for rel in sorted(set(old) - set(new)):   # what was added by hand: no file of the curation
            (folder / rel).unlink()
    assert sha256_tree(folder) == recorded
    return (f"epoch {epoch}: rebuilt {', '.join(changed) or 'nothing'}"
            f"{'; removed ' + ', '.join(sorted(set(old) - set(new))) if set(old) - set(new) else ''}, "
            "byte for byte as recorded")


def cmd_repair(args) -> int:
    store = RunStore.open(Path(args.run))
    store.lock()   # a run or resume writing it now refuses this
    curated = curated_epochs(store)
    if args.epoch is not None and args.epoch not in curated:
        raise UserError(f"epoch {args.epoch} of {args.run} was not curated (the journal records no artifacts of it); "
                        "nothing to repair")
    for epoch in [args.epoch] if args.epoch is not None else sorted(curated):
        print(repair_epoch(store, epoch, *curated[epoch], sandbox=args.sandbox), file=sys.stderr, flush=True)
    print(f"the run's artifacts hash as recorded; continue with `curateevo resume {args.run}`")
    return 0


def add_cli(sub) -> None:
    from sandbox.options import add_sandbox

    p = sub.add_parser("repair", help="rebuild a curated epoch's deleted or edited artifacts, byte for byte as recorded")
    p.add_argument("run", help="a run directory")
    p.add_argument("--epoch", type=int, help="only this epoch (default: every curated epoch that is damaged)")
    add_sandbox(p, "the strategy, executed again", default=None, shown="the run's own")
    p.set_defaults(func=cmd_repair)

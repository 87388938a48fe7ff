"""The rows of the quality benchmark (the paper's Tables 1 and 2) for one corpus setting.

Table 1: ρ0 on the wild corpus (no curation), the AgentRefine reference strategy, the final
strategy of each given run, the oracle (ρ0 on the wild records the builder labelled `clean`:
the ceiling for filtering) and ρ0 on the labeled corpus (the clean reference). Table 2: one
of those rows without SFT data, without RL data, without memory at evaluation.
"""
from __future__ import annotations

import functools
from pathlib import Path

from base.errors import UserError
from base.files import read_json
from corpora import corpus_sha256, load_corpus, write_corpus
from sandbox.executor import PROJECT_ROOT

from experiments.journal import RunRecord
from experiments.quality import ROWS
from experiments.quality.cells import ABLATIONS, Row

SEED_STRATEGY = PROJECT_ROOT / "curation_strategies" / "seed"
AGENTREFINE = PROJECT_ROOT / "curation_strategies" / "agentrefine"
AUGMENT = PROJECT_ROOT / "curation_strategies" / "augment"


def default_corpus_dir(benchmark: str, setting: str, seed: int = 0, max_records: int | None = None) -> Path:
    """The default raw corpus of a benchmark, built once where `curateevo run` builds it (sized to
    the profile's SFT budget as the run sizes it)."""
    from base import registry

    return registry.get(benchmark).default_corpus(PROJECT_ROOT / "runs" / "corpora", setting, seed, max_records).parent


def held_out_train_dir(corpus: tuple[str, ...], tools: str | None, cache: Path) -> Path:
    """A user's corpus as the loop's strategies see it with the next-call benchmark: its train part
    (the held-out dev part is the tasks and, with the test part, never reaches a strategy), written
    once under the cache by the corpus's hash and the split, as the rows' wild corpus."""
    from corpora.split import train_part

    # "-tk": the task-ranked dev + test split (corpora.split.DEFAULT_SPLIT); a cache made under an
    # earlier split ("-dt": content-ranked; none: dev only) has another name and is not taken for it
    out = Path(cache) / "corpora" / f"next-call-{corpus_sha256(list(corpus))[:16]}-tk"
    if not (out / "corpus.jsonl").is_file():
        train = train_part(load_corpus(list(corpus), tools=tools))
        out.mkdir(parents=True, exist_ok=True)
        write_corpus(train.records, out / "corpus.jsonl")
    return out


def _corpus_file(folder: Path, what: str) -> Path:
    path = Path(folder) / "corpus.jsonl"
    if not path.is_file():
        raise UserError(f"{folder}: no corpus.jsonl; give {what} a `curateevo corpus build` output directory")
    return path


def _success(records: list[dict]) -> dict[str, bool | None]:
    return {r["id"]: (r.get("outcome") or {}).get("success") for r in records}


def labels_of(wild_dir: Path, records: list[dict] | None = None) -> str | None:
    """What tells a clean record from a noisy one in this corpus: "noise" (the wild corpus
    builder's noise_labels.json), "success" (a user's corpus whose records carry an outcome, e.g.
    tau-bench's reward: the successful ones are the clean-by-construction subset), else None.
    `records`: the corpus's, when the caller has read them already."""
    if (Path(wild_dir) / "noise_labels.json").is_file():
        return "noise"
    if records is None:
        records = load_corpus([str(_corpus_file(wild_dir, "--wild"))]).records
    return "success" if {True, False} <= set(_success(records).values()) else None


def oracle_corpus(wild_dir: Path, cache: Path) -> Path:
    """The wild records whose noise label is `clean`, or on a user's corpus the records whose
    outcome is a success (a copy under the cache, by the wild hash)."""
    return _labelled_subset(wild_dir, cache, "oracle", lambda noise: noise == "clean")


def noisy_corpus(wild_dir: Path, cache: Path) -> Path:
    """The wild records whose noise label is not `clean` (or whose outcome is a failure): the oracle's complement."""
    return _labelled_subset(wild_dir, cache, "noisy", lambda noise: noise != "clean")


def poisoned_corpus(wild_dir: Path, cache: Path, seed: int = 0) -> Path:
    """A deliberately corrupted copy of the wild corpus (experiments/quality/poison.py), cached by
    the wild corpus's hash and the seed."""
    from experiments.quality.poison import poison

    wild = _corpus_file(wild_dir, "--wild")
    out = Path(cache) / "corpora" / f"poisoned-{corpus_sha256([str(wild)])[:16]}-seed{seed}.jsonl"
    if not out.is_file():
        records, _ = poison(load_corpus([str(wild)]).records, seed)
        out.parent.mkdir(parents=True, exist_ok=True)
        write_corpus(records, out)
    return out


def _labelled_subset(wild_dir: Path, cache: Path, name: str, keep) -> Path:
    wild = _corpus_file(wild_dir, "--wild")
    out = Path(cache) / "corpora" / f"{name}-{corpus_sha256([str(wild)])[:16]}.jsonl"
    if out.is_file():
        return out
    labels_path = Path(wild_dir) / "noise_labels.json"
    records = load_corpus([str(wild)]).records
    source = labels_of(wild_dir, records)
    if source is None:
        raise UserError(f"{labels_path}: no such file, and no record of {wild} carries a success outcome; the {name} "
                        "row needs the wild corpus builder's noise labels or records labelled successful and failed")
    if source == "noise":
        labels = read_json(labels_path)["labels"]
        chosen = [r for r in records if keep(labels.get(r["id"], {}).get("noise"))]
    else:   # success True is clean; an unlabelled record is in neither subset
        success = _success(records)
        chosen = [r for r in records if success[r["id"]] is not None and keep("clean" if success[r["id"]] else "failed")]
    if not chosen:
        raise UserError(f"{labels_path if source == 'noise' else wild}: no record fits the {name} row; "
                        "it has nothing to train on")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_corpus(chosen, out)
    return out


def _strategy(folder: Path) -> dict:
    from sandbox.strategy_files import strategy_files

    return strategy_files(folder)


def _check_corpus(record: RunRecord, wild: Path, source_sha256: str | None = None) -> None:
    """UserError unless the run evolved on `wild`. `source_sha256`: the hash of the corpus the run must
    have evolved on, when `wild` is made from it (next-call: its train part); else the hash of `wild` itself."""
    if record.corpus_sha256 != (source_sha256 or corpus_sha256([str(wild)])):
        raise UserError(f"{record.root} evolved on another corpus than {wild}; give --wild (or --corpus) the run's corpus")


def run_row(run: Path, wild: Path, source_sha256: str | None = None) -> Row:
    """The final strategy of a finished run (its journal's `final` result, files from git), on
    the wild corpus, trained and evaluated with the run's own ablations; a run with ablations is
    a Table 2 row."""
    from workspace.repository import Workspace

    run = Path(run)
    record = RunRecord.open(run)
    finals = record.results("final")
    if not finals:
        raise UserError(f"{run} has no final strategy yet; finish it with `curateevo resume {run}`")
    _check_corpus(record, wild, source_sha256)
    commit = finals[-1]["commit"]
    run_ablations = record.ablations   # a run-level ablation (no-efficiency …) is a Table 2 row
    suffix = f" ({', '.join(run_ablations)})" if run_ablations else ""
    return Row(id=f"run:{run.name}", label=f"run {run.name} final (epoch {finals[-1]['epoch']}){suffix}",
               files=Workspace.open(run / "strategy").files(commit), corpus=wild,
               ablations=tuple(a for a in run_ablations if a in ABLATIONS), table=2 if run_ablations else 1)


def run_epoch_rows(run: Path, wild: Path, source_sha256: str | None = None) -> list[Row]:
    """Every evolved candidate a run evaluated (epochs 1 on, accepted or rolled back), each a
    row `run:NAME@E`: the candidates the loop compared, to rank again (`--proxy`)."""
    from workspace.repository import Workspace

    run = Path(run)
    record = RunRecord.open(run)
    _check_corpus(record, wild, source_sha256)
    if record.ablations:
        raise UserError(f"{run} ran with ablations; --run-epochs compares the candidates of runs without them")
    ws, rows = Workspace.open(run / "strategy"), []
    final = (record.results("final") or [{}])[-1].get("commit")
    for d in record.results("decide"):   # the final strategy is the row `run:NAME` already
        if d.get("epoch", 0) >= 1 and d.get("commit") and d["commit"] != final:
            rows.append(Row(id=f"run:{run.name}@{d['epoch']}", corpus=wild, files=ws.files(d["commit"]),
                            label=f"run {run.name} epoch {d['epoch']} ({'accepted' if d['accepted'] else 'rolled back'})"))
    return rows


def table_rows(which: tuple[str, ...], wild_dir: Path, labeled_dir: Path | None, runs: list[Path],
               cache: Path, ablate: str | None, run_epochs: bool = False,
               source_sha256: str | None = None) -> list[Row]:
    """The rows named in `which` (ROWS names), then Table 2 for the row `ablate`; `source_sha256`:
    the user's corpus that `wild_dir` was made from (next-call), which a run's row must have evolved on."""
    wild = _corpus_file(wild_dir, "--wild")
    by_outcome = functools.cache(lambda: labels_of(wild_dir) == "success")   # read once, when a labelled row asks
    rows = []
    for name in which:
        if name == "rho0-wild":
            what = "the wild corpus" if source_sha256 is None else "your corpus"
            rows.append(Row("rho0-wild", f"ρ0 on {what} (no curation)", _strategy(SEED_STRATEGY), wild))
        elif name == "agentrefine":
            rows.append(Row("agentrefine", "AgentRefine reference strategy", _strategy(AGENTREFINE), wild))
        elif name == "augment":
            rows.append(Row("augment", "augmenting reference strategy (adds composed items)", _strategy(AUGMENT), wild))
        elif name == "runs":
            rows += [run_row(r, wild, source_sha256) for r in runs]
            rows += [row for r in runs for row in run_epoch_rows(r, wild, source_sha256)] if run_epochs else []
        elif name == "oracle":
            clean = "whose outcome is a success" if by_outcome() else "labelled clean"
            rows.append(Row("oracle", f"oracle: ρ0 on the records {clean}", _strategy(SEED_STRATEGY),
                            oracle_corpus(wild_dir, cache)))
        elif name == "noisy":
            noisy = "whose outcome is a failure" if by_outcome() else "labelled noisy"
            rows.append(Row("noisy", f"ρ0 on the records {noisy} (the oracle's complement)",
                            _strategy(SEED_STRATEGY), noisy_corpus(wild_dir, cache)))
        elif name == "poisoned":
            rows.append(Row("poisoned", "ρ0 on a deliberately corrupted copy (wrong tools, shuffled arguments, "
                                        "wrong requests)", _strategy(SEED_STRATEGY), poisoned_corpus(wild_dir, cache)))
        elif name == "rho0-labeled":
            if labeled_dir is None:
                raise UserError("the rho0-labeled row needs --labeled (a labeled corpus directory)")
            rows.append(Row("rho0-labeled", "ρ0 on the labeled corpus (clean reference)", _strategy(SEED_STRATEGY),
                            _corpus_file(labeled_dir, "--labeled")))
        else:
            raise UserError(f"unknown row {name!r} (one of {', '.join(ROWS)})")
    if ablate is not None:
        name, _, only = ablate.partition(":")   # ROW, or ROW:no-rl,no-memory for some of the ablations
        wanted = tuple(a for a in only.split(",") if a) or ABLATIONS
        unknown = [a for a in wanted if a not in ABLATIONS]
        if unknown:
            raise UserError(f"--ablate {ablate}: unknown ablation {unknown[0]!r} (one of {', '.join(ABLATIONS)}); "
                            "give ROW or ROW:ABLATION[,ABLATION]")
        target = next((r for r in rows if r.id in (name, f"run:{name}")), None)
        if target is None:
            raise UserError(f"--ablate {ablate}: no such row (one of {', '.join(r.id for r in rows)})")
        rows += [target.ablated(a) for a in ABLATIONS if a in wanted and a not in target.ablations]
    return rows

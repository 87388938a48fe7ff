"""Any strategy as a row of the quality benchmark (`bench quality --strategy DIR [DIR …]`).

A researcher's strategy directory is read on the host's terms (the files a candidate may hold,
sandbox/strategy_files.py), then curated, trained and evaluated as every other row: the same
cells, the same fixed recipe, seeds and tasks, cached by the strategy's content. Each row is
paired against ρ0 on the wild corpus (the table's Δ column) and against the best other row, and
the table goes to a raw result file under bench/results/ with its date, commit, command and each
row's `strategy_sha256` (the content hash of its files), which the results leaderboard reads.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import subprocess
from pathlib import Path

from base.errors import UserError
from base.files import atomic_json, sha256_files

from experiments.quality import stats, table
from experiments.quality.cells import Row

PREFIX = "strategy:"


def strategy_rows(folders: list[Path], wild: Path) -> list[Row]:
    """One row per strategy directory, on the wild corpus: `strategy:NAME` (the directory's name);
    a directory that is no strategy, or two with one name, is one sentence."""
    from sandbox.strategy_files import check_files, strategy_files

    rows, seen = [], {}
    for folder in folders:
        files = check_files(strategy_files(folder), where=str(folder))
        name = Path(folder).resolve().name
        if name in seen:
            raise UserError(f"--strategy {folder} and {seen[name]} are both named {name!r}: a row is named by its "
                            "directory, so rename one")
        seen[name] = folder
        rows.append(Row(id=PREFIX + name, label=f"strategy {name} ({sha256_files(files)[:12]})", files=files,
                        corpus=wild))
    return rows


def curate(cells, rows: list[Row], folders: list[Path]) -> None:
    """Each strategy row curated in the sandbox now (cells.curation: cached by content), judged as the
    loop judges a candidate's dry run: a failure or a curation of no record at all is one sentence
    naming the directory (a row that trains nothing would measure the base model)."""
    from sandbox.curate import CurationFailed
    from sandbox.manifest import Manifest

    for row, folder in zip(rows, folders):
        try:
            artifacts = cells.curation(row)
        except CurationFailed as exc:
            raise UserError(f"--strategy {folder}: its curation failed the host's check: {exc.reason}") from None
        if not any(Manifest.read(artifacts).counts().values()):
            raise UserError(f"--strategy {folder} curates no record at all (SFT, RL and memory are empty), so its row "
                            "would measure the base model; give it records to keep")


def strategy_sha256(row: Row) -> str:
    """The content hash of a row's strategy files (base.files.sha256_files)."""
    return sha256_files(row.files)


def add_vs_best(doc: dict, scores: dict[str, dict], category: dict | None = None) -> str | None:
    """In place: each computed Table 1 row's paired difference with the best other row (the highest
    P among them, `vs_best`, naming it; with `category`, task → category, also on the calling and
    the declining tasks apart, `vs_best_by_kind`); returns the best row's id (None with fewer than two
    rows). `scores`: row id → its task → per-seed scores (experiments.quality.table.row_scores)."""
    done = [r for r in doc["rows"] if not r.get("pending") and r["table"] == 1 and r["id"] in scores]
    if len(done) < 2:
        return None
    ranked = sorted(done, key=lambda r: (-r["P"]["value"], r["id"]))
    for entry in done:
        other = ranked[1] if entry is ranked[0] else ranked[0]
        entry["vs_best"] = {"row": other["id"], **stats.paired_difference(scores[entry["id"]], scores[other["id"]])}
        split = table.by_kind(scores[entry["id"]], scores[other["id"]], category) if category else None
        if split:
            entry["vs_best_by_kind"] = split
    return ranked[0]["id"]


def commit_of(root: Path | None = None) -> str | None:
    """The project's commit (`+dirty` when tracked files differ from it); None outside a git checkout."""
    def git(*argv: str) -> str | None:
        done = subprocess.run(["git", "-C", str(root or Path(__file__).resolve().parents[2]), "-c", "core.hooksPath=/dev/null", *argv],
                              capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else None

    head = git("rev-parse", "HEAD")
    if head is None:
        return None
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def write_raw(doc: dict, rows: list[Row], command: list[str], folder: Path) -> Path:
    """The table as a raw result file `quality-<benchmark>-<split>-<profile>-<date>-<hash>.json` in
    `folder` ({date, commit, command} beside the table; each row with its `strategy_sha256`). The
    hash is of the setting and the rows' strategies, so the same table on the same day is one file."""
    by_id = {r.id: r for r in rows}
    out_rows = [{**entry, "strategy_sha256": strategy_sha256(by_id[entry["id"]])} for entry in doc["rows"]]
    s, date = doc["setting"], datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    key = hashlib.sha256(json.dumps([s, [(r["id"], r["strategy_sha256"]) for r in out_rows]], sort_keys=True,
                                    default=str).encode()).hexdigest()[:10]
    path = Path(folder) / f"quality-{s['benchmark']}-{s['split']}-{s['profile']}-{date}-{key}.json"
    atomic_json(path, {"kind": "quality", "date": date, "commit": commit_of(), "command": " ".join(["curateevo", *command]),
                       **doc, "rows": out_rows})
    return path


def markdown(doc: dict, best: str | None) -> str:
    """One line per strategy row: its paired differences with ρ0 on the wild corpus and the best other row."""
    lines = []
    for r in doc["rows"]:
        if not r["id"].startswith(PREFIX) or r.get("pending"):
            continue
        parts = [f"{_points(r['vs_rho0_wild'])} vs ρ0 wild"] if r.get("vs_rho0_wild") else []
        if r.get("vs_best"):
            parts.append(f"{_points(r['vs_best'])} vs {r['vs_best']['row']}" + (" (the best other row)" if r["id"] == best
                                                                                 else " (the best row)"))
            if r.get("vs_best_by_kind"):
                k = r["vs_best_by_kind"]
                parts.append(f"of it, on the {k['calling']['n']} calling tasks {_points(k['calling'])}, on the "
                             f"{k['declining']['n']} declining ones {_points(k['declining'])}")
        lines.append(f"{r['id']}: P {100 * r['P']['value']:.1f}; " + "; ".join(parts))
    return "\n".join(lines)


def _points(d: dict) -> str:
    return f"{100 * d['value']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}] points"

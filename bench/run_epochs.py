"""A finished (or stopped) run, epoch by epoch, as a raw result file under bench/results/.

    .venv/bin/python bench/run_epochs.py runs/search-e5 --command "curateevo run --epochs 5 --name search-e5" \
        --what "..." --out bench/results/run-search-e5-DATE.json

Everything is read from the run's own files, as `curateevo log` and `report` read them: per epoch
the decision (accepted, P, C, J, the reason and the margin it was held to), the edits, the dev tasks
it fixed and broke against its parent (`evolver.lineage.outcome_delta`, all seeds), the solved
tasks per category, the GRPO groups with zero reward variance, and the stages' seconds. The file is
of the leaderboard's `run` kind (`epochs` and `wall_s`); `accepted_revisions` counts the epochs
after ρ0 that were accepted (the acceptance rule already holds them to the run's margin); `final`
is the epoch the run ended on as its journal recorded it — its epoch, commit, P, the final rule that
chose it and why (`evolver.tables.final_of`; a run finished before the rules had names chose by
paper-best-dev and says so), None for a run that has not finished; `table` holds the same epochs as
flat rows for a docs table.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from base.files import atomic_json  # noqa: E402
from bench.loop_identity import label  # noqa: E402
from evolver.config import RunConfig  # noqa: E402
from evolver.lineage import decisions, outcome_deltas  # noqa: E402
from evolver.store import RunStore  # noqa: E402
from evolver.tables import epoch_rows  # noqa: E402
from evolver.tables import final_of as recorded_final  # noqa: E402


def categories(store: RunStore, epoch: int, seeds) -> dict[str, list[int]]:
    """Solved and evaluated episodes per category, summed over the seeds' metrics.json."""
    found: dict[str, list[int]] = {}
    for seed in seeds:
        path = store.epoch_dir(epoch) / f"eval-s{seed}" / "metrics.json"
        if path.is_file():
            for name, m in json.loads(path.read_text())["per_category"].items():
                got = found.setdefault(name, [0, 0])
                got[0] += m.get("successes", 0)
                got[1] += m.get("episodes", 0)
    return dict(sorted(found.items()))


def decision_text(row: dict) -> str:
    if row.get("accepted") is None:
        return "not decided"
    if row["epoch"] == 0:
        return "first best"
    reason = (row.get("reason") or "").removesuffix("; rolled back")   # the loop's reason may say it already
    return ("accepted" if row["accepted"] else "rolled back") + (f" ({reason})" if reason else "")


def epochs_of(store: RunStore) -> list[dict]:
    cfg = RunConfig.from_json(store.config)
    deltas = {d["epoch"]: d for d in outcome_deltas(store, cfg.seeds)}
    edits = {d["epoch"]: list(d.get("edits") or ()) for d in decisions(store)}   # the journal, read once
    out = []
    for row in epoch_rows(store):
        e = row["epoch"]
        per_category = categories(store, e, cfg.seeds)
        delta = deltas.get(e)
        groups = row.get("grpo_groups") or 0
        out.append({
            "epoch": e, "accepted": row.get("accepted"), "decision": decision_text(row),
            "P": row.get("P"), "C": row.get("C"), "J": row.get("J"),
            "solved": sum(v[0] for v in per_category.values()), "tasks": sum(v[1] for v in per_category.values()),
            "categories": per_category,
            "edits": edits.get(e, []),
            "parent": (delta or {}).get("parent"),
            "fixed": sorted(r["task"] for r in (delta or {}).get("fixed", [])),
            "broken": sorted(r["task"] for r in (delta or {}).get("broken", [])),
            "grpo_zero_variance_share": round(row.get("grpo_zero_variance", 0) / groups, 3) if groups else None,
            "seconds": {k: round(v, 1) for k, v in row["seconds"].items()},
            "epoch_s": round(sum(row["seconds"].values()), 1),
        })
    return out


def final_of(store: RunStore, epochs: list[dict]) -> dict | None:
    """The epoch the run ended on, as its journal recorded it (the run's final rule chose it), with
    whether that epoch was accepted; None before the run finished."""
    final = recorded_final(store)
    if final is None:
        return None
    accepted = next((e["accepted"] for e in epochs if e["epoch"] == final["epoch"]), None)
    return {"epoch": final["epoch"], "commit": final["commit"], "P": final["P"], "accepted": accepted,
            "rule": final["rule"], "why": final["why"]}


def flat(epochs: list[dict], names: list[str]) -> list[dict]:
    """The epochs as flat rows for docs (`<!-- gen table:FILE:table -->`): solved per category in
    `names`' order, fixed/broken as counts, the epoch in minutes."""
    return [{"epoch": e["epoch"], "edits": ", ".join(e["edits"]) or ("ρ0" if e["epoch"] == 0 else "—"),
             "solved": f"{e['solved']}/{e['tasks']}",
             "categories": " / ".join(str(e["categories"].get(n, [0])[0]) for n in names),
             "fixed": len(e["fixed"]), "broken": len(e["broken"]), "decision": e["decision"],
             **{k: None if e[k] is None else round(e[k], 4) for k in ("P", "J")},
             "epoch_min": round(e["epoch_s"] / 60, 1)} for e in epochs]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="the run directory")
    ap.add_argument("--command", required=True, help="the command that made the run, as it was typed")
    ap.add_argument("--what", default="", help="the leaderboard's description of the row")
    ap.add_argument("--machine", default="", help="the machine and what ran beside the run")
    ap.add_argument("--commit", default="", help="the code the run ran (default: this checkout's commit)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if not (args.run / "run.json").is_file():
        print(f"{args.run}: no run.json, so not a run directory; give runs/<name>.", file=sys.stderr)
        return 2
    store = RunStore.open(args.run)
    epochs = epochs_of(store)
    if not epochs:
        print(f"{args.run}: no epoch has finished a stage yet; nothing to write.", file=sys.stderr)
        return 2
    atomic_json(args.out, {
        "kind": "run", "date": datetime.date.today().isoformat(), "command": args.command,
        "commit": args.commit or label(Path(__file__).resolve().parents[1]), "what": args.what, "machine": args.machine,
        "run": str(args.run), "wall_s": round(sum(e["epoch_s"] for e in epochs)),
        "accepted_revisions": sum(1 for e in epochs if e["epoch"] > 0 and e["accepted"]),
        "final": (final := final_of(store, epochs)),
        "categories": " / ".join(names := sorted({n for e in epochs for n in e["categories"]})),
        "table": flat(epochs, names), "epochs": epochs})
    print(f"wrote {args.out}: {len(epochs)} epochs, "
          f"{sum(1 for e in epochs if e['epoch'] > 0 and e['accepted'])} revisions accepted, "
          f"final: {'none yet' if final is None else 'epoch %d (%s)' % (final['epoch'], final['rule'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

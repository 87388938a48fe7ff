"""The scale curve as a picture: time per 1K records and peak memory against corpus size, per
strategy, from bench/scale.py's raw results.

    .venv/bin/python bench/scale_plot.py RAW.json [RAW.json ...] --out docs/img/scale-DATE.png

Each raw file's rows are points (a size measured in two files: the later file's row). Left: the
curation's seconds per 1K records (log-log). Right: the host's and the sandbox's peak resident
memory, with the issue's 2 GiB host goal as a line; a curation the sandbox refused (a failed
step) is marked where its size is, with no time.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

GOAL = 2 * 2**30   # issue 74's host goal


def points(paths: list[Path]) -> dict[tuple[str, int], dict]:
    """(strategy, trajectories) -> its curate step, the latest file's; plus ("load_split", n)."""
    found: dict[tuple[str, int], dict] = {}
    for path in paths:
        for row in json.loads(Path(path).read_text())["rows"]:
            n = row["trajectories"]
            if "load_split" in row:
                found["load_split", n] = row["load_split"]
            for key, step in row.items():
                if key.startswith("curate_"):
                    found[key.removeprefix("curate_"), n] = step
    return found


def plot(paths: list[Path], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found = points(paths)
    strategies = sorted({s for s, _ in found if s != "load_split"})
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, name in enumerate(strategies):
        color = f"C{i}"
        steps = sorted((n, step) for (s, n), step in found.items() if s == name)
        done = [(n, step) for n, step in steps if step["rc"] == 0]
        left.plot([n for n, _ in done], [step["curation_s_per_1k_records"] for _, step in done], "o-", color=color,
                  label=name)
        right.plot([n for n, _ in done], [step["sandbox_peak_rss_bytes"] / 2**30 for _, step in done], "s--",
                   color=color, label=f"{name}: sandbox")
        right.plot([n for n, _ in steps], [step["host_peak_rss_bytes"] / 2**30 for _, step in steps], "o-",
                   color=color, label=f"{name}: host (curate)")
        for n, step in steps:
            if step["rc"] != 0:
                right.annotate("refused", (n, step["host_peak_rss_bytes"] / 2**30), textcoords="offset points",
                               xytext=(4, 6), fontsize=7, color=color)
    loads = sorted((n, step) for (s, n), step in found.items() if s == "load_split")
    right.plot([n for n, _ in loads], [step["host_peak_rss_bytes"] / 2**30 for _, step in loads], "^:", color="gray",
               label="host: load + split")
    right.axhline(GOAL / 2**30, color="red", linewidth=0.8, linestyle=":", label="host goal (2 GiB)")
    left.set(xscale="log", yscale="log", xlabel="trajectories", ylabel="curation seconds per 1K records",
             title="time per record")
    right.set(xscale="log", yscale="log", xlabel="trajectories", ylabel="peak resident memory (GiB)", title="peak memory")
    left.legend(fontsize=8)
    right.legend(fontsize=7)
    for ax in (left, right):
        ax.grid(True, which="both", linewidth=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("raw", type=Path, nargs="+")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    plot(args.raw, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

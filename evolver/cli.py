"""The `curateevo` command line (DESIGN: CLI). Errors a user can cause are one line and exit 2."""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

from evolver.errors import RunFailed, UserError, printable
from evolver import report, run_cli
from sandbox import image as sandbox_image
from benchmarks import corpus_cli
from trainer import cli as trainer_cli
from benchmarks import eval_cli
from sandbox.executor import EXECUTORS, PROJECT_ROOT, Limits

SEED_STRATEGY = PROJECT_ROOT / "curation_strategies" / "seed"
SAMPLE_CORPUS = PROJECT_ROOT / "benchmarks" / "data" / "sample_corpus.jsonl"


def _say(args, text: str) -> None:
    if not getattr(args, "quiet", False):
        print(printable(text), file=sys.stderr, flush=True)


def format_profile(profile: dict) -> str:
    raw, sft, rl, mem = profile["raw"], profile["sft"], profile["rl"], profile["memory"]
    tools = ", ".join(f"{k} {v}" for k, v in list(sft["trained_tool_calls"].items())[:6]) or "none"
    rows = [
        ("raw trajectories", f"{raw['records']} ({raw['retained']} retained, {raw['retention']:.1%})"),
        ("SFT records", f"{sft['records']}: {sft['turns']} assistant turns, {sft['trained_turns']} trained, "
                        f"{sft['masked_turns']} masked, {sft['tokens']} tokens"),
        ("RL records", f"{rl['records']}: " + (", ".join(f"{k} {v}" for k, v in rl["rewards"].items()) or "none")
                       + f", {rl['prompt_tokens']} prompt tokens"),
        ("memory records", f"{mem['records']} ({mem['tokens']} tokens)"),
        ("trained tool calls", tools),
        ("Cost_train", f"{profile['cost_train']} turns"),
        ("C", f"{profile['C']:.4f} (N_ref {profile['n_ref']:g})"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def cmd_curate(args) -> int:
    from sandbox.curate import curate
    from sandbox.executor import make_executor

    out = args.out or PROJECT_ROOT / "runs" / datetime.datetime.now().strftime("curate-%Y%m%d-%H%M%S")
    limits = Limits(timeout_s=args.timeout)
    executor = make_executor(args.sandbox, trusted=True)   # the user's own strategy
    _say(args, f"curating {', '.join(map(str, args.corpus))} with {args.strategy} ({executor.name} sandbox)")
    result = curate(args.strategy, args.corpus, out, seed=args.seed, executor=executor, limits=limits,
                    corpus_format=args.format, on_error="skip" if args.skip_bad_lines else "abort")
    if args.json:
        print(json.dumps(result.profile, indent=2, sort_keys=True))
    else:
        print(format_profile(result.profile))
        secs = result.execution["seconds"]
        print(f"\nartifacts in {result.out_dir} (executed in {secs['execute']:.2f} s, total {secs['total']:.2f} s)")
    return 0


def cmd_replay(args) -> int:
    from sandbox.executor import make_executor
    from sandbox.replay import discard, replay

    source = args.dir
    if args.epoch is not None:   # a run's epoch: its artifacts directory is a whole curation output
        source = run_cli.epoch_artifacts(args.dir, args.epoch)
    elif args.retrain or args.reeval:
        raise UserError("--retrain and --reeval replay a run's epoch: give --epoch E")
    report = replay(source, args.out, executor=make_executor(args.sandbox), corpus_paths=args.corpus)
    print(report.summary())
    for name, diff in report.differences.items():
        print(f"  {name}: {diff}")
    same = report.identical
    if report.identical and args.out is None:
        discard(report)
    if args.epoch is not None and (args.retrain or args.reeval):
        same &= run_cli.replay_training(args.dir, args.epoch, retrain=args.retrain, reeval=args.reeval)
    return 0 if same else 1


def _workspace(path: Path):
    from sandbox.workspace import Workspace

    for candidate in (path / "strategy", path):
        if (candidate / ".git").exists():
            return Workspace.open(candidate)
    raise UserError(f"{path} is neither a run directory nor a strategy workspace (no .git found)")


def cmd_diff(args) -> int:
    """The strategy code in full; the diagnosis and profile under inputs/ (one-line JSON) as a
    line each unless --inputs asks for them whole."""
    ws = _workspace(Path(args.run))
    text = ws.diff(args.a, args.b, include_inputs=args.inputs)
    if not args.inputs:
        text += "".join(f"inputs: {row['path']} {row['status']} (+{row['added']} -{row['removed']} lines; --inputs shows them)\n"
                        for row in ws.diff_summary(args.a, args.b) if row["path"].startswith("inputs/"))
    sys.stdout.write(text if text else f"no difference between {args.a} and {args.b}\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="curateevo", description="Evolve the code that curates agent training data.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("curate", help="execute one strategy once and show its profile")
    p.add_argument("--strategy", type=Path, default=SEED_STRATEGY, help="strategy.py or its directory (default: seed ρ0)")
    p.add_argument("--corpus", type=Path, nargs="+", default=[SAMPLE_CORPUS], help="raw corpus JSONL file(s)")
    p.add_argument("--format", default="auto", choices=["auto", "canonical", "sharegpt", "adp"])
    p.add_argument("--skip-bad-lines", action="store_true", help="skip and count invalid corpus lines instead of aborting")
    p.add_argument("--out", type=Path, help="output directory, new or empty (default: runs/curate-<time>)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sandbox", default="auto", choices=["auto", *EXECUTORS], help="executor of the strategy (default: auto)")
    p.add_argument("--timeout", type=float, default=Limits.timeout_s, help="wall-clock limit in seconds")
    p.add_argument("--json", action="store_true", help="print the profile as JSON")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_curate)

    p = sub.add_parser("replay", help="re-execute a curation output (or a run's epoch) into an empty directory and compare bytes")
    p.add_argument("dir", type=Path, help="a curation output directory (with manifest.json), or a run with --epoch")
    p.add_argument("--epoch", type=int, help="replay this epoch of the run DIR")
    p.add_argument("--retrain", action="store_true", help="with --epoch: train again and compare the adapter bytes")
    p.add_argument("--reeval", action="store_true", help="with --epoch: evaluate again and compare P and every outcome")
    p.add_argument("--out", type=Path, help="where to write the replay (default: a temporary directory)")
    p.add_argument("--corpus", nargs="+", help="the corpus file(s), if they moved")
    p.add_argument("--sandbox", default="auto", choices=["auto", *EXECUTORS], help="executor of the strategy (default: auto)")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("diff", help="strategy diff between two epochs or commits of a workspace")
    p.add_argument("run", help="a run directory or a strategy workspace")
    p.add_argument("a", help="epoch number, tag (epoch-3, best), branch or commit")
    p.add_argument("b")
    p.add_argument("--inputs", action="store_true", help="show the changed inputs/ files (diagnosis, profile) in full")
    p.set_defaults(func=cmd_diff)
    sandbox_image.add_cli(sub)  # curateevo sandbox build|lock
    run_cli.add_cli(sub)  # curateevo run|resume|status|log
    report.add_cli(sub)  # curateevo report
    corpus_cli.add_cli(sub)  # curateevo corpus build
    trainer_cli.add_cli(sub)  # curateevo train
    eval_cli.add_cli(sub)  # curateevo eval
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UserError as exc:   # what the message quotes (a file name, a strategy's error) is not ours
        print(f"curateevo: error: {printable(exc)}", file=sys.stderr)
        return UserError.exit_code
    except RunFailed as exc:
        print(f"curateevo: failed: {printable(exc)}", file=sys.stderr)
        return RunFailed.exit_code
    except KeyboardInterrupt:
        print("curateevo: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

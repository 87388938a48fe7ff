"""The `curateevo` command line (DESIGN: CLI). Errors a user can cause are one line and exit 2."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path

from base.errors import RunFailed, UserError, positive_int, printable
from base.options import add_old_spelling
from sandbox.options import add_corpus, add_sandbox, add_timeout
from trainer.options import add_profile
from base.files import atomic_write, read_json
from evolver import repair, report, run_cli, trace
from sandbox import image as sandbox_image
from environments import corpus_cli
from trainer import cli as trainer_cli
from trainer import export as trainer_export
from trainer import serve as trainer_serve
from experiments import eval_cli
from experiments.quality import cli as quality_cli
from corpora import FORMATS as CORPUS_FORMATS
from sandbox.executor import PROJECT_ROOT, Limits, gib
from sandbox.leftovers import reap_leftovers, start_ticks

SEED_STRATEGY = PROJECT_ROOT / "curation_strategies" / "seed"
SAMPLE_CORPUS = PROJECT_ROOT / "environments" / "data" / "sample_corpus.jsonl"
_IMPORTED = time.monotonic()


def _say(args, text: str) -> None:
    if not getattr(args, "quiet", False):
        print(printable(text), file=sys.stderr, flush=True)


def format_outcomes(raw: dict) -> str:
    """The outcome mix of the corpus and of what the curation retained (the curation stats' raw, sandbox.checker)."""
    mix = lambda m: ", ".join(f"{m.get(k, 0)} {k}" for k in ("success", "failure", "unknown"))   # noqa: E731
    return f"corpus {mix(raw['outcomes'])}; retained {mix(raw.get('retained_outcomes') or {})}"


def format_curation_stats(stats: dict) -> str:
    """The curation stats Σ (profile.json) as a table."""
    raw, sft, rl, mem = stats["raw"], stats["sft"], stats["rl"], stats["memory"]
    tools = ", ".join(f"{k} {v}" for k, v in list(sft["trained_tool_calls"].items())[:6]) or "none"
    rows = [
        ("raw trajectories", f"{raw['records']} ({raw['retained']} retained, {raw['retention']:.1%})"),
        *([("recorded outcomes", format_outcomes(raw))] if raw.get("outcomes") else []),
        ("SFT records", f"{sft['records']}: {sft['turns']} assistant turns, {sft['trained_turns']} trained, "
                        f"{sft['masked_turns']} masked, {sft['tokens']} tokens"),
        ("RL records", f"{rl['records']}: " + (", ".join(f"{k} {v}" for k, v in rl["rewards"].items()) or "none")
                       + f", {rl['prompt_tokens']} prompt tokens"),
        ("memory records", f"{mem['records']} ({mem['tokens']} tokens)"),
        ("trained tool calls", tools),
        ("Cost_train", f"{stats['cost_train']} turns"),
        ("C", f"{stats['C']:.4f} (N_ref {stats['n_ref']:g})"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def process_seconds() -> float:
    """Wall seconds since this process started (interpreter start-up and imports included), from
    /proc where there is one, else since this module was imported."""
    try:
        with open("/proc/uptime", "rb") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks() / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.monotonic() - _IMPORTED


def cmd_curate(args) -> int:
    from base.registry import NO_ENVIRONMENT
    from corpora import corpus_kind, load_corpus
    from corpora.split import sides, sides_note
    from sandbox.curate import execute
    from sandbox.executor import make_executor
    from sandbox.strategy_files import strategy_files
    from trainer.length import files_length_report
    from trainer.recipe import get_profile

    if args.runs_dir is not None and args.runs_dir.exists() and not args.runs_dir.is_dir():
        raise UserError(f"--runs-dir {args.runs_dir} exists and is not a directory")
    out = args.out or (args.runs_dir or PROJECT_ROOT / "runs") / datetime.datetime.now().strftime("curate-%Y%m%d-%H%M%S")
    args.corpus = args.corpus or [SAMPLE_CORPUS]
    limits = Limits(timeout_s=args.timeout)
    executor = make_executor(args.sandbox, trusted=True)   # the user's own strategy
    get_profile(args.profile)   # a misspelled profile fails before anything runs
    corpus = load_corpus([str(p) for p in args.corpus], fmt=args.format,
                         on_error=args.on_bad_line, tools=args.tools, on_progress=lambda text: _say(args, text))
    for notice in (corpus.quirks_notice, corpus.tools_notice):
        if notice:
            _say(args, f"corpus: {notice}")
    if corpus_kind(corpus.records) == NO_ENVIRONMENT:   # what `run` would hold out of it; curate reads it whole
        _say(args, f"corpus: curated whole here; a run holds out dev and test parts. {sides_note(sides(corpus.records))}")
    _say(args, f"curating {', '.join(map(str, args.corpus))} with {args.strategy} ({executor.name} sandbox)")
    from trainer.recipe import curation_budget, get_profile

    # ctx.budget as `run` gives its candidates under this profile, so `curate` makes what a run would
    result = execute(strategy_files(Path(args.strategy)), corpus, Path(out), seed=args.seed,
                     executor=executor, limits=limits, budget=curation_budget(get_profile(args.profile)),
                     say=lambda text: _say(args, text),   # limits raised for a large corpus: a progress note
                     on_progress=lambda text: _say(args, text))
    if corpus.skipped_lines:
        atomic_write(Path(result.out_dir) / "skipped.jsonl",
                     "".join(json.dumps(s.to_json(), ensure_ascii=False) + "\n" for s in corpus.skipped_lines))
    curated = {kind: Path(result.out_dir) / f"{kind}.jsonl" for kind in ("sft", "rl")}
    counts = result.manifest.counts()   # the check counted the records: no file is read again here
    if not counts.get("sft.jsonl") and not counts.get("rl.jsonl"):   # said even with --quiet: a run would train nothing on this
        print("curateevo: warning: this strategy would train nothing: it curated no SFT record and no RL record, "
              "so a run rolls such a candidate back unevaluated", file=sys.stderr)
    try:
        length = files_length_report(curated["sft"], curated["rl"], args.profile, args.max_length,
                                     args.train_max_prompt_tokens)   # training's sample of a large curation
    except UserError as exc:   # advisory here: the artifacts stand without it
        length = exc
    read = len(corpus.records) + len(corpus.skipped_lines)
    lines_read = {"read": read, "skipped": len(corpus.skipped_lines),
                  "retained": result.curation_stats["raw"]["retained"]}
    if args.json:
        shown = {**result.curation_stats, "lines": lines_read, "wall_s": round(process_seconds(), 3),
                 "sandbox_memory": sandbox_memory(result.execution),
                 "length": length.to_json() if not isinstance(length, UserError) else str(length)}
        print(json.dumps(shown, indent=2, sort_keys=True))
    else:
        print(format_curation_stats(result.curation_stats))
        print(f"length ({args.profile})  " + (f"not measured: {length}" if isinstance(length, UserError)
                                             else length.summary()))
        if not isinstance(length, UserError) and length.advice():
            print(f"{'':<{len(args.profile) + 10}} {length.advice()}")
        if corpus.skipped_lines:
            print(f"skipped lines  {len(corpus.skipped_lines)} of {read} (listed in skipped.jsonl); "
                  f"retained {lines_read['retained']} of {read} read ({lines_read['retained'] / read:.1%})")
        secs = result.execution["seconds"]
        print(f"\nartifacts in {result.out_dir} (executed in {secs['execute']:.2f} s, curation {secs['total']:.2f} s; "
              f"wall {process_seconds():.1f} s with start-up, imports and corpus loading)")
        memory = sandbox_memory(result.execution)
        if memory["peak_bytes"] is not None:
            print(f"memory: the strategy's peak resident memory was {gib(memory['peak_bytes'])} of the sandbox's "
                  f"{gib(memory['cap_bytes'])} cap")
    return 0


def sandbox_memory(execution: dict) -> dict:
    """What a curation held in memory (the runtime's peak, execution.json) beside the sandbox's cap."""
    return {"peak_bytes": execution["execution"].get("peak_rss_bytes"), "cap_bytes": execution["limits"]["memory_bytes"]}


def cmd_replay(args) -> int:
    from evolver.integrity import check_artifacts
    from evolver.store import RunStore
    from sandbox.executor import make_executor
    from sandbox.replay import discard, replay

    source, llm = args.dir, None
    if args.epoch is not None:   # a run's epoch: its artifacts directory is a whole curation output
        check_artifacts(RunStore.open(args.dir), only=args.epoch)   # a damaged one: say how to rebuild it
        source = run_cli.epoch_artifacts(args.dir, args.epoch)
        llm = run_cli.replay_llm(args.dir)   # ctx.llm answered from the run's records only
    elif args.retrain or args.reeval:
        raise UserError("--retrain and --reeval replay a run's epoch: give --epoch E")
    _say_environment(args.dir if args.epoch is not None else source)
    report = replay(source, args.out, executor=make_executor(args.sandbox), corpus_paths=args.corpus, llm=llm,
                    tools_path=args.tools, on_progress=lambda text: _say(args, text),
                    keep=False if args.hashes else None)
    kept = not (report.identical and args.out is None)   # an identical replay into a temporary folder is removed
    print(report.summary(kept))
    for name, diff in report.differences.items():
        print(f"  {name}: {diff}")
    same = report.identical
    if not kept:
        discard(report)
    if args.epoch is not None and (args.retrain or args.reeval):
        same &= run_cli.replay_training(args.dir, args.epoch, retrain=args.retrain, reeval=args.reeval)
    return 0 if same else 1


def _say_environment(folder: Path) -> None:
    """A note on stderr when this environment is not the one the run or output was made in."""
    from sandbox.package_lock import compare_with_lock

    folder = Path(folder)
    for name in ("environment.json", "execution.json"):
        if (folder / name).is_file():
            doc = read_json(folder / name)
            recorded = doc.get("environment") if name == "execution.json" else doc
            for note in compare_with_lock(recorded):
                print(f"curateevo: note: {note}; bytes that differ may come from it", file=sys.stderr)
            return


def _workspace(path: Path):
    from workspace.repository import Workspace

    for candidate in (path / "strategy", path):
        if (candidate / ".git").exists():
            return Workspace.open(candidate)
    raise UserError(f"{path} is neither a run directory nor a strategy workspace (no .git found)")


def cmd_diff(args) -> int:
    """The strategy code in full; the diagnosis and curation stats (profile.json) under inputs/ (one-line JSON) as a
    line each unless --inputs asks for them whole."""
    ws = _workspace(Path(args.run))
    if (Path(args.run) / "run.json").is_file():   # a run: its tags must be the ones its journal recorded
        from evolver.integrity import check_workspace
        from evolver.store import RunStore

        check_workspace(RunStore.open(Path(args.run)), ws)
    text = ws.diff(args.a, args.b, include_inputs=args.inputs)
    if not args.inputs:
        text += "".join(f"inputs: {row['path']} {row['status']} (+{row['added']} -{row['removed']} lines; --inputs shows them)\n"
                        for row in ws.diff_summary(args.a, args.b) if row["path"].startswith("inputs/"))
    sys.stdout.write(text if text else f"no difference between {args.a} and {args.b}\n")
    return 0


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's help line ends with its default, unless it has none or says it already."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default in (None, False, [], argparse.SUPPRESS) or "default" in text:
            return text
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """`curateevo`'s parsers: defaults shown in every help line."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        """A bad argument is one line (not argparse's usage block), exit 2."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("curateevo")
    except PackageNotFoundError:   # run from a checkout that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="curateevo", description="Evolve the code that curates agent training data.")
    parser.add_argument("--version", action="version", version=f"curateevo {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)

    p = sub.add_parser("curate", help="execute one strategy once and show its curation stats (profile.json)")
    p.add_argument("--strategy", type=Path, default=SEED_STRATEGY, help="strategy.py or its directory (default: seed ρ0)")
    add_corpus(p, "raw corpus file(s) or folder(s), any format `run` reads (default: the bundled sample, "
                  "environments/data/sample_corpus.jsonl)",
               "JSON file of the real tool schemas for records whose files carry none (default: one catalogue per "
               "source, built from the calls the corpus makes)")
    p.add_argument("--format", default="auto", choices=["auto", "openai", *CORPUS_FORMATS],
                   help="corpus format; auto detects it per file")
    add_profile(p, "recipe profile: what its recipe trains is the strategy's ctx.budget (as `run` gives it), "
                   "and its length limits are reported", overrides=None)
    p.add_argument("--max-length", type=positive_int, default=None, help="SFT max_length to report (default: the profile's)")
    p.add_argument("--train-max-prompt-tokens", type=positive_int, default=None,
                   help="GRPO max_prompt_tokens to report (default: the profile's)")
    add_old_spelling(p, "--max-prompt-length", "--train-max-prompt-tokens", "train_max_prompt_tokens", type=positive_int)
    p.add_argument("--out", type=Path, help="output directory, new or empty (default: RUNS_DIR/curate-<time>)")
    p.add_argument("--runs-dir", type=Path, help="where the output directory goes without --out (default: runs/ of the project)")
    p.add_argument("--seed", type=int, default=0, help="the curation seed (ctx.rng)")
    add_sandbox(p)
    add_timeout(p)
    p.add_argument("--json", action="store_true", help="print the curation stats as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress messages")
    p.set_defaults(func=cmd_curate)

    p = sub.add_parser("replay", help="re-execute a curation output (or a run's epoch) into an empty directory and compare bytes")
    p.add_argument("dir", type=Path, help="a curation output directory (with manifest.json), or a run with --epoch")
    p.add_argument("--epoch", type=int, help="replay this epoch of the run DIR")
    p.add_argument("--retrain", action="store_true", help="with --epoch: train again and compare the adapter bytes")
    p.add_argument("--reeval", action="store_true", help="with --epoch: evaluate again and compare P and every outcome")
    p.add_argument("--out", type=Path, help="where to write the replay (default: a temporary directory)")
    p.add_argument("--hashes", action="store_true",
                   help="compare the replayed SFT, RL and memory files by sha256 as they are checked and keep no copy "
                   "(no disk for them; a difference then names no line). A temporary replay does so by itself "
                   "where a copy would not fit")
    add_corpus(p, "the corpus file(s) or folder(s) as given to curate or run, if they moved",
               "the --tools file the output was curated with, if it moved", bad_lines=None)
    add_sandbox(p)
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("diff", help="strategy diff between two epochs or commits of a workspace")
    p.add_argument("run", help="a run directory or a strategy workspace")
    p.add_argument("a", help="epoch number, tag (epoch-3, best), branch or commit")
    p.add_argument("b", help="the other epoch number, tag, branch or commit (the diff goes from A to B)")
    p.add_argument("--inputs", action="store_true", help="show the changed inputs/ files (diagnosis, curation stats) in full")
    p.set_defaults(func=cmd_diff)
    sandbox_image.add_cli(sub)  # curateevo sandbox build|lock
    run_cli.add_cli(sub)  # curateevo run|resume|status|log
    repair.add_cli(sub)  # curateevo repair RUN [--epoch E]
    report.add_cli(sub)  # curateevo report
    trace.add_cli(sub)  # curateevo trace RUN --record ID | --task TASK
    corpus_cli.add_cli(sub)  # curateevo corpus build
    trainer_cli.add_cli(sub)  # curateevo train
    trainer_export.add_cli(sub)  # curateevo export verl
    trainer_serve.add_cli(sub)  # curateevo serve (a local OpenAI-compatible server: transformers serve)
    eval_cli.add_cli(sub)  # curateevo eval
    quality_cli.add_cli(sub)  # curateevo bench quality
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)   # the command as given (a raw result records it)
    try:
        reaped = reap_leftovers()   # what a curateevo process killed with SIGKILL left (containers, job folders)
        if reaped:
            print(f"curateevo: {reaped}", file=sys.stderr)
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
    except BrokenPipeError:   # `curateevo status RUN | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())

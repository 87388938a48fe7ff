"""`curateevo bench quality`: the paper's Tables 1 and 2 on our corpora, resumable and cached.

    curateevo bench quality [--run RUN ...] [--ablate ROW] [--seeds S] [--tasks N] [--profile P]

Curates every row once, then trains and evaluates each row × seed cell that the cache does not
hold yet (a progress bar with the ETA counts the cells), and writes OUT/quality.json,
quality.md and quality.png. `--spread` reports the run-to-run spread of P (item 4 of issue 14)
on the dev subset the loop uses.
"""
from __future__ import annotations

import argparse
import dataclasses
import contextlib
import fcntl
import sys
from pathlib import Path

from base.errors import UserError, positive_int
from sandbox.options import add_corpus, add_sandbox, add_timeout
from trainer.options import add_profile
from trainer.cli import parse_budget
from sandbox.executor import make_executor

from environments.evaluate import EvalSpec
from environments.policies.limits import LEGACY_MAX_NEW_TOKENS
from experiments.quality import CACHE, CALIBRATION, DEV_TASKS, RESULTS, ROWS, SEEDS, TABLE1, TEST_TASKS

EVAL = EvalSpec()   # the evaluation's defaults, declared once (environments.evaluate.EvalSpec)


@contextlib.contextmanager
def _only_writer(cache: Path):
    """One invocation computes cells in a cache at a time (a second would clear its partial cells)."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(f"another `bench quality` is computing cells in {cache}; wait for it, "
                            "use --report-only, or give another --cache") from None
        yield


def _sha256(text: str) -> str:
    if len(text) != 64 or any(c not in "0123456789abcdef" for c in text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a sha256 (64 lowercase hex digits, as `bench quality` prints)")
    return text


def _shard(text: str) -> tuple[int, int]:
    """`I/N`: the I-th (from 0) of N shares."""
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        i, n = -1, 0
    if not 0 <= i < n:
        raise argparse.ArgumentTypeError(f"{text!r}: write I/N with 0 <= I < N (e.g. 0/4 for the first of four shares)")
    return i, n


def _units(text: str) -> list[int]:
    try:
        units = sorted({int(u) for u in text.split(",")})
    except ValueError:
        units = []
    if not units or units[0] < 1:
        raise UserError(f"--proxy {text!r}: give the proxy's units as whole numbers of 1 or more, comma-separated (e.g. 1,2)")
    return units


def setting_of(args):
    from base import registry
    from experiments.quality.cells import Setting
    from trainer.train import TrainSpec
    from corpora import corpus_sha256

    if args.seeds < 1 or (args.tasks is not None and args.tasks < 1):
        raise UserError("--seeds and --tasks must be at least 1")
    if args.spread and args.seeds < 2:
        raise UserError("--spread compares training seeds: give --seeds 2 or more")
    env = registry.get(args.benchmark)
    if env.executable and (args.corpus or args.tools):
        raise UserError(f"--corpus and --tools are for --benchmark {registry.NO_ENVIRONMENT} (a corpus without an "
                        f"environment); {args.benchmark} brings its own tasks and corpora (--wild, --labeled)")
    if not env.executable:
        if not args.corpus:
            raise UserError(f"--benchmark {args.benchmark} needs --corpus FILE: the corpus whose held-out tenth "
                            "are the tasks and whose other nine tenths the rows curate")
        if args.split == "test" or args.wild or args.labeled:
            raise UserError(f"--benchmark {args.benchmark} has no test split and no --wild/--labeled corpora: its tasks "
                            "are the held-out tenth of --corpus (dev), its rows curate the rest")
        if args.proxy:
            raise UserError(f"--proxy scores episodes; --benchmark {args.benchmark} has none (it scores steps)")
    split = "dev" if not env.executable else args.split or ("dev" if args.spread or args.calibrate else "test")
    default_tasks = None if not env.executable else DEV_TASKS if split == "dev" else TEST_TASKS
    tasks = args.tasks if args.tasks is not None else default_tasks
    corpus = tuple(str(c) for c in args.corpus or ())
    from environments.user_sim import from_args

    user = from_args(args) if env.user_simulated else None   # its server answers before any cell is computed
    return Setting(benchmark=args.benchmark, split=split, tasks=tasks, seeds=tuple(range(args.seeds)),
                   categories=tuple(c for c in (args.categories or "").split(",") if c),
                   metric=env.metrics[0], train=TrainSpec(profile=args.profile, base=args.base, budget=parse_budget(args.set)),
                   eval=EvalSpec(batch_size=args.batch_size, max_new_tokens=args.max_new_tokens),
                   curation_timeout_s=args.timeout, corpus=corpus,
                   tools=str(args.tools) if args.tools else None,
                   corpus_sha256=corpus_sha256(list(corpus)) if corpus else None,
                   user=dataclasses.astuple(user) if user else None)


def cmd_bench_quality(args) -> int:
    from experiments.quality import rows as rows_mod
    from experiments.quality import strategy_rows, table
    from experiments.quality.cells import Cells
    from experiments.quality.stats import minimal_detectable_difference
    def say(text: str) -> None:
        if not args.quiet:
            print(text, file=sys.stderr, flush=True)

    setting = setting_of(args)
    if args.calibrate and args.strategy:
        raise UserError("--calibrate trains its own rows (" + ", ".join(CALIBRATION) + "); give --strategy without it")
    if args.calibrate and args.rows and not set(args.rows.split(",")) <= set(CALIBRATION):
        raise UserError("--calibrate trains its own rows (" + ", ".join(CALIBRATION) + "); --rows may pick among them")
    held_out_dir = rows_mod.held_out_train_dir(setting.corpus, setting.tools, args.cache) if setting.corpus else None
    labelled = rows_mod.labels_of(held_out_dir) is not None if held_out_dir else True
    default = TABLE1 if not held_out_dir else ("rho0-wild", "agentrefine", "oracle") if labelled else ("rho0-wild", "agentrefine")
    which = (tuple(r for r in CALIBRATION if r in args.rows.split(",")) if args.calibrate and args.rows
             else CALIBRATION if args.calibrate else tuple(args.rows.split(",")) if args.rows
             else (("rho0-wild",) if args.spread else default))
    if args.calibrate and not labelled:
        which = tuple(w for w in which if w not in ("oracle", "noisy"))
        say(f"{setting.corpus[0]}: no record carries a success outcome, so the calibration has no clean subset "
            "(oracle, noisy): it compares the corpus with its poisoned copy")
    if "runs" in which and not args.run:
        which = tuple(w for w in which if w != "runs")
    elif args.run and "runs" not in which:
        raise UserError("--run was given but --rows leaves out `runs`")
    if args.run_epochs and not args.run:
        raise UserError("--run-epochs names the candidates of the runs given with --run; give --run RUN")
    units = _units(args.proxy) if args.proxy else []
    executor = None if args.curated_runtime else make_executor(args.sandbox, warn=say)
    cells = Cells(args.cache, setting, executor, args.curated_runtime)   # checks base, budget, tasks first
    sized = cells.curation_budget["sft_examples"]   # the default corpus is sized as `run` sizes it
    # a benchmark that builds no corpus (ACEBench, τ²: held-out tests) scores rows curated from the corpus the
    # default run curates, as `run --benchmark` without --corpus trains on it
    from base import registry

    source = args.benchmark if registry.get(args.benchmark).declares("corpus") else registry.DEFAULT
    wild_dir = held_out_dir or args.wild or rows_mod.default_corpus_dir(source, "wild", max_records=sized)
    labeled_dir = args.labeled or (rows_mod.default_corpus_dir(source, "labeled", max_records=sized)
                                   if "rho0-labeled" in which and not held_out_dir else None)
    if args.strategy and "rho0-wild" not in which:   # each strategy is paired against ρ0
        which = ("rho0-wild", *which)
    rows = rows_mod.table_rows(which, wild_dir, labeled_dir, args.run or [], args.cache, args.ablate, args.run_epochs,
                               source_sha256=setting.corpus_sha256)
    if args.strategy:
        rows += strategy_rows.strategy_rows(args.strategy, next(r for r in rows if r.id == "rho0-wild").corpus)
    adopted = sum(cells.adopt(run) for run in args.run or [])
    if adopted:
        say(f"{adopted} training(s) of the given runs match this recipe: a cell with the same data and seed reuses them")

    say(f"curating {len(rows)} rows (cached by strategy × corpus × sandbox runtime {cells.runtime}) …"
        if cells.curate_here else f"reusing the curations of {len(rows)} rows made under runtime {cells.runtime} …")
    if args.strategy:   # judged as a candidate's dry run is, before any row trains
        strategy_rows.curate(cells, [r for r in rows if r.id.startswith(strategy_rows.PREFIX)], args.strategy)
    for row in rows:
        cells.inputs(row)
    missing = [(row, s) for s in setting.seeds for row in rows if cells.cached(row, s) is None]   # seed-major: a stopped bench leaves paired seeds
    if args.shard:   # this process's share of the cells; the others compute theirs in their own caches
        i, n = args.shard
        say(f"shard {i}/{n}: {len(missing[i::n])} of the {len(missing)} missing cells")
        missing = missing[i::n]
    say(f"{len(rows) * len(setting.seeds) - len(missing)} cells cached, {len(missing)} to compute "
        f"({len(cells.tasks)} {setting.split} tasks, profile {setting.train.profile}, cache {args.cache})")
    mdd = minimal_detectable_difference(len(cells.tasks), len(setting.seeds), table.BASE_RATE)
    say(f"with {len(cells.tasks)} tasks × {len(setting.seeds)} seeds, two rows must differ by about "
        f"{100 * mdd:.0f} points of P to be told apart (power 0.8, α 0.05, P near {table.BASE_RATE}, seed spread not counted)")
    if missing and not args.report_only:
        from tqdm import tqdm

        with _only_writer(Path(args.cache)), tqdm(total=len(missing), desc="cells", unit="cell", file=sys.stderr, disable=args.quiet,
                  dynamic_ncols=True) as bar:
            for row, seed in missing:
                bar.set_postfix_str(f"{row.id} seed {seed}")
                cells.cell(row, seed)
                if args.calibrate or args.gold:   # while the adapter is here: a shard's cache travels without it
                    cells.gold(row, seed)
                bar.update(1)
    results = {}
    for row in rows:
        got = [cells.cached(row, s) for s in setting.seeds]
        results[row.id] = got if all(got) else []
    # the tasks each cell scored (next-call scores only held-out records with a call step; BFCL every task)
    scored = [len(c["scores"]) for got in results.values() for c in got]
    doc = table.summarize(rows, results, setting, min(scored) if scored else len(cells.tasks), groups=cells.groups)
    golds = {}
    if args.calibrate or args.gold:
        say("gold-call log-likelihood of every computed cell (cached beside it) …")
        golds = {row.id: [cells.gold(row, s) for s in setting.seeds] for row in rows if results.get(row.id)}
    if args.gold:   # what bench/rank_agreement.py resamples
        table.add_per_task(doc, results, golds)
    if units:
        from experiments.quality import proxy

        say(f"proxy scores at {', '.join(map(str, units))} unit(s) for the rows with all their cells …")
        with (contextlib.nullcontext() if args.report_only else _only_writer(Path(args.cache))):
            doc["proxy"] = proxy.report(cells, rows, units, results, compute=not args.report_only)
    out = args.out or Path(args.cache) / f"report-{setting.split}"
    if args.spread:
        doc["spread"] = table.spread(doc)
    best = strategy_rows.add_vs_best(doc, {r: table.row_scores(c) for r, c in results.items() if c}, cells.category) \
        if args.strategy else None
    paths = table.write(doc, Path(out))
    print(table.markdown(doc))
    if args.strategy:
        print(strategy_rows.markdown(doc, best))
        print(f"raw result: {strategy_rows.write_raw(doc, rows, getattr(args, 'argv', []), args.results)} "
              "(`bench/leaderboard.py` makes it a row of docs/leaderboard.md)")
    if args.calibrate:
        from experiments.quality import calibration

        cal = calibration.summarize(doc, results, golds)
        print(calibration.markdown(cal))
        print(f"calibration: {calibration.write(cal, Path(args.cache))}")
    if args.spread:
        print(table.spread_text(doc["spread"], doc))
    print(f"results: {paths['json']}, {paths['markdown']}, {paths['png']}")
    return 0


def _with_test_splits() -> list[str]:
    """The environments the quality table can score: those with tasks of their own (a test split; one
    that builds no corpus scores rows curated from the default run's corpus), and next-call on a
    user's corpus."""
    from base import registry

    return [n for n in registry.names() if registry.get(n).executable] \
        + [registry.NO_ENVIRONMENT]   # a user's corpus (--corpus): its held-out tenth are the tasks


def add_cli(sub) -> None:
    """Register `curateevo bench quality` on the main parser's subcommands."""
    from base import registry

    bench = sub.add_parser("bench", help="benchmarks of the product itself")
    bsub = bench.add_subparsers(dest="bench_command", required=True, metavar="BENCHMARK")
    p = bsub.add_parser("quality", help="the paper's Tables 1 and 2: does evolved curation beat no curation?",
                        description="Train the fixed recipe on each row's curated data with several seeds and "
                                    "evaluate on a held-out, category-balanced test subset; every cell is cached.")
    p.add_argument("--benchmark", default=registry.DEFAULT, type=registry.given, choices=_with_test_splits(),
                   help="the benchmark whose test split scores every row (next-call: the held-out tenth of --corpus; "
                        "old name: replay)")
    from environments.user_sim import add_flags

    add_flags(p)
    add_corpus(p, "--benchmark next-call: your corpus (files as `run --corpus` takes them); its held-out tenth are the "
               "tasks (dev), its other nine tenths what the rows curate",
               "--benchmark next-call: the corpus's tool schemas, as `run --tools`", bad_lines=None)
    p.add_argument("--wild", type=Path, help="wild corpus directory with noise_labels.json "
                                             "(default: runs/corpora/BENCHMARK-wild-seed0-maxN, sized to the profile's SFT budget N "
                                             "as `run` sizes it, built if missing)")
    p.add_argument("--labeled", type=Path, help="labeled corpus directory (default: runs/corpora/BENCHMARK-labeled-seed0-maxN, "
                                                  "the wild one's tasks)")
    p.add_argument("--run", type=Path, nargs="+", help="finished run directories: their final strategies are rows")
    p.add_argument("--strategy", type=Path, nargs="+", metavar="DIR",
                   help="strategy directories (strategy.py, helper modules, inputs/): each a row `strategy:NAME`, "
                        "executed in the sandbox and scored under the same recipe, seeds and tasks, paired against "
                        "ρ0 and the best other row, and written to a raw result file in --results")
    p.add_argument("--results", type=Path, default=RESULTS, help="where --strategy's raw result JSON goes "
                                                                  "(default bench/results)")
    p.add_argument("--rows", help=f"comma-separated rows among {','.join(ROWS)} (default: {','.join(TABLE1)}; "
                                  "with --spread: rho0-wild)")
    p.add_argument("--ablate", metavar="ROW[:ABLATIONS]", help="Table 2 for this row (rho0-wild, agentrefine, oracle, "
                                                   "rho0-labeled or a run's name): w/o SFT, w/o RL, w/o memory; "
                                                   "ROW:no-rl[,no-memory] for some of them")
    p.add_argument("--seeds", type=positive_int, default=SEEDS, help=f"training seeds per row (default {SEEDS})")
    p.add_argument("--tasks", type=positive_int, help="tasks of the split, balanced over its categories "
                                                      f"(default {TEST_TASKS} test, {DEV_TASKS} dev)")
    p.add_argument("--categories", help="comma-separated categories of the benchmark to score (default: all of them)")
    p.add_argument("--split", choices=["test", "dev", "tune"], help="test (default), dev (default with --spread) or tune (bfcl-single's tuning slice: train tasks outside the default corpus, for choosing a profile's learning rates)")
    add_profile(p, overrides="the profile (part of the cache key)")
    p.add_argument("--base", help="base model (default: the profile's)")
    p.add_argument("--batch-size", type=positive_int, default=EVAL.batch_size,
                   help=f"evaluation batch size (default {EVAL.batch_size})")
    p.add_argument("--max-new-tokens", type=positive_int, default=EVAL.max_new_tokens,
                   help=f"tokens the policy writes per turn at most (default {EVAL.max_new_tokens}; the tables made "
                        f"before 2026-11-29 evening used {LEGACY_MAX_NEW_TOKENS})")
    add_sandbox(p, "the strategies")
    p.add_argument("--curated-runtime", metavar="SHA256", type=_sha256,
                   help="reuse curations made on another machine, whose sandbox runtime hash (printed there) this is, "
                        "and curate nothing here: curate where the sandbox runs, train and evaluate where the GPU is")
    add_timeout(p)
    p.add_argument("--cache", type=Path, default=CACHE, help="cache directory (default runs/bench-quality)")
    p.add_argument("--out", type=Path, help="where quality.json/.md/.png go (default CACHE/report-SPLIT)")
    p.add_argument("--spread", action="store_true", help="report the run-to-run spread of P between seeds "
                                                         "and the acceptance margin it implies (dev split)")
    p.add_argument("--gold", action="store_true", help="also each cell's gold-call log-likelihood (the continuous signal "
                   "beside P), and each row's per-task P and gold LL in quality.json (bench/rank_agreement.py)")
    p.add_argument("--calibrate", action="store_true", help="train rows that must differ (ρ0 wild, clean, noisy, "
                   "poisoned, augment) on dev and say whether this setting sees data and the smallest effect it "
                   "resolves; cached per setting, read by `run`")
    p.add_argument("--run-epochs", action="store_true", help="also a row for every other candidate the --run runs "
                                                             "evaluated (accepted or rolled back)")
    p.add_argument("--proxy", metavar="UNITS", help="score every row with the loop's candidate proxy at these units "
                                                    "(e.g. 1,2) and report how well it ranks rows against the full recipe")
    p.add_argument("--shard", metavar="I/N", type=_shard,
                   help="compute only the I-th of N shares of the missing cells, in this --cache (to spread one "
                        "setting over processes or machines; merge the caches' cells/ folders, then --report-only)")
    p.add_argument("--report-only", action="store_true", help="compute no cell; report what the cache holds")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_bench_quality)

"""`curateevo run | resume | status | log`: launch an evolution run, continue it, inspect it."""
from __future__ import annotations

import datetime
import json
import os
import shutil
import sys
from pathlib import Path

from evolver import overrides
from evolver.backends import InFlight, make_backend, read_in_flight
from evolver.config import (OLD_OPTIONS, OPTIONS_BY_DEST, RESUME_OPTIONS, RUN_OPTIONS, RunConfig, flag_values,
                            llm_moved, llm_of, merge_options, on_backend, option_values, resolve)
from evolver.options import check_option
from base.errors import UserError, positive_int
from base.options import add_old_spelling
from base.files import atomic_json, is_empty_or_missing, read_json, read_jsonl, sha256_bytes, sha256_file
from base import registry
from environments.evaluate import EvalResult
from experiments import journal
from evolver.store import RunStore, half_made, taken
from evolver.launch import check_own_strategy, check_run_lengths, check_run_prompts, dev_check, dev_note, read_ids
from evolver.own_strategy import create_workspace, own_files
from evolver.tables import epoch_rows, failed_stages, final_line, format_log, format_stages, untrained_choice
from corpora import corpus_kind, corpus_sha256, load_corpus
from sandbox.executor import PROJECT_ROOT

RUNS = PROJECT_ROOT / "runs"


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def default_corpus(benchmark: str, setting: str, seed: int, max_records: int | None = None,
                   runs_dir: Path | None = None) -> list[str]:
    """The default raw corpus of a benchmark (train split only; registry.DEFAULT_CORPUS's when the
    benchmark builds none), sized to `max_records` (the profile's SFT budget, so every record ρ0
    keeps is trained), built once into a cache under `runs_dir`/corpora (the project's runs/ by default)."""
    environment = registry.get(benchmark)
    if not environment.corpus_settings:
        environment = registry.get(registry.DEFAULT_CORPUS)
    return [str(environment.default_corpus(Path(runs_dir or RUNS) / "corpora", setting, seed, max_records))]


def read_config_file(path: str) -> dict:
    """`--config FILE` (YAML or JSON, keys = the long options of `run`, dashes or underscores),
    checked against RUN_OPTIONS: dest → value."""
    import yaml

    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"cannot read the run config {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise UserError(f"{where}: not valid YAML/JSON ({getattr(exc, 'problem', exc)})") from None
    return option_values(doc, str(path))


def run_options(args) -> dict:
    """The options of `curateevo run`: flags given, else the config file's values, else defaults
    (each checked against its declaration in evolver/config.py)."""
    from evolver.llm import OLD_MODES

    given = flag_values({o.dest: getattr(args, o.dest) for o in RUN_OPTIONS})
    options = merge_options(given, read_config_file(args.config) if args.config else {})
    if options.get("llm_mode") in OLD_MODES:   # the old spelling still works, and says the new one
        print(f"note: --llm-mode {options['llm_mode']} is the old spelling of --llm-mode "
              f"{OLD_MODES[options['llm_mode']]}", file=sys.stderr)
    if isinstance(options.get("benchmark"), str):   # likewise an old benchmark name (registry.OLD_NAMES)
        options["benchmark"] = registry.given(options["benchmark"])
    options["set"] = list(getattr(args, "set", None) or ())   # any setting by its dotted key, applied last
    return options


def agent_sandbox_answers() -> None:
    """UserError unless the Docker executor, where the code agent's commands run, answers here."""
    from base.errors import RunFailed
    from sandbox.executor import executor_class

    try:
        executor_class("docker")()
    except RunFailed as exc:
        raise UserError(f"the code agent's commands run in the Docker sandbox, and {exc}; or evolve without the "
                        "agent: --proposer offline") from None


def create_run(options: dict) -> RunStore:
    """A new run directory with its resolved run.json; everything a user can get wrong is
    checked here, before the corpus is built and before the directory exists."""
    runs_dir = Path(options["runs_dir"] or RUNS)
    name = options["name"] or datetime.datetime.now().strftime("run-%Y%m%d-%H%M%S")
    if name in (".", "..") or "/" in name or "\\" in name or any(ord(c) < 32 for c in name):
        raise UserError(f"--name {name[:60]!r} must be a plain directory name (no /, no ..)")
    if runs_dir.exists() and not runs_dir.is_dir():
        raise UserError(f"--runs-dir {runs_dir} exists and is not a directory")
    llm = llm_of(options)
    if llm is not None and (options["proposer"] or "agent") == "agent":
        if options["sandbox"] == "process":
            raise UserError("the code agent's commands run in the Docker sandbox only: use --sandbox docker or auto")
        agent_sandbox_answers()   # said now, not after epoch 0's curation, training and diagnosis
    if options["llm_records"] and not Path(options["llm_records"]).is_dir():
        raise UserError(f"--llm-records {options['llm_records']}: no such directory (a run's llm/ folder)")
    probe = overrides.apply(resolve(options, (), ""), options.get("set"))   # every value checked before any
    # corpus is read or built
    if probe.strategy:
        own_files(probe)   # --strategy DIR: a directory with a strategy.py, said before the corpus is read
    held_out_corpus = registry.get(probe.benchmark).holds_out_corpus()
    if held_out_corpus and not options["corpus"]:
        raise UserError(f"--benchmark {probe.benchmark} scores held-out records of your own corpus: give --corpus FILE "
                        "(a JSON/JSONL file or folder of trajectories, e.g. --corpus examples/corpora/glaive-toolcall-40.json)")
    chosen = {part: read_ids(options[f"{part}_ids"], f"{part}-ids") for part in ("dev", "test")
              if options[f"{part}_ids"]}
    if not is_empty_or_missing(runs_dir / name) and not half_made(runs_dir / name):   # said before the corpus is
        raise UserError(taken(runs_dir / name))   # read or built; a half-made run is replaced by RunStore.create
    if options["corpus"]:   # a user's corpus: read and checked now; without an environment, its own dev tenth
        corpus = [str(Path(p).resolve()) for p in options["corpus"]]
        loaded = load_corpus(corpus, on_error=probe.on_error, tools=probe.tools or None, on_progress=say)
        config = overrides.apply(resolve(options, tuple(corpus), corpus_sha256(corpus), corpus_kind(loaded.records)),
                                 options.get("set"))
    else:
        corpus = default_corpus(probe.benchmark, "wild", probe.seed,
                                probe.curation_budget["sft_examples"], runs_dir)
        loaded = load_corpus(corpus, tools=probe.tools or None) if probe.tools else None
        config = probe.replace(corpus=tuple(corpus), corpus_sha256=corpus_sha256(corpus))
    if loaded is not None and loaded.tools_file is not None:
        config = config.replace(tools_sha256=loaded.tools_file.sha256)
    held_out = registry.get(config.benchmark).holds_out_corpus()   # the corpus's held-out parts
    if held_out:
        from corpora.split import DEFAULT_SPLIT

        config = config.replace(holdout={**DEFAULT_SPLIT, **{f"{part}_ids": ids for part, ids in chosen.items()}})
    elif chosen:
        raise UserError(f"--{next(iter(chosen))}-ids chooses held-out records of a corpus without an environment; "
                        f"this corpus is evaluated on {config.benchmark}, which brings its own dev and test tasks")
    dev = dev_check(config) if held_out else None   # before any work: the hold-out can be judged
    def fill(folder: Path) -> None:   # written before the run directory takes its name
        if loaded is not None and loaded.skipped_lines:
            write_skipped(folder, loaded)
        if options["llm_records"]:   # a rerun from another run's record (offline: no network call)
            shutil.copytree(options["llm_records"], folder / "llm", ignore=shutil.ignore_patterns("diagnosis-cache"))
        if config.strategy:   # the user's strategy is the run's from now on: resume and replay need no DIR
            create_workspace(folder / "strategy", config)

    prestart_trainings(config)   # their imports beside the checks below, which import transformers here
    config, limits = check_run_lengths(config, loaded)
    if limits:
        say(limits)
    check_run_prompts(config)   # every dev prompt fits the evaluation's prompt cap, or one sentence now
    config = check_own_strategy(config)   # --strategy DIR: the candidate gate's checks, before any training
    store = RunStore.create(runs_dir / name, config.to_json(), fill)   # else the loop creates the workspace from ρ0
    if loaded is not None:
        corpus_notes(store, loaded)
    if dev is not None:
        say(dev_note(dev, config.tasks))
    return store


def prestart_trainings(cfg: RunConfig) -> None:
    """Where the run trains here (the local backend), its trainings' forkserver starts importing now
    (trainer.train.prestart_training); a Ray cluster's trainings start on the cluster."""
    if cfg.backend == "local":
        from trainer.train import prestart_training

        prestart_training()


def write_skipped(folder: Path, corpus) -> None:
    """RUN/skipped.jsonl: each record the corpus's loading skipped, with its reason."""
    from base.files import atomic_write

    atomic_write(folder / "skipped.jsonl",
                 "".join(json.dumps(s.to_json(), ensure_ascii=False) + "\n" for s in corpus.skipped_lines))


def corpus_notes(store: RunStore, corpus) -> None:
    """What loading did to the corpus, on stderr: skipped records (listed in RUN/skipped.jsonl, and
    skipped by every later stage too) and tool lists built from the calls or taken from --tools."""
    if corpus.skipped_lines:
        read = len(corpus.records) + len(corpus.skipped_lines)
        say(f"corpus: {len(corpus.skipped_lines)} of {read} records skipped (--on-bad-line skip; each with its reason "
            f"in {store.root / 'skipped.jsonl'}); every stage that reads the corpus (curation, the dev hold-out, "
            f"resume, replay) skips them too; first: {corpus.skipped_lines[0]}")
    for notice in (corpus.quirks_notice, corpus.tools_notice):
        if notice:
            say(f"corpus: {notice}")


def cmd_run(args) -> int:
    from evolver.preflight import check_base_model, check_llm
    from trainer.tracking import check_report_to

    options = run_options(args)
    store = create_run(options)
    backend = None
    try:   # before epoch 0: the base model's tokenizer, the LLM's key and one answer, the cluster
        check_report_to(run_config(store).train.report_to)   # a tracker whose package is missing
        check_base_model(run_config(store).train.base)
        backend = make_backend(run_config(store), store.root)
        backend.prepare(run_config(store))              # a cluster without the GPUs the profile needs
        usage = check_llm(run_config(store), store.root / "llm")
    except BaseException:
        shutil.rmtree(store.root, ignore_errors=True)   # nothing was run: nothing is left behind
        if backend is not None:
            backend.close()
        raise
    if usage:
        store.journal.append(journal.Preflight.of(usage))
    if options["corpus"] and not options["benchmark"]:
        benchmark = run_config(store).benchmark
        say(f"benchmark: {benchmark} (chosen from the corpus: " + (
            "it has no environment, so P is call_f1 on its held-out dev tenth, and `curateevo test` scores its held-out "
            "test tenth; the strategy sees neither)"
            if registry.get(benchmark).holds_out_corpus() else
            "every record names this environment; --benchmark chooses another)"))
    cfg = run_config(store)
    if options["margin"] is None:
        from evolver.config import default_margin_of

        say("acceptance: " + default_margin_of(options, cfg.train.base, cfg.benchmark)[1])
    # the instrument's calibration of this setting (bench quality --calibrate), a next-call run's by its corpus
    from experiments.quality.calibration import run_note
    from experiments.quality import CACHE

    dev_corpus = registry.get(cfg.benchmark).dev_corpus(cfg.corpus)   # a next-call run's is its own corpus
    say(run_note(CACHE, benchmark=cfg.benchmark, profile=cfg.train.profile, base=cfg.train.base, tasks=cfg.tasks,
                 seeds=len(cfg.seeds), margin=cfg.margin if cfg.acceptance_rule == "margin" else None,
                 corpus=tuple(dev_corpus or ()), corpus_sha256=cfg.corpus_sha256 if dev_corpus is not None else None))
    print(f"run directory: {store.root}")
    return run_and_report(store, backend)


def cmd_resume(args) -> int:
    store = RunStore.open(Path(args.run))
    store.lock()   # a second resume of the run refuses here, before it reads or touches anything else
    store.journal.events()   # a journal damaged in the middle refuses here too (a torn last line is cut at the first write)
    cfg = run_config(store)
    if corpus_sha256(list(cfg.corpus)) != cfg.corpus_sha256:
        raise UserError(f"the corpus of {args.run} changed since the run started; nothing was run")
    if cfg.tools and (not Path(cfg.tools).is_file() or sha256_file(Path(cfg.tools)) != cfg.tools_sha256):
        raise UserError(f"the --tools file {cfg.tools} of {args.run} is missing or changed since the run started; "
                        "nothing was run")
    # the cluster may have moved: results do not depend on it
    cfg = on_backend(cfg, {o.dest: getattr(args, o.dest) for o in RESUME_OPTIONS})
    if args.base_url is not None:   # so may the LLM's server (a server that died mid-run, back at another address)
        move_llm(store, cfg, args.base_url)
    prestart_trainings(cfg)   # the resumed run's first training forks without waiting on the imports
    backend = make_backend(cfg, store.root)
    backend.prepare(cfg)
    return run_and_report(store, backend)


def move_llm(store: RunStore, cfg: RunConfig, base_url: str) -> None:
    """`resume --base-url URL`: the run's LLM answers one request there (else one sentence, nothing changed),
    and the journal records the move (`llm_moved`), which the run's later stages, resumes and replays follow."""
    from evolver.preflight import check_llm

    base_url = check_option(next(o for o in RESUME_OPTIONS if o.dest == "base_url"), base_url, "")
    if cfg.llm is None:
        raise UserError(f"{store.root} runs without an LLM (it was started without --model): --base-url has nothing "
                        "to move; nothing was run")
    if base_url == cfg.llm.base_url:
        return
    moved = llm_moved(cfg, [journal.LLMMoved.of(base_url, cfg.llm.base_url, {})])
    usage = check_llm(moved, store.root / "llm")
    store.journal.append(journal.LLMMoved.of(base_url, cfg.llm.base_url, usage))


def run_and_report(store: RunStore, backend=None) -> int:
    from evolver.loop import run_epochs

    run_epochs(store, backend)
    print(format_log(store))
    print("\n" + final_line(store))
    return 0


def cmd_status(args) -> int:
    store = RunStore.open(Path(args.run))
    events = store.journal.events()
    cfg = run_config(store)
    last = events[-1] if events else None
    finished = bool(journal.done(events, "final"))
    print(f"run {store.root.name}: {cfg.epochs} epochs on {cfg.benchmark} ({cfg.metric}), base {cfg.train.base}, "
          f"profile {cfg.train.profile}, λ = {cfg.lam}")
    where = f"{last.kind} epoch {last.epoch} {last.stage}" if last else ""
    if finished:
        print("finished")
    elif not last:
        print("not started")
    elif store.writer_active():
        print(f"running: {where}")
        for row in read_in_flight(store.root):   # the backend's stages now (a cluster runs several)
            print(f"  in flight: {InFlight.describe(row)}")
    else:
        print(f"stopped (crashed or killed; no process holds the run): last event {where}; "
              f"`curateevo resume {store.root}` continues it")
    for f in failed_stages(store):
        print(f"failed: epoch {f['epoch']} · {f['stage']}: {f['error']} (`curateevo resume {store.root}` runs it again)")
    print(format_log(store))
    return 0


def cmd_log(args) -> int:
    store = RunStore.open(Path(args.run))
    print(format_log(store))
    for r in epoch_rows(store):
        if r.get("reason"):
            print(f"epoch {r['epoch']}: {r['reason']}")
    for f in failed_stages(store):
        print(f"epoch {f['epoch']} · {f['stage']} failed: {f['error']}")
    if final_line(store):
        print(final_line(store))
    print("\ntime and LLM usage per stage:")
    print(format_stages(store))
    return 0


def epoch_artifacts(run: Path, epoch: int) -> Path:
    store = RunStore.open(Path(run))
    folder = store.epoch_dir(epoch) / "artifacts"
    from sandbox.manifest import Manifest

    if not Manifest.exists(folder):
        raise UserError(f"epoch {epoch} of {run} has no curated artifacts")
    return folder


def replay_training(run: Path, epoch: int, *, retrain: bool, reeval: bool) -> bool:
    """Train and/or evaluate the epoch again in a temporary directory and compare with the record
    (no sandbox and no proposer is made: a retrain needs neither)."""
    from base.lifetime import owned_temporary_directory
    from evolver.results import Evaluation, Training
    from evolver.stages import evaluate_epoch, train_epoch

    store = RunStore.open(Path(run))
    cfg, artifacts = run_config(store), store.epoch_dir(epoch) / "artifacts"
    same = True
    with owned_temporary_directory("replay") as tmp:   # beside, never over, the record
        for seed in cfg.seeds:
            adapter = str(store.epoch_dir(epoch) / f"train-s{seed}" / "adapter")
            if retrain:
                trained = Training.from_journal(train_epoch(cfg, artifacts, Path(tmp) / f"train-s{seed}", seed))
                new, old = Path(trained.adapter or Path(tmp) / "none"), Path(adapter)
                match = new.exists() and old.exists() and sha256_file(new / "adapter_model.safetensors") == \
                    sha256_file(old / "adapter_model.safetensors")
                print(f"retrain seed {seed}: adapter weights {'identical' if match else 'DIFFER'}")
                same &= match
                adapter = trained.adapter or adapter
            if reeval:
                again = Evaluation.from_journal(evaluate_epoch(cfg, artifacts, Path(tmp) / f"eval-s{seed}", seed,
                                                               adapter if Path(adapter).exists() else None))
                recorded = read_jsonl(store.epoch_dir(epoch) / f"eval-s{seed}" / "trajectories.jsonl")
                replayed = read_jsonl(Path(tmp) / f"eval-s{seed}" / "trajectories.jsonl")
                outcomes = [(t["id"], t["outcome"]) for t in recorded] == [(t["id"], t["outcome"]) for t in replayed]
                digest = lambda rows: sha256_bytes(json.dumps([r["messages"] for r in rows]).encode())
                match = outcomes and digest(recorded) == digest(replayed)
                print(f"reeval seed {seed}: P {again.P:.4f}, trajectories {'identical' if match else 'DIFFER'}")
                rules = [(read_json(d / f"eval-s{seed}" / "metrics.json").get("memory") or {}).get("retrieval")
                         for d in (store.epoch_dir(epoch), Path(tmp))]
                if not match and rules[0] != rules[1]:
                    print(f"  the record retrieved its memory by {rules[0]!r}, this replay by {rules[1]!r}: "
                          "the hints differ by that rule")
                same &= match
    return same


def replay_llm(run: Path):
    """What answers ctx.llm when an epoch of `run` is replayed: the run's LLM layer in its offline
    mode over RUN/llm (no network; a missing record is an error). None when the run has no LLM."""
    store = RunStore.open(Path(run))
    cfg = run_config(store)
    if cfg.llm is None:
        return None
    from evolver.llm import LLM
    from evolver.stages import channel_answer

    return channel_answer(LLM(cfg.llm.model_copy(update={"mode": "offline"}), store.root / "llm"))


def run_config(store: RunStore) -> RunConfig:
    """run.json's config, its LLM where `resume --base-url` moved it."""
    return llm_moved(RunConfig.from_json(store.config, where=str(store.root / "run.json")), store.journal.events())


def cmd_test(args) -> int:
    """The final strategy (its adapter + memory) and ρ0 (epoch 0's) on the test split, once, paired
    (evolver/tested.py), recorded in RUN/test/ (ρ0's evaluation in RUN/test/rho0/)."""
    from environments.evaluate import format_metrics

    store = RunStore.open(Path(args.run))
    final = [e.result for e in journal.done(store.journal.events(), "final")]
    if not final:
        raise UserError(f"{args.run} has not finished; `curateevo resume {args.run}` first")
    out = store.root / "test"
    readings = journal.of_kind(store.journal.events(), journal.Tested)
    if readings and not getattr(args, "again", False):   # the journal is the record, whatever the files say
        raise UserError(f"the test split was read for {args.run} already (P = {readings[-1].P}, journal); "
                        "it is read once per run: `curateevo test RUN --again` reads it again and says so in the report")
    if (out / "metrics.json").exists() and not readings:
        raise UserError(f"{out} exists: the test split is read once per run")
    from environments.user_sim import from_args

    user = from_args(args)   # the simulated user's server answers (one sentence if not) before anything is read
    # an interrupted test showed no result: its partial output is cleared and the test runs again
    partial = store.root / "test.partial"
    for stale in (out, partial):
        if stale.exists():
            shutil.rmtree(stale)
    cfg, epoch = run_config(store), final[-1]["epoch"]
    seed = cfg.seeds[0]
    from evolver import tested

    if args.seeds:   # both as two rows of `bench quality`, through its cells
        scores, rho0, category, groups = tested.cells_scores(store, cfg, args.seeds, args.cache, args.tasks, cfg.sandbox)
        partial.mkdir(parents=True)
        doc = None
    else:
        doc, scores, category, groups = _read_test(store, cfg, final[-1], seed, args.tasks, partial)
        rho0 = scores if epoch == 0 else \
            _read_test(store, cfg, {"epoch": 0, "commit": store.done(0, "curate").result["commit"]}, seed,
                       args.tasks, partial / "rho0")[1]   # ρ0: epoch 0's adapter and memory
    comparison = tested.compare(scores, rho0, category, groups)
    how = f"bench quality's cells in {args.cache}" if args.seeds else "the run's adapters"
    kept = tested.record(partial, comparison, epoch, how)
    held, skipped = _held_out(store, cfg, final[-1], epoch, seed, args, partial, user)
    if held or skipped:
        atomic_json(partial / tested.HELD_OUT_FILE, {"epoch": epoch, "how": how, "benchmarks": held, "not_run": skipped})
        kept["held_out"] = {b: {"P_rho0": d["rho0"]["value"], "P": d["final"]["value"], "tasks": d["tasks"],
                                "difference": {k: d["difference"][k] for k in ("value", "low", "high")}}
                            for b, d in held.items()}
    if out.exists():   # --again: the earlier reading's files give way; the journal keeps every reading
        shutil.rmtree(out)
    os.replace(partial, out)
    P = doc.P if doc is not None else comparison["final"]["value"]   # the metric's own P (call_f1 pools the calls)
    store.journal.append(journal.Tested.of(epoch, P, cfg.metric, len(readings) + 1, **kept))
    empty = untrained_choice(store)
    if empty:
        print(f"warning: {empty}")
    if doc is not None:
        print(f"final strategy (epoch {epoch}) on the test split:")
        print(format_metrics(doc.doc, out))
    print(("\n" if doc is not None else "") + tested.text(comparison, cfg.metric, epoch))
    if held or skipped:
        print("\n" + tested.held_out_text(held, epoch, skipped))
    print(final_line(store))
    if epoch == 0:
        print("the final strategy is ρ0 itself: evolution accepted no candidate")
    return 0


def _held_out(store: RunStore, cfg: RunConfig, final: dict, epoch: int, seed: int, args,
              out: Path, user=None) -> tuple[dict, dict]:
    """The final strategy and ρ0 on each held-out benchmark's test split (evolver/tested.py HELD_OUT, or
    --held-out), paired as on the run's own: {benchmark: comparison}, {benchmark: why it was not run}."""
    from evolver import tested

    from environments.user_sim import FLAGS

    names = tested.held_out_for(cfg.benchmark, getattr(args, "held_out", None))
    docs, skipped = {}, {}
    rho0_choice = {"epoch": 0, "commit": store.done(0, "curate").result["commit"]}
    for name in names:
        print(f"held-out benchmark {name}: the final strategy and ρ0 on its test split", file=sys.stderr, flush=True)
        try:
            if args.seeds:
                scores, rho0, category, groups = tested.cells_scores(store, cfg, args.seeds, args.cache, args.tasks,
                                                             cfg.sandbox, benchmark=name, user=user)
            else:
                _, scores, category, groups = _read_test(store, cfg, final, seed, args.tasks, out / "held-out" / name / "final",
                                                 benchmark=name, user=user)
                rho0 = scores if epoch == 0 else _read_test(store, cfg, rho0_choice, seed, args.tasks,
                                                            out / "held-out" / name / "rho0", benchmark=name, user=user)[1]
        except UserError as exc:   # a benchmark that cannot run here (its package, a prompt cap): said, not scored 0
            skipped[name] = str(exc)
            continue
        docs[name] = tested.compare(scores, rho0, category, groups)
        if user is None and registry.get(name).user_simulated:
            skipped[f"{name}, its user-simulated tasks"] = f"they need an LLM playing the user: give {FLAGS}"
    return docs, skipped


def _read_test(store: RunStore, cfg: RunConfig, final: dict, seed: int, tasks: int | None,
               out: Path, benchmark: str | None = None, user=None) -> tuple[EvalResult, dict, dict, dict]:
    """One epoch's strategy (its adapter + memory, as the run recorded them) on the test split into
    `out`, evaluated as the run evaluates (its EvalSpec, through experiments.train_eval.evaluate_on; the
    whole test split unless `tasks`): the evaluation's result, task id → [score], task id → category and
    task id → the task it is a record of (tested.scores_of)."""
    from experiments.train_eval import evaluate_on
    from evolver.tested import scores_of

    from evolver.tested import held_out_spec

    adapter, memory = chosen(store, final, seed)
    corpus = registry.get(cfg.benchmark).dev_corpus(cfg.corpus)   # a next-call run: the test part of its own corpus
    if benchmark is not None and benchmark != cfg.benchmark:   # a held-out benchmark: its own test split
        spec = held_out_spec(cfg.eval_spec, benchmark, tasks)
        doc = evaluate_on(spec, "test", out, base=cfg.train.base, adapter=adapter, memory=memory, seed=seed,
                          progress=True, allow_test=True, user=user)
        scores, category, groups = scores_of(out / "trajectories.jsonl", doc.metric)
        return doc, {t: [v] for t, v in scores.items()}, category, groups
    if corpus is not None:
        if not cfg.holdout:
            raise UserError(f"{store.root} was started before a user corpus got a test part (its run.json has no "
                            "holdout): its records outside the dev tenth were all curated; start a new run to test")
        if corpus_sha256(list(corpus)) != cfg.corpus_sha256:
            raise UserError(f"the corpus of {store.root} changed since the run started; its test part cannot be "
                            "rebuilt; nothing was run")
    spec = cfg.eval_spec.model_copy(update={"tasks": tasks})   # the whole test split unless --tasks
    doc = evaluate_on(spec, "test", out, base=cfg.train.base, adapter=adapter, memory=memory, seed=seed, progress=True,
                      allow_test=True)
    scores, category, groups = scores_of(out / "trajectories.jsonl", doc.metric)
    return doc, {t: [v] for t, v in scores.items()}, category, groups


def chosen(store: RunStore, final: dict, seed: int) -> tuple[str | None, Path | None]:
    """The final strategy's adapter (None when its epoch had nothing to train) and memory, as
    the run recorded them; UserError when what is on disk is not that (nothing is evaluated)."""
    from evolver.integrity import check_artifacts, check_workspace
    from workspace.repository import Workspace

    epoch, fix = final["epoch"], f"`curateevo resume {store.root}` makes it again"
    check_workspace(store, Workspace.open(store.root / "strategy"))
    check_artifacts(store)
    curation = store.done(epoch, "curate")
    if curation is None or curation.result.get("commit") != final["commit"]:
        raise UserError(f"the artifacts of epoch {epoch}, the run's choice, are missing or changed; {fix}")
    trained = store.done(epoch, f"train-s{seed}")
    if trained is None:
        raise UserError(f"the adapter of epoch {epoch} (train-s{seed}), the run's choice, is missing or changed; "
                        f"testing now would evaluate something else; {fix}")
    from experiments.train_eval import used

    # the memory rule of every evaluation: the epoch's memory file unless ablated (evaluate_on skips an empty one)
    memory = used(store.epoch_dir(epoch) / "artifacts", run_config(store).ablations)["memory"]
    return trained.result["adapter"], memory


def add_cli(sub) -> None:
    p = sub.add_parser("run", help="launch an evolution run")
    groups = {"run": p, "llm": p.add_argument_group("LLM and code agent (any OpenAI-compatible endpoint, or Anthropic)")}
    for o in RUN_OPTIONS:   # defaults stay None here: "not given", so a config file can set them
        shown = "" if o.default in (None, []) else f" (default: {o.default})"
        groups[o.group].add_argument(f"--{o.name}", dest=o.dest, type=o.type, nargs=o.nargs, choices=o.allowed(),
                                     default=None, help=o.help + shown)
    for old, dest in OLD_OPTIONS.items():   # old command lines still work, and say the new spelling
        o = OPTIONS_BY_DEST[dest]
        add_old_spelling(p, f"--{old.replace('_', '-')}", f"--{o.name}", dest, type=o.type)
    p.add_argument("--config", help="YAML/JSON file of run options (keys: these long options); flags given here win")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="any setting by its dotted key in run.json (train.profile=cpu-small, eval.batch_size=16, "
                        "agent.step_limit=40); repeatable; applied last")
    p.set_defaults(func=cmd_run)
    for name, func, text in (("resume", cmd_resume, "continue a run after a crash or kill"),
                             ("test", cmd_test, "the final strategy on the test split, once"),
                             ("status", cmd_status, "where a run stands"), ("log", cmd_log, "the epoch table of a run")):
        p = sub.add_parser(name, help=text)
        p.add_argument("run", help="the run directory (runs/<name>, or under the run's --runs-dir)")
        if name == "resume":
            for o in RESUME_OPTIONS:
                p.add_argument(f"--{o.name}", dest=o.dest, type=o.type, nargs=o.nargs, choices=o.allowed(), help=o.help)
        if name == "test":
            p.add_argument("--tasks", type=positive_int, help="N test tasks balanced over the categories (default: the whole test split)")
            p.add_argument("--again", action="store_true", help="read the test split once more (journaled; the report "
                                                                "lists every reading)")
            p.add_argument("--held-out", dest="held_out", metavar="B1,B2|none",
                           help="held-out benchmarks scored beside the run's own test split (default: every one of "
                                "bfcl-single, acebench, tau2 the run did not evolve on; `none`: only its own)")
            p.add_argument("--seeds", type=positive_int, help="score the final strategy and ρ0 with training seeds "
                           "0..N-1 as `bench quality` scores rows (its cells: the run's trainings adopted, the missing "
                           "seeds trained) and pair them over tasks × seeds")
            p.add_argument("--cache", type=Path, default=PROJECT_ROOT / "runs" / "bench-quality",
                           help="--seeds: the bench quality cache its cells go to (default runs/bench-quality)")
            from environments.user_sim import add_flags

            add_flags(p)   # τ² airline/retail and ACEBench agent multi-turn are held out only with a simulated user
        p.set_defaults(func=func)

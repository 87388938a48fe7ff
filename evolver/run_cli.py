"""`curateevo run | resume | status | log`: launch an evolution run, continue it, inspect it."""
from __future__ import annotations

import datetime
import json
import os
import shutil
from pathlib import Path

from evolver.errors import UserError
from evolver.files import read_jsonl
from evolver.store import RunStore
from sandbox.corpus import corpus_sha256
from sandbox.executor import PROJECT_ROOT

RUNS = PROJECT_ROOT / "runs"
ABLATIONS = ("no-effectiveness", "no-efficiency", "no-sft", "no-rl", "no-memory")


def default_corpus(benchmark: str, setting: str, seed: int) -> list[str]:
    """The default raw corpus of a benchmark (train split only), built once into a cache under runs/."""
    from benchmarks.bfcl import corpus_builder

    folder = RUNS / "corpora" / f"{benchmark}-{setting}-seed{seed}"
    path = folder / corpus_builder.CORPUS_FILE
    if not path.is_file():
        corpus_builder.write(folder, benchmark, setting, seed)
    return [str(path)]


def apply_config(args, parser) -> None:
    """`--config FILE` (YAML or JSON, keys = the long options of `run`, dashes or underscores):
    its values apply to every option not given on the command line."""
    if not args.config:
        return
    import yaml

    path = Path(args.config)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"cannot read the run config {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise UserError(f"{where}: not valid YAML/JSON ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(doc, dict):
        raise UserError(f"{path}: a run config is a mapping of option names to values")
    dests = {a.dest: a for a in parser._actions if a.dest not in ("help", "config", "func")}
    for key, value in doc.items():
        dest = {"lambda": "lam"}.get(str(key), str(key).replace("-", "_"))
        if dest not in dests:
            raise UserError(f"{path}: unknown option {key!r} (the long options of `curateevo run`)")
        action = dests[dest]
        if action.choices and value not in action.choices and not isinstance(value, list):
            raise UserError(f"{path}: {key} must be one of {', '.join(map(str, action.choices))}, not {value!r}")
        if getattr(args, dest) == parser.get_default(dest):
            setattr(args, dest, value)


def llm_config(args) -> dict | None:
    """The run's LLM settings (for run.json: names of key variables, never key values)."""
    if not args.model:
        if args.proposer == "agent":
            raise UserError("the code agent needs an LLM: give --model (and --base-url for a local server)")
        return None
    from evolver.llm import LLMConfig

    fields = {"provider": args.provider, "model": args.model, "base_url": args.base_url, "api_key_env": args.api_key_env,
              "mode": args.llm_mode, "budget_tokens": args.budget_tokens, "budget_usd": args.budget_usd,
              "pricing_file": str(Path(args.pricing).resolve()) if args.pricing else None}
    return LLMConfig.from_mapping({k: v for k, v in fields.items() if v is not None}).describe()


def create_run(args) -> RunStore:
    name = args.name or datetime.datetime.now().strftime("run-%Y%m%d-%H%M%S")
    root = Path(args.runs_dir) / name
    llm = llm_config(args)
    proposer = args.proposer or ("agent" if llm else "offline")
    if proposer == "agent" and args.sandbox == "process":
        raise UserError("the code agent's commands run in the Docker sandbox only: use --sandbox docker or auto")
    if args.llm_records and not Path(args.llm_records).is_dir():
        raise UserError(f"--llm-records {args.llm_records}: no such directory (a run's llm/ folder)")
    corpus = [str(Path(p).resolve()) for p in args.corpus] if args.corpus else default_corpus(
        "bfcl-single" if args.benchmark == "bfcl-single" else "bfcl", "wild", args.seed)
    for ablation in args.ablate:
        if ablation not in ABLATIONS:
            raise UserError(f"unknown ablation {ablation!r} (one of {', '.join(ABLATIONS)})")
    config = {
        "corpus": corpus, "corpus_sha256": corpus_sha256(corpus), "benchmark": args.benchmark, "split": "dev",
        "metric": args.metric, "tasks": args.tasks, "base": args.base, "profile": args.profile,
        "epochs": args.epochs, "lambda": args.lam, "n_ref": args.n_ref, "margin": args.margin,
        "seeds": list(range(args.seeds)), "seed": args.seed, "proposer": proposer, "sandbox": args.sandbox,
        "llm": llm, "diagnosis": args.diagnosis or ("rules+llm" if llm else "rules"),
        "agent": {"step_limit": args.agent_steps, "repairs": args.agent_repairs, "wall_time_s": args.agent_wall,
                  "cost_limit_usd": args.agent_usd},
        "ablations": sorted(args.ablate), "curation_timeout_s": args.timeout,
        "train_budget": {},
        # single-turn tasks are one step each: the step-level pass would score the same answers again
        "eval_options": {"batch_size": args.batch_size,
                         "steps": not (args.benchmark == "bfcl-single" and args.metric != "step_accuracy")},
    }
    store = RunStore.create(root, config)   # the loop creates the strategy workspace from ρ0
    if args.llm_records:   # a rerun from another run's record (replay-only: no network call)
        shutil.copytree(args.llm_records, store.root / "llm", dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("diagnosis-cache"))
    return store


def cmd_run(args) -> int:
    from evolver.loop import run_epochs

    apply_config(args, args.run_parser)
    store = create_run(args)
    print(f"run directory: {store.root}")
    final = run_epochs(store)
    print(format_log(store))
    print(f"\nfinal strategy: epoch {final['epoch']} ({final['commit'][:10]}), P = {final['P']:.4f}, C = {final['C']:.4f}")
    return 0


def cmd_resume(args) -> int:
    from evolver.loop import run_epochs

    store = RunStore.open(Path(args.run))
    if corpus_sha256(store.config["corpus"]) != store.config["corpus_sha256"]:
        raise UserError(f"the corpus of {args.run} changed since the run started; nothing was run")
    final = run_epochs(store)
    print(format_log(store))
    print(f"\nfinal strategy: epoch {final['epoch']} ({final['commit'][:10]}), P = {final['P']:.4f}, C = {final['C']:.4f}")
    return 0


def stage_rows(store: RunStore) -> list[dict]:
    """Every finished stage: epoch, stage, wall seconds and the LLM usage it caused."""
    started, rows = {}, []
    for event in store.journal.events():
        key = (event.get("epoch"), event.get("stage"))
        if event.get("event") == "stage_started":
            started[key] = event["time"]
        elif event.get("event") == "stage_done":
            seconds = None
            if key in started:
                seconds = (datetime.datetime.fromisoformat(event["time"]) - datetime.datetime.fromisoformat(started[key])).total_seconds()
            llm = (event.get("result") or {}).get("llm") or {}
            rows.append({"epoch": key[0], "stage": key[1], "seconds": seconds, "result": event.get("result") or {},
                         "tokens": llm.get("prompt_tokens", 0) + llm.get("completion_tokens", 0),
                         "usd": llm.get("usd", 0.0), "calls": llm.get("calls", 0)})
    return rows


def epoch_rows(store: RunStore) -> list[dict]:
    rows: dict[int, dict] = {}
    for stage in stage_rows(store):
        if stage["epoch"] is None or stage["epoch"] < 0:
            continue
        row = rows.setdefault(stage["epoch"], {"epoch": stage["epoch"], "seconds": {}, "tokens": 0, "usd": 0.0})
        result = stage["result"]
        if stage["stage"] == "curate":
            row.update(cost_train=result.get("cost_train"), scale=result.get("counts"), failed=result.get("failed"))
        elif stage["stage"] == "decide":
            row.update({k: result.get(k) for k in ("P", "C", "J", "accepted", "reason", "commit")})
        if stage["seconds"] is not None:
            row["seconds"][stage["stage"]] = stage["seconds"]
        row["tokens"] += stage["tokens"]
        row["usd"] += stage["usd"]
    return [rows[e] for e in sorted(rows)]


def format_log(store: RunStore) -> str:
    llm = bool(store.config.get("llm"))
    head = f"{'epoch':>5} {'P':>7} {'C':>7} {'J':>8} {'Cost_train':>10} {'SFT/RL/mem':>14} {'decision':<9} {'time':>7}"
    head += f" {'LLM tokens':>10} {'USD':>8}" if llm else ""
    lines = [head, "-" * len(head)]
    for r in epoch_rows(store):
        f = lambda v, w, p: f"{v:>{w}.{p}f}" if isinstance(v, (int, float)) else f"{'—':>{w}}"
        scale = r.get("scale") or {}
        counts = "/".join(str(scale.get(k, "—")) for k in ("sft.jsonl", "rl.jsonl", "memory.jsonl"))
        decision = "—" if r.get("accepted") is None else ("accepted" if r["accepted"] else "rejected")
        line = (f"{r['epoch']:>5} {f(r.get('P'), 7, 4)} {f(r.get('C'), 7, 4)} {f(r.get('J'), 8, 4)} "
                f"{r.get('cost_train') if r.get('cost_train') is not None else '—':>10} {counts:>14} {decision:<9} "
                f"{sum(r['seconds'].values()):>6.0f}s")
        lines.append(line + (f" {r['tokens']:>10} {r['usd']:>8.4f}" if llm else ""))
    return "\n".join(lines)


def format_stages(store: RunStore) -> str:
    """Time and LLM usage per stage."""
    head = f"{'epoch':>5} {'stage':<14} {'time':>8} {'LLM calls':>9} {'tokens':>9} {'USD':>8}"
    lines = [head, "-" * len(head)]
    for r in stage_rows(store):
        seconds = f"{r['seconds']:>7.1f}s" if r["seconds"] is not None else f"{'—':>8}"
        epoch = "run" if r["epoch"] is None or r["epoch"] < 0 else r["epoch"]   # the final choice is the run's
        lines.append(f"{epoch:>5} {r['stage']:<14} {seconds} {r['calls']:>9} {r['tokens']:>9} {r['usd']:>8.4f}")
    return "\n".join(lines)


def cmd_status(args) -> int:
    store = RunStore.open(Path(args.run))
    events = store.journal.events()
    cfg = store.config
    last = events[-1] if events else None
    finished = any(e.get("stage") == "final" and e.get("event") == "stage_done" for e in events)
    print(f"run {store.root.name}: {cfg['epochs']} epochs on {cfg['benchmark']} ({cfg['metric']}), base {cfg['base']}, "
          f"profile {cfg['profile']}, λ = {cfg['lambda']}")
    print("finished" if finished else f"last event: {last['event']} epoch {last.get('epoch')} {last.get('stage')}"
          if last else "not started")
    print(format_log(store))
    return 0


def cmd_log(args) -> int:
    store = RunStore.open(Path(args.run))
    print(format_log(store))
    for r in epoch_rows(store):
        if r.get("reason"):
            print(f"epoch {r['epoch']}: {r['reason']}")
    print("\ntime and LLM usage per stage:")
    print(format_stages(store))
    return 0


def epoch_artifacts(run: Path, epoch: int) -> Path:
    store = RunStore.open(Path(run))
    folder = store.epoch_dir(epoch) / "artifacts"
    if not (folder / "manifest.json").is_file():
        raise UserError(f"epoch {epoch} of {run} has no curated artifacts")
    return folder


def replay_training(run: Path, epoch: int, *, retrain: bool, reeval: bool) -> bool:
    """Train and/or evaluate the epoch again in a temporary directory and compare with the record."""
    import hashlib
    import tempfile

    from evolver.loop import Epochs
    from evolver.store import sha256_path

    store = RunStore.open(Path(run))
    ep = Epochs(store)
    same = True
    with tempfile.TemporaryDirectory(prefix="curateevo-replay-") as tmp:
        ep.dir = lambda e, name: Path(tmp) / name   # the re-run writes beside, never over, the record
        for seed in ep.cfg["seeds"]:
            adapter = str(store.epoch_dir(epoch) / f"train-s{seed}" / "adapter")
            if retrain:
                trained = ep.train(epoch, seed)
                new, old = Path(trained["adapter"]), Path(adapter)
                match = new.exists() and old.exists() and sha256_path(new / "adapter_model.safetensors") == \
                    sha256_path(old / "adapter_model.safetensors")
                print(f"retrain seed {seed}: adapter weights {'identical' if match else 'DIFFER'}")
                same &= match
                adapter = trained["adapter"]
            if reeval:
                again = ep.evaluate(epoch, seed, adapter if Path(adapter).exists() else None)
                recorded = read_jsonl(store.epoch_dir(epoch) / f"eval-s{seed}" / "trajectories.jsonl")
                replayed = read_jsonl(Path(tmp) / f"eval-s{seed}" / "trajectories.jsonl")
                outcomes = [(t["id"], t["outcome"]) for t in recorded] == [(t["id"], t["outcome"]) for t in replayed]
                digest = lambda rows: hashlib.sha256(json.dumps([r["messages"] for r in rows]).encode()).hexdigest()
                match = outcomes and digest(recorded) == digest(replayed)
                print(f"reeval seed {seed}: P {again['P']:.4f}, trajectories {'identical' if match else 'DIFFER'}")
                same &= match
    return same


def cmd_test(args) -> int:
    """The final strategy (its adapter + memory) on the test split, once, recorded in RUN/test/."""
    from benchmarks.eval_cli import evaluate_to_dir, format_metrics

    store = RunStore.open(Path(args.run))
    final = [e["result"] for e in store.journal.events() if e.get("stage") == "final" and e["event"] == "stage_done"]
    if not final:
        raise UserError(f"{args.run} has not finished; `curateevo resume {args.run}` first")
    out = store.root / "test"
    if (out / "metrics.json").exists():
        raise UserError(f"{out} exists: the test split is read once per run")
    # an interrupted test showed no result: its partial output is cleared and the test runs again
    partial = store.root / "test.partial"
    for stale in (out, partial):
        if stale.exists():
            shutil.rmtree(stale)
    cfg, epoch = store.config, final[-1]["epoch"]
    seed = cfg["seeds"][0]
    adapter = store.epoch_dir(epoch) / f"train-s{seed}" / "adapter"
    memory = store.epoch_dir(epoch) / "artifacts" / "memory.jsonl"
    doc = evaluate_to_dir(cfg["benchmark"], "test", partial, tasks=args.tasks, metric=cfg["metric"], allow_test=True,
                          memory=str(memory) if memory.stat().st_size and "no-memory" not in cfg["ablations"] else None,
                          policy_options={"base": cfg["base"], "adapter": str(adapter) if adapter.exists() else None},
                          seed=seed, progress=True, **cfg["eval_options"])
    os.replace(partial, out)
    store.journal.append({"event": "tested", "epoch": epoch, "P": doc["P"], "metric": doc["metric"]})
    print(f"final strategy (epoch {epoch}) on the test split:")
    print(format_metrics(doc, out))
    return 0


def add_cli(sub) -> None:
    p = sub.add_parser("run", help="launch an evolution run")
    p.add_argument("--corpus", nargs="+", help="raw corpus file(s) (default: the wild corpus of --benchmark, train split)")
    p.add_argument("--benchmark", default="bfcl-single", help="dev benchmark: bfcl-single (CPU default), bfcl, replay")
    p.add_argument("--metric", default="task_success", choices=["task_success", "turn_pass", "step_accuracy"])
    p.add_argument("--tasks", type=int, default=60, help="dev tasks evaluated per epoch, balanced over the categories")
    p.add_argument("--base", default="smollm2-135m")
    p.add_argument("--profile", default="cpu-small", help="recipe budgets: cpu-small, paper, test")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lambda", dest="lam", type=float, default=0.3)
    p.add_argument("--n-ref", type=float, default=1e5)
    p.add_argument("--margin", type=float, default=0.0)
    p.add_argument("--seeds", type=int, default=1, help="train+eval seeds per candidate (>1: paired noise-aware acceptance)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ablate", nargs="*", default=[], help=" ".join(ABLATIONS))
    p.add_argument("--sandbox", default="auto", choices=["auto", "docker", "process"])
    p.add_argument("--timeout", type=float, default=900.0, help="curation wall-clock limit (s)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--name")
    p.add_argument("--runs-dir", default=str(RUNS))
    p.add_argument("--config", help="YAML/JSON file of run options (keys: these long options); flags given here win")
    g = p.add_argument_group("LLM and code agent (any OpenAI-compatible endpoint, or Anthropic)")
    g.add_argument("--proposer", choices=["offline", "agent"], help="default: agent when --model is given, else offline")
    g.add_argument("--model", help="LLM model name, e.g. gpt-4.1-mini, claude-sonnet-4-5, or a local server's model")
    g.add_argument("--provider", default="openai", choices=["openai", "anthropic"])
    g.add_argument("--base-url", help="OpenAI-compatible server (vLLM, llama.cpp, Ollama, hosted)")
    g.add_argument("--api-key-env", help="name of the environment variable holding the key (default OPENAI_API_KEY / ANTHROPIC_API_KEY)")
    g.add_argument("--llm-mode", default="record", choices=["live", "record", "replay"],
                   help="record: reuse recorded replies, call for new ones; replay: recorded replies only, no network")
    g.add_argument("--llm-records", help="copy another run's llm/ record into this run first (with --llm-mode replay: rerun it offline)")
    g.add_argument("--budget-tokens", type=int, help="LLM tokens for the whole run; when spent, proposing stops, the run goes on")
    g.add_argument("--budget-usd", type=float, help="LLM spend for the whole run, USD")
    g.add_argument("--pricing", help="JSON {model: {input, output}} USD per 1M tokens, over the built-in table")
    g.add_argument("--diagnosis", choices=["rules", "rules+llm"], help="default: rules+llm when an LLM is configured")
    g.add_argument("--agent-steps", type=int, default=30, help="model calls per revision")
    g.add_argument("--agent-repairs", type=int, default=2, help="failed validations sent back to the agent per revision")
    g.add_argument("--agent-wall", type=int, default=1200, help="seconds per revision")
    g.add_argument("--agent-usd", type=float, default=0.0, help="USD per revision (0: only the run's budget)")
    p.set_defaults(func=cmd_run, run_parser=p)
    for name, func, text in (("resume", cmd_resume, "continue a run after a crash or kill"),
                             ("test", cmd_test, "the final strategy on the test split, once"),
                             ("status", cmd_status, "where a run stands"), ("log", cmd_log, "the epoch table of a run")):
        p = sub.add_parser(name, help=text)
        p.add_argument("run")
        if name == "test":
            p.add_argument("--tasks", type=int, help="N test tasks balanced over the categories (default: the whole test split)")
        p.set_defaults(func=func)

"""`curateevo run | resume | status | log`: launch an evolution run, continue it, inspect it."""
from __future__ import annotations

import datetime
import json
from pathlib import Path

from evolver.errors import UserError
from evolver.files import read_json
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


def create_run(args) -> RunStore:
    name = args.name or datetime.datetime.now().strftime("run-%Y%m%d-%H%M%S")
    root = Path(args.runs_dir) / name
    corpus = [str(Path(p).resolve()) for p in args.corpus] if args.corpus else default_corpus(
        "bfcl-single" if args.benchmark == "bfcl-single" else "bfcl", "wild", args.seed)
    for ablation in args.ablate:
        if ablation not in ABLATIONS:
            raise UserError(f"unknown ablation {ablation!r} (one of {', '.join(ABLATIONS)})")
    config = {
        "corpus": corpus, "corpus_sha256": corpus_sha256(corpus), "benchmark": args.benchmark, "split": "dev",
        "metric": args.metric, "tasks": args.tasks, "base": args.base, "profile": args.profile,
        "epochs": args.epochs, "lambda": args.lam, "n_ref": args.n_ref, "margin": args.margin,
        "seeds": list(range(args.seeds)), "seed": args.seed, "proposer": "offline", "sandbox": args.sandbox,
        "ablations": sorted(args.ablate), "curation_timeout_s": args.timeout,
        "train_budget": {}, "eval_options": {"batch_size": args.batch_size},
    }
    return RunStore.create(root, config)   # the loop creates the strategy workspace from ρ0


def cmd_run(args) -> int:
    from evolver.loop import run_epochs

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


def epoch_rows(store: RunStore) -> list[dict]:
    rows: dict[int, dict] = {}
    for event in store.journal.events():
        if event.get("event") != "stage_done" or event.get("epoch", -1) < 0:
            continue
        row = rows.setdefault(event["epoch"], {"epoch": event["epoch"], "seconds": {}})
        result = event.get("result") or {}
        if event["stage"] == "curate":
            row.update(cost_train=result.get("cost_train"), scale=result.get("counts"), failed=result.get("failed"))
        elif event["stage"] == "decide":
            row.update({k: result.get(k) for k in ("P", "C", "J", "accepted", "reason", "commit")})
    started: dict[tuple, str] = {}
    for event in store.journal.events():
        key = (event.get("epoch"), event.get("stage"))
        if event.get("event") == "stage_started":
            started[key] = event["time"]
        elif event.get("event") == "stage_done" and key in started and key[0] in rows:
            t0 = datetime.datetime.fromisoformat(started[key])
            rows[key[0]]["seconds"][key[1]] = (datetime.datetime.fromisoformat(event["time"]) - t0).total_seconds()
    return [rows[e] for e in sorted(rows)]


def format_log(store: RunStore) -> str:
    head = f"{'epoch':>5} {'P':>7} {'C':>7} {'J':>8} {'Cost_train':>10} {'SFT/RL/mem':>14} {'decision':<9} {'time':>7}"
    lines = [head, "-" * len(head)]
    for r in epoch_rows(store):
        f = lambda v, w, p: f"{v:>{w}.{p}f}" if isinstance(v, (int, float)) else f"{'—':>{w}}"
        scale = r.get("scale") or {}
        counts = "/".join(str(scale.get(k, "—")) for k in ("sft.jsonl", "rl.jsonl", "memory.jsonl"))
        decision = "—" if r.get("accepted") is None else ("accepted" if r["accepted"] else "rejected")
        lines.append(f"{r['epoch']:>5} {f(r.get('P'), 7, 4)} {f(r.get('C'), 7, 4)} {f(r.get('J'), 8, 4)} "
                     f"{r.get('cost_train') if r.get('cost_train') is not None else '—':>10} {counts:>14} {decision:<9} "
                     f"{sum(r['seconds'].values()):>6.0f}s")
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
                recorded = [json.loads(line) for line in (store.epoch_dir(epoch) / f"eval-s{seed}" / "trajectories.jsonl").read_text().splitlines()]
                replayed = [json.loads(line) for line in (Path(tmp) / f"eval-s{seed}" / "trajectories.jsonl").read_text().splitlines()]
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
    if out.exists():
        raise UserError(f"{out} exists: the test split is read once per run")
    cfg, epoch = store.config, final[-1]["epoch"]
    seed = cfg["seeds"][0]
    adapter = store.epoch_dir(epoch) / f"train-s{seed}" / "adapter"
    memory = store.epoch_dir(epoch) / "artifacts" / "memory.jsonl"
    doc = evaluate_to_dir(cfg["benchmark"], "test", out, tasks=args.tasks, metric=cfg["metric"], allow_test=True,
                          memory=str(memory) if memory.stat().st_size and "no-memory" not in cfg["ablations"] else None,
                          policy_options={"base": cfg["base"], "adapter": str(adapter) if adapter.exists() else None},
                          seed=seed, **cfg["eval_options"])
    store.journal.append({"event": "tested", "epoch": epoch, "P": doc["P"], "metric": doc["metric"]})
    print(f"final strategy (epoch {epoch}) on the test split:")
    print(format_metrics(doc, out))
    return 0


def add_cli(sub) -> None:
    p = sub.add_parser("run", help="launch an evolution run")
    p.add_argument("--corpus", nargs="+", help="raw corpus file(s) (default: the wild corpus of --benchmark, train split)")
    p.add_argument("--benchmark", default="bfcl-single", help="dev benchmark: bfcl-single (CPU default), bfcl, replay")
    p.add_argument("--metric", default="task_success", choices=["task_success", "turn_pass", "step_accuracy"])
    p.add_argument("--tasks", type=int, default=60, help="dev tasks evaluated per epoch")
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
    p.set_defaults(func=cmd_run)
    for name, func, text in (("resume", cmd_resume, "continue a run after a crash or kill"),
                             ("test", cmd_test, "the final strategy on the test split, once"),
                             ("status", cmd_status, "where a run stands"), ("log", cmd_log, "the epoch table of a run")):
        p = sub.add_parser(name, help=text)
        p.add_argument("run")
        if name == "test":
            p.add_argument("--tasks", type=int, help="only the first N test tasks (default: the whole test split)")
        p.set_defaults(func=func)

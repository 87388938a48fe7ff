"""`curateevo eval`: a policy (base model + adapter + memory) on a benchmark's dev tasks (DESIGN: CLI).

    curateevo eval --benchmark bfcl|bfcl-single|replay --base M [--adapter D] [--memory F]
                   --split dev --tasks N --out D [--metric M] [--samples K --temperature T]

prints task_success, turn_pass, step_accuracy, the format-error rate and episodes per minute,
and writes into D (new or empty), each file atomically:

- `trajectories.jsonl`: one canonical raw record per episode (benchmarks.runner);
- `steps.jsonl`: one line per step item (gold prefix given, the policy's next action judged);
- `metrics.json`: P (the chosen metric), all metrics overall and per category, the resolved
  configuration (policy, chat format, runner, memory, task ids) and, apart under `timing`, wall
  times and throughput — everything but `timing` is deterministic for the same inputs.

The test split is refused: only `curateevo test` reads it (it calls `evaluate_to_dir` with
`allow_test=True`).
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable

from evolver.errors import UserError

BENCHMARKS = ("bfcl", "bfcl-single", "replay")
METRICS = ("task_success", "turn_pass", "step_accuracy")
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder and a rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix="." + path.name + ".", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def jsonl(records: Iterable[Any]) -> str:
    from sandbox.schemas import canonical_json

    return "".join(canonical_json(r) + "\n" for r in records)


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _adapter_dir(adapter: str | None) -> str | None:
    """The adapter folder: D itself, or D/adapter when D is a `curateevo train` output."""
    if adapter is None:
        return None
    path = Path(adapter)
    if (path / "adapter_config.json").is_file():
        return str(path)
    if (path / "adapter" / "adapter_config.json").is_file():
        return str(path / "adapter")
    raise UserError(f"{adapter} is not a trained adapter (no adapter_config.json in it or in its adapter/)")


def build_policy(*, base: str, adapter: str | None = None, endpoint: str | None = None, api: str = "completions",
                 api_key_env: str = "OPENAI_API_KEY", device: str = "auto", dtype: str = "auto",
                 threads: int | None = None, batch_size: int = 8, max_new_tokens: int = 128,
                 max_prompt_tokens: int = 4096, style: str | None = None, concurrency: int = 4):
    from trainer import chat_format as cf

    style = style or cf.DEFAULT_STYLE
    if endpoint:
        if adapter:
            raise UserError("--adapter is for local models; an endpoint serves its own weights")
        from benchmarks.policies.openai_compat import OpenAIPolicy

        return OpenAIPolicy(endpoint, base, api=api, api_key_env=api_key_env, max_new_tokens=max_new_tokens,
                            style=style, concurrency=concurrency)
    from benchmarks.policies.local import TransformersPolicy

    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UserError("--device cuda: no CUDA device is available here")
    return TransformersPolicy(base, _adapter_dir(adapter), device=device, dtype=dtype, threads=threads,
                              batch_size=batch_size, max_new_tokens=max_new_tokens,
                              max_prompt_tokens=max_prompt_tokens, style=style)


def _check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} exists and is not an empty directory")


def evaluate_to_dir(benchmark: str, split: str, out: str | Path, *, policy=None, tasks: int | None = None,
                    categories: list[str] | None = None, metric: str | None = None, corpus: str | None = None,
                    memory: str | None = None, memory_k: int = 3, samples: int = 1, temperature: float = 0.0,
                    seed: int = 0, batch_size: int = 8, max_steps: int | None = None, episodes: bool = True,
                    steps: bool = True, step_limit: int | None = None, allow_test: bool = False,
                    progress: bool = False, policy_options: dict | None = None) -> dict:
    """Evaluate and write trajectories.jsonl, steps.jsonl and metrics.json into `out`; returns
    the metrics document. `policy` (any benchmarks.policies.Policy) or `policy_options` (the
    keywords of `build_policy`) says what is evaluated."""
    from benchmarks import memory as memory_mod
    from benchmarks import metrics as metrics_mod
    from benchmarks import replay_benchmark  # noqa: F401 -- registers "replay"
    from benchmarks import runner
    from benchmarks.base import check_split, get_benchmark
    from trainer import chat_format as cf

    if split == "test" and not allow_test:
        raise UserError("eval never reads the test split; only `curateevo test` does (use --split dev)")
    check_split(split, allow_test)
    if samples < 1:
        raise UserError("--samples must be at least 1")
    if temperature < 0:
        raise UserError("--temperature must be >= 0")
    if samples > 1 and temperature == 0:
        raise UserError("several samples need a positive --temperature (greedy decoding repeats itself)")
    if tasks is not None and tasks < 1:
        raise UserError("--tasks must be at least 1")
    if batch_size < 1 or (max_steps is not None and max_steps < 1):
        raise UserError("--batch-size and --max-steps must be at least 1")
    out = Path(out)
    _check_out(out)
    options: dict[str, Any] = {"allow_test": True} if allow_test else {}
    if benchmark == "replay":
        if not corpus:
            raise UserError("--benchmark replay needs --corpus FILE (the raw corpus to hold 10% out of)")
        options.update(corpus=corpus)
    elif corpus:
        raise UserError(f"--corpus is for --benchmark replay; {benchmark} brings its own tasks")
    bench = get_benchmark(benchmark, **options)
    executable = getattr(bench, "executable", True)
    episodes = episodes and executable
    metric = metric or ("task_success" if executable else "step_accuracy")
    if metric not in METRICS:
        raise UserError(f"unknown metric {metric!r} (one of {', '.join(METRICS)})")
    if metric in ("task_success", "turn_pass") and not episodes:
        raise UserError(f"{metric} needs episodes" + ("" if executable else f"; {benchmark} has no environment "
                                                                               "and measures step_accuracy only"))
    if metric == "step_accuracy" and not steps:
        raise UserError("step_accuracy needs the step items (drop --no-steps)")
    if not episodes and not steps:
        raise UserError("nothing to evaluate: both episodes and steps are off")
    task_list = bench.tasks(split, limit=tasks, categories=categories or None)
    if not task_list:
        raise UserError(f"{benchmark} has no {split} tasks" + (f" in {', '.join(categories)}" if categories else ""))
    index = None
    if memory:
        index = memory_mod.MemoryIndex.from_file(memory, memory_k)
    if policy is None:
        policy = build_policy(batch_size=batch_size, **(policy_options or {}))
    out.mkdir(parents=True, exist_ok=True)

    progress_factory = None
    if progress:
        from tqdm import tqdm

        def progress_factory(label: str, total: int):
            return tqdm(total=total, desc=label, unit=label.rstrip("s"), file=sys.stderr, dynamic_ncols=True)

    result = runner.evaluate(bench, task_list, policy, episodes=episodes, steps=steps, max_steps=max_steps,
                             batch_size=batch_size, samples=samples, temperature=temperature, seed=seed,
                             memory=index, step_limit=step_limit, progress_factory=progress_factory)
    summary = metrics_mod.summarize(result.trajectories, result.steps, result.timing)
    describe = policy.describe() if hasattr(policy, "describe") else {"backend": type(policy).__name__}
    stats = getattr(policy, "stats", None)
    doc = {
        "benchmark": benchmark,
        "benchmark_config": bench.describe() if hasattr(bench, "describe") else {},
        "split": split,
        "categories": sorted(categories) if categories else None,
        "tasks": [t.id for t in task_list],
        "metric": metric,
        "P": summary["metrics"][metric],
        "metrics": summary["metrics"],
        "per_category": summary["per_category"],
        "policy": describe,
        "chat_format": {"style": describe.get("chat_style", cf.DEFAULT_STYLE),
                        "template_sha256": hashlib.sha256(cf.CHAT_TEMPLATE.encode()).hexdigest()},
        "runner": {"episodes": episodes, "steps": steps, "batch_size": batch_size,
                   "max_steps": max_steps, "max_steps_per_task": sorted({runner.task_max_steps(t, max_steps)
                                                                         for t in task_list}),
                   "samples": samples, "temperature": temperature, "seed": seed, "step_limit": step_limit},
        "memory": None if index is None else {"path": str(memory), "sha256": _sha256_file(Path(memory)),
                                              "records": len(index), "k": memory_k, "retrieval": "bm25s"},
        "timing": {**summary["timing"], **({"policy": {k: round(v, 3) if isinstance(v, float) else v
                                                      for k, v in stats.items()}} if stats else {})},
    }
    write_atomic(out / "trajectories.jsonl", jsonl(result.trajectories))
    write_atomic(out / "steps.jsonl", jsonl(result.steps))
    write_atomic(out / "metrics.json", json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    return doc


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def format_metrics(doc: dict, out: Path | None = None) -> str:
    m, t, pol = doc["metrics"], doc["timing"], doc["policy"]
    where = pol.get("device") or pol.get("base_url") or pol.get("backend")
    model = pol.get("base") or pol.get("model") or pol.get("label") or pol.get("backend")
    extra = f", {pol['threads']} threads" if pol.get("threads") else ""
    rows = [
        ("benchmark", f"{doc['benchmark']} ({doc['split']}, {len(doc['tasks'])} tasks)"),
        ("policy", f"{model}" + (f" + {pol['adapter']}" if pol.get("adapter") else "") + f" ({where}{extra}, "
                   f"batch {doc['runner']['batch_size']})"),
        ("task_success", f"{_pct(m['task_success'])} ({m['successes']}/{m['episodes']} episodes)"),
        ("turn_pass", f"{_pct(m['turn_pass'])} ({m['turns_passed']}/{m['turns']} turns)"),
        ("step_accuracy", f"{_pct(m['step_accuracy'])} ({m['step_items']} step items; "
                          f"{_pct(m['step_accuracy_calls'])} of {m['step_items_with_calls']} with gold calls, "
                          f"{_pct(m['step_accuracy_replies'])} of {m['step_items'] - m['step_items_with_calls']} "
                          "closing replies)"),
        ("format errors", f"{_pct(m['format_error_rate'])} ({m['format_errors']}/{m['answers']} answers; "
                          f"{_pct(m['call_rate'])} with calls)"),
        ("episodes/min", "n/a" if t.get("episodes_per_minute") is None else f"{t['episodes_per_minute']:.2f}"
                         + (f" ({t['episodes_s']:.1f} s)" if "episodes_s" in t else "")),
    ]
    if t.get("items_per_minute") is not None:
        rows.append(("items/min", f"{t['items_per_minute']:.2f} ({t['steps_s']:.1f} s)"))
    p = doc["P"]
    rows.append(("P", f"{'n/a' if p is None else f'{p:.4f}'} ({doc['metric']})"))
    width = max(len(k) for k, _ in rows)
    text = "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
    if out is not None:
        text += f"\n\ntrajectories, steps and metrics in {out}"
    return text


def cmd_eval(args) -> int:
    if args.split == "test":
        raise UserError("eval never reads the test split; only `curateevo test` does (use --split dev)")
    if args.policy == "openai" and not args.endpoint:
        raise UserError("--policy openai needs --base-url URL (an OpenAI-compatible server, e.g. vLLM's http://HOST:8000/v1)")
    if args.policy == "local" and args.endpoint:
        raise UserError("--policy local evaluates a model here; drop --base-url, or use --policy openai")
    out = args.out or PROJECT_ROOT / "runs" / datetime.datetime.now().strftime("eval-%Y%m%d-%H%M%S")
    categories = [c for c in (args.categories or "").split(",") if c] or None
    policy_options = dict(base=args.base, adapter=args.adapter, endpoint=args.endpoint, api=args.api,
                          api_key_env=args.api_key_env, device=args.device, dtype=args.dtype, threads=args.threads,
                          max_new_tokens=args.max_new_tokens, max_prompt_tokens=args.max_prompt_tokens,
                          style=args.chat_style, concurrency=args.concurrency)
    if not args.endpoint:
        from trainer.models import check_name

        check_name(args.base)
        _adapter_dir(args.adapter)
    doc = evaluate_to_dir(args.benchmark, args.split, out, tasks=args.tasks, categories=categories,
                          metric=args.metric, corpus=args.corpus, memory=args.memory, memory_k=args.memory_k,
                          samples=args.samples, temperature=args.temperature, seed=args.seed,
                          batch_size=args.batch_size, max_steps=args.max_steps, episodes=not args.no_episodes,
                          steps=not args.no_steps, step_limit=args.step_limit, progress=not args.quiet,
                          policy_options=policy_options)
    if args.json:
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        print(format_metrics(doc, Path(out)))
    return 0


def add_cli(sub) -> None:
    """Register `curateevo eval` on the main parser's subcommands."""
    p = sub.add_parser("eval", help="score a policy (base model + adapter + memory) on dev tasks",
                       description="Score a policy on a benchmark's dev tasks; writes trajectories.jsonl, "
                                   "steps.jsonl and metrics.json. The test split is refused.")
    p.add_argument("--benchmark", default="bfcl-single", choices=BENCHMARKS,
                   help="bfcl (multi-turn), bfcl-single (single-turn, the CPU default) or replay (a corpus's held-out 10%%)")
    p.add_argument("--corpus", help="raw corpus for --benchmark replay")
    p.add_argument("--base", "--model", dest="base", default="smollm2-135m",
                   help="base model: smollm2-135m, tiny-random, a model directory or HF id; with --policy openai the "
                        "served model name (vLLM: the --lora-modules name, so the adapter is used)")
    p.add_argument("--adapter", help="a trained LoRA adapter (a `curateevo train` output or its adapter/ folder)")
    p.add_argument("--memory", help="memory records (JSONL) retrieved by BM25 into the system prompt")
    p.add_argument("--memory-k", type=int, default=3, help="memory records per task (default 3)")
    p.add_argument("--split", default="dev", choices=["train", "dev", "test"], help="dev (default); test is refused")
    p.add_argument("--tasks", type=int, help="evaluate N tasks of the split, balanced over its categories (default all)")
    p.add_argument("--categories", help="comma-separated categories (e.g. base,miss_func or simple_python,multiple)")
    p.add_argument("--out", type=Path, help="output directory, new or empty (default: runs/eval-<time>)")
    p.add_argument("--metric", choices=METRICS, help="P, the metric the run is judged by "
                                                     "(default task_success; step_accuracy for replay)")
    p.add_argument("--samples", type=int, default=1, help="answers per episode and per step item (default 1)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=8, help="episodes or step items generated together (default 8)")
    p.add_argument("--max-steps", type=int, help="lower the answers with calls allowed per user turn (default: the task's; BFCL 20, single-turn 1)")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--max-prompt-tokens", type=int, default=4096, help="longer prompts lose their oldest turns")
    p.add_argument("--no-episodes", action="store_true", help="skip episodes (step_accuracy only)")
    p.add_argument("--no-steps", action="store_true", help="skip step items (task_success and turn_pass only)")
    p.add_argument("--step-limit", type=int, help="at most this many step items")
    p.add_argument("--chat-style", choices=["compact", "json"], help="tool rendering (default: the chat format's)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="auto (default): bfloat16 on a GPU that has it, float32 elsewhere")
    p.add_argument("--threads", type=int, help="torch CPU threads (pinned and recorded; default: the cores, at most 16)")
    p.add_argument("--policy", choices=["local", "openai"], help="local (transformers here) or openai (a server "
                                                                     "at --base-url); default: openai iff --base-url is given")
    p.add_argument("--endpoint", "--base-url", dest="endpoint",
                   help="OpenAI-compatible base URL (e.g. http://127.0.0.1:8000/v1: vLLM, SGLang) instead of a local model")
    p.add_argument("--api", default="completions", choices=["completions", "chat"], help="endpoint API (default completions)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the endpoint's key")
    p.add_argument("--concurrency", type=int, default=4, help="parallel endpoint requests")
    p.add_argument("--json", action="store_true", help="print metrics.json instead of the table")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_eval)

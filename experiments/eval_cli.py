"""`curateevo eval`: a policy (base model + adapter + memory) on a benchmark's dev tasks (DESIGN: CLI).

    curateevo eval --benchmark bfcl|bfcl-single|next-call [--profile P] [--base M] [--adapter D] [--memory F]
                   --split dev --tasks N --out D [--metric M] [--samples K --temperature T]

prints task_success, turn_pass, step_accuracy, call_f1 (next-call), the format-error rate and episodes per minute,
and writes trajectories, steps and metrics into D (environments/evaluate.py). The test split is
refused: only `curateevo test` reads it. The base model and the pinned CPU threads are the recipe
profile's (`--profile`, as `run` and `train` take it) unless `--base` / `--threads` say otherwise.
"""
from __future__ import annotations

import datetime
import json
from pathlib import Path

from base.errors import UserError, nonnegative_number, positive_int
from sandbox.options import add_corpus
from base import registry
from environments.evaluate import METRICS, EvalSpec, adapter_dir, format_metrics
from experiments.train_eval import evaluate_on
from trainer.options import add_profile
from trainer.train import TrainSpec

DEFAULTS = EvalSpec()   # the defaults of every evaluation, declared once (environments.evaluate.EvalSpec)

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def cmd_eval(args) -> int:
    if args.split == "test":
        raise UserError("eval never reads the test split; only `curateevo test` does (use --split dev)")
    if args.policy == "openai" and not args.endpoint:
        raise UserError("--policy openai needs --base-url URL (an OpenAI-compatible server, e.g. vLLM's http://HOST:8000/v1)")
    if args.policy == "local" and args.endpoint:
        raise UserError("--policy local evaluates a model here; drop --base-url, or use --policy openai")
    out = args.out or PROJECT_ROOT / "runs" / datetime.datetime.now().strftime("eval-%Y%m%d-%H%M%S")
    categories = [c for c in (args.categories or "").split(",") if c] or None
    train = TrainSpec(profile=args.profile, base=args.base)   # what trained the policy: its base and threads
    base = train.base_model
    spec = EvalSpec(benchmark=args.benchmark, metric=args.metric, tasks=args.tasks, batch_size=args.batch_size,
                    max_new_tokens=args.max_new_tokens, max_prompt_tokens=args.max_prompt_tokens,
                    threads=args.threads or train.threads,
                    steps=not args.no_steps, memory_k=args.memory_k, corpus=tuple(args.corpus or ()),
                    corpus_tools=args.tools, corpus_on_error=args.on_bad_line)
    policy_options = dict(endpoint=args.endpoint, api=args.api, api_key_env=args.api_key_env, device=args.device,
                          dtype=args.dtype, style=args.chat_style, concurrency=args.concurrency)
    from environments.user_sim import from_args

    user = from_args(args)   # the simulated user's server answers, before any decoding
    policy = None
    if args.policy == "most-common-tool":
        policy = _most_common_tool(args)
    elif not args.endpoint:
        from trainer.models import check_name

        check_name(base)
        adapter_dir(args.adapter)
    doc = evaluate_on(spec, args.split, out, base=base, adapter=args.adapter, memory=args.memory,
                      seed=args.seed, samples=args.samples, temperature=args.temperature, progress=not args.quiet,
                      policy_options=policy_options, categories=categories, max_steps=args.max_steps,
                      episodes=not args.no_episodes, step_limit=args.step_limit, policy=policy, user=user)
    if args.json:
        print(json.dumps(doc.doc, indent=2, sort_keys=True))
    else:
        print(format_metrics(doc.doc, Path(out)))
    return 0


def _most_common_tool(args):
    """The baseline that always calls the most common tool of the corpus's training 90%."""
    if args.benchmark != "next-call" or not args.corpus:
        raise UserError("--policy most-common-tool is a baseline for --benchmark next-call --corpus FILE "
                        "(it learns its tool from the corpus's training 90%)")
    if args.endpoint or args.adapter:
        raise UserError("--policy most-common-tool runs no model: drop --base-url and --adapter")
    from environments.policies.baselines import MostCommonToolPolicy
    from environments.next_call.benchmark import NextCallBenchmark

    return MostCommonToolPolicy.from_records(NextCallBenchmark(args.corpus).train_records())


def add_cli(sub) -> None:
    """Register `curateevo eval` on the main parser's subcommands."""
    p = sub.add_parser("eval", help="score a policy (base model + adapter + memory) on dev tasks",
                       description="Score a policy on a benchmark's dev tasks; writes trajectories.jsonl, "
                                   "steps.jsonl and metrics.json. The test split is refused.")
    from environments.user_sim import add_flags

    add_flags(p)
    p.add_argument("--benchmark", default=registry.DEFAULT, type=registry.given, choices=registry.names(),
                   help="bfcl (multi-turn), bfcl-single (single-turn, the CPU default) or next-call (the agent's next "
                        "call at each recorded step of a corpus's held-out 10%%; old name: replay)")
    add_corpus(p, "raw corpus file(s) or folder(s) for --benchmark next-call",
               "next-call: JSON file of the real tool schemas for records whose files carry none",
               "next-call corpus (as the run that trained the adapter did)")
    add_profile(p, "the recipe profile the policy was trained with (its base model and CPU threads)", overrides=None)
    p.add_argument("--base", "--model", dest="base",
                   help="the model evaluated (as `run --base`; default: the profile's): smollm2-135m, tiny-random, a "
                        "model directory or HF id; "
                        "with --policy openai the served model name (vLLM: the --lora-modules name, so the adapter is "
                        "used); --model is its older spelling, not `run --model` (the LLM that proposes strategies)")
    p.add_argument("--adapter", help="a trained LoRA adapter (a `curateevo train` output or its adapter/ folder)")
    p.add_argument("--memory", help="memory records (JSONL) retrieved by BM25 into the system prompt; a record about one tool (meta.tool) only for tasks that offer it")
    p.add_argument("--memory-k", type=positive_int, default=DEFAULTS.memory_k,
                   help=f"memory records per task (default {DEFAULTS.memory_k})")
    p.add_argument("--split", default="dev", choices=["train", "dev", "test", "tune"], help="dev (default); test is refused; tune: bfcl-single's tuning slice")
    p.add_argument("--tasks", type=positive_int, help="evaluate N tasks of the split, balanced over its categories (default all)")
    p.add_argument("--categories", help="comma-separated categories (e.g. base,miss_func or simple_python,multiple)")
    p.add_argument("--out", type=Path, help="output directory, new or empty (default: runs/eval-<time>)")
    p.add_argument("--metric", choices=METRICS, help="P, the metric the run is judged by "
                                                     "(default task_success; call_f1 for next-call)")
    p.add_argument("--samples", type=positive_int, default=1, help="answers per episode and per step item (default 1)")
    p.add_argument("--temperature", type=nonnegative_number, default=0.0, help="0 = greedy (default)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (with --samples > 1) and the recorded run seed")
    p.add_argument("--batch-size", type=positive_int, default=DEFAULTS.batch_size,
                   help=f"episodes or step items generated together (default {DEFAULTS.batch_size})")
    p.add_argument("--max-steps", type=positive_int, help="lower the answers with calls allowed per user turn (default: the task's; BFCL 20, single-turn 1)")
    p.add_argument("--max-new-tokens", type=positive_int, default=DEFAULTS.max_new_tokens,
                   help=f"tokens generated per answer at most (default {DEFAULTS.max_new_tokens})")
    p.add_argument("--max-prompt-tokens", type=positive_int, default=DEFAULTS.max_prompt_tokens,
                   help=f"longer prompts lose their oldest turns (default {DEFAULTS.max_prompt_tokens})")
    p.add_argument("--no-episodes", action="store_true", help="skip episodes (step_accuracy only)")
    p.add_argument("--no-steps", action="store_true", help="skip step items (task_success and turn_pass only)")
    p.add_argument("--step-limit", type=positive_int, help="at most this many step items")
    p.add_argument("--chat-style", choices=["compact", "json"], help="tool rendering (default: the chat format's)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where the local model runs (auto: a GPU when there is one)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="weights and activations of the local model; auto: bfloat16 on a GPU that has it, else float32")
    p.add_argument("--threads", type=positive_int, help="torch CPU threads (pinned and recorded; default: the profile's, "
                                                        "else the cores, at most 16)")
    p.add_argument("--policy", choices=["local", "openai", "most-common-tool"],
                   help="local (transformers here), openai (a server at --base-url; default iff --base-url is given) "
                        "or most-common-tool (next-call's baseline: always call the corpus's most common offered tool)")
    p.add_argument("--endpoint", "--base-url", dest="endpoint",
                   help="OpenAI-compatible base URL (e.g. http://127.0.0.1:8000/v1: vLLM, SGLang) instead of a local model")
    p.add_argument("--api", default="completions", choices=["completions", "chat"], help="endpoint API (default completions)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the endpoint's key")
    p.add_argument("--concurrency", type=positive_int, default=4, help="parallel endpoint requests")
    p.add_argument("--json", action="store_true", help="print metrics.json instead of the table")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_eval)

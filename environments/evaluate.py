"""The evaluation stage: a policy (base model + adapter + memory) on a benchmark's tasks, written
to a folder — what `curateevo eval`, the run's evaluate stage and `curateevo test` all call.

`evaluate_to_dir` writes into a new or empty folder, each file atomically:

- `trajectories.jsonl`: one canonical raw record per episode (environments.runner); on a benchmark
  without an environment (next-call), one per held-out record with scored steps: the recorded
  messages and, per step, the model's answer, its verdict and why (environments/next_call/scoring.py);
- `steps.jsonl`: one line per step item (gold prefix given, the policy's next action judged);
- `metrics.json`: P (the chosen metric), all metrics overall and per category, the resolved
  configuration (policy, chat format, runner, memory, task ids) and, apart under `timing`, wall
  times and throughput — everything but `timing` is deterministic for the same inputs.

The test split is refused unless `allow_test` (only `curateevo test` and the quality benchmark
read it).
"""
from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path
from dataclasses import dataclass
from typing import Annotated, Any, Iterable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from base.errors import UserError
from base.files import atomic_write, is_empty_or_missing, sha256_file
from environments.policies.limits import DEFAULT_BATCH_SIZE, DEFAULT_MAX_NEW_TOKENS, DEFAULT_MAX_PROMPT_TOKENS
from base.registry import DEFAULT as DEFAULT_BENCHMARK
from trainer.memory import DEFAULT_K as DEFAULT_MEMORY_K

METRICS = ("task_success", "turn_pass", "step_accuracy", "call_f1")


class EvalSpec(BaseModel):
    """How a trained policy is evaluated, besides what is evaluated (base, adapter, memory), the
    split and the seed: what the loop, `bench quality`'s cells, the proxy of k candidates,
    `curateevo test` and `curateevo eval` give `experiments.train_eval.evaluate_on`, so the thread
    pinning, the decoding budget and the memory rule are the same wherever a policy is scored.
    Each field is declared here once; `evolver.config.RunConfig.eval` and the quality bench's
    `Setting.eval` nest one (what the run or the bench sets itself, benchmark to holdout, is
    added when they evaluate: `RunConfig.eval_spec`, `Cells.eval_spec`)."""
    model_config = ConfigDict(frozen=True, extra="forbid")

    benchmark: str = DEFAULT_BENCHMARK
    """The environment (base.registry): bfcl-single, bfcl, next-call, …"""
    metric: str | None = None
    """P: task_success, turn_pass, step_accuracy or call_f1 (None: the benchmark's first metric)."""
    tasks: int | None = None
    """N tasks of the split, balanced over its categories (None: all)."""
    batch_size: Annotated[int, Field(ge=1)] = DEFAULT_BATCH_SIZE
    """Episodes or step items decoded together (fixed batches by task id keep evaluation deterministic)."""
    max_new_tokens: Annotated[int, Field(ge=1)] = DEFAULT_MAX_NEW_TOKENS
    """What a policy decodes per model turn at most (a tool call longer than this is cut and fails)."""
    max_prompt_tokens: int = DEFAULT_MAX_PROMPT_TOKENS
    """A longer prompt loses its oldest turns (trainer.data.fit_prompt)."""
    threads: int | None = None
    """CPU threads decoding is pinned to (the training profile's, `TrainSpec.threads`; None: the cores, at most 16)."""
    steps: bool | None = None
    """Also score the step items (None: unless every task is one step and P is no step metric: `steps_pass`)."""
    memory_k: int = DEFAULT_MEMORY_K
    """Memory records retrieved per task (trainer.memory.DEFAULT_K: as many as the training hints)."""
    corpus: tuple[str, ...] = ()
    """next-call: the raw corpus files whose held-out part the tasks are."""
    corpus_tools: str | None = None
    """next-call: the tool schemas for records whose files carry none (`--tools`)."""
    corpus_on_error: str = "abort"
    """next-call: an invalid corpus line aborts (file:line) or is skipped and counted."""
    holdout: dict | None = None
    """next-call: how the run held out its dev and test parts (corpora.split; None: the legacy split)."""

    def step_pass(self) -> bool:
        """Whether the step items are scored: `steps`, else `steps_pass` of the benchmark and metric."""
        return self.steps if self.steps is not None else steps_pass(self.benchmark, self.metric)


@dataclass(frozen=True)
class EvalResult:
    """What an evaluation returns (experiments.train_eval.evaluate_on): its `metrics.json` document
    (`doc`, exactly as written) and the fields its readers take from it. Contract: `tasks` lists
    the evaluated task ids in evaluation order, one per episode (each task once; `samples` > 1
    rolls each out several times); `per_category` maps each category of those tasks to the same
    metrics as `metrics`; `P` is `metrics[metric]` (None when the dev set gave the metric no item);
    `gold` is the gold-call log-likelihood document (`mean`, `per_category`, …) or None;
    `task_groups` maps each task id to the task it is a record of where the benchmark names one
    (next-call: a held-out record of a published task), else {}."""
    doc: Mapping[str, Any]

    @property
    def task_groups(self) -> dict[str, str]:
        return dict(self.doc.get("task_groups") or {})

    @property
    def P(self) -> float | None:
        return self.doc["P"]

    @property
    def metric(self) -> str:
        return self.doc["metric"]

    @property
    def tasks(self) -> list[str]:
        return self.doc["tasks"]

    @property
    def metrics(self) -> dict:
        return self.doc["metrics"]

    @property
    def per_category(self) -> dict:
        return self.doc["per_category"]

    @property
    def gold(self) -> dict | None:
        return self.doc.get("gold_log_likelihood")

    @property
    def timing(self) -> dict:
        """Wall times and throughput: the one part that differs between two runs of the same evaluation."""
        return self.doc["timing"]


def scores_steps(env: Any) -> bool:
    """Whether an environment scores step items (a step metric among its metrics)."""
    return bool({"step_accuracy", "call_f1"} & set(env.metrics))


def steps_pass(benchmark: str, metric: str | None) -> bool:
    """Whether evaluation adds the step-level pass: never for a benchmark that scores no step items;
    single-turn tasks are one step each, so the step pass would score the same answers again (unless
    the metric is the steps' own)."""
    from base import registry

    env = registry.get(benchmark)
    return scores_steps(env) and not (env.single_step and metric != "step_accuracy")


def opening_prompts(bench: Any, tasks: Sequence[Any], episodes: bool) -> list[tuple[list, list]]:
    """The (messages, tools) an evaluation shows first: each episode's opening turn, or each step item."""
    from environments.runner import step_items

    if episodes:
        return [(t.turns[0] if t.turns else [], t.tools) for t in tasks]
    return [(i.messages, i.tools) for i in step_items(bench, tasks)]


def check_prompts_fit(benchmark: str, prompts: Sequence[tuple[list, list]], tokenizer: Any, cap: int, *,
                      style: str | None = None, context: int | None = None, max_new_tokens: int = 0) -> None:
    """UserError before any decoding when a prompt (messages, tools) cannot fit `cap` tokens even with its
    oldest turns dropped: an answer to a prompt the model never saw is no score. The fix names the cap
    that fits, or says the model's `context` cannot hold it with the answer."""
    from trainer.data import can_fit, fit_prompt

    style = style or "compact"
    longest, over = 0, 0
    for messages, tools in prompts:
        if not can_fit(messages, tools, tokenizer, cap, style):
            over += 1
            longest = max(longest, fit_prompt(messages, tools, tokenizer, 1 << 30, style)[1])
    if over:
        fix = (f"give --max-prompt-tokens {longest} or more (the model's context is {context} tokens)"
               if context is None or longest + max_new_tokens <= context else
               f"the model's context ({context} tokens) cannot hold them with the answer: evaluate a model with a longer one")
        raise UserError(f"{over} of {len(prompts)} {benchmark} prompts do not fit the prompt cap of {cap} tokens "
                        f"(the longest {longest}); they would be answered unseen: {fix}")


def jsonl(records: Iterable[Any]) -> str:
    from base.schemas import canonical_json

    return "".join(canonical_json(r) + "\n" for r in records)


def adapter_dir(adapter: str | None) -> str | None:
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
                 threads: int | None = None, batch_size: int = DEFAULT_BATCH_SIZE,
                 max_new_tokens: Annotated[int, Field(ge=1)] = DEFAULT_MAX_NEW_TOKENS, max_prompt_tokens: int = DEFAULT_MAX_PROMPT_TOKENS, style: str | None = None, concurrency: int = 4):
    from chat_format import chat_format as cf

    style = style or cf.DEFAULT_STYLE
    if endpoint:
        if adapter:
            raise UserError("--adapter is for local models; an endpoint serves its own weights")
        from environments.policies.openai_compat import OpenAIPolicy

        return OpenAIPolicy(endpoint, base, api=api, api_key_env=api_key_env, max_new_tokens=max_new_tokens,
                            style=style, concurrency=concurrency)
    from environments.policies.local import TransformersPolicy

    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UserError("--device cuda: no CUDA device is available here")
    return TransformersPolicy(base, adapter_dir(adapter), device=device, dtype=dtype, threads=threads,
                              batch_size=batch_size, max_new_tokens=max_new_tokens,
                              max_prompt_tokens=max_prompt_tokens, style=style)


def _check_out(out: Path) -> None:
    if not is_empty_or_missing(out):
        raise UserError(f"{out} exists and is not an empty directory")


def evaluate_to_dir(benchmark: str, split: str, out: str | Path, *, policy=None, tasks: int | None = None,
                    categories: list[str] | None = None, metric: str | None = None, corpus: str | list[str] | None = None,
                    corpus_on_error: str = "abort", corpus_tools: str | None = None, holdout: dict | None = None,
                    memory: str | None = None, memory_k: int = DEFAULT_MEMORY_K, samples: int = 1, temperature: float = 0.0,
                    seed: int = 0, batch_size: int = DEFAULT_BATCH_SIZE, max_steps: int | None = None, episodes: bool = True,
                    steps: bool = True, step_limit: int | None = None, allow_test: bool = False,
                    progress: bool = False, policy_options: dict | None = None, gold: bool = False,
                    user=None) -> dict:
    """Evaluate and write trajectories.jsonl, steps.jsonl and metrics.json into `out`; returns
    the metrics document. `policy` (any environments.policies.Policy) or `policy_options` (the
    keywords of `build_policy`) says what is evaluated. `corpus_on_error`, `corpus_tools` and
    `holdout` load and split a next-call corpus as the run that curated it did (skipped lines,
    --tools schemas, its dev and test parts: corpora.split). `gold`: also the policy's log-likelihood of
    the tasks' gold calls (environments/gold_likelihood.py; a local transformers policy only). `user`
    (environments.user_sim.UserEndpoint) plays the user where the benchmark simulates one (τ² airline and
    retail, ACEBench agent multi-turn); other benchmarks ignore it."""
    from trainer import memory as memory_mod
    from environments import metrics as metrics_mod
    from base import registry
    from environments import runner
    from base.benchmark import check_split
    from base.registry import get_benchmark
    from chat_format import chat_format as cf

    if split == "test" and not allow_test:
        raise UserError("eval never reads the test split; only `curateevo test` does (use --split dev)")
    check_split(split, allow_test, tune=True)   # the benchmark's tasks() refuses a slice it lacks
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
    env = registry.get(benchmark)
    executable = env.executable
    if not executable:   # its dev set is a corpus's own held-out tenth
        if not corpus:
            raise UserError(f"--benchmark {benchmark} needs --corpus FILE (the raw corpus to hold 10% out of)")
        options.update(corpus=corpus, on_error=corpus_on_error, tools=corpus_tools, holdout=holdout)
    elif corpus:
        raise UserError(f"--corpus is for --benchmark {registry.NO_ENVIRONMENT}; {benchmark} brings its own tasks")
    user = user if env.user_simulated else None
    if user is not None:
        options["user"] = user
    bench = get_benchmark(benchmark, **options)
    episodes = episodes and executable
    metric = metric or env.metrics[0]   # the environment's default P
    if metric not in METRICS:
        raise UserError(f"unknown metric {metric!r} (one of {', '.join(METRICS)})")
    steps = steps and scores_steps(env)   # a benchmark without step items has no step pass
    judges_calls = "call_f1" in env.metrics   # its steps are judged call by call (next-call), not by a checker
    if metric == "call_f1" and not judges_calls:
        raise UserError(f"call_f1 is measured on the next-call benchmark; {benchmark} is judged by its checker "
                        "(use --metric task_success, turn_pass or step_accuracy)")
    if metric == "step_accuracy" and judges_calls:
        raise UserError(f"--metric step_accuracy on {benchmark} counts every text step right whatever the model "
                        "writes (a random model passes it); P there is call_f1 (drop --metric)")
    if metric in ("task_success", "turn_pass") and not episodes:
        raise UserError(f"{metric} needs episodes" + ("" if executable else f"; {benchmark} has no environment "
                                                                               "and measures step_accuracy only"))
    if metric not in env.metrics and metric != "turn_pass":   # e.g. step_accuracy where there are no step items
        raise UserError(f"{benchmark} does not score {metric} (it scores {', '.join(env.metrics)}): drop --metric")
    if metric in ("step_accuracy", "call_f1") and not steps:
        raise UserError(f"{metric} needs the step items (drop --no-steps)")
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
    if getattr(policy, "tokenizer", None) is not None:   # a local policy: its prompts are checked against its cap
        check_prompts_fit(benchmark, opening_prompts(bench, task_list, episodes), policy.tokenizer,
                          policy.max_prompt_tokens, style=policy.style, max_new_tokens=policy.max_new_tokens,
                          context=getattr(getattr(policy.model, "config", None), "max_position_embeddings", None))
    out.mkdir(parents=True, exist_ok=True)

    progress_factory = None
    if progress:
        from trainer.progress import progress_bar

        def progress_factory(label: str, total: int):
            return progress_bar(total, label, label.rstrip("s"), sys.stderr)

    result = runner.evaluate(bench, task_list, policy, episodes=episodes, steps=steps, max_steps=max_steps,
                             batch_size=batch_size, samples=samples, temperature=temperature, seed=seed,
                             memory=index, step_limit=step_limit, progress_factory=progress_factory)
    summary = metrics_mod.summarize(result.trajectories, result.steps, result.timing)
    trajectories = result.trajectories
    if not executable:   # the scored held-out records, for report and diagnosis
        trajectories = bench.episodes(task_list, result.steps)
    gold_doc = None
    if gold and getattr(policy, "model", None) is not None:
        from environments.gold_likelihood import gold_log_likelihood

        started = time.perf_counter()
        gold_doc = gold_log_likelihood(policy.model, policy.tokenizer, runner.hinted(runner.step_items(bench, task_list), index),
                                       {t.id: t.category for t in task_list}, policy.style)
        gold_doc["seconds"] = round(time.perf_counter() - started, 3)
    describe = policy.describe() if hasattr(policy, "describe") else {"backend": type(policy).__name__}
    stats = getattr(policy, "stats", None)
    doc = {
        "benchmark": benchmark,
        "benchmark_config": bench.describe() if hasattr(bench, "describe") else {},
        "split": split,
        **({"user": user.record()} if user is not None else {}),
        "categories": sorted(categories) if categories else None,
        "tasks": [t.id for t in task_list],
        **({"task_groups": {t.id: t.meta["task_group"] for t in task_list}}
           if any("task_group" in (t.meta or {}) for t in task_list) else {}),
        "metric": metric,
        "P": summary["metrics"][metric],
        "metrics": summary["metrics"],
        "per_category": summary["per_category"],
        **({"per_tool": summary["per_tool"]} if "per_tool" in summary else {}),
        **({"gold_log_likelihood": gold_doc} if gold_doc is not None else {}),
        "policy": describe,
        "chat_format": {"style": describe.get("chat_style", cf.DEFAULT_STYLE),
                        "template_sha256": hashlib.sha256(cf.CHAT_TEMPLATE.encode()).hexdigest()},
        "runner": {"episodes": episodes, "steps": steps, "batch_size": batch_size,
                   "max_steps": max_steps, "max_steps_per_task": sorted({runner.task_max_steps(t, max_steps)
                                                                         for t in task_list}),
                   "samples": samples, "temperature": temperature, "seed": seed, "step_limit": step_limit},
        "memory": None if index is None else {"path": str(memory), "sha256": sha256_file(Path(memory)),
                                              "records": len(index), "k": memory_k, "retrieval": memory_mod.RETRIEVAL},
        "timing": {**summary["timing"], **({"policy": {k: round(v, 3) if isinstance(v, float) else v
                                                      for k, v in stats.items()}} if stats else {})},
    }
    atomic_write(out / "trajectories.jsonl", jsonl(trajectories))
    atomic_write(out / "steps.jsonl", jsonl(result.steps))
    atomic_write(out / "metrics.json", json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    return doc


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def decoding_figures(stats: dict) -> str:
    """A local policy's throughput in one line: tokens/s, the prompts' padding share, and the
    decoding a batch would have spent on rows that had already ended (saved by decode.py)."""
    secs = stats["generate_s"]
    text = (f"{stats['prompts'] / secs:.2f} prompts/s, {stats['prompt_tokens'] / secs:.0f} prompt and "
            f"{stats['generated_tokens'] / secs:.1f} generated tokens/s")
    if stats.get("padding_tokens") is not None and stats.get("prompt_tokens"):
        text += f", padding {stats['padding_tokens'] / (stats['padding_tokens'] + stats['prompt_tokens']):.0%} of prompt slots"
    if stats.get("padded_row_steps"):
        text += (f", {stats['row_steps']} row-steps decoded of the {stats['padded_row_steps']} a whole-batch "
                 f"decode takes ({1 - stats['row_steps'] / stats['padded_row_steps']:.0%} saved)")
    return text


def format_metrics(doc: dict, out: Path | None = None) -> str:
    m, t, pol = doc["metrics"], doc["timing"], doc["policy"]
    where = pol.get("device") or pol.get("base_url") or pol.get("backend")
    model = pol.get("base") or pol.get("model") or pol.get("label") or pol.get("backend")
    extra = f", {pol['threads']} threads" if pol.get("threads") else ""
    rows = [
        ("benchmark", f"{doc['benchmark']} ({doc['split']}, " + (
            f"{len(doc['tasks'])} records of {len(set(doc['task_groups'].values()))} tasks)" if doc.get("task_groups")
            else f"{len(doc['tasks'])} tasks)")),
        ("policy", f"{model}" + (f" + {pol['adapter']}" if pol.get("adapter") else "") + f" ({where}{extra}, "
                   f"batch {doc['runner']['batch_size']})"),
        ("task_success", f"{_pct(m['task_success'])} ({m['successes']}/{m['episodes']} episodes)"),
        ("turn_pass", f"{_pct(m['turn_pass'])} ({m['turns_passed']}/{m['turns']} turns)"),
        ("step_accuracy", f"{_pct(m['step_accuracy'])} ({m['step_items']} step items; "
                          f"{_pct(m['step_accuracy_calls'])} of {m['step_items_with_calls']} with gold calls, "
                          f"{_pct(m['step_accuracy_replies'])} of {m['step_items'] - m['step_items_with_calls']} "
                          "closing replies)"),
        *([("call_f1", f"{_pct(m['call_f1'])} (precision {_pct(m['call_precision'])}, recall "
                          f"{_pct(m['call_recall'])}: {m['call_tp']} right calls, {m['call_fp']} wrong or unwanted, "
                          f"{m['call_fn']} missed; {_pct(m['no_call_fp_rate'])} of {m['text_step_answers']} text "
                          "steps answered with a call)")] if "call_tp" in m else []),
        ("format errors", f"{_pct(m['format_error_rate'])} ({m['format_errors']}/{m['answers']} answers; "
                          f"{_pct(m['call_rate'])} with calls)"),
        ("episodes/min", "n/a" if t.get("episodes_per_minute") is None else f"{t['episodes_per_minute']:.2f}"
                         + (f" ({t['episodes_s']:.1f} s)" if "episodes_s" in t else "")),
    ]
    if t.get("items_per_minute") is not None:
        rows.append(("items/min", f"{t['items_per_minute']:.2f} ({t['steps_s']:.1f} s)"))
    policy = t.get("policy") or {}
    if policy.get("generate_s"):
        rows.append(("decoding", decoding_figures(policy)))
    if policy.get("prompts_too_long") or policy.get("prompts_shortened"):   # openings always fit (check_prompts_fit)
        rows.append(("unseen", f"{policy.get('prompts_too_long', 0)} later prompt(s) of {policy.get('prompts', 0)} could "
                               f"not fit {pol.get('max_prompt_tokens')} tokens (answered empty: not the model's answers); "
                               f"{policy.get('prompts_shortened', 0)} lost their oldest turns to fit"))
    p = doc["P"]
    rows.append(("P", f"{'n/a' if p is None else f'{p:.4f}'} ({doc['metric']})"))
    width = max(len(k) for k, _ in rows)
    text = "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
    if out is not None:
        text += f"\n\ntrajectories, steps and metrics in {out}"
    return text



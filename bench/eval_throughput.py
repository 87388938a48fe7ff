"""Evaluation throughput: tasks/s, prompt and generated tokens/s, padding, and what decoding skipped.

    .venv/bin/python bench/eval_throughput.py --adapter ADAPTER [--tasks 186] \
        [--configs float32:32,bfloat16:32] [--rounds 2] [--gold] [--out result.json]

Evaluates one trained adapter on the default `bfcl-single` dev tasks as the loop does
(environments.evaluate.evaluate_to_dir: the adapter merged, greedy decoding sorted by prompt length,
a row leaving its batch at the stop marker), once per config (`DTYPE:BATCH`), the configs
interleaved over `--rounds` so that load drifts hit them alike. Per run: tasks/s, prompt tokens/s
and generated tokens/s (both over the decoding time, prefill included), the share of prompt
slots that are left padding, and the row-steps a fixed-batch `generate` would have decoded after
rows had stopped (`padded_row_steps − row_steps`; ours decodes none of them), with P and the gold
log-likelihood, so a faster config is also seen to keep the results.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def figures(metrics: dict, wall: float) -> dict:
    policy = metrics["timing"]["policy"]
    decode_s = policy["generate_s"] or None
    slots = policy["prompt_tokens"] + policy["padding_tokens"]
    gold = metrics.get("gold_log_likelihood") or {}
    return {"tasks": policy["prompts"], "wall_s": round(wall, 2), "episodes_s": metrics["timing"]["episodes_s"],
            "decode_s": round(policy["generate_s"], 2), "gold_s": gold.get("seconds"),
            "tasks_per_s": round(policy["prompts"] / metrics["timing"]["episodes_s"], 3),
            "prompt_tokens_per_s": round(policy["prompt_tokens"] / decode_s, 1) if decode_s else None,
            "generated_tokens_per_s": round(policy["generated_tokens"] / decode_s, 1) if decode_s else None,
            "prompt_padding_share": round(policy["padding_tokens"] / slots, 4) if slots else None,
            "generated_tokens": policy["generated_tokens"], "batches": policy["batches"],
            "row_steps": policy["row_steps"],
            "skipped_after_stop": policy["padded_row_steps"] - policy["row_steps"],
            "P": metrics["P"], "gold_ll": gold.get("mean")}


def measure(adapter: str, tasks: int, configs: list[tuple[str, int]], rounds: int, gold: bool,
            threads: int | None = None, base: str = "smollm2-135m") -> dict:
    from environments.evaluate import build_policy, evaluate_to_dir

    runs = []
    with tempfile.TemporaryDirectory(prefix="eval-throughput-") as tmp:
        for r in range(rounds):
            for dtype, batch in configs:
                policy = build_policy(base=base, adapter=adapter, device="cpu", dtype=dtype,
                                      threads=threads, batch_size=batch)
                out = Path(tmp) / f"{dtype}-{batch}-{r}"
                load = os.getloadavg()[0]
                start = time.perf_counter()
                metrics = evaluate_to_dir("bfcl-single", "dev", out, policy=policy, tasks=tasks, steps=False,
                                          gold=gold, batch_size=batch)
                row = {"dtype": dtype, "batch": batch, "round": r, "load_before": round(load, 2),
                       **figures(metrics, time.perf_counter() - start)}
                runs.append(row)
                print(f"eval-throughput: {json.dumps(row)}", file=sys.stderr, flush=True)
                shutil.rmtree(out, ignore_errors=True)
                del policy
    return {"adapter": adapter, "base": base, "tasks": tasks, "rounds": rounds, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/eval_throughput.py", description=__doc__.splitlines()[0])
    p.add_argument("--adapter", required=True, help="a trained adapter (a training's OUT or OUT/adapter)")
    p.add_argument("--base", default="smollm2-135m", help="the base model the adapter was trained on")
    p.add_argument("--tasks", type=int, default=186, help="balanced dev tasks (default: all 186)")
    p.add_argument("--configs", default="float32:32", help="DTYPE:BATCH,... (default: float32:32, the loop's)")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--threads", type=int)
    p.add_argument("--gold", action="store_true", help="also the gold-call log-likelihood, as the loop computes it")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    configs = []
    for item in a.configs.split(","):
        dtype, _, batch = item.partition(":")
        configs.append((dtype, int(batch or 32)))
    result = measure(a.adapter, a.tasks, configs, a.rounds, a.gold, a.threads, a.base)
    text = json.dumps(result, indent=2)
    if a.out:
        a.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A quick check of what training changed: greedy next turns on held-out RL steps.

`python -m experiments.probe [--profile P] [--base M] [--adapter OUT/adapter] --rl dev_rl.jsonl --limit 30`
(`python -m trainer.probe` before issue 72) renders each step's prefix with the chat format, decodes
greedily (temperature 0) within the evaluation's decoding budget and on the profile's pinned threads
(an `environments.evaluate.EvalSpec`, as every evaluation does), and reports how many turns hold a parseable tool call, how many call the reference's
functions, and the mean of each step's own reward. It is a smoke test of the recipe, not the dev
benchmark (environments/ owns that).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from base.errors import positive_int
from environments.evaluate import EvalSpec
from chat_format import chat_format as cf
from trainer.options import add_profile
from trainer.train import TrainSpec

EVAL = EvalSpec()   # the evaluation's decoding budget, declared once (environments/policies/limits.py)


def probe(base: str, adapter: str | None, rl_path: str, *, limit: int | None = None, spec: EvalSpec = EVAL) -> dict:
    """The probe's counts on the first `limit` steps of `rl_path`, decoded as `spec` says (its
    max_new_tokens, max_prompt_tokens and threads; None: torch's threads)."""
    import torch

    from trainer import data, rewards
    from trainer.models import load_policy

    if spec.threads:
        torch.set_num_threads(spec.threads)
    model, tokenizer = load_policy(base, adapter)
    records = data.read_records(rl_path, "rl")[:limit]
    start = time.perf_counter()
    parseable = names = 0
    scores, samples = [], []
    for r in records:
        fitted = data.fit_prompt(r["messages"], r.get("tools") or [], tokenizer, spec.max_prompt_tokens)
        if fitted is None:
            continue
        enc = tokenizer(fitted[0], return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=spec.max_new_tokens, do_sample=False,
                                 eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        text = tokenizer.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=False).split(cf.STOP)[0]
        parsed = cf.parse_tool_calls(text, r.get("tools"))
        parseable += parsed.parseable
        ref = [c.name for c in rewards.reference_calls(r)] if "tool_calls" in r["reference"] else []
        names += parsed.parseable and [c.name for c in parsed.calls] == ref
        scores.append(rewards.score(text, r))
        if len(samples) < 3:
            samples.append(text)
    n = len(scores)
    return {"base": base, "adapter": adapter, "steps": n, "parseable_rate": parseable / n if n else None,
            "reference_functions_rate": names / n if n else None, "reward_mean": sum(scores) / n if n else None,
            "seconds": round(time.perf_counter() - start, 1), "samples": samples}


def parser() -> argparse.ArgumentParser:
    """The probe's options: its defaults are the profile's (base, threads) and the evaluation's (budget)."""
    p = argparse.ArgumentParser(prog="python -m experiments.probe", description=__doc__.splitlines()[0])
    add_profile(p, "the recipe profile the adapter was trained with (its base model and CPU threads)", overrides=None)
    p.add_argument("--base", help="base model (default: the profile's)")
    p.add_argument("--adapter")
    p.add_argument("--rl", required=True, help="RL records whose steps are probed (held out from training)")
    p.add_argument("--limit", type=positive_int)
    p.add_argument("--max-new-tokens", type=positive_int, default=EVAL.max_new_tokens,
                   help=f"tokens decoded per step at most (default {EVAL.max_new_tokens}, the evaluation's)")
    p.add_argument("--threads", type=positive_int, help="torch CPU threads (default: the profile's)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    train = TrainSpec(profile=args.profile, base=args.base)
    spec = EVAL.model_copy(update={"max_new_tokens": args.max_new_tokens, "threads": args.threads or train.threads})
    result = probe(train.base_model, args.adapter, args.rl, limit=args.limit, spec=spec)
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())

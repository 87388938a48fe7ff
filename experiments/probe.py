"""A quick check of what training changed: greedy next turns on held-out RL steps.

`python -m trainer.probe --base smollm2-135m [--adapter OUT/adapter] --rl dev_rl.jsonl --limit 30`
renders each step's prefix with the chat format, decodes greedily (temperature 0, as evaluation
does), and reports how many turns hold a parseable tool call, how many call the reference's
functions, and the mean of each step's own reward. It is a smoke test of the recipe, not the dev
benchmark (environments/ owns that).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from formats import chat_format as cf


def probe(base: str, adapter: str | None, rl_path: str, *, limit: int | None = None, max_new_tokens: int = 128,
          max_prompt_length: int = 4096, threads: int | None = 2) -> dict:
    import torch

    from trainer import data, rewards
    from trainer.models import load_policy

    if threads:
        torch.set_num_threads(threads)
    model, tokenizer = load_policy(base, adapter)
    records = data.read_records(rl_path, "rl")[:limit]
    start = time.perf_counter()
    parseable = names = 0
    scores, samples = [], []
    for r in records:
        fitted = data.fit_prompt(r["messages"], r.get("tools") or [], tokenizer, max_prompt_length)
        if fitted is None:
            continue
        enc = tokenizer(fitted[0], return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainer.probe", description=__doc__.splitlines()[0])
    p.add_argument("--base", default="smollm2-135m")
    p.add_argument("--adapter")
    p.add_argument("--rl", required=True, help="RL records whose steps are probed (held out from training)")
    p.add_argument("--limit", type=int)
    p.add_argument("--max-new-tokens", type=int, default=128, help="BFCL calls with many arguments need ~100")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    result = probe(args.base, args.adapter, args.rl, limit=args.limit, max_new_tokens=args.max_new_tokens,
                   threads=args.threads)
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())

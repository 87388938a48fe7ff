"""GRPO rollout generation, TRL's `generate` against trainer.rollout's merged path, paired in one process.

    .venv/bin/python bench/grpo_generation.py --rl RL.jsonl [--profile cpu-small] [--pairs 2]
                                              [--set FIELD=VALUE ...] [--out result.json]

One GRPO trainer of the profile (its base with a fresh LoRA adapter, its threads, precision and
budget) and one generation batch as a step makes it: `grpo_prompts_per_step` prompts of the RL
records (the first ones, rendered and fitted as trainer.data does), each repeated G times. The
batch is generated A B A B … (`trl`, then `merged`; `--pairs` pairs, after one warm-up call of
each unless `--no-warmup`; `--modes` one of them alone, to pair whole processes instead), so a drift of the shared machine's load falls on both alike; each call's seconds, the
completion tokens it sampled (up to and including EOS) and their rate are printed and written, with
the ratio per pair. The update half of a step is unchanged by the generation path (time it with
bench/throughput.py --no-sft).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trainer.cli import parse_budget  # noqa: E402
from trainer.recipe import RECIPE, get_profile  # noqa: E402

MODES = ("trl", "merged")


def measure(rl_path: Path, profile_name: str, pairs: int, seed: int = 0, modes=MODES, warmup: bool = True,
            **budget) -> dict:
    import torch
    import transformers
    from datasets import Dataset

    from trainer import data, devices, models
    from trainer.grpo import RecipeGRPOTrainer, grpo_config
    from trainer.rewards import trl_reward_functions
    from trainer.sft import lora_config

    profile = get_profile(profile_name).replace(**budget)
    torch.set_num_threads(profile.threads or torch.get_num_threads())
    transformers.logging.set_verbosity_error()
    device, dtype, compute = devices.choose_compute(profile.device, profile.precision)
    profile = profile.replace(precision="bf16" if compute == "bfloat16" else "fp32")
    source = models.resolve(profile.base)
    tokenizer = models.load_tokenizer(source)
    rows, stats = data.rl_rows(data.read_records(rl_path, "rl"), tokenizer, profile.max_prompt_tokens)
    rows = rows[:profile.grpo_prompts_per_step]
    torch.manual_seed(seed)
    with tempfile.TemporaryDirectory(prefix="grpo-generation-") as tmp:
        trainer = RecipeGRPOTrainer(
            model=models.load_model(source, dtype=dtype), reward_funcs=trl_reward_functions(sorted(stats.rewards)),
            args=grpo_config(RECIPE, profile, 1, Path(tmp), seed, device == "cpu"), train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer, peft_config=lora_config(RECIPE), advantage_clip=RECIPE.advantage_clip,
            generation="merged")
        trainer.model.train()
        prompt_ids = [ids for ids in trainer._tokenize_prompts([r["prompt"] for r in rows])[0]
                      for _ in range(profile.num_generations)]

        def call(mode: str) -> dict:
            trainer.merged_generation = mode == "merged"
            start = time.perf_counter()
            completions, _ = trainer._generate_single_turn(prompt_ids, None, {}, profile.num_generations)
            seconds = time.perf_counter() - start
            tokens = sum(len(c) for c in completions)
            return {"mode": mode, "s": round(seconds, 3), "tokens": tokens, "tokens_per_s": round(tokens / seconds, 2)}

        warm = [call(m) for m in modes] if warmup else []
        calls = []
        for n in range(pairs):
            for mode in modes:
                calls.append({"pair": n, **call(mode)})
                print(f"grpo-generation: {json.dumps(calls[-1])}", file=sys.stderr, flush=True)
    per = {m: [c for c in calls if c["mode"] == m] for m in modes}
    ratios = [round(a["s"] / b["s"], 3) for a, b in zip(per.get("trl", []), per.get("merged", []))]
    return {"profile": profile.name, "base": profile.base, "device": device, "compute_dtype": compute,
            "threads": torch.get_num_threads(), "prompts": len(rows), "num_generations": profile.num_generations,
            "max_completion_length": profile.max_completion_length,
            "prompt_tokens": [len(ids) for ids in prompt_ids[::profile.num_generations]],
            "warmup": warm, "calls": calls, "trl_over_merged_seconds": ratios,
            "median": {m: sorted(c["s"] for c in per[m])[len(per[m]) // 2] for m in modes if per[m]},
            "tokens_per_s_median": {m: sorted(c["tokens_per_s"] for c in per[m])[len(per[m]) // 2] for m in modes if per[m]},
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/grpo_generation.py", description=__doc__.splitlines()[0])
    p.add_argument("--rl", type=Path, required=True, help="RL records (e.g. a curation's rl.jsonl)")
    p.add_argument("--profile", default="cpu-small")
    p.add_argument("--pairs", type=int, default=2)
    p.add_argument("--modes", default=",".join(MODES), help="trl, merged or both (in that order)")
    p.add_argument("--no-warmup", action="store_true", help="no untimed call first (the first merged call then "
                   "includes building the merged copy)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="override a profile budget")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    modes = tuple(m for m in MODES if m in args.modes.split(","))
    text = json.dumps(measure(args.rl, args.profile, args.pairs, args.seed, modes, not args.no_warmup,
                              **parse_budget(args.set)),
                      indent=2, sort_keys=True) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Training throughput of the recipe against a plain TRL `SFTTrainer`, and GRPO step time.

    .venv/bin/python bench/throughput.py [--profile test] [--base tiny-random] [--sft F --rl F]
                                         [--sft-steps N] [--grpo-steps N] [--out result.json]

In one process, on the device `trainer.devices` picks for the profile, three runs on the same data:

1. `baseline`: TRL's `SFTTrainer` with its defaults on the records rendered as text by the chat
   format (loss on every token, TRL's tokenization and padding, its default gradient
   checkpointing, no patch). Held equal to the recipe, because they define the workload: the
   steps, batch size, gradient accumulation, maximum length, the LoRA adapter, device and dtype.
2. `sft`: the recipe's SFT stage (trainer.sft: pre-tokenized examples with their loss mask).
3. `grpo`: the recipe's GRPO stage (trainer.grpo.RecipeGRPOTrainer) from a fresh adapter; each
   step is split into generation (`_generate_and_score_completions`: rollouts and their rewards)
   and update (the rest: log-probs of policy and reference, loss, backward, optimizer).

Tokens are the non-padding input tokens a step consumed; the first step of every run is warm-up
and left out of the rates. Model FLOPs utilisation (MFU) = achieved model FLOPs / the device's
peak. Model FLOPs per trained token with LoRA = 4·N + 6·L·d_attn·T (N: weights of the linear
layers incl. the LM head; forward 2·N, backward through frozen weights 2·N — no weight
gradients; causal attention 2·L·d_attn·T forward, twice that backward; T: the mean sequence
length). Recomputation by gradient checkpointing is not counted (MFU, not hardware utilisation).
Peaks: bf16 dense tensor-core figures from NVIDIA's datasheets (`PEAKS`); on a CPU the "peak"
is a measured fp32 matmul rate on the same threads (`cpu_matmul_rate`), so CPU MFU says how
close training comes to the best this CPU does on one big matmul.

`--base qwen3-4b-arch` is Qwen3-4B's architecture randomly initialised (trainer.models); the
default data is the bundled sample corpus: every trajectory as an SFT record, its first tool
call as an RL step.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from transformers import TrainerCallback  # noqa: E402

from base.errors import UserError  # noqa: E402
from bench.step_breakdown import breakdown  # noqa: E402
from chat_format import chat_format as cf  # noqa: E402
from trainer import data, devices, models  # noqa: E402
from trainer.cli import parse_budget  # noqa: E402
from trainer.recipe import RECIPE, get_profile  # noqa: E402

SAMPLE = ROOT / "environments" / "data" / "sample_corpus.jsonl"
# bf16 dense tensor-core peaks (FLOP/s), NVIDIA datasheets; matched against the device name.
PEAKS = [("H200", 989e12), ("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("H100", 989e12),
         ("A100", 312e12), ("L40S", 362e12), ("A10G", 70e12)]


def sample_records(corpus: Path = SAMPLE, short: bool = False) -> tuple[list[dict], list[dict]]:
    """Every trajectory as an SFT record; the step before its first tool call as an RL record.
    `short`: each trajectory cut after its first tool call and its tools cut to the ones called
    (~300 tokens instead of ~1,800: for a quick run on a CPU)."""
    raw = [json.loads(line) for line in corpus.read_text().splitlines() if line.strip()]
    sft, rl = [], []
    for r in raw:
        k = next((i for i, m in enumerate(r["messages"]) if m.get("tool_calls")), None)
        if k is None:
            continue
        tools, messages = r["tools"], r["messages"]
        if short:
            called = {c["function"]["name"] for c in messages[k]["tool_calls"]}
            tools, messages = [t for t in tools if t["function"]["name"] in called], messages[:k + 1]
        sft.append({"id": r["id"], "messages": messages, "tools": tools})
        rl.append({"id": f"{r['id']}#{k}", "messages": messages[:k], "tools": tools,
                   "reference": {"tool_calls": messages[k]["tool_calls"]}, "reward": "tool_call_match"})
    return sft, rl


def peak_flops(device: str, dtype: str, threads: int) -> tuple[float | None, str]:
    """(FLOP/s, where the figure comes from); `dtype` is the compute dtype."""
    if device == "cpu":
        kind = "bf16" if dtype == "bfloat16" else "fp32"
        rate, size = cpu_matmul_rate(threads, dtype=dtype)
        return rate, f"measured {kind} matmul ({size}², this CPU, these threads)"
    name = devices.device_name(device)
    if dtype != "bfloat16":
        return None, f"{name}: no peak listed for {dtype}"
    for key, flops in PEAKS:
        if key in name:
            return flops, f"{key} bf16 dense datasheet"
    return None, f"{name}: not in the peak table"


def cpu_matmul_rate(threads: int, size: int = 2048, seconds: float = 1.0, dtype: str = "float32") -> tuple[float, int]:
    """(FLOP/s, the matrix side used): square products repeated for `seconds`. The side halves from
    `size` (to 256 at least) until one product is expected to take at most half of `seconds`,
    judged by one 256² product: a CPU without bf16 units emulates a 2048² bf16 product in over a
    minute (AMD EPYC, AVX2 only: 74 s on one thread), which the probe would otherwise spend twice."""
    import torch

    torch.set_num_threads(threads)
    kind = getattr(torch, dtype)
    small = torch.randn(256, 256, dtype=kind)
    small @ small  # warm-up: the first product also starts the thread pool
    start = time.perf_counter()
    small @ small
    per_256 = time.perf_counter() - start
    while size > 256 and per_256 * (size / 256) ** 3 > seconds / 2:
        size //= 2
    a, b = torch.randn(size, size, dtype=kind), torch.randn(size, size, dtype=kind)
    a @ b  # warm-up
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        n += 1
    return 2 * size ** 3 * n / (time.perf_counter() - start), size


def linear_weights(model) -> int:
    import torch

    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


def flops_per_token(model, mean_length: float) -> float:
    cfg = model.config
    d_attn = cfg.num_attention_heads * (getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
    return 4 * linear_weights(model) + 6 * cfg.num_hidden_layers * d_attn * mean_length


def _quiet(trainer):
    """The trainer without its stdout printer (the bench prints its own table)."""
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    return trainer


class StepClock(TrainerCallback):
    """Wall time and input tokens of every optimizer step (the device synchronised at both ends)."""

    def __init__(self, device: str):
        self.device, self.steps, self._t0, self._tokens = device, [], 0.0, 0

    def _now(self) -> float:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()
        return time.perf_counter()

    def on_step_begin(self, args, state, control, **kwargs):
        self._t0, self._tokens = self._now(), state.num_input_tokens_seen

    def on_step_end(self, args, state, control, **kwargs):
        self.steps.append((self._now() - self._t0, state.num_input_tokens_seen - self._tokens))

    def measured(self) -> list[tuple[float, int]]:
        return self.steps[1:] or self.steps  # the first step is warm-up


def _memory_reset(device: str) -> None:
    gc.collect()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak_memory_mb(device: str) -> float:
    import torch

    if device == "cuda":
        return round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _sft_figures(clock: StepClock, flops_token: float, peak: float | None, device: str) -> dict:
    steps = clock.measured()
    seconds, tokens = sum(s for s, _ in steps), sum(t for _, t in steps)
    rate = tokens / seconds if seconds else None
    late = steps[len(steps) // 2:]   # past warm-up and, under torch.compile, most recompilations
    late_s = sum(s for s, _ in late)
    return {"steps": len(clock.steps), "measured_steps": len(steps), "tokens": tokens, "seconds": round(seconds, 3),
            "tokens_per_s": None if rate is None else round(rate, 1),
            "second_half_tokens_per_s": round(sum(t for _, t in late) / late_s, 1) if late_s else None,
            "step_s": round(seconds / len(steps), 4) if steps else None,
            "mfu": None if rate is None or not peak else round(rate * flops_token / peak, 4),
            "peak_memory_mb": _peak_memory_mb(device)}


def run_baseline(source, tokenizer, records, profile, steps, place, out, seed, flops_token, peak) -> dict:
    """TRL's SFTTrainer with its defaults on the chat-format text of the same records."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from trainer.sft import lora_config

    device, dtype = place
    _memory_reset(device)
    texts = Dataset.from_list([{"text": cf.render(r["messages"], r.get("tools") or [])} for r in records])
    args = SFTConfig(output_dir=str(out / "baseline"), max_steps=steps, per_device_train_batch_size=profile.sft_batch_size,
                     gradient_accumulation_steps=profile.sft_grad_accum, max_length=profile.max_length,
                     use_cpu=device == "cpu", bf16=dtype == "bfloat16", seed=seed, report_to="none",
                     save_strategy="no", disable_tqdm=True, include_num_input_tokens_seen="non_padding")
    clock = StepClock(device)
    trainer = SFTTrainer(model=models.load_model(source, dtype=dtype), args=args, train_dataset=texts,
                         processing_class=tokenizer, peft_config=lora_config(RECIPE), callbacks=[clock])
    _quiet(trainer).train()
    result = _sft_figures(clock, flops_token, peak, device)
    del trainer
    return result


TORCH_COMPILE = ("static", "dynamic")
"""`--torch-compile`: the model under torch.compile (inductor), shapes specialised per batch
length (recompiling up to dynamo's limit) or symbolic from the first batch. Not the recipe's:
on the 2-core Xeon both were slower than eager (trainer/README.md)."""


def _compiled(args, mode: str | None):
    if mode:
        import torch._dynamo

        args.torch_compile, args.torch_compile_backend = True, "inductor"
        if mode == "dynamic":
            torch._dynamo.config.assume_static_by_default = False
            torch._dynamo.config.recompile_limit = 64
    return args


def run_recipe_sft(source, tokenizer, examples, profile, steps, place, out, seed, flops_token, peak,
                   torch_compile: str | None = None) -> dict:
    from trainer.sft import build_trainer, sft_config

    device, dtype = place
    _memory_reset(device)
    clock = StepClock(device)
    args = _compiled(sft_config(RECIPE, profile, steps, out / "sft", seed, device == "cpu"), torch_compile)
    trainer, padding = build_trainer(models.load_model(source, dtype=dtype), tokenizer, examples, RECIPE, profile,
                                     args, [clock])
    _quiet(trainer).train()
    result = {**_sft_figures(clock, flops_token, peak, device), "padding_share": padding.share(),
              "length_grouped": profile.sft_length_grouped, "uniform_dropout": profile.uniform_dropout,
              "torch_compile": torch_compile}
    del trainer
    return result


def run_grpo(source, tokenizer, rows, reward_names, profile, steps, place, out, seed) -> dict:
    from datasets import Dataset

    from trainer.grpo import RecipeGRPOTrainer, grpo_config
    from trainer.rewards import trl_reward_functions
    from trainer.sft import lora_config

    device, dtype = place
    _memory_reset(device)
    generation: list[tuple[int, float]] = []
    tokens: list[tuple[int, int]] = []   # completion tokens sampled, per step

    class TimedGRPO(RecipeGRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            start = clock._now()
            result = super()._generate_and_score_completions(inputs)
            generation.append((len(clock.steps), clock._now() - start))
            tokens.append((len(clock.steps), int(result["completion_mask"].sum())))
            return result

    clock = StepClock(device)
    trainer = TimedGRPO(model=models.load_model(source, dtype=dtype), reward_funcs=trl_reward_functions(reward_names),
                        args=grpo_config(RECIPE, profile, steps, out / "grpo", seed, device == "cpu"),
                        train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                        peft_config=lora_config(RECIPE), advantage_clip=RECIPE.advantage_clip, callbacks=[clock],
                        generation=profile.grpo_generation)
    _quiet(trainer).train()
    per_step = [sum(s for k, s in generation if k == i) for i in range(len(clock.steps))]
    first = 1 if len(clock.steps) > 1 else 0
    step_s = [s for s, _ in clock.steps[first:]]
    gen_s = per_step[first:]
    n = len(step_s)
    per = profile.grpo_prompts_per_step * profile.num_generations
    generated = sum(t for k, t in tokens if k >= first)   # completion tokens sampled in the measured steps
    result = {"steps": len(clock.steps), "measured_steps": n, "generation": profile.grpo_generation,
              "completions_per_step": per, "prompts_per_step": profile.grpo_prompts_per_step,
              "generated_tokens_per_step": round(generated / n, 1),
              "generated_tokens_per_s": round(generated / sum(gen_s), 2) if sum(gen_s) else None,
              "max_completion_length": profile.max_completion_length,
              "step_s": round(sum(step_s) / n, 4), "generation_s": round(sum(gen_s) / n, 4),
              "update_s": round((sum(step_s) - sum(gen_s)) / n, 4), "peak_memory_mb": _peak_memory_mb(device)}
    del trainer
    return result


def measure(profile_name: str = "test", base: str | None = None, sft_records=None, rl_records=None, *,
            sft_steps: int | None = None, grpo_steps: int | None = None, seed: int = 0, baseline: bool = True,
            grpo: bool = True, torch_compile: str | None = None, sft: bool = True, **budget) -> dict:
    """Run the three measurements; `budget` overrides fields of the profile (as `train --set`);
    `torch_compile` (one of TORCH_COMPILE) compiles the recipe's SFT model."""
    if torch_compile not in (None, *TORCH_COMPILE):
        raise UserError(f"--torch-compile {torch_compile!r}: one of {', '.join(TORCH_COMPILE)}")
    import torch
    import transformers

    profile = get_profile(profile_name).replace(**budget)
    base = base or profile.base
    if sft_records is None or rl_records is None:
        default_sft, default_rl = sample_records()
        sft_records = default_sft if sft_records is None else sft_records
        rl_records = default_rl if rl_records is None else rl_records
    threads = profile.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    transformers.logging.set_verbosity_error()
    device, dtype, compute = devices.choose_compute(profile.device, profile.precision)
    place = (device, dtype)
    profile = profile.replace(precision="bf16" if compute == "bfloat16" else "fp32")
    sft_steps = sft_steps or profile.sft_max_steps
    grpo_steps = grpo_steps or profile.grpo_max_steps
    source = models.resolve(base)
    tokenizer = models.load_tokenizer(source)
    examples, _ = data.sft_examples(sft_records, tokenizer, profile.max_length)
    rows, rl_stats = data.rl_rows(rl_records, tokenizer, profile.max_prompt_tokens)
    if not examples:
        raise UserError(f"no SFT example keeps a trained token within max_length {profile.max_length}; raise it")
    mean_length = sum(len(e["input_ids"]) for e in examples) / len(examples)
    meta_model = _meta_model(source)
    flops_token = flops_per_token(meta_model, mean_length)
    peak, peak_source = peak_flops(device, compute, threads) if sft else (None, "not probed (no SFT run)")
    other = {}
    if device == "cpu" and sft:   # both CPU peaks, so a figure can be read against either
        for name in ("float32", "bfloat16"):
            other[name] = peak if name == compute else cpu_matmul_rate(threads, dtype=name)[0]
    result = {"profile": profile.name, "base": base, "device": device, "device_name": devices.device_name(device),
              "dtype": dtype, "compute_dtype": compute, "cpu_peaks": other, "threads": threads, "gradient_checkpointing": profile.gradient_checkpointing,
              "batch": f"{profile.sft_batch_size} × {profile.sft_grad_accum} accumulation, ≤ {profile.max_length} tokens",
              "examples": len(examples), "mean_length": round(mean_length, 1),
              "linear_weights": linear_weights(meta_model), "model_flops_per_token": flops_token,
              "peak_flops": peak, "peak_source": peak_source,
              "versions": {"torch": torch.__version__, "transformers": transformers.__version__}}
    with tempfile.TemporaryDirectory(prefix="throughput-") as tmp:
        out = Path(tmp)
        if baseline:
            result["baseline"] = run_baseline(source, tokenizer, sft_records, profile, sft_steps, place, out, seed,
                                              flops_token, peak)
            _say("baseline", result["baseline"])
        if sft:
            result["sft"] = run_recipe_sft(source, tokenizer, examples, profile, sft_steps, place, out, seed,
                                           flops_token, peak, torch_compile)
            _say("sft", result["sft"])
        if baseline and sft and result["baseline"]["tokens_per_s"] and result["sft"]["tokens_per_s"]:
            result["sft_vs_baseline"] = round(result["sft"]["tokens_per_s"] / result["baseline"]["tokens_per_s"], 3)
        if grpo and rows:
            result["grpo"] = run_grpo(source, tokenizer, rows, sorted(rl_stats.rewards), profile, grpo_steps, place,
                                      out, seed)
            _say("grpo", result["grpo"])
    return result


def _say(run: str, figures: dict) -> None:
    print(f"throughput: {run} {json.dumps(figures, sort_keys=True)}", file=sys.stderr, flush=True)


def torch_threads(profile) -> None:
    import torch

    torch.set_num_threads(profile.threads or torch.get_num_threads())


def _meta_model(source: str):
    """The base model's module tree without weights (for counting), any architecture."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(source))


def format_result(r: dict) -> str:
    peak = "n/a" if r["peak_flops"] is None else f"{r['peak_flops'] / 1e12:.3g} TFLOP/s"
    lines = [f"{r['base']} on {r['device_name']} ({r['device']}, {r['dtype']} weights, {r.get('compute_dtype', r['dtype'])} "
             f"compute, {r['threads']} threads), profile "
             f"{r['profile']}: {r['batch']}, mean example {r['mean_length']} tokens",
             f"peak {peak} ({r['peak_source']}); {r['model_flops_per_token'] / 1e6:.4g} MFLOP per trained token"]
    if r.get("cpu_peaks"):
        lines.append("CPU matmul peaks: " + ", ".join(f"{k} {v / 1e9:.0f} GFLOP/s" for k, v in r["cpu_peaks"].items()))
    for key, label in (("baseline", "TRL SFTTrainer, defaults"), ("sft", "recipe SFT")):
        if key in r:
            s = r[key]
            mfu = "n/a" if s["mfu"] is None else f"{s['mfu']:.1%}"
            compiled = f" (torch.compile {s['torch_compile']})" if s.get("torch_compile") else ""
            lines.append(f"{label + compiled:<26} {s['tokens_per_s']} tokens/s ({s['second_half_tokens_per_s']} over "
                         f"the second half), {s['step_s']} s/step, MFU {mfu}, "
                         f"peak memory {s['peak_memory_mb']:.0f} MB ({s['measured_steps']} of {s['steps']} steps)")
    if "sft_vs_baseline" in r:
        lines.append(f"{'recipe / baseline':<26} {r['sft_vs_baseline']}× tokens/s")
    if "grpo" in r:
        g = r["grpo"]
        lines.append(f"{'recipe GRPO':<26} {g['step_s']} s/step = generation {g['generation_s']} s + update "
                     f"{g['update_s']} s ({g['completions_per_step']} completions of ≤ {g['max_completion_length']} "
                     f"tokens, generation {g.get('generation')}: {g.get('generated_tokens_per_s')} generated tokens/s; "
                     f"peak memory {g['peak_memory_mb']:.0f} MB)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/throughput.py", description=__doc__.splitlines()[0])
    p.add_argument("--profile", default="test")
    p.add_argument("--base", help=f"default: the profile's; e.g. {', '.join(models.NAMES)}")
    p.add_argument("--sft", type=Path, help="SFT records (default: the bundled sample corpus)")
    p.add_argument("--rl", type=Path, help="RL records (default: first tool call of each sample trajectory)")
    p.add_argument("--short", action="store_true", help="default data cut after the first call, with the tools called")
    p.add_argument("--sft-steps", type=int, help="default: the profile's sft_max_steps")
    p.add_argument("--grpo-steps", type=int, help="default: the profile's grpo_max_steps")
    p.add_argument("--no-baseline", action="store_true")
    p.add_argument("--no-grpo", action="store_true")
    p.add_argument("--no-sft", action="store_true", help="skip the recipe's SFT run (e.g. to time GRPO alone)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="override a profile budget")
    p.add_argument("--out", type=Path, help="write the result as JSON here")
    p.add_argument("--torch-compile", choices=TORCH_COMPILE, help="the recipe's SFT model under torch.compile "
                   "(inductor): static shapes or dynamic ones (not the recipe's; for measuring it)")
    p.add_argument("--breakdown", action="store_true", help="only where an SFT step's time goes (phases, operator "
                   "kinds, padding), for the profile's precision")
    args = p.parse_args(argv)
    default_sft, default_rl = sample_records(short=args.short)
    if args.breakdown:
        profile = get_profile(args.profile).replace(**parse_budget(args.set))
        torch_threads(profile)
        source = models.resolve(args.base or profile.base)
        records = data.read_records(args.sft, "sft") if args.sft else default_sft
        examples, _ = data.sft_examples(records, models.load_tokenizer(source), profile.max_length)
        result = breakdown(source, examples, profile, seed=args.seed)
        print(json.dumps(result, indent=2))
        if args.out:
            args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        return 0
    result = measure(args.profile, args.base, data.read_records(args.sft, "sft") if args.sft else default_sft,
                     data.read_records(args.rl, "rl") if args.rl else default_rl, sft_steps=args.sft_steps,
                     grpo_steps=args.grpo_steps, seed=args.seed, baseline=not args.no_baseline, grpo=not args.no_grpo,
                     torch_compile=args.torch_compile, sft=not args.no_sft, **parse_budget(args.set))
    print(format_result(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())

"""The training process: `python -m trainer.worker OUT/request.json` (or under a launcher such as
`accelerate launch -m trainer.worker …`). It runs SFT then GRPO and writes, in OUT:

    adapter/          the final PEFT adapter (+ tokenizer with the chat template): what evaluation loads
    sft_adapter/      the adapter after SFT alone (a copy of a finished training's when the request
                      names one to reuse: trainer.sft_reuse)
    metrics.jsonl     every logged step of both stages ({"stage", "step", ...})
    tensorboard/      TensorBoard event files per stage (TRL's report_to; `--report-to`, default tensorboard)
    summary.json      data used and dropped, steps, tokens, wall time, peak memory, losses, rewards, warnings

trainer.train starts it as a child so that a crash or an out-of-memory kill never takes the
caller down and GPU memory is returned when it exits.
"""
from __future__ import annotations

import gc
import json
import multiprocessing
import os
import platform
import resource
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path

from base.errors import UserError
from base.files import atomic_write
from sandbox import package_lock
from trainer.recipe import RECIPE, Profile, as_dict, profile_fields
from trainer.sft_reuse import take_over


USER_ERROR_PREFIX = "curateevo-train: error: "
"""How the child reports a user error (bad records found after the parent's checks): trainer.train reads it."""


def _peak_memory_mb(device: str) -> float:
    if device == "cuda":
        import torch

        return round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # Linux: KiB


def _is_main() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def _barrier() -> None:
    """Under a multi-process launcher, wait until rank 0 has written the SFT adapter."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def run(request: dict) -> dict:
    """Train per `request` (written by trainer.train) and return the summary."""
    start = time.perf_counter()
    out = Path(request["out"])
    profile = Profile(**profile_fields(request["profile"]))   # request.json: profile_data
    seed = int(request["seed"])
    progress = bool(request.get("progress"))
    report_to = list(request.get("report_to") or [])
    if profile.threads:
        os.environ.setdefault("OMP_NUM_THREADS", str(profile.threads))

    import torch
    import transformers
    from transformers import set_seed

    from trainer import data, devices, models

    if profile.threads:
        torch.set_num_threads(profile.threads)
    transformers.logging.set_verbosity_error()
    device, dtype, compute = devices.choose_compute(profile.device, profile.precision)
    use_cpu = device == "cpu"
    profile = profile.replace(precision="bf16" if compute == "bfloat16" else "fp32")  # as resolved
    source = models.resolve(request["base"])
    tokenizer = models.load_tokenizer(source)

    read = {kind: data.training_sample(request.get(kind), kind) for kind in ("sft", "rl")}   # a sample above TRAIN_SAMPLE
    hints = memory_hints(request.get("memory"))
    examples, sft_stats = data.sft_examples(read["sft"].records, tokenizer, profile.max_length,
                                            memory=hints[0] if hints else None, places=read["sft"].places)
    # the RL prompts GRPO draws are fitted as it draws them: a sample of thousands, a few steps
    rows, rl_stats = data.rl_rows(read["rl"].records, tokenizer, profile.max_prompt_tokens, on_demand=True)
    prompts = data.PromptsOnDemand(read["rl"].records, tokenizer, profile.max_prompt_tokens, rl_stats)
    sampled = {kind: {"records": len(r.records), "of": r.of} for kind, r in read.items() if r.sampled}
    summary: dict = {"base": request["base"], "base_source": source, "seed": seed,
                     "device": device, "device_name": devices.device_name(device), "dtype": dtype, "compute_dtype": compute,
                     "threads": torch.get_num_threads(), "warnings": [],
                     "data": {"sft": asdict(sft_stats), "rl": asdict(rl_stats), **({"sampled": sampled} if sampled else {})},
                     **as_dict(RECIPE, profile), "memory_hints": hints and hints[1]}
    if not examples and not rows:
        raise UserError("nothing to train: no SFT example and no RL prompt survived the length limits")

    from trainer.grpo import ZERO_VARIANCE_WARNING, continue_from, run_grpo  # TRL: imported once there is work
    from trainer.sft import run_sft

    set_seed(seed)
    reused = request.get("reuse_sft") if examples else None
    model = None if reused else models.load_model(source, dtype=dtype)
    if reused:   # the same SFT stage, finished elsewhere (trainer.sft_reuse): its adapter, not a new one
        print(f"SFT: reused from {reused}", flush=True)
        if _is_main():
            summary["sft"] = take_over(Path(reused), out)
        _barrier()
    elif examples:
        model, summary["sft"] = run_sft(model, tokenizer, examples, RECIPE, profile, out, seed, use_cpu, progress,
                                        report_to)
        summary["sft"]["peak_memory_mb"] = _peak_memory_mb(device)  # so far: the GRPO stage may raise it
        if _is_main():
            models.name_base(model, models.base_model_id(request["base"], source))
            models.save_adapter(model, out / "sft_adapter")
        _barrier()
    if rows:
        if examples:  # a fresh copy with the saved adapter: one model in memory, not two
            del model
            gc.collect()
            if device == "cuda":
                torch.cuda.empty_cache()
            model = continue_from(out / "sft_adapter", source, dtype)
        reward_names = sorted(rl_stats.rewards)
        model, summary["grpo"] = run_grpo(model, tokenizer, rows, reward_names, RECIPE, profile, out, seed,
                                          use_cpu, progress, report_to, prompts)
        summary["data"]["rl"] = asdict(rl_stats)   # with the prompts GRPO fitted
        share = summary["grpo"]["zero_variance_share"]
        if share is not None and share > ZERO_VARIANCE_WARNING:
            summary["warnings"].append(
                f"{share:.0%} of GRPO groups had zero reward variance (every completion scored the same), so "
                "GRPO had almost nothing to learn from: the RL data is too easy or too hard for this model")
    if _is_main():
        if model is None:   # the SFT stage reused and no GRPO: the SFT adapter is the final one
            shutil.copytree(out / "sft_adapter", out / "adapter")
        else:
            models.name_base(model, models.base_model_id(request["base"], source))
            models.save_adapter(model, out / "adapter", selected_adapters=["default"])
        tokenizer.save_pretrained(out / "adapter")
    if not rows:
        summary["warnings"].append("no RL data: the adapter is the SFT adapter")
    if not examples:
        summary["warnings"].append("no SFT data: GRPO started from a fresh adapter")
    for stage, stats in (("sft", sft_stats), ("rl", rl_stats)):
        dropped = getattr(stats, "dropped_untrained", 0) + getattr(stats, "dropped_too_long", 0)
        if dropped:
            summary["warnings"].append(f"{dropped} {stage.upper()} record(s) dropped (see data.{stage})")
    summary["peak_memory_mb"] = _peak_memory_mb(device)
    # "warm": forked from trainer.warm's forkserver (libraries imported once); "fresh": its own interpreter
    summary["started"] = "warm" if multiprocessing.parent_process() is not None else "fresh"
    summary["wall_s"] = round(time.perf_counter() - start, 2)
    summary["sft_key"] = request.get("sft_key")
    summary["versions"] = {"python": platform.python_version(), "torch": torch.__version__,
                           "transformers": transformers.__version__, **_versions("trl", "peft"),
                           "lock_sha256": package_lock.lock_sha256()}
    return summary


def memory_hints(path: str | None):
    """(index, its record in the summary) of the memory bank whose hints go into the SFT prompts, or
    None: the retrieval rule, the bank's path, hash and size, and k (as evaluation's metrics.json)."""
    if not path:
        return None
    from base.files import sha256_file
    from trainer.memory import RETRIEVAL, MemoryIndex

    index = MemoryIndex.from_file(path)
    return index, {"retrieval": RETRIEVAL, "path": path, "sha256": sha256_file(Path(path)), "records": len(index),
                   "k": index.k}


def _versions(*names: str) -> dict:
    from importlib.metadata import version

    return {n: version(n) for n in names}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    request = json.loads(Path(argv[0]).read_text())
    try:
        summary = run(request)
    except UserError as exc:  # reported by the parent as one line
        print(USER_ERROR_PREFIX + str(exc), file=sys.stderr, flush=True)
        return UserError.exit_code
    if _is_main():
        out = Path(request["out"])
        shutil.rmtree(out / "sft", ignore_errors=True)  # trainer scratch dirs (no checkpoints are saved)
        shutil.rmtree(out / "grpo", ignore_errors=True)
        atomic_write(out / "summary.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

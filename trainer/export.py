"""`curateevo export verl ARTIFACTS --out D`: curated SFT/RL data and the rewards in verl's input format.

For a user who outgrows one machine, the same recipe on verl (volcengine's distributed RL engine;
formats checked against verl 0.9.1's `RLHFDataset`, `MultiTurnSFTDataset` and reward loader):

- `D/rl.parquet`: one row per RL record: `data_source` ("curateevo/<reward name>"), `prompt`
  (the prefix as chat messages), `ability` ("tool_use"), `reward_model` {"style": "rule",
  "ground_truth": the reference as JSON}, `extra_info` {"index", "id", "reward", "record": the whole
  record as canonical JSON, which the reward needs (tools, environment)}.
- `D/sft.parquet`: one row per SFT record: `messages` (chat messages), `data_source`, `extra_info`
  {"index", "id", "weights"}; read by verl's multi-turn SFT trainer (`data.messages_key=messages`).
- `D/reward.py`: `compute_score(data_source, solution_str, ground_truth, extra_info)`, verl's
  custom reward signature, wrapping trainer.rewards (trainer.verl_reward); curateevo must be
  importable on the verl workers (`pip install` this repository there).
- `D/launch.sh`: the verl commands with the recipe's hyperparameters (trainer/README.md explains
  each mapping and what verl cannot express).

Messages carry the chat format's texts: the system message holds the tools block
(`chat_format.render_tools`), an assistant message its text with `<tool_call>` blocks
(`render_assistant`), tool results stay `tool` messages; the model's own chat template wraps
them (ChatML for Qwen, as here). verl's multi-turn SFT trains every assistant message: a record's
weight-0 turns (AgentRefine's corrected errors) would be trained there, so they are counted in
`D/export.json` and named in a warning.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

from base.errors import UserError
from chat_format import chat_format as cf
from trainer import data
from trainer.recipe import RECIPE, get_profile

ABILITY = "tool_use"
ENGINES = ("verl",)


def verl_messages(messages: Sequence[Mapping], tools: Sequence[Mapping]) -> list[dict]:
    """Chat messages whose texts are the chat format's: tools in the system message, calls as text."""
    rest = cf.normalize_messages(messages)
    system = cf.DEFAULT_SYSTEM
    if rest and rest[0].get("role") == "system":
        system, rest = rest[0].get("content") or "", rest[1:]
    block = cf.render_tools(tools or [])
    out = [{"role": "system", "content": system + ("\n\n" + block if block else "")}]
    for m in rest:
        body = cf.render_assistant(m) if m["role"] == "assistant" else m.get("content") or ""
        out.append({"role": m["role"], "content": body})
    return out


def rl_rows(records: Sequence[Mapping]) -> list[dict]:
    from base.schemas import canonical_json

    return [{"data_source": f"curateevo/{r['reward']}", "prompt": verl_messages(r["messages"], r["tools"]),
             "ability": ABILITY,
             "reward_model": {"style": "rule", "ground_truth": canonical_json(r["reference"])},
             "extra_info": {"index": i, "id": r["id"], "reward": r["reward"], "record": canonical_json(r)}}
            for i, r in enumerate(records)]


def sft_rows(records: Sequence[Mapping]) -> tuple[list[dict], int, int]:
    """(rows, records with weight-0 turns, weight-0 turns)."""
    rows, masked_records, masked_turns = [], 0, 0
    for i, r in enumerate(records):
        n = sum(m["role"] == "assistant" for m in r["messages"])
        weights = list(r.get("weights") or [1] * n)
        zeros = weights.count(0)
        masked_records += bool(zeros)
        masked_turns += zeros
        rows.append({"messages": verl_messages(r["messages"], r["tools"]), "data_source": "curateevo/sft",
                     "extra_info": {"index": i, "id": r["id"], "weights": weights}})
    return rows, masked_records, masked_turns


REWARD_SHIM = '''"""verl custom reward for data exported by `curateevo export verl` (needs curateevo importable)."""
from trainer.verl_reward import compute_score  # noqa: F401
'''


def launch_script(out: Path, profile_name: str = "paper", gpus: int = 8) -> str:
    """verl 0.9.1 commands running the recipe on the exported files (paths made absolute)."""
    p, r = get_profile(profile_name), RECIPE
    d = out.resolve()
    return f"""#!/usr/bin/env bash
# The curateevo recipe on verl (written by `curateevo export verl`; profile {p.name}, {gpus} GPUs per node).
# MODEL: the base (Hugging Face id or directory); SFT_MODEL: the SFT stage's output merged into a
# Hugging Face directory (python -m verl.model_merger merge ...), which GRPO starts from and keeps
# as its KL reference, as the recipe does.
set -euo pipefail
MODEL=${{MODEL:-{p.base}}}
SFT_MODEL=${{SFT_MODEL:-checkpoints/curateevo/sft-merged}}
GPUS=${{GPUS:-{gpus}}}

# Stage 1: LoRA SFT on every assistant turn of sft.parquet
torchrun --standalone --nnodes=1 --nproc_per_node="$GPUS" -m verl.trainer.sft_trainer \\
  data.train_files={d}/sft.parquet data.messages_key=messages \\
  data.train_batch_size={p.sft_batch_size * p.sft_grad_accum} data.max_length={p.max_length} data.truncation=right \\
  model.path="$MODEL" model.lora_rank={r.lora_r} model.lora_alpha={r.lora_alpha} model.target_modules={r.lora_target_modules} \\
  optim.lr={p.sft_lr(r)} optim.lr_warmup_steps_ratio={r.sft_warmup_ratio} optim.lr_scheduler_type={r.sft_lr_scheduler} \\
  optim.clip_grad={r.sft_max_grad_norm} optim.weight_decay={r.weight_decay} \\
  trainer.total_training_steps={p.sft_max_steps} trainer.project_name=curateevo trainer.experiment_name=sft \\
  trainer.logger='[console]'

# Stage 2: GRPO on rl.parquet, rewards from reward.py (trainer.rewards)
python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo algorithm.norm_adv_by_std_in_grpo=True \\
  algorithm.use_kl_in_reward=False \\
  data.train_files={d}/rl.parquet data.val_files={d}/rl.parquet data.prompt_key=prompt \\
  data.train_batch_size={p.grpo_prompts_per_step} data.max_prompt_length={p.max_prompt_tokens} \\
  data.max_response_length={p.max_completion_length} data.filter_overlong_prompts=True data.truncation=error \\
  actor_rollout_ref.model.path="$SFT_MODEL" actor_rollout_ref.model.lora_rank={r.lora_r} \\
  actor_rollout_ref.model.lora_alpha={r.lora_alpha} actor_rollout_ref.model.target_modules={r.lora_target_modules} \\
  actor_rollout_ref.actor.optim.lr={p.grpo_lr(r)} actor_rollout_ref.actor.optim.lr_warmup_steps_ratio={r.grpo_warmup_ratio} \\
  actor_rollout_ref.actor.optim.lr_scheduler_type={r.grpo_lr_scheduler} actor_rollout_ref.actor.optim.clip_grad={r.max_grad_norm} \\
  actor_rollout_ref.actor.ppo_mini_batch_size={p.grpo_prompts_per_step} actor_rollout_ref.actor.ppo_epochs={r.num_iterations} \\
  actor_rollout_ref.actor.clip_ratio={r.ratio_clip} actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean \\
  actor_rollout_ref.actor.use_kl_loss=True actor_rollout_ref.actor.kl_loss_coef={r.kl_beta} actor_rollout_ref.actor.kl_loss_type=low_var_kl \\
  actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n={p.num_generations} \\
  actor_rollout_ref.rollout.temperature={r.temperature} \\
  reward.custom_reward_function.path={d}/reward.py reward.custom_reward_function.name=compute_score \\
  trainer.total_training_steps={p.grpo_max_steps} trainer.n_gpus_per_node="$GPUS" trainer.nnodes=1 \\
  trainer.project_name=curateevo trainer.experiment_name=grpo trainer.logger='[console]'
"""


def _write_parquet(rows: list[dict], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)


def export_verl(artifacts: str | Path, out: str | Path, *, profile: str = "paper", gpus: int = 8) -> dict:
    """Write rl.parquet, sft.parquet, reward.py, launch.sh and export.json into `out` (new or
    empty; written in a temporary sibling and renamed, so nothing is half-written)."""
    artifacts, out = Path(artifacts), Path(out)
    get_profile(profile)
    if not artifacts.is_dir():
        raise UserError(f"{artifacts} is not a directory (give a curation output with sft.jsonl / rl.jsonl)")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} exists and is not an empty directory")
    files = {kind: artifacts / f"{kind}.jsonl" for kind in ("sft", "rl")}
    records = {kind: data.read_records(path, kind) if path.is_file() else [] for kind, path in files.items()}
    if not records["sft"] and not records["rl"]:
        raise UserError(f"{artifacts} has no SFT or RL records (sft.jsonl, rl.jsonl)")
    sft, masked_records, masked_turns = sft_rows(records["sft"])
    rl = rl_rows(records["rl"])
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    os.chmod(tmp, 0o755)
    try:
        if sft:
            _write_parquet(sft, tmp / "sft.parquet")
        if rl:
            _write_parquet(rl, tmp / "rl.parquet")
        (tmp / "reward.py").write_text(REWARD_SHIM)
        script = tmp / "launch.sh"
        script.write_text(launch_script(out, profile, gpus))
        script.chmod(0o755)
        summary = {"engine": "verl", "artifacts": str(artifacts.resolve()), "sft_rows": len(sft), "rl_rows": len(rl),
                   "rewards": sorted({r["reward"] for r in records["rl"]}), "profile": profile,
                   "weight0_records": masked_records, "weight0_turns": masked_turns, "warnings": []}
        if masked_turns:
            summary["warnings"].append(
                f"{masked_turns} weight-0 assistant turn(s) in {masked_records} SFT record(s): verl's multi-turn SFT "
                "trains every assistant turn, so these corrected errors would be trained there")
        (tmp / "export.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary


def cmd_export(args) -> int:
    summary = export_verl(args.artifacts, args.out, profile=args.profile, gpus=args.gpus)
    print(f"verl data in {args.out}: {summary['sft_rows']} SFT rows (sft.parquet), {summary['rl_rows']} RL rows "
          f"(rl.parquet; rewards {', '.join(summary['rewards']) or 'none'}), reward.py, launch.sh")
    for warning in summary["warnings"]:
        print(f"warning: {warning}")
    return 0


def add_cli(subparsers) -> None:
    """Register `export` on the `curateevo` parser."""
    p = subparsers.add_parser("export", help="curated SFT/RL data + rewards in a distributed RL engine's format (verl)")
    p.add_argument("engine", choices=ENGINES, help="the training framework the export is for")
    p.add_argument("artifacts", type=Path, help="a curation output (`curateevo curate` or RUN/epochs/N/artifacts)")
    p.add_argument("--out", type=Path, required=True, help="output directory, new or empty")
    from trainer.recipe import PROFILE_HELP, PROFILES

    p.add_argument("--profile", default="paper", choices=list(PROFILES),
                   help=f"budgets written into launch.sh: {PROFILE_HELP} (default: paper)")
    p.add_argument("--gpus", type=int, default=8, help="GPUs per node in launch.sh (default 8)")
    p.set_defaults(func=cmd_export)

"""`curateevo train`: the fixed recipe on SFT/RL records (DESIGN: CLI)."""
from __future__ import annotations

import dataclasses
import datetime
import json
import sys
from pathlib import Path

from base.errors import UserError, positive_seconds
from trainer.options import add_profile
from trainer.recipe import READ_AS, Profile
from trainer.tracking import DEFAULT_REPORT_TO, REPORT_TO

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def parse_budget(pairs: list[str]) -> dict:
    """`--set sft_max_steps=10` → {"sft_max_steps": 10}, typed like the profile field; a field by
    its old name (trainer.recipe.READ_AS: max_prompt_length) is read as its new one, said on stderr."""
    fields = {f.name: f for f in dataclasses.fields(Profile)}
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if sep and key in READ_AS:
            print(f"note: --set {key} is the old spelling of --set {READ_AS[key]}", file=sys.stderr)
            key = READ_AS[key]
        if not sep or key not in fields or key == "name":
            raise UserError(f"--set {pair}: expected FIELD=VALUE with FIELD one of "
                            + ", ".join(k for k in fields if k != "name"))
        try:
            out[key] = json.loads(value) if value not in ("", "None") else None
        except ValueError:
            out[key] = value
    return out


def format_summary(summary: dict, out: Path) -> str:
    sft, grpo, data = summary.get("sft"), summary.get("grpo"), summary["data"]
    where = f"{summary['device']} {summary.get('dtype', '')}".strip()
    rows = [("base", f"{summary['base']} ({where}, {summary['threads']} threads, profile {summary['profile']['name']})")]
    def of(kind: str) -> str:   # "5000 of 79997 records, a sample: 4900 …" where training read a sample
        s = data.get("sampled", {}).get(kind)
        return f" (a sample of the file's {s['of']})" if s else ""

    d = data["sft"]
    rows.append(("SFT data", f"{d['examples']} of {d['records']} records{of('sft')}, {d['trained_tokens']} trained of "
                             f"{d['tokens']} tokens, {d['truncated']} truncated, {d['dropped_untrained']} dropped"))
    if sft:
        rows.append(("SFT", f"{sft['steps']} steps, {sft['epochs_seen']} epochs, loss {_f(sft['loss_first'])} → "
                            f"{_f(sft['loss_last'])}" + (f" (mean of the last 10 steps {_f(sft['loss_last_10'])})"
                                                     if sft.get("loss_last_10") is not None else "")
                            + f", {sft['tokens_per_s']} tokens/s"
                            + (f" ({sft['padding_share']:.0%} of batch slots padding)"
                               if sft.get("padding_share") is not None else "") + f", {sft['wall_s']} s"))
    d = data["rl"]
    fitted = d.get("fitted", d["prompts"])   # older summaries fitted every prompt
    rows.append(("RL data", f"{d['prompts']} of {d['records']} prompts{of('rl')} ({d['dropped_too_long']} dropped; "
                            f"{d['shortened']} of the {fitted} GRPO drew shortened)"))
    if grpo:
        rows.append(("GRPO", f"{grpo['steps']} steps, reward {_f(grpo['reward_first'])} → {_f(grpo['reward_last'])}, "
                             f"zero-variance groups {grpo['zero_variance_groups']}/{grpo['groups']}, {grpo['wall_s']} s"))
    rows.append(("total", f"{summary['wall_s']} s, peak memory {summary['peak_memory_mb']:.0f} MB"))
    width = max(len(k) for k, _ in rows)
    text = "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
    for warning in summary.get("warnings", []):
        text += f"\nwarning: {warning}"
    return text + f"\n\nadapter in {out / 'adapter'}, metrics in {out / 'metrics.jsonl'}"


def _f(x) -> str:
    return "-" if x is None else f"{x:.4g}"


def cmd_train(args) -> int:
    """The recipe as a `TrainSpec` says, after the length check, as every training of a run is made."""
    from trainer.length import check_lengths
    from trainer.models import check_name
    from trainer.train import TrainSpec, check_out, train_as

    out = args.out or PROJECT_ROOT / "runs" / datetime.datetime.now().strftime("train-%Y%m%d-%H%M%S")
    if args.sft is None and args.rl is None:
        raise UserError("give --sft and/or --rl records")
    echo = None if args.quiet else sys.stderr
    budget = parse_budget(args.set)
    budget.update({k: v for k, v in (("vllm_mode", args.vllm), ("vllm_server_url", args.vllm_server_url)) if v})
    spec = TrainSpec(base=args.base, profile=args.profile, budget=budget, report_to=args.report_to,
                     launcher=args.launcher or "", accelerate_config=str(args.accelerate_config or ""))
    check_name(spec.base_model)
    check_out(out)   # what a user gets wrong is said before the records are tokenized
    check_lengths(spec, args.sft, args.rl, echo)
    summary = train_as(spec, args.sft, args.rl, out, seed=args.seed, progress=not args.quiet, echo=echo,
                       timeout=args.timeout)
    print(json.dumps(summary, indent=2, sort_keys=True) if args.json else format_summary(summary, Path(out)))
    return 0


def add_cli(subparsers) -> None:
    """Register `train` on the `curateevo` parser."""
    p = subparsers.add_parser("train", help="train a LoRA adapter with the fixed SFT+GRPO recipe")
    p.add_argument("--sft", type=Path, help="SFT records (JSONL)")
    p.add_argument("--rl", type=Path, help="RL records (JSONL)")
    p.add_argument("--base", help="smollm2-135m, tiny-random, a local model directory or a Hugging Face id "
                                   "(default: the profile's)")
    add_profile(p, "budgets", overrides="the profile (the recipe stays fixed)")
    p.add_argument("--out", type=Path, help="output directory, new or empty (default: runs/train-<time>)")
    p.add_argument("--seed", type=int, default=0, help="training seed (data order, LoRA init, GRPO sampling)")
    p.add_argument("--launcher", help="how the training process starts: 'accelerate' (with --accelerate-config, "
                                      "multi-GPU) or a literal command prefix such as 'torchrun --nproc_per_node 4'")
    p.add_argument("--accelerate-config", type=Path, metavar="F", help="an `accelerate config` YAML for --launcher accelerate")
    p.add_argument("--vllm", choices=["colocate", "server"],
                   help="generate GRPO rollouts with vLLM (installed on the GPU machine): in-process or a `trl vllm-serve`")
    p.add_argument("--vllm-server-url", metavar="URL", help="with --vllm server: the trl vllm-serve address (default :8000 here)")
    p.add_argument("--timeout", type=positive_seconds, help="stop training after this many seconds")
    p.add_argument("--report-to", default=DEFAULT_REPORT_TO, metavar="TRACKERS",
                   help=f"experiment trackers TRL logs to, comma-separated: {', '.join(REPORT_TO)} "
                        f"(default: {DEFAULT_REPORT_TO})")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=cmd_train)

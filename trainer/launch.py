"""How the training process is started and how GRPO generates: the engines a GPU user adds.

- `launcher_prefix(launcher, accelerate_config)`: the command prefix of the training child.
  None runs `python -m trainer.worker …`; "accelerate" runs it under
  `python -m accelerate.commands.launch --config_file F -m trainer.worker …` (the same as
  `accelerate launch`, from this interpreter), one process per GPU as the config says; any other
  string is a literal prefix (`torchrun --nproc_per_node 4`). The recipe is the same: each
  process takes its share of every step's batch (trainer.sft, trainer.grpo), rank 0 writes.
- `vllm_args(profile)`: the TRL GRPOConfig options for generating the GRPO rollouts with vLLM
  (`use_vllm`, `vllm_mode` colocate|server, the server's URL), empty when the profile has none;
  `check_vllm(profile)` refuses, in one sentence and before any training, a vLLM profile where
  vllm is not installed.
"""
from __future__ import annotations

import importlib.util
import re
import shlex
import sys
from pathlib import Path

from base.errors import UserError

ACCELERATE = "accelerate"


def launcher_processes(launcher: str | None) -> int:
    """The processes (GPUs) one training takes under a launcher prefix: `torchrun --nproc_per_node N`
    or `accelerate launch --num_processes N` give N; a plain child process, or a count only its
    config file knows, gives 1."""
    match = re.search(r"--(?:nproc[_-]per[_-]node|num[_-]processes)[= ](\d+)", launcher or "")
    return int(match[1]) if match else 1


def launcher_prefix(launcher: str | None = None, accelerate_config: str | Path | None = None) -> list[str]:
    """The argv prefix that `-m trainer.worker REQUEST` is appended to."""
    if accelerate_config is not None and launcher != ACCELERATE:
        raise UserError("--accelerate-config goes with --launcher accelerate")
    if not launcher:
        return [sys.executable]
    if launcher != ACCELERATE:
        return shlex.split(launcher)
    if importlib.util.find_spec("accelerate") is None:
        raise UserError("--launcher accelerate needs the accelerate package (pip install accelerate)")
    prefix = [sys.executable, "-m", "accelerate.commands.launch"]
    if accelerate_config is not None:
        config = Path(accelerate_config)
        if not config.is_file():
            raise UserError(f"accelerate config {config} does not exist (write one with `accelerate config`)")
        prefix += ["--config_file", str(config.resolve())]
    return prefix


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def check_vllm(profile) -> None:
    if profile.vllm_mode and not vllm_available():
        raise UserError(f"vllm_mode {profile.vllm_mode} needs vLLM, which is not installed here "
                        "(pip install vllm on the GPU machine, or drop --vllm)")


def vllm_args(profile) -> dict:
    """GRPOConfig keywords for vLLM generation (none when the profile generates with transformers)."""
    if not profile.vllm_mode:
        return {}
    args = {"use_vllm": True, "vllm_mode": profile.vllm_mode}
    if profile.vllm_mode == "server" and profile.vllm_server_url:
        args["vllm_server_base_url"] = profile.vllm_server_url
    return args

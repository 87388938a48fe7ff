"""π_e = Train_SFT+GRPO(π_base, D_sft, D_rl): the recipe run in a child process.

`train()` checks the inputs, writes `OUT/request.json`, runs `trainer.worker` as a child (forked
from a process that has the training libraries imported, trainer.warm; or under a launcher:
`accelerate launch --config_file F`, see trainer.launch), streams its output to `OUT/train.log`
and returns the summary it wrote. A crash or an out-of-memory kill of
the child becomes a `RunFailed` naming the log; the caller's process and memory are untouched.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import IO, Sequence

from pydantic import BaseModel, ConfigDict, Field

from base.errors import RunFailed, UserError
from base.files import is_empty_or_missing
from base.lifetime import die_with_parent
from sandbox.leftovers import OWNER_ENV, owner_id
from trainer.progress import RELAYED_TO_TERMINAL
from trainer import data
from trainer.launch import check_vllm, launcher_prefix
from trainer.models import check_name
from trainer.recipe import DEFAULT_PROFILE, get_profile, profile_data
from trainer.sft_reuse import reusable, sft_key
from trainer import warm
from trainer.worker import USER_ERROR_PREFIX
from trainer.tracking import DEFAULT_REPORT_TO, check_report_to

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class TrainSpec(BaseModel):
    """How the fixed recipe trains a curation, besides its data and seed: what every training of
    the project (the loop's seeds, `bench quality`'s cells, the proxy of k candidates) is given, so
    they train alike (experiments.train_eval.train_on). `evolver.config.RunConfig.train` and the quality
    bench's `Setting.train` nest one; each field is declared here once."""
    model_config = ConfigDict(frozen=True, extra="forbid")

    base: str | None = None
    """The base model π_base: a registry name, a local model directory or a hub id (None: the profile's)."""
    profile: str = DEFAULT_PROFILE
    """The recipe's budgets (trainer.recipe.PROFILES); the method never changes."""
    budget: dict = Field(default_factory=dict)
    """Overrides of single budgets of the profile (sft_max_steps, max_length, max_prompt_tokens, …)."""
    report_to: str = DEFAULT_REPORT_TO
    """Trackers for TRL (trainer.tracking.REPORT_TO, comma-separated, or "none")."""
    launcher: str = ""
    """How the training child starts: "" (a plain child process), "accelerate" or a command prefix."""
    accelerate_config: str = ""
    """The accelerate config file for launcher "accelerate"."""

    @property
    def resolved(self):
        """The profile with this spec's budget overrides (UserError on an unknown budget)."""
        try:
            return get_profile(self.profile).replace(**self.budget)
        except (TypeError, ValueError) as exc:
            raise UserError(f"bad budget override: {exc}") from None

    @property
    def base_model(self) -> str:
        """The base model trained: `base`, else the profile's."""
        return self.base or self.resolved.base

    @property
    def threads(self) -> int | None:
        """The CPU threads the profile pins: training's, and the evaluation's of what it trains."""
        return self.resolved.threads

    def with_budget(self, **changes) -> "TrainSpec":
        """A copy whose budget overrides also hold `changes` (the proxy's short SFT)."""
        return self.model_copy(update={"budget": {**self.budget, **changes}})


def check_out(out: str | Path) -> Path:
    """The output folder of a training: new or empty (UserError otherwise)."""
    out = Path(out)
    if not is_empty_or_missing(out):
        raise UserError(f"{out} exists and is not an empty directory")
    return out


def train_as(spec: TrainSpec, sft: str | Path | None, rl: str | Path | None, out: str | Path, *, seed: int = 0,
             **options) -> dict:
    """`train` as `spec` says (its base, profile, budget overrides, trackers and launcher): how every
    training of the project is started (`curateevo train`, experiments.train_eval.train_on);
    `options` are train's other keywords (echo, progress, timeout, memory, reuse_sft)."""
    return train(sft, rl, out, base=spec.base, profile=spec.profile, seed=seed, report_to=spec.report_to,
                 launcher=spec.launcher or None, accelerate_config=spec.accelerate_config or None,
                 **options, **spec.budget)


def train(sft: str | Path | None, rl: str | Path | None, out: str | Path, *, base: str | None = None,
          profile: str = DEFAULT_PROFILE, seed: int = 0, launcher: str | None = None,
          accelerate_config: str | Path | None = None, progress: bool = False,
          report_to: str | list[str] | None = DEFAULT_REPORT_TO,
          echo: IO[str] | None = None, timeout: float | None = None, memory: str | Path | None = None,
          reuse_sft: Sequence[str | Path] = (), **budget) -> dict:
    """Train a LoRA adapter on the SFT then RL records; returns the summary (also OUT/summary.json).

    `profile` names the budgets (trainer.recipe.PROFILES); `budget` overrides single fields of it
    (e.g. `sft_max_steps=2`), never the recipe. `base` defaults to the profile's model. `echo`
    receives the child's output as it comes (progress bars with `progress=True`). `launcher`
    ("accelerate" with `accelerate_config`, or a literal command prefix) starts the child
    (trainer.launch.launcher_prefix). `report_to`: trackers for TRL (trainer.tracking.REPORT_TO,
    comma-separated or a list; "none"). `memory`: the curated memory bank, read only when the
    profile's `sft_memory_hints` puts hints into the SFT prompts. `reuse_sft`: finished training
    directories; the first whose SFT stage this training's would repeat (the same `sft_key`,
    trainer.sft_reuse) gives its SFT adapter instead of a new SFT stage."""
    prof = TrainSpec(profile=profile, budget=budget).resolved
    check_name(base or prof.base)
    trackers = check_report_to(report_to)
    prefix = launcher_prefix(launcher, accelerate_config)
    check_vllm(prof)
    out = check_out(out)
    # the records the worker will read (all, or its sample of a large file): a bad one fails here, as one
    # sentence, before a child starts
    n_sft, n_rl = (len(data.training_sample(path, kind).records) for path, kind in ((sft, "sft"), (rl, "rl")))
    if not n_sft and not n_rl:
        raise UserError("nothing to train: give SFT and/or RL records")
    out.mkdir(parents=True, exist_ok=True)
    memory = _abs(memory) if prof.sft_memory_hints and memory else None
    key = sft_key(sft, base=base or prof.base, seed=seed, profile=prof, memory=memory, launcher=launcher,
                  accelerate_config=accelerate_config) if n_sft else None
    reuse = reusable(key, reuse_sft)
    request = {"sft": _abs(sft), "rl": _abs(rl), "base": base or prof.base, "profile": profile_data(prof),
               "seed": seed, "out": str(out.resolve()), "progress": progress, "report_to": trackers,
               "memory": memory, "sft_key": key, "reuse_sft": reuse and str(reuse)}
    (out / "request.json").write_text(json.dumps(request, indent=2, sort_keys=True) + "\n")
    command = prefix + ["-m", "trainer.worker", str(out.resolve() / "request.json")]
    rc = _run_child(command, out / "train.log", echo, timeout, warm_start=not launcher)
    if rc != 0:
        tail = _tail(out / "train.log")
        user = [line for line in tail if line.startswith(USER_ERROR_PREFIX)]
        if user:
            raise UserError(user[-1][len(USER_ERROR_PREFIX):])
        if rc == -signal.SIGKILL:
            why = "was killed (SIGKILL: out of memory?)"
        elif rc < 0:
            why = f"died of signal {-rc}"
        else:
            why = f"exited with status {rc}"
        raise RunFailed(f"training {why}; see {out / 'train.log'}: {tail[-1] if tail else 'no output'}")
    return json.loads((out / "summary.json").read_text())


def _abs(path) -> str | None:
    return None if path is None else str(Path(path).resolve())


def child_env() -> dict:
    """The training child's environment: this process's, with the project importable and the hash seed fixed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    # idle OpenMP threads sleep instead of spinning: on shared cores spinning costs several times the
    # time (environments/policies/local.py, which sets it for evaluation); read once, when torch loads
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # str hashes fixed: PEFT writes "all-linear"'s target modules from a set, so their order in
    # adapter_config.json (and the adapter's hash) would otherwise change from process to process
    env["PYTHONHASHSEED"] = "0"
    env[OWNER_ENV] = owner_id() or ""   # whose it is: the next command reaps it if this process is killed
    return env


def prestart_training() -> None:
    """The warm trainings' forkserver started now, its imports beside the caller's work (trainer.warm.prestart):
    for a command that will train here soon, called once its cheap checks have passed."""
    warm.prestart(child_env())


def _run_child(command: list[str], log_path: Path, echo: IO[str] | None, timeout: float | None,
               warm_start: bool = False) -> int:
    """The child's exit status; `warm_start`: forked from trainer.warm's forkserver where it can be."""
    env = child_env()
    if echo is not None and getattr(echo, "isatty", lambda: False)():   # live bars for a person watching (trainer.progress)
        env[RELAYED_TO_TERMINAL] = "1"
    with log_path.open("wb") as log:
        child = warm.start(command[-1], env, str(PROJECT_ROOT)) if warm_start else None
        if child is None:
            child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                     cwd=str(PROJECT_ROOT), start_new_session=True, preexec_fn=die_with_parent)
            child.stdout_fd = child.stdout.fileno()
        try:
            _pump(child, log, echo, timeout)
        except BaseException:
            _kill(child)
            raise
    return child.returncode


def _pump(child, log, echo, timeout: float | None) -> None:
    """Copy the child's output (`child.stdout_fd`: a Popen's pipe or a warm.Child's) to the log and `echo` until it ends."""
    import codecs
    import selectors
    import time

    deadline = None if timeout is None else time.monotonic() + timeout
    fd = child.stdout_fd
    decode = codecs.getincrementaldecoder("utf-8")("replace").decode  # a character may span two reads

    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            if deadline is not None and time.monotonic() > deadline:
                _kill(child)
                raise RunFailed(f"training ran past its {timeout:g} s limit and was stopped")
            if not sel.select(timeout=1.0):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            log.write(chunk)
            log.flush()
            if echo is not None:
                echo.write(decode(chunk))
                echo.flush()
    child.wait()


def _kill(child) -> None:
    """Stop the child and whatever it started (its own session)."""
    if child.poll() is None:
        if isinstance(child, subprocess.Popen):
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        else:
            child.kill_group()
        child.wait()


def _tail(path: Path, lines: int = 20) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [line.strip() for line in text.replace("\r", "\n").splitlines() if line.strip()][-lines:]

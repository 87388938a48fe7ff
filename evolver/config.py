"""The run's configuration as data: `RunConfig` is what `run.json` holds, `RUN_OPTIONS` the
options of `curateevo run` (flags and `--config` file keys alike) that resolve into it.

Defaults are written once, here: a field's default in `RunConfig`, or an option's own default
when it has no field of the same meaning. A value of the wrong type, out of range, or a key
nobody knows is one sentence naming the key (UserError), both from a config file and from a
`run.json` read back by `resume`.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping

from base.errors import UserError

BENCHMARKS = ("bfcl-single", "bfcl", "replay")
METRICS = ("task_success", "turn_pass", "step_accuracy", "call_f1")
ABLATIONS = ("no-effectiveness", "no-efficiency", "no-sft", "no-rl", "no-memory")
DIAGNOSES = ("rules", "rules+llm")
# json key ≠ field name (`lambda` is a Python keyword)
_JSON_KEYS = {"lam": "lambda"}


@dataclass(frozen=True)
class RunConfig:
    """One evolution run, resolved: every value the loop reads, nothing it has to default."""

    corpus: tuple[str, ...] = ()
    """Raw corpus files, absolute paths (the default: the wild corpus of `benchmark`, train split)."""
    corpus_sha256: str = ""
    """sha256 of the corpus bytes at launch; `resume` refuses a corpus that changed."""
    benchmark: str = "bfcl-single"
    """Dev benchmark: bfcl-single (the CPU default), bfcl (multi-turn) or replay (a held-out tenth of the corpus)."""
    split: str = "dev"
    """The split the loop evaluates on; the test split is read only by `curateevo test`."""
    metric: str = "task_success"
    """P: task_success (official checker), turn_pass or step_accuracy; call_f1 on replay (call-level F1 over
    the held-out steps, benchmarks/replay_scoring.py)."""
    tasks: int = 60
    """Dev tasks evaluated per epoch, balanced over the benchmark's categories."""
    base: str = "smollm2-135m"
    """Base model π_base: a registry name, a local model directory or a hub id."""
    profile: str = "cpu-small"
    """Recipe budgets (trainer/recipe.py): cpu-small, paper or test; the method never changes."""
    epochs: int = 3
    """Epochs, ρ0's included."""
    lam: float = 0.3
    """λ in J = P − λ·C (paper §4.2)."""
    n_ref: float = 1e5
    """N_ref in C = tanh(log(1 + Cost_train) / log(1 + N_ref))."""
    margin: float = 0.0
    """A candidate is accepted when its J beats the best J by more than this (`run` derives the
    default from the measured run-to-run spread: evolver.acceptance.default_margin)."""
    seeds: tuple[int, ...] = (0,)
    """Training + evaluation seeds per candidate; more than one enables the paired acceptance."""
    seed: int = 0
    """The run's seed: curation (ctx.rng), the proposer and the acceptance resampling."""
    acceptance: str = "auto"
    """Acceptance rule (evolver/acceptance.py): margin, paired, or auto (paired with several seeds)."""
    proposer: str = "offline"
    """Who rewrites the strategy (evolver/proposers/): offline, or agent (needs `llm`)."""
    sandbox: str = "auto"
    """Executor of candidate code (sandbox/executor.py registry); auto: Docker, else the process fallback."""
    curation_timeout_s: float = 900.0
    """Wall-clock limit of one curation in the sandbox, seconds."""
    batch_size: int = 8
    """Evaluation batch size (fixed batches by task id keep evaluation deterministic)."""
    eval_steps: bool = False
    """Also score the step-level items (needed by step_accuracy; redundant on single-turn tasks)."""
    ablations: tuple[str, ...] = ()
    """Paper §5.3 switches: no-effectiveness, no-efficiency, no-sft, no-rl, no-memory."""
    on_error: str = "abort"
    """An invalid corpus line: abort (file:line, exit 2) or skip (counted). Every stage that reads the
    corpus (curation, the replay benchmark's hold-out, resume, replay) loads it this way."""
    tools: str = ""
    """A JSON file of the real tool schemas for records whose files carry none (absolute path; "": each
    source's catalogue of the calls it makes, sandbox.corpus.catalogue)."""
    tools_sha256: str = ""
    """sha256 of that file at launch; `resume` refuses a file that changed."""
    llm: Mapping | None = None
    """The LLM (evolver/llm.py LLMConfig as a mapping: names of key variables, never keys); None: none."""
    diagnosis: str = "rules"
    """rules, or rules+llm (an LLM's failed points beside the rule families)."""
    agent: Mapping = field(default_factory=dict)
    """The code agent's limits (evolver/proposers/agent.py AgentLimits as a mapping)."""
    train_budget: Mapping = field(default_factory=dict)
    """Overrides of the profile's budgets passed to the trainer (empty: the profile's)."""
    max_length: int = 0
    """SFT max_length in tokens (0: the profile's); records beyond it are cut or dropped, and a run
    where nothing would survive fails before training."""
    max_prompt_length: int = 0
    """GRPO max_prompt_length in tokens (0: the profile's); longer prompts lose old messages or are dropped."""
    report_to: str = "tensorboard"
    """Trackers for training (TRL's report_to) and per-epoch P, C, J, decision, per-category P and scale:
    tensorboard, wandb, trackio, mlflow (comma-separated) or none."""
    launcher: str = ""
    """How the trainer starts: "" (a plain child process), "accelerate" (with accelerate_config), or a
    command prefix such as "torchrun --nproc_per_node 4" (multi-GPU)."""
    accelerate_config: str = ""
    """`accelerate launch --config_file` for launcher "accelerate"."""
    signal_window: int = 3
    """W: the earlier evaluated epochs a task's forgetting window holds (CoEvolve §3.1)."""
    boundary_samples: int = 0
    """K: sampled rollouts per dev task for the boundary signal (0 or 1: off; costs K× the episodes)."""
    boundary_temperature: float = 0.9
    """Temperature of the boundary rollouts (greedy P stays the metric)."""
    rare_theta: float = 5.0
    """θ: an action pattern is rare below θ % of all patterns observed across epochs."""
    rare_n_min: int = 20
    """N_min: no rare signal before this many patterns were observed."""
    candidates: int = 1
    """k: candidates per epoch (offline proposer: its k best edits; code agent: k runs sampled apart); more than
    one are ranked by the proxy, the best goes on."""
    proxy_budget: int = 0
    """Proxy units for successive halving over k candidates (0: k·⌈log2 k⌉, one unit per candidate and rung)."""
    proxy_sft_steps: int = 10
    """SFT steps of the proxy per unit (a short SFT on the candidate's dry-run artifacts, no RL)."""
    proxy_tasks: int = 10
    """Dev tasks of the proxy per unit (a balanced subset of the run's dev tasks)."""
    backend: str = "local"
    """Where trainings and evaluations run (evolver/backends/): local (one after another on this
    machine) or ray (a Ray cluster: every (candidate, seed) of an epoch at once). Results are the same."""
    ray_address: str = ""
    """The Ray cluster of backend ray (`HOST:PORT` of its head); "": RAY_ADDRESS, or the cluster started here."""
    storage: str = ""
    """Where backend ray's stages' inputs and outputs travel (evolver/backends/storage.py): a URI
    fsspec opens (s3://, gs://, a path every node shares); "": Ray's object store."""

    def __post_init__(self):
        for f in fields(self):
            _check_type(f, getattr(self, f.name))
        checks = [
            (self.benchmark in BENCHMARKS, "benchmark", f"one of {', '.join(BENCHMARKS)}"),
            (self.split == "dev", "split", "dev (the loop never reads the test split)"),
            (self.metric in METRICS, "metric", f"one of {', '.join(METRICS)}"),
            (self.tasks >= 1, "tasks", "at least 1"),
            (self.epochs >= 1, "epochs", "at least 1"),
            (math.isfinite(self.lam) and self.lam >= 0, "lambda", "a finite number >= 0"),
            (math.isfinite(self.n_ref) and self.n_ref > 0, "n_ref", "a finite number > 0"),
            (math.isfinite(self.margin), "margin", "a finite number"),
            (len(self.seeds) >= 1 and len(set(self.seeds)) == len(self.seeds), "seeds", "at least one, no repeats"),
            (self.acceptance in ("auto", *_acceptance_names()), "acceptance", f"auto or one of {', '.join(_acceptance_names())}"),
            (self.proposer in _proposer_names(), "proposer", f"one of {', '.join(_proposer_names())}"),
            (self.sandbox in ("auto", *_executor_names()), "sandbox", f"auto or one of {', '.join(_executor_names())}"),
            (math.isfinite(self.curation_timeout_s) and self.curation_timeout_s > 0, "curation_timeout_s", "a finite number > 0"),
            (self.batch_size >= 1, "batch_size", "at least 1"),
            (all(a in ABLATIONS for a in self.ablations), "ablations", f"from {', '.join(ABLATIONS)}"),
            (self.on_error in ("abort", "skip"), "on_error", "abort or skip"),
            (self.diagnosis in DIAGNOSES, "diagnosis", f"one of {', '.join(DIAGNOSES)}"),
            (self.diagnosis == "rules" or self.llm is not None, "diagnosis", "rules when no LLM is configured"),
            (all(t in _trackers() for t in self.report_to.split(",")), "report_to",
             f"comma-separated from {', '.join(_trackers())}"),
            (self.launcher != "accelerate" or bool(self.accelerate_config), "accelerate_config",
             "a config file when launcher is accelerate"),
            (self.max_length >= 0, "max_length", "0 (the profile's) or a positive number of tokens"),
            (self.max_prompt_length >= 0, "max_prompt_length", "0 (the profile's) or a positive number of tokens"),
            (self.signal_window >= 1, "signal_window", "at least 1"),
            (self.boundary_samples >= 0, "boundary_samples", "0 (off) or more"),
            (math.isfinite(self.boundary_temperature) and self.boundary_temperature > 0, "boundary_temperature",
             "a finite number > 0"),
            (math.isfinite(self.rare_theta) and 0 < self.rare_theta < 100, "rare_theta", "a percentage in (0, 100)"),
            (self.rare_n_min >= 0, "rare_n_min", "0 or more"),
            (self.candidates >= 1, "candidates", "at least 1"),
            (self.proxy_budget >= 0 and self.proxy_sft_steps >= 1 and self.proxy_tasks >= 1, "proxy_budget",
             "0 or more (with proxy_sft_steps and proxy_tasks at least 1)"),
            (self.backend in _backend_names(), "backend", f"one of {', '.join(_backend_names())}"),
            (not self.ray_address or self.backend == "ray", "ray_address", "empty unless backend is ray"),
            (not self.storage or self.backend == "ray", "storage", "empty unless backend is ray"),
            (self.proposer != "agent" or self.llm is not None, "proposer",
             "offline unless an LLM is configured (the code agent needs --model)"),
            (_temperature(self.agent.get("candidate_temperature", 0.0)), "agent",
             "the agent's limits, candidate_temperature a number in [0, 2]"),
        ]
        for ok, key, expected in checks:
            if not ok:
                shown = repr(getattr(self, key if key != "lambda" else "lam"))
                raise UserError(f"run config: {key} must be {expected}, not {shown[:80]}")

    @property
    def curation_budget(self) -> dict:
        """ctx.budget of the run's candidates: what the full recipe trains on (the profile with the
        run's budget overrides and --max-length; trainer.recipe.curation_budget)."""
        from trainer.recipe import curation_budget, get_profile

        return curation_budget(get_profile(self.profile).replace(**self.budget_overrides))

    @property
    def budget_overrides(self) -> dict:
        """The profile's budgets this run changes: train_budget, --max-length, --max-prompt-length."""
        return {**self.train_budget, **({"max_length": self.max_length} if self.max_length else {}),
                **({"max_prompt_length": self.max_prompt_length} if self.max_prompt_length else {})}

    @property
    def acceptance_rule(self) -> str:
        """The acceptance rule in force: `auto` is paired with several seeds, else margin."""
        if self.acceptance != "auto":
            return self.acceptance
        return "paired" if len(self.seeds) > 1 else "margin"

    def signal_params(self):
        """CoEvolve's signal parameters (evolver/signals.py)."""
        from evolver.signals import SignalParams

        return SignalParams(window=self.signal_window, samples=self.boundary_samples,
                            temperature=self.boundary_temperature, theta=self.rare_theta, n_min=self.rare_n_min)

    def params(self) -> dict:
        """`inputs/params.json` of every candidate: what a strategy may know of the run."""
        return {"lambda": self.lam, "n_ref": self.n_ref, "seed": self.seed}

    def to_json(self) -> dict:
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[_JSON_KEYS.get(f.name, f.name)] = list(value) if isinstance(value, tuple) else \
                (dict(value) if isinstance(value, Mapping) else value)
        return out

    @classmethod
    def from_json(cls, doc: Any, where: str = "run.json") -> "RunConfig":
        """The config from a parsed run.json; one sentence naming `where` and the key otherwise."""
        if not isinstance(doc, Mapping):
            raise UserError(f"{where}: a run config is a JSON object of settings")
        names = {_JSON_KEYS.get(f.name, f.name): f.name for f in fields(cls)}
        unknown = sorted(str(k) for k in doc if k not in names)
        if unknown:
            raise UserError(f"{where}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(names)}")
        values = {names[k]: tuple(v) if isinstance(v, list) else v for k, v in doc.items()}
        try:
            return cls(**values)
        except UserError as exc:
            raise UserError(f"{where}: {exc}") from None

    def replace(self, **changes) -> "RunConfig":
        return dataclasses.replace(self, **changes)


def _check_type(f: dataclasses.Field, value: Any) -> None:
    want = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    key = _JSON_KEYS.get(f.name, f.name)
    ok = {
        "str": isinstance(value, str),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, (int, float)) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "tuple[str, ...]": isinstance(value, tuple) and all(isinstance(v, str) for v in value),
        "tuple[int, ...]": isinstance(value, tuple) and all(isinstance(v, int) and not isinstance(v, bool) for v in value),
        "Mapping": isinstance(value, Mapping),
        "Mapping | None": value is None or isinstance(value, Mapping),
    }.get(want)
    if ok is None:
        raise TypeError(f"RunConfig.{f.name}: no type check for {want}")
    if not ok:
        kind = {"tuple[str, ...]": "a list of strings", "tuple[int, ...]": "a list of integers", "Mapping": "a mapping",
                "Mapping | None": "a mapping or null", "float": "a number", "int": "an integer", "str": "a string",
                "bool": "true or false"}[want]
        raise UserError(f"run config: {key} must be {kind}, not {type(value).__name__} {repr(value)[:60]}")


def _trackers() -> tuple[str, ...]:
    from trainer.tracking import REPORT_TO

    return REPORT_TO


def _acceptance_names() -> tuple[str, ...]:
    from evolver.acceptance import ACCEPTANCE

    return tuple(ACCEPTANCE)


def _proposer_names() -> tuple[str, ...]:
    from evolver.proposers import PROPOSERS

    return tuple(PROPOSERS)


def _backend_names() -> tuple[str, ...]:
    from evolver.backends import BACKENDS

    return tuple(BACKENDS)


def _executor_names() -> tuple[str, ...]:
    from sandbox.executor import EXECUTORS

    return tuple(EXECUTORS)


# ------------------------------------------------------------------------------ run options


@dataclass(frozen=True)
class Option:
    """One option of `curateevo run`: a flag `--name` and a config-file key `name` (or `name_`)."""
    name: str
    type: Callable | None = None      # int, float, str; None: a switch-less string list (nargs)
    default: Any = None               # None: not given (RunConfig's default, or derived)
    help: str = ""
    choices: Callable[[], tuple] | tuple | None = None
    nargs: str | None = None
    group: str = "run"

    @property
    def dest(self) -> str:
        return {"lambda": "lam"}.get(self.name, self.name.replace("-", "_"))

    def allowed(self) -> tuple | None:
        return self.choices() if callable(self.choices) else self.choices


def _temperature(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and 0 <= x <= 2


def _field_default(name: str) -> Any:
    f = {f.name: f for f in fields(RunConfig)}[name]
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def _profiles() -> tuple[str, ...]:
    from trainer.recipe import PROFILES

    return tuple(PROFILES)


RUN_OPTIONS: tuple[Option, ...] = (
    Option("corpus", str, None, "raw corpus file(s) (default: the wild corpus of --benchmark, train split)", nargs="+"),
    Option("benchmark", str, None, "dev benchmark (default: bfcl-single, or replay for a corpus without an environment)",
           BENCHMARKS),
    Option("metric", str, None, "P, the dev metric (default: task_success; call_f1 on replay)", METRICS),
    Option("tasks", int, _field_default("tasks"), "dev tasks evaluated per epoch, balanced over the categories"),
    Option("base", str, None, "base model (default: the profile's base model)"),
    Option("profile", str, _field_default("profile"), "recipe budgets", _profiles),
    Option("epochs", int, _field_default("epochs"), "epochs, ρ0's included"),
    Option("lambda", float, _field_default("lam"), "λ in J = P − λ·C"),
    Option("n-ref", float, _field_default("n_ref"), "N_ref of the cost C"),
    Option("margin", float, None, "J must beat the best J by more than this (default: from the measured "
                                  "run-to-run spread of P with one seed, 0 with several; see trainer/README.md)"),
    Option("seeds", int, len(_field_default("seeds")), "train+eval seeds per candidate (>1: paired noise-aware acceptance)"),
    Option("seed", int, _field_default("seed"), "the run's seed"),
    Option("acceptance", str, _field_default("acceptance"), "acceptance rule (auto: paired with several seeds, else margin)",
           lambda: ("auto", *_acceptance_names())),
    Option("ablate", str, [], "paper §5.3 ablations", ABLATIONS, nargs="*"),
    Option("sandbox", str, _field_default("sandbox"), "executor of candidate code", lambda: ("auto", *_executor_names())),
    Option("timeout", float, _field_default("curation_timeout_s"), "curation wall-clock limit (s)"),
    Option("batch-size", int, _field_default("batch_size"), "evaluation batch size"),
    Option("on-bad-line", str, "abort", "an invalid corpus line: abort with file:line, or skip and count it",
           ("abort", "skip")),
    Option("tools", str, None, "JSON file of the real tool schemas, for corpus records whose files carry none "
           "(default: one catalogue per source, built from the calls the corpus makes)"),
    Option("name", str, None, "run directory name (default: run-<time>)"),
    Option("runs-dir", str, None, "where run directories go (default: runs/ of the project)"),
    Option("max-length", int, _field_default("max_length"), "SFT max_length in tokens (0: the profile's)"),
    Option("max-prompt-length", int, _field_default("max_prompt_length"),
           "GRPO max_prompt_length in tokens (0: the profile's)"),
    Option("report-to", str, _field_default("report_to"), "trackers for training curves and per-epoch P, C, J "
           "(tensorboard, wandb, trackio, mlflow, comma-separated, or none)"),
    Option("launcher", str, None, "trainer launcher: accelerate (with --accelerate-config) or a command prefix "
           "such as 'torchrun --nproc_per_node 4' (default: a plain child process)"),
    Option("accelerate-config", str, None, "accelerate config file for --launcher accelerate"),
    Option("boundary-samples", int, _field_default("boundary_samples"),
           "K sampled rollouts per dev task for CoEvolve's boundary signal (0: off; costs K× the episodes)"),
    Option("boundary-temperature", float, _field_default("boundary_temperature"), "temperature of those rollouts"),
    Option("signal-window", int, _field_default("signal_window"), "W, epochs in the forgetting window"),
    Option("rare-theta", float, _field_default("rare_theta"), "θ: a pattern below θ %% of all is rare"),
    Option("rare-n-min", int, _field_default("rare_n_min"), "N_min: patterns observed before a rare signal fires"),
    Option("candidates", int, _field_default("candidates"), "k candidates per epoch, ranked by a short-SFT proxy"),
    Option("proxy-budget", int, _field_default("proxy_budget"), "proxy units for successive halving (0: k·⌈log2 k⌉)"),
    Option("backend", str, _field_default("backend"), "where trainings and evaluations run: local, or ray (a Ray "
           "cluster, every candidate and seed of an epoch at once; pip install 'curateevo[ray]')", _backend_names),
    Option("ray-address", str, None, "the Ray cluster's head, HOST:PORT (default: RAY_ADDRESS, or the cluster "
           "started on this machine)"),
    Option("storage", str, None, "backend ray: where stages' inputs and outputs travel, a URI (s3://BUCKET/DIR, "
           "gs://..., or a path every node shares; default: Ray's object store)"),
    Option("proposer", str, None, "who rewrites the strategy (default: agent with --model, else offline)",
           _proposer_names, group="llm"),
    Option("model", str, None, "LLM model name, e.g. gpt-4.1-mini, claude-sonnet-4-5, or a local server's model", group="llm"),
    Option("provider", str, "openai", "LLM API", ("openai", "anthropic"), group="llm"),
    Option("base-url", str, None, "OpenAI-compatible server (vLLM, llama.cpp, Ollama, hosted)", group="llm"),
    Option("api-key-env", str, None, "NAME of the variable holding the key (default OPENAI_API_KEY / ANTHROPIC_API_KEY)",
           group="llm"),
    Option("llm-mode", str, "record", "record: reuse recorded replies, call for new ones; replay: records only, no network",
           ("live", "record", "replay"), group="llm"),
    Option("llm-records", str, None, "copy another run's llm/ record into this run first (with --llm-mode replay: "
                                     "rerun it offline)", group="llm"),
    Option("budget-tokens", int, None, "LLM tokens for the whole run; when spent, proposing stops, the run goes on", group="llm"),
    Option("budget-usd", float, None, "LLM spend for the whole run, USD", group="llm"),
    Option("pricing", str, None, "JSON {model: {input, output}} USD per 1M tokens, over the genai-prices catalog", group="llm"),
    Option("diagnosis", str, None, "default: rules+llm when an LLM is configured, else rules", DIAGNOSES, group="llm"),
    Option("agent-steps", int, 30, "model calls per revision", group="llm"),
    Option("agent-repairs", int, 2, "failed validations sent back to the agent per revision", group="llm"),
    Option("agent-wall", int, 1200, "seconds per revision", group="llm"),
    Option("agent-usd", float, 0.0, "USD per revision (0: only the run's budget)", group="llm"),
    Option("agent-temperature", float, 0.8, "sampling temperature of the code agent's candidates 2..k with --candidates k "
           "(candidate 1 keeps the LLM's; candidate i >= 2 also sends seed = --seed + i - 1)", group="llm"),
)
OPTIONS_BY_DEST = {o.dest: o for o in RUN_OPTIONS}


def option_values(doc: Any, where: str) -> dict:
    """A config file's mapping checked against RUN_OPTIONS: dest → value (one sentence otherwise)."""
    if not isinstance(doc, Mapping):
        raise UserError(f"{where}: a run config is a mapping of option names to values")
    out = {}
    for key, value in doc.items():
        dest = {"lambda": "lam"}.get(str(key), str(key).replace("-", "_"))
        option = OPTIONS_BY_DEST.get(dest)
        if option is None:
            raise UserError(f"{where}: unknown option {str(key)[:60]!r} (the long options of `curateevo run`)")
        out[dest] = _coerce(option, value, where)
    return out


def _coerce(option: Option, value: Any, where: str) -> Any:
    def one(v):
        if option.type is float and isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
        if option.type is int and isinstance(v, int) and not isinstance(v, bool):
            return v
        if option.type is str and isinstance(v, str):
            return v
        raise UserError(f"{where}: {option.name} must be {'a number' if option.type is float else option.type.__name__}"
                        f"{' (or a list of them)' if option.nargs else ''}, not {type(v).__name__} {repr(v)[:60]}")

    if value is None:
        return None
    if option.nargs and not isinstance(value, list):   # a list option takes a list, even of one
        raise UserError(f"{where}: {option.name} must be a list (e.g. [{repr(value)[:40]}]), "
                        f"not {type(value).__name__} {repr(value)[:60]}")
    values = [one(v) for v in (value if option.nargs else [value])]
    allowed = option.allowed()
    for v in values:
        if allowed and v not in allowed:
            raise UserError(f"{where}: {option.name} must be one of {', '.join(map(str, allowed))}, not {v!r}")
    return values if option.nargs else values[0]


def merge_options(given: Mapping[str, Any], from_file: Mapping[str, Any]) -> dict:
    """Flags given on the command line win over the config file; the rest take their defaults."""
    return {o.dest: given[o.dest] if given.get(o.dest) is not None else
            from_file[o.dest] if from_file.get(o.dest) is not None else o.default for o in RUN_OPTIONS}


def resolve(options: Mapping[str, Any], corpus: tuple[str, ...], corpus_sha256: str, corpus_kind: str | None = None) -> RunConfig:
    """The RunConfig of a new run from merged options (`merge_options`) and its resolved corpus;
    `corpus_kind` is the benchmark a user's corpus implies (sandbox.corpus.corpus_kind)."""
    from trainer.recipe import get_profile

    o = dict(options)
    llm = llm_mapping(o)
    proposer = o["proposer"] or ("agent" if llm else "offline")
    benchmark = o["benchmark"] or corpus_kind or "bfcl-single"
    metric = o["metric"] or ("call_f1" if benchmark == "replay" else _field_default("metric"))
    if (metric == "call_f1") != (benchmark == "replay"):
        raise UserError(f"--metric {metric} on {benchmark}: call_f1 is the replay benchmark's P and only its "
                        "(step_accuracy there counts every text step right whatever the model writes)")
    base = o["base"] or get_profile(o["profile"]).base
    if o["seeds"] < 1:
        raise UserError(f"--seeds must be at least 1, not {o['seeds']}")
    if o["margin"] is None:
        o["margin"] = default_margin_of(o, base, benchmark)[0]
    return RunConfig(
        corpus=tuple(corpus), corpus_sha256=corpus_sha256, benchmark=benchmark, metric=metric, tasks=o["tasks"],
        base=base, profile=o["profile"], epochs=o["epochs"], lam=o["lam"], n_ref=o["n_ref"], margin=o["margin"],
        seeds=tuple(range(o["seeds"])), seed=o["seed"], acceptance=o["acceptance"], proposer=proposer,
        sandbox=o["sandbox"], curation_timeout_s=o["timeout"], batch_size=o["batch_size"],
        # single-turn tasks are one step each: the step-level pass would score the same answers again
        eval_steps=not (benchmark == "bfcl-single" and metric != "step_accuracy"),
        ablations=tuple(sorted(set(o["ablate"]))), on_error=o["on_bad_line"], llm=llm,
        tools=str(Path(o["tools"]).resolve()) if o["tools"] else "",
        diagnosis=o["diagnosis"] or ("rules+llm" if llm else "rules"),
        boundary_samples=o["boundary_samples"], boundary_temperature=o["boundary_temperature"],
        signal_window=o["signal_window"], rare_theta=o["rare_theta"], rare_n_min=o["rare_n_min"],
        candidates=o["candidates"], proxy_budget=o["proxy_budget"], report_to=o["report_to"], max_length=o["max_length"],
        max_prompt_length=o["max_prompt_length"],
        launcher=o["launcher"] or "", backend=o["backend"], ray_address=o["ray_address"] or "",
        storage=o["storage"] or "",
        accelerate_config=str(Path(o["accelerate_config"]).resolve()) if o["accelerate_config"] else "",
        agent={"step_limit": o["agent_steps"], "repairs": o["agent_repairs"], "wall_time_s": o["agent_wall"],
               "cost_limit_usd": o["agent_usd"], "candidate_temperature": o["agent_temperature"]})


def default_margin_of(o: Mapping[str, Any], base: str, benchmark: str) -> tuple[float, str]:
    """The margin (and why) a run gets without --margin: evolver.acceptance.default_margin."""
    from evolver.acceptance import default_margin

    rule = o["acceptance"] if o["acceptance"] != "auto" else ("paired" if o["seeds"] > 1 else "margin")
    return default_margin(o["profile"], base, benchmark, o["tasks"], o["seeds"], rule)


def llm_mapping(o: Mapping[str, Any]) -> dict | None:
    """The run's LLM settings (names of key variables, never key values); None without --model."""
    if not o.get("model"):
        if o.get("proposer") == "agent":
            raise UserError("the code agent needs an LLM: give --model (and --base-url for a local server)")
        return None
    from evolver.llm import LLMConfig

    fields_ = {"provider": o["provider"], "model": o["model"], "base_url": o["base_url"], "api_key_env": o["api_key_env"],
               "mode": o["llm_mode"], "budget_tokens": o["budget_tokens"], "budget_usd": o["budget_usd"],
               "pricing_file": str(Path(o["pricing"]).resolve()) if o["pricing"] else None}
    return LLMConfig.from_mapping({k: v for k, v in fields_.items() if v is not None}).describe()

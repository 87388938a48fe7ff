"""The run's settings, each declared once: a field of `RunConfig` (what `run.json` holds), of a
component's model it nests (`train`: trainer/train.py TrainSpec; `eval`: environments/evaluate.py
EvalSpec; `llm`: evolver/llm.py LLMConfig; `agent`: evolver/proposers/agent_limits.py AgentLimits)
or of `LaunchOptions` (what only `curateevo run` needs), with its type,
range, default and — where it is an option of `run` — a `Flag` with its help text. The options of
`run` (flags and `--config` file keys alike, `RUN_OPTIONS`) are generated from these declarations
(evolver/options.py), and the same declarations check a config file, the flags and a `run.json`
read back by `resume`: a value of the wrong type, out of range, or a key nobody knows is one
sentence naming the key (UserError).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from base.errors import UserError
from base.objective import LAMBDA
from base import registry
from environments.evaluate import EvalSpec, steps_pass
from experiments.train_eval import PROXY_SFT_STEPS, PROXY_TASKS
from evolver import old_runs
from evolver.llm import LLMConfig
from evolver.options import Flag, Nested, check_choices, check_option, options_of, sentence
from evolver.proposers.agent_limits import AgentLimits
from evolver.signals import SignalParams
from sandbox.executor import Limits
from trainer.recipe import PROFILE_HELP
from trainer.train import TrainSpec

METRICS = ("task_success", "turn_pass", "step_accuracy", "call_f1")
ABLATIONS = ("no-effectiveness", "no-efficiency", "no-sft", "no-rl", "no-memory")
DIAGNOSES = ("rules", "rules+llm")

Finite = Field(allow_inf_nan=False)


def _trackers() -> tuple[str, ...]:
    from trainer.tracking import REPORT_TO

    return REPORT_TO


def _acceptance_names() -> tuple[str, ...]:
    from evolver.acceptance import ACCEPTANCE

    return tuple(ACCEPTANCE)


def _final_rules() -> tuple[str, ...]:
    from evolver.final_rules import FINAL_RULES

    return tuple(FINAL_RULES)


def _proposer_names() -> tuple[str, ...]:
    from evolver.proposers import PROPOSERS

    return tuple(PROPOSERS)


def _backend_names() -> tuple[str, ...]:
    from evolver.backends import BACKENDS

    return tuple(BACKENDS)


def _executor_names() -> tuple[str, ...]:
    from sandbox.executor import EXECUTORS

    return tuple(EXECUTORS)


def _profiles() -> tuple[str, ...]:
    from trainer.recipe import PROFILES

    return tuple(PROFILES)


BUDGET_OPTIONS = {"max_length": "max_length", "train_max_prompt_tokens": "max_prompt_tokens"}
"""The options of `run` (LaunchOptions) that `resolve` folds into `train.budget` when not 0 (the
profile's) → the budget's field (--max-prompt-tokens is evaluation's cap: `eval.max_prompt_tokens`)."""
OLD_OPTIONS = {"max_prompt_length": "train_max_prompt_tokens"}
"""Options of `run` by their names before issue 72 (flags and config-file keys) → their dest now:
each still works and says its new name in one line (`old_option`)."""
RUN_SETS = ("benchmark", "metric", "tasks", "threads", "corpus", "corpus_tools", "corpus_on_error", "holdout")
"""The EvalSpec fields the run sets itself when it evaluates (`RunConfig.eval_spec`), never in `eval`."""


def _given(spec: Any) -> dict | None:
    """A nested spec as the keys given (a model: its fields set; None: none; not a mapping: None)."""
    if isinstance(spec, BaseModel):
        return spec.model_dump(exclude_unset=True)
    return dict(spec) if isinstance(spec, Mapping) else {} if spec is None else None


class RunConfig(BaseModel):
    """One evolution run, resolved: every value the loop reads, nothing it has to default."""
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, validate_by_name=True, validate_by_alias=True)

    corpus: Annotated[tuple[str, ...], Flag(
        "raw corpus file(s) (default: the wild corpus of --benchmark, train split)", derived=True, nargs="+")] = ()
    """Raw corpus files, absolute paths (the default: the wild corpus of `benchmark`, train split)."""
    corpus_sha256: str = ""
    """sha256 of the corpus bytes at launch; `resume` refuses a corpus that changed."""
    benchmark: Annotated[str, Flag("dev benchmark (default: bfcl-single, or next-call for a corpus without an "
                                   "environment; old name: replay)", derived=True,
                                   choices=lambda: (*registry.names(), *registry.OLD_NAMES))] = registry.DEFAULT
    """Dev benchmark: bfcl-single (the CPU default), bfcl (multi-turn) or next-call (the agent's next call at each
    recorded step of a held-out dev tenth of the corpus; another tenth is its test part). "replay", its name
    before issue 61, reads as next-call (registry.OLD_NAMES)."""
    split: str = "dev"
    """The split the loop evaluates on; the test split is read only by `curateevo test`."""
    metric: Annotated[str, Flag("P, the dev metric (default: task_success; call_f1 on next-call)", derived=True,
                                choices=METRICS)] = "task_success"
    """P: task_success (official checker), turn_pass or step_accuracy; call_f1 on next-call (call-level F1 over
    the held-out steps, environments/next_call/scoring.py)."""
    tasks: Annotated[int, Field(ge=1), Flag("dev tasks evaluated per epoch, balanced over the categories")] = 186
    """Every bfcl-single dev task; a smaller dev split is evaluated whole. Fewer tasks resolve only larger
    differences of P (docs/results.md: the calibration and the seed spread)."""
    train: Annotated[TrainSpec, Nested(
        base=Flag("base model (default: the profile's base model)", derived=True),
        profile=Flag("recipe budgets: " + PROFILE_HELP, choices=_profiles),
        report_to=Flag("trackers for training curves and per-epoch P, C, J (tensorboard, wandb, trackio, mlflow, "
                       "comma-separated, or none)"),
        launcher=Flag("trainer launcher: accelerate (with --accelerate-config) or a command prefix such as "
                      "'torchrun --nproc_per_node 4' (default: a plain child process)", derived=True),
        accelerate_config=Flag("accelerate config file for --launcher accelerate", derived=True))] = \
        Field(default_factory=TrainSpec)
    """How every candidate is trained (trainer/train.py TrainSpec, given to train_on as it is): its
    base resolved (the profile's when none is given), its budget the profile's overrides
    (--max-length, --train-max-prompt-tokens; the proxy's short SFT). `report_to` also receives the
    per-epoch P, C, J, decision, per-category P and scale."""
    windows: bool = False
    """The run took its length limits from the corpus (evolver.launch.check_run_lengths,
    trainer.length.corpus_limits: a corpus whose system prompt and tools alone outgrow the profile's
    limits, no limit named by the user): its candidates' ctx.budget then says `windows`, and ρ0
    trains a trajectory longer than max_length as windows that fit it (toolkit.windows). False
    (every other run, and every run made before it): no such key in ctx.budget nor in run.json
    (`to_json`), and ρ0 keeps every trajectory whole."""
    epochs: Annotated[int, Field(ge=1), Flag("epochs, ρ0's included")] = 3
    lam: Annotated[float, Field(alias="lambda", ge=0), Finite, Flag("λ in J = P − λ·C", name="lambda")] = LAMBDA
    """λ in J = P − λ·C (paper §4.2); json key `lambda` (a Python keyword)."""
    n_ref: Annotated[float, Field(gt=0), Finite, Flag("N_ref of the cost C")] = 1e5
    """N_ref in C = tanh(log(1 + Cost_train) / log(1 + N_ref))."""
    margin: Annotated[float, Finite, Flag(
        "J must beat the best J by more than this (default: from the measured run-to-run spread of P with one "
        "seed, 0 with several; see trainer/README.md)", derived=True)] = 0.0
    """`run` derives the default from the measured run-to-run spread: evolver.acceptance.default_margin."""
    seeds: Annotated[tuple[int, ...], Flag(
        "train+eval seeds per candidate (>1: paired noise-aware acceptance)", option_type=Annotated[int, Field(ge=1)],
        option_default=1)] = (0,)
    """Training + evaluation seeds per candidate (`--seeds N`: 0..N-1); more than one enables the paired acceptance."""
    seed: Annotated[int, Flag("the run's seed")] = 0
    """The run's seed: curation (ctx.rng), the proposer and the acceptance resampling."""
    strategy: Annotated[str, Flag(
        "your own strategy directory (its strategy.py and the modules beside it) as epoch 0's candidate instead "
        "of the seed ρ0; it is dry-run on the corpus and checked as any candidate before anything is trained "
        "(default: the seed ρ0)", derived=True)] = ""
    """Absolute path of the user's strategy directory, or "" (the seed ρ0, curation_strategies/seed):
    its files are committed as epoch 0's candidate when the run is created (evolver/own_strategy.py),
    so resume and replay read them from the run's workspace, never from this directory again."""
    strategy_sha256: str = ""
    """sha256 of that directory's strategy files at launch (sandbox.strategy_files; base.files.sha256_files)."""
    acceptance: Annotated[str, Flag("acceptance rule (auto: paired with several seeds, else margin)",
                                    choices=lambda: ("auto", *_acceptance_names()))] = "auto"
    """Acceptance rule (evolver/acceptance.py): margin, paired, or auto (paired with several seeds)."""
    final_rule: Annotated[str, Flag(
        "which evaluated epoch the run ends on: accepted-best (the accepted lineage's head, unless a rejected epoch "
        "beats it beyond the acceptance margin) or paper-best-dev (the best dev P, lower C breaking ties; paper §4.3) "
        "(default: accepted-best)", derived=True, choices=_final_rules)] = "paper-best-dev"
    """evolver/final.py. A new run gets accepted-best (`resolve`); a run.json without the key was made
    when the final was always the paper's best dev P, so it reads as paper-best-dev and resumes so."""
    ablations: Annotated[tuple[str, ...], Flag("paper §5.3 ablations", name="ablate", choices=ABLATIONS,
                                               option_type=list[str], option_default=[])] = ()
    sandbox: Annotated[str, Flag("executor of candidate code", choices=lambda: ("auto", *_executor_names()))] = "auto"
    """Executor of candidate code (sandbox/executor.py registry); auto: Docker, else the process fallback."""
    curation_timeout_s: Annotated[float, Field(gt=0), Finite, Flag("curation wall-clock limit (s)", name="timeout")] = Limits.timeout_s
    """At its default it rises with a large corpus (sandbox/corpus_limits.py); any other value is kept."""
    eval: Annotated[EvalSpec, Nested(
        batch_size=Flag("evaluation batch size (greedy rows decoded together)"),
        max_new_tokens=Flag("evaluation: most tokens the agent writes per turn"),
        max_prompt_tokens=Flag("evaluation: most prompt tokens per turn (a longer conversation loses its oldest "
                               "turns; a prompt that cannot fit is refused before the run starts)"))] = Field(default_factory=EvalSpec)
    """How every candidate is evaluated (environments/evaluate.py EvalSpec): the decoding budget, the
    batches, the step pass (`steps`: set from --benchmark and --metric), the memory rule. What the
    run sets itself (`RUN_SETS`: its benchmark, metric and tasks, its profile's threads, its corpus)
    stays out of it and is added when the run evaluates (`eval_spec`)."""
    on_error: Annotated[str, Flag("an invalid corpus line: abort with file:line, or skip and count it",
                                  name="on-bad-line", choices=("abort", "skip"))] = "abort"
    """Every stage that reads the corpus (curation, the next-call benchmark's hold-out, resume, replay) loads it this way."""
    holdout: Mapping = Field(default_factory=dict)
    """A corpus without an environment: how its dev and test parts are held out (corpora.split,
    `{"rank": "content", "seed", "share", "test_share"}` and the `dev_ids` / `test_ids` a user chose);
    {}: a run made before the test part, whose dev tenth is the legacy split (`effective_holdout`)."""
    tools: Annotated[str, Flag("JSON file of the real tool schemas, for corpus records whose files carry none "
                               "(default: one catalogue per source, built from the calls the corpus makes)",
                               derived=True)] = ""
    """Absolute path, or "": each source's catalogue of the calls it makes (corpora.catalogue)."""
    tools_sha256: str = ""
    """sha256 of that file at launch; `resume` refuses a file that changed."""
    boundary_samples: Annotated[int, Field(ge=0), Flag(
        "K sampled rollouts per dev task for CoEvolve's boundary signal (0: off; costs K× the episodes)")] = \
        SignalParams.samples
    boundary_temperature: Annotated[float, Field(gt=0), Finite, Flag("temperature of those rollouts")] = \
        SignalParams.temperature
    """Temperature of the boundary rollouts (greedy P stays the metric)."""
    signal_window: Annotated[int, Field(ge=1), Flag("W, epochs in the forgetting window")] = SignalParams.window
    """W: the earlier evaluated epochs a task's forgetting window holds (CoEvolve §3.1)."""
    rare_theta: Annotated[float, Field(gt=0, lt=100), Finite, Flag("θ: a pattern below θ %% of all is rare",
                                                                   expected="a percentage in (0, 100)")] = \
        SignalParams.theta
    rare_n_min: Annotated[int, Field(ge=0), Flag("N_min: patterns observed before a rare signal fires")] = \
        SignalParams.n_min
    candidates: Annotated[int, Field(ge=1), Flag("k candidates per epoch, ranked by a short-SFT proxy")] = 1
    """k (offline proposer: its k best edits; code agent: k runs sampled apart); the best goes on."""
    proxy_budget: Annotated[int, Field(ge=0), Flag("proxy units for successive halving (0: k·⌈log2 k⌉)")] = 0
    proxy_sft_steps: Annotated[int, Field(ge=1), Flag("SFT steps of the proxy per unit (no RL)")] = PROXY_SFT_STEPS
    """SFT steps of the proxy per unit (a short SFT on the candidate's dry-run artifacts, no RL)."""
    proxy_tasks: Annotated[int, Field(ge=1), Flag("dev tasks of the proxy per unit (a balanced subset)")] = \
        PROXY_TASKS
    """Dev tasks of the proxy per unit (a balanced subset of the run's dev tasks)."""
    backend: Annotated[str, Flag("where trainings and evaluations run: local, or ray (a Ray cluster, every candidate "
                                 "and seed of an epoch at once; pip install 'curateevo[ray]')",
                                 choices=_backend_names)] = "local"
    """Where trainings and evaluations run (evolver/backends/): local (one after another on this
    machine) or ray (a Ray cluster: every (candidate, seed) of an epoch at once). Results are the same."""
    ray_address: Annotated[str, Flag("the Ray cluster's head, HOST:PORT (default: RAY_ADDRESS, or the cluster "
                                     "started on this machine)", derived=True)] = ""
    """The Ray cluster of backend ray (`HOST:PORT` of its head); "": RAY_ADDRESS, or the cluster started here."""
    storage: Annotated[str, Flag("backend ray: where stages' inputs and outputs travel, a URI (s3://BUCKET/DIR, "
                                 "gs://..., or a path every node shares; default: Ray's object store)", derived=True)] = ""
    """Where backend ray's stages' inputs and outputs travel (evolver/backends/storage.py): a URI
    fsspec opens (s3://, gs://, a path every node shares); "": Ray's object store."""
    proposer: Annotated[str, Flag("who rewrites the strategy (default: agent with --model, else offline)",
                                  derived=True, choices=_proposer_names, group="llm")] = "offline"
    diagnosis: Annotated[str, Flag("default: rules+llm when an LLM is configured, else rules", derived=True,
                                   choices=DIAGNOSES, group="llm")] = "rules"
    """rules, or rules+llm (an LLM's failed points beside the rule families)."""
    llm: LLMConfig | None = None
    """The LLM (evolver/llm.py LLMConfig: its options, names of key variables, never keys); None: none."""
    agent: AgentLimits = AgentLimits()
    """The code agent's limits (evolver/proposers/agent_limits.py AgentLimits: the --agent-* options)."""

    def __init__(self, **values: Any):
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise sentence(exc, type(self), values) from None

    @model_validator(mode="before")
    @classmethod
    def _nested(cls, data: Any) -> Any:
        """A run.json written before the specs were nested (their fields flat: evolver/old_runs.py)
        as the nested `train` and `eval` it means (a flat key wins over the nested field:
        `replace(profile=…)`); and `train.base` resolved (the profile's) when none is given."""
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        nested = {key: _given(data.get(key)) for key in ("train", "eval")}
        if None in nested.values():
            return data   # not a mapping: pydantic says what it must be
        old_runs.nest(data, nested)
        if nested["train"].get("base") is None:
            from trainer.recipe import PROFILES

            profile = PROFILES.get(nested["train"].get("profile", TrainSpec.model_fields["profile"].default))
            nested["train"]["base"] = profile.base if profile else None   # an unknown profile: check_choices says so
        for key, spec in (("train", TrainSpec), ("eval", EvalSpec)):   # as strictly as the run's own settings
            try:
                nested[key] = spec.model_validate(nested[key], strict=True)
            except ValidationError as exc:
                raise sentence(exc, spec, nested[key], within=(key,)) from None
        return {**data, **nested}

    @model_validator(mode="before")
    @classmethod
    def _old_benchmark(cls, data: Any) -> Any:
        """A benchmark by its old name (a run.json made before issue 61: evolver/old_runs.py) is read as its new one."""
        return old_runs.current_benchmark(data)

    @model_validator(mode="after")
    def _consistent(self) -> "RunConfig":
        """What one field's type and range cannot say: choices from the registries, and pairs of settings."""
        check_choices(self, "run config")
        checks = [
            (self.split == "dev", "split", "dev (the loop never reads the test split)"),
            (len(self.seeds) >= 1 and len(set(self.seeds)) == len(self.seeds), "seeds", "at least one, no repeats"),
            (self.diagnosis == "rules" or self.llm is not None, "diagnosis", "rules when no LLM is configured"),
            (all(t in _trackers() for t in self.train.report_to.split(",")), "report_to",
             f"comma-separated from {', '.join(_trackers())}"),
            (self.train.launcher != "accelerate" or bool(self.train.accelerate_config), "accelerate_config",
             "a config file when launcher is accelerate"),
            (not self.windows or bool(self.train.budget.get("max_length")), "windows",
             "false unless the run's max_length is set (the limits it took from the corpus)"),
            (not self.ray_address or self.backend == "ray", "ray_address", "empty unless backend is ray"),
            (not self.storage or self.backend == "ray", "storage", "empty unless backend is ray"),
            (self.proposer != "agent" or self.llm is not None, "proposer",
             "offline unless an LLM is configured (the code agent needs --model)"),
        ]
        for ok, key, expected in checks:
            if not ok:
                value = getattr(self.train if key in TrainSpec.model_fields else self, key)
                raise UserError(f"run config: {key} must be {expected}, not {repr(value)[:80]}")
        run_sets = sorted(self.eval.model_fields_set & set(RUN_SETS))
        if run_sets:
            raise UserError(f"run config: eval.{run_sets[0]} is the run's own (its benchmark, metric, tasks, profile "
                            f"and corpus set it); leave it out of eval")
        return self

    @property
    def curation_budget(self) -> dict:
        """ctx.budget of the run's candidates: what the full recipe trains on (the profile with the
        run's budget overrides and --max-length; trainer.recipe.curation_budget), with `windows`:
        True only when the run took its limits from the corpus (`windows`)."""
        from trainer.recipe import curation_budget

        budget = curation_budget(self.train.resolved)
        return {**budget, "windows": True} if self.windows else budget

    @property
    def eval_spec(self) -> EvalSpec:
        """How the run evaluates every candidate (experiments.train_eval.evaluate_on): `eval` with what
        the run sets itself (`RUN_SETS`), on the profile's pinned CPU threads, so any machine of a
        cluster decodes alike."""
        corpus = registry.get(self.benchmark).dev_corpus(self.corpus)
        return self.eval.model_copy(update={
            "benchmark": self.benchmark, "metric": self.metric, "tasks": self.tasks, "threads": self.train.threads,
            "corpus": tuple(corpus or ()), "corpus_tools": self.tools or None, "corpus_on_error": self.on_error,
            "holdout": self.effective_holdout})

    @property
    def effective_holdout(self) -> dict:
        """The hold-out the run's next-call benchmark and strategies use (corpora.split): `holdout`, or
        the legacy split for a run that recorded none."""
        from corpora.split import LEGACY_SPLIT

        return dict(self.holdout) if self.holdout else dict(LEGACY_SPLIT)

    @property
    def acceptance_rule(self) -> str:
        """The acceptance rule in force (evolver.acceptance.rule_name: `auto` is paired with several seeds)."""
        from evolver.acceptance import rule_name

        return rule_name(self.acceptance, len(self.seeds))

    def signal_params(self) -> SignalParams:
        """CoEvolve's signal parameters (evolver/signals.py)."""
        return SignalParams(window=self.signal_window, samples=self.boundary_samples,
                            temperature=self.boundary_temperature, theta=self.rare_theta, n_min=self.rare_n_min)

    def params(self) -> dict:
        """`inputs/params.json` of every candidate: what a strategy may know of the run."""
        return {"lambda": self.lam, "n_ref": self.n_ref, "seed": self.seed}

    def to_json(self) -> dict:
        """run.json's object (lists for tuples, `lambda` for lam, the specs nested without `RUN_SETS`;
        `windows` only when true, so every other run's run.json is what it was before the key)."""
        return self.model_dump(mode="json", by_alias=True,
                               exclude={"eval": set(RUN_SETS), **({} if self.windows else {"windows": True})})

    @classmethod
    def from_json(cls, doc: Any, where: str = "run.json") -> "RunConfig":
        """The config from a parsed run.json; one sentence naming `where` and the key otherwise."""
        if not isinstance(doc, Mapping):
            raise UserError(f"{where}: a run config is a JSON object of settings")
        names = {info.alias or name: name for name, info in cls.model_fields.items()}
        names.update({old: old for old in old_runs.OLD_KEYS})   # a run.json of an earlier shape (evolver/old_runs.py)
        unknown = sorted(str(k) for k in doc if k not in names)
        if unknown:
            raise UserError(f"{where}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(i.alias or n for n, i in cls.model_fields.items())}")
        tuples = {name for name, info in cls.model_fields.items() if getattr(info.annotation, "__origin__", None) is tuple}
        values = {names[k]: tuple(v) if names[k] in tuples and isinstance(v, list) else v for k, v in doc.items()}
        values.update(old_runs.absent_then(doc))   # what an earlier run that named a setting not decoded with
        try:
            return cls(**values)
        except UserError as exc:
            raise UserError(f"{where}: {exc}") from None

    def replace(self, **changes) -> "RunConfig":
        """A copy with `changes`, checked like a new config."""
        return type(self)(**{**self.model_dump(exclude={"eval": set(RUN_SETS)}), **changes})


class LaunchOptions(BaseModel):
    """The options of `curateevo run` that are no setting of run.json as such: where the run
    directory goes, the held-out ids, another run's LLM record, and the length limits `resolve`
    folds into the training spec's budget (`train.budget`). The LLM's options are its own model's
    (LLMConfig: `llm`), the code agent's limits likewise (AgentLimits: `agent`)."""
    name: Annotated[str | None, Flag("run directory name (default: run-<time>)")] = None
    runs_dir: Annotated[str | None, Flag("where run directories go, and the default corpus's cache (RUNS_DIR/corpora) "
                                         "(default: runs/ of the project)")] = None
    dev_ids: Annotated[str | None, Flag("a corpus without an environment: FILE of the record ids to hold out as dev, "
                                        "one a line (default: a tenth of the records, drawn by their content)")] = None
    test_ids: Annotated[str | None, Flag("likewise the ids held out for `curateevo test` (default: another tenth)")] = None
    llm_records: Annotated[str | None, Flag("copy another run's llm/ record into this run first (with --llm-mode "
                                            "offline: rerun it with no network)", group="llm")] = None
    max_length: Annotated[int, Field(ge=0), Flag("SFT max_length in tokens (0: the profile's)",
                                                 expected="0 (the profile's) or a positive number of tokens")] = 0
    """Records beyond it are cut or dropped, and a run where nothing would survive fails before training."""
    train_max_prompt_tokens: Annotated[int, Field(ge=0), Flag(
        "training: most tokens of a GRPO prompt, the profile's max_prompt_tokens (0: the profile's; old name: "
        "--max-prompt-length)", expected="0 (the profile's) or a positive number of tokens")] = 0
    """Longer prompts lose old messages or are dropped (`train.budget.max_prompt_tokens`)."""


class ResumeOptions(BaseModel):
    """The options of `curateevo resume`: where the rest of a run goes when its cluster or its LLM's
    server moved. They change no result, so run.json keeps the run's own: `on_backend` applies the
    cluster's for this resume, and a moved LLM is a journal event (`llm_moved`) the run follows from then on."""
    backend: Annotated[str | None, Flag("run the rest on this backend instead of the run's",
                                        choices=_backend_names)] = None
    ray_address: Annotated[str | None, Flag("the Ray cluster's head, HOST:PORT, when it moved since the run "
                                            "started")] = None
    storage: Annotated[str | None, Flag("backend ray: where stages' inputs and outputs travel now (a URI)")] = None
    base_url: Annotated[str | None, Field(pattern=r"^https?://"), Flag(
        "the LLM's server now, when its address changed since the run started (it answers one request first; "
        "the journal records the move, and later stages, resumes and replays follow it)",
        expected="an http:// or https:// URL")] = None


RUN_OPTIONS = options_of(RunConfig, LaunchOptions, LLMConfig, AgentLimits)   # TrainSpec's and EvalSpec's through `Nested`
"""The options of `curateevo run`, generated from the declarations above."""
RESUME_OPTIONS = options_of(ResumeOptions)
"""The options of `curateevo resume`, generated the same way."""
OPTIONS_BY_DEST = {o.dest: o for o in RUN_OPTIONS}


def option_values(doc: Any, where: str) -> dict:
    """A config file's mapping checked against RUN_OPTIONS: dest → value (one sentence otherwise)."""
    if not isinstance(doc, Mapping):
        raise UserError(f"{where}: a run config is a mapping of option names to values")
    out = {}
    for key, value in doc.items():
        dest = old_option({"lambda": "lam"}.get(str(key), str(key).replace("-", "_")), f"{where}: {key}")
        option = OPTIONS_BY_DEST.get(dest)
        if option is None:
            raise UserError(f"{where}: unknown option {str(key)[:60]!r} (the long options of `curateevo run`)")
        out[dest] = check_option(option, value, where, str(key))
    return out


def old_option(dest: str, shown: str) -> str:
    """The dest of an option named by its old name (`OLD_OPTIONS`), said on stderr; any other as it is."""
    if dest not in OLD_OPTIONS:
        return dest
    print(f"note: {shown} is the old spelling of --{OPTIONS_BY_DEST[OLD_OPTIONS[dest]].name}", file=sys.stderr)
    return OLD_OPTIONS[dest]


def flag_values(given: Mapping[str, Any]) -> dict:
    """The flags given on the command line (dest → value, None: not given) checked against RUN_OPTIONS."""
    return {o.dest: check_option(o, given.get(o.dest), "") for o in RUN_OPTIONS}


def default_of(name: str) -> Any:
    """RunConfig's default of a field (a nested spec's field: the spec's default)."""
    for model in (RunConfig, TrainSpec, EvalSpec):
        if name in model.model_fields:
            return model.model_fields[name].get_default(call_default_factory=True)
    raise KeyError(name)


def merge_options(given: Mapping[str, Any], from_file: Mapping[str, Any]) -> dict:
    """Flags given on the command line win over the config file; the rest take their defaults."""
    return {o.dest: given[o.dest] if given.get(o.dest) is not None else
            from_file[o.dest] if from_file.get(o.dest) is not None else o.default for o in RUN_OPTIONS}


def resolve(options: Mapping[str, Any], corpus: tuple[str, ...], corpus_sha256: str, corpus_kind: str | None = None) -> RunConfig:
    """The RunConfig of a new run from merged options (`merge_options`) and its resolved corpus;
    `corpus_kind` is the benchmark a user's corpus implies (corpora.corpus_kind)."""
    from trainer.recipe import get_profile

    o = dict(options)
    llm = llm_of(o)
    proposer = o["proposer"] or ("agent" if llm else "offline")
    benchmark = o["benchmark"] or corpus_kind or registry.DEFAULT
    metrics = registry.get(benchmark).metrics if benchmark in registry.names() else (default_of("metric"),)
    metric = o["metric"] or metrics[0]
    if metric not in metrics and metric in METRICS:
        raise UserError(f"--metric {metric} on {benchmark}: it scores {', '.join(metrics)}; call_f1 is the next-call "
                        "benchmark's P and only its (step_accuracy there counts every text step right whatever "
                        "the model writes)")
    base = o["base"] or get_profile(o["profile"]).base
    if o["margin"] is None:
        o["margin"] = default_margin_of(o, base, benchmark)[0]
    budget = {field: o[k] for k, field in BUDGET_OPTIONS.items() if o[k]}   # 0: the profile's
    train = TrainSpec(**as_given(TrainSpec, o), base=base, budget=budget, launcher=o["launcher"] or "",
                      accelerate_config=str(Path(o["accelerate_config"]).resolve()) if o["accelerate_config"] else "")
    evaluation = EvalSpec(**as_given(EvalSpec, o), steps=benchmark not in registry.names() or steps_pass(benchmark, metric))
    return RunConfig(
        **as_given(RunConfig, o), corpus=tuple(corpus), corpus_sha256=corpus_sha256, benchmark=benchmark,
        metric=metric, train=train, eval=evaluation, margin=o["margin"], seeds=tuple(range(o["seeds"])),
        proposer=proposer, final_rule=o["final_rule"] or "accepted-best", ablations=tuple(sorted(set(o["ablate"]))), llm=llm,
        tools=str(Path(o["tools"]).resolve()) if o["tools"] else "", strategy=str(Path(o["strategy"]).resolve()) if
        o["strategy"] else "", diagnosis=o["diagnosis"] or ("rules+llm" if llm else "rules"),
        ray_address=o["ray_address"] or "", storage=o["storage"] or "", agent=AgentLimits(**given_to(AgentLimits, o)))


def as_given(model: type[BaseModel], o: Mapping[str, Any]) -> dict:
    """The fields of `model` (RunConfig, or a spec it nests) whose option gives its value as it is:
    `resolve` needs no line for them, so a new one cannot keep its default."""
    return {op.field: o[op.dest] for op in RUN_OPTIONS if op.model is model and not op.flag.derived
            and op.flag.option_type is None}


def given_to(model: type[BaseModel], o: Mapping[str, Any]) -> dict:
    """The fields of `model` its options were given (dest → value merged by `merge_options`)."""
    return {op.field: o[op.dest] for op in RUN_OPTIONS if op.model is model and o[op.dest] is not None}


def on_backend(cfg: RunConfig, given: Mapping[str, Any]) -> RunConfig:
    """The run's config with the cluster options given to `resume` (dest → value, None: not given):
    --ray-address or --storage alone mean backend ray; a backend other than ray keeps neither."""
    given = {o.dest: check_option(o, given.get(o.dest), "") for o in RESUME_OPTIONS if o.dest != "base_url"}
    if not any(given.values()):   # none given (or only empty ones): the run's own
        return cfg
    backend = given["backend"] or ("ray" if given["ray_address"] or given["storage"] else cfg.backend)
    ray = {"ray_address": cfg.ray_address, "storage": cfg.storage} if backend == "ray" else {}
    moved = {k: given[k] for k in ("ray_address", "storage") if given[k] is not None}
    return cfg.replace(backend=backend, **{"ray_address": "", "storage": "", **ray, **moved})


def llm_moved(cfg: RunConfig, events: Sequence) -> RunConfig:
    """The run's config with its LLM at the base URL the last `resume --base-url` moved it to (the
    journal's `LLMMoved` event; run.json keeps the URL the run started with)."""
    from experiments.journal import LLMMoved

    url = next((e.base_url for e in reversed(events) if isinstance(e, LLMMoved)), None)
    if url is None or cfg.llm is None:
        return cfg
    return cfg.model_copy(update={"llm": cfg.llm.model_copy(update={"base_url": url})})


def default_margin_of(o: Mapping[str, Any], base: str, benchmark: str) -> tuple[float, str]:
    """The margin (and why) a run gets without --margin: evolver.acceptance.default_margin."""
    from evolver.acceptance import default_margin, rule_name

    return default_margin(o["profile"], base, benchmark, o["tasks"], o["seeds"], rule_name(o["acceptance"], o["seeds"]))


def llm_of(o: Mapping[str, Any]) -> LLMConfig | None:
    """The run's LLM from its options (names of key variables, never key values); None without --model."""
    if not o.get("model"):
        if o.get("proposer") == "agent":
            raise UserError("the code agent needs an LLM: give --model (and --base-url for a local server)")
        return None
    given = given_to(LLMConfig, o)
    if given.get("pricing_file"):
        pricing = Path(given["pricing_file"])
        if not pricing.is_file():
            raise UserError(f"--pricing {pricing}: no such file; give a JSON file of {{model: {{\"input\": usd_per_1M, "
                            f"\"output\": usd_per_1M}}}} or leave --pricing out")
        given["pricing_file"] = str(pricing.resolve())
    return LLMConfig(**given)

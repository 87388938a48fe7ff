"""Run settings declared once (evolver/config.py): the options of `curateevo run` are generated
from the pydantic fields, and the same declarations refuse a bad flag, a bad config file and a
bad run.json in one sentence naming the option or key; run.json round-trips byte for byte."""
import json
import re
from pathlib import Path
from typing import Annotated

import pytest
from pydantic import Field

from base.errors import UserError
from base.files import json_text
from evolver import cli
from evolver.config import RESUME_OPTIONS, RUN_OPTIONS, LaunchOptions, RunConfig, on_backend
from evolver.llm import LLMConfig
from evolver.old_runs import FLAT, FLAT_BUDGET
from evolver.options import Flag, flagged, options_of
from evolver.proposers.agent_limits import AgentLimits
from evolver.run_cli import create_run, run_options
from environments.evaluate import EvalSpec
from trainer.train import TrainSpec

from conftest import SAMPLE_CORPUS

FIXTURES = Path(__file__).parent / "fixtures" / "run_json"


@pytest.mark.parametrize("flags, expected", [
    (["--tasks", "0"], "--tasks must be at least 1, not 0"),                            # zero where it makes no sense
    (["--boundary-samples", "-1"], "--boundary-samples must be 0 or more, not -1"),     # a negative count
    (["--lambda", "-0.5"], "--lambda must be a finite number >= 0, not -0.5"),          # a negative weight
    (["--lambda", "nan"], "--lambda must be a finite number >= 0, not nan"),            # NaN
    (["--boundary-temperature", "inf"], "--boundary-temperature must be a finite number > 0, not inf"),   # infinity
    (["--margin=-inf"], "--margin must be a finite number, not -inf"),
    (["--rare-theta", "100"], "--rare-theta must be a percentage in (0, 100), not 100.0"),
    (["--max-length", "-5"], "--max-length must be 0 (the profile's) or a positive number of tokens, not -5"),
    (["--agent-temperature", "2.5"], "--agent-temperature must be a finite number in [0, 2], not 2.5"),
    (["--budget-usd", "0"], "--budget-usd must be a finite number > 0, not 0.0"),
    (["--budget-tokens", "0"], "--budget-tokens must be at least 1, not 0"),
    (["--agent-steps", "0"], "--agent-steps must be at least 1, not 0"),
])
def test_a_bad_flag_is_one_sentence_naming_it_before_anything_is_built(tmp_path, capsys, flags, expected):
    assert cli.main(["run", "--runs-dir", str(tmp_path / "runs"), "--corpus", str(SAMPLE_CORPUS), *flags]) == 2
    err = capsys.readouterr().err
    assert err == f"curateevo: error: {expected}\n", err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("text, expected", [
    ("ablate: no-sft\n", "ablate must be a list (e.g. ['no-sft']), not str 'no-sft'"),
    ("ablate: [no-sft, no-gold]\n", "ablate must be one of no-effectiveness, no-efficiency, no-sft, no-rl, no-memory, "
                                    "not 'no-gold'"),
    ("seeds: '2'\n", "seeds must be an integer, not str '2'"),
    ("epochs: 2.5\n", "epochs must be an integer, not 2.5"),
    ("agent_steps: true\n", "agent_steps must be an integer, not bool True"),
    ("lambda: yes\n", "lambda must be a number, not bool True"),
    ("model: 5\n", "model must be a string, not 5"),
    ("corpus: [1]\n", "corpus must be a list of strings, not list [1]"),
    ("timeout: .nan\n", "timeout must be a finite number > 0, not nan"),
    ("candidates: 0\n", "candidates must be at least 1, not 0"),
    ("seed_count: 2\n", "unknown option 'seed_count'"),
])
def test_a_config_file_with_a_wrong_type_or_range_is_one_sentence_naming_the_file_and_key(tmp_path, capsys, text,
                                                                                         expected):
    config = tmp_path / "run.yaml"
    config.write_text(text)
    assert cli.main(["run", "--config", str(config), "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert expected in err and str(config) in err and err.count("\n") == 1, err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("change, expected", [
    ({"ablations": "no-sft"}, "ablations (--ablate) must be a list of strings, not str 'no-sft'"),
    ({"ablations": ["no-gold"]}, "ablate must be one of"),
    ({"seeds": 2}, "seeds must be a list of integers, not 2"),
    ({"eval_steps": 1}, "eval.steps must be true or false or null, not 1"),   # a run.json from before the nesting
    ({"eval": {"steps": 1}}, "eval.steps must be true or false or null, not 1"),
    ({"eval": {"batch_size": 0}}, "eval.batch_size must be at least 1, not 0"),
    ({"eval": {"tasks": 3}}, "eval.tasks is the run's own"),
    ({"train": {"bogus": 1}}, "unknown setting(s) train.bogus"),
    ({"llm": "gpt"}, "llm must be a mapping or null, not str 'gpt'"),
    ({"agent": []}, "agent must be a mapping, not list []"),
    ({"lambda": -1}, "lambda must be a finite number >= 0, not -1"),
    ({"curation_timeout_s": 0}, "curation_timeout_s (--timeout) must be a finite number > 0, not 0"),
    ({"proxy_tasks": 0}, "proxy_tasks must be at least 1, not 0"),
    ({"split": "test"}, "split must be dev (the loop never reads the test split)"),
    ({"benchmark": "bfcl-v9"}, "benchmark must be one of bfcl, bfcl-single, next-call, scienceworld, acebench, tau2, replay, not 'bfcl-v9'"),
    ({"report_to": "tensorboard,nope"}, "report_to must be comma-separated from"),
    ({"agent": {"candidate_temperature": 3}}, "agent.candidate_temperature (--agent-temperature) must be a finite number "
                                              "in [0, 2], not 3"),
    ({"llm": {"model": "m", "base_url": "localhost"}}, "llm: base_url must be an http:// or https:// URL"),
])
def test_a_bad_run_json_is_one_sentence_naming_the_key(change, expected):
    good = json.loads((FIXTURES / "replay-1126.json").read_text())   # written before the specs were nested
    if {"train", "eval"} & set(change):   # a nested spec: as a run.json written since holds it
        good = RunConfig.from_json(good).to_json()
    with pytest.raises(UserError) as err:
        RunConfig.from_json({**good, **change}, where="RUN/run.json")
    assert str(err.value).startswith(("RUN/run.json: run config: ", "RUN/run.json: llm: ")) and expected in str(err.value), \
        err.value
    assert "\n" not in str(err.value)


# settings newer than both fixtures, at their defaults
BACKEND_DEFAULTS = {"backend": "local", "ray_address": "", "storage": "", "max_new_tokens": 128}


def flat(written: dict) -> dict:
    """A nested run.json's object with the specs' fields flat, as run.json held them before the
    nesting (evolver.old_runs.FLAT); the EvalSpec fields no run.json held before, at their defaults, left out."""
    out, nested = dict(written), {"train": dict(written["train"]), "eval": dict(written["eval"])}
    del out["train"], out["eval"]
    budget = dict(nested["train"].pop("budget"))
    out.update({key: budget.pop(field, 0) for key, field in FLAT_BUDGET.items()})
    out.update({old: nested[spec].pop(field) for old, (spec, field) in FLAT.items() if field != "budget"},
               train_budget=budget)
    assert nested == {"train": {}, "eval": {"max_prompt_tokens": 4096, "memory_k": 3}}
    return out


def test_run_json_of_earlier_runs_reads_back_and_round_trips():
    # a run made before the settings were declared with pydantic: byte for byte once flattened
    # (run.json nests the specs now), the stage backend's and the decoding budget's settings (added
    # later) aside, at their defaults
    text = (FIXTURES / "replay-1126.json").read_text()
    config = RunConfig.from_json(json.loads(text))
    written = flat(config.to_json())
    assert {k: written.pop(k) for k in BACKEND_DEFAULTS} == BACKEND_DEFAULTS
    assert written.pop("holdout") == {}   # made before the test part: the legacy dev tenth (RunConfig.effective_holdout)
    assert written.pop("final_rule") == "paper-best-dev"   # made before the final rules: the paper's, as it ended then
    assert (written.pop("strategy"), written.pop("strategy_sha256")) == ("", "")   # before --strategy: the seed ρ0
    # made before issue 61: its benchmark by the old name, read as the new one (registry.OLD_NAMES)
    assert json_text(written) == text.replace('"benchmark": "replay"', '"benchmark": "next-call"')
    assert '"benchmark": "replay"' in text and RunConfig.from_json(config.to_json()) == config
    # an older one, from before max_prompt_length and --tools: its settings as written, the new ones at their defaults
    doc = json.loads((FIXTURES / "default-1125.json").read_text())
    again = flat(RunConfig.from_json(doc).to_json())
    # the agent's limits are AgentLimits: a limit newer than the file (candidate_temperature) at its default
    assert again["agent"] == {**doc["agent"], "candidate_temperature": 0.8}
    assert {k: again[k] for k in doc if k != "agent"} == {k: v for k, v in doc.items() if k != "agent"}
    assert {k: v for k, v in again.items() if k not in doc} == {"max_prompt_length": 0, "tools": "", "tools_sha256": "",
                                                                 "holdout": {}, "final_rule": "paper-best-dev",
                                                                 "strategy": "", "strategy_sha256": "",
                                                                 **BACKEND_DEFAULTS}
    assert RunConfig.from_json(doc).margin == 0.0478 and RunConfig.from_json(doc).seeds == (0,)


def test_a_new_run_json_reads_back_to_the_same_bytes(tmp_path):
    args = cli.build_parser().parse_args(["run", "--runs-dir", str(tmp_path), "--name", "r", "--corpus",
                                          str(SAMPLE_CORPUS), "--seeds", "2", "--ablate", "no-rl", "no-sft", "no-rl",
                                          "--lambda", "0.1", "--timeout", "60", "--rare-theta", "2.5"])
    written = (create_run(run_options(args)).root / "run.json").read_text()
    config = RunConfig.from_json(json.loads(written))
    assert json_text(config.to_json()) == written
    assert (config.seeds, config.ablations, config.lam, config.curation_timeout_s) == ((0, 1), ("no-rl", "no-sft"), 0.1, 60.0)
    assert config.replace(epochs=5) == RunConfig.from_json({**json.loads(written), "epochs": 5})
    with pytest.raises(UserError, match=re.escape("epochs must be at least 1, not 0")):
        config.replace(epochs=0)


# The RunConfig fields no option of `run` sets, each with what sets it instead.
SET_BY_THE_RUN = {
    "corpus_sha256": "the corpus's bytes at launch",
    "tools_sha256": "the --tools file's bytes at launch",
    "strategy_sha256": "the --strategy directory's files at launch, once they passed the candidate checks",
    "windows": "a corpus whose context outgrows the profile's limits, none named: the limits taken from it "
               "(evolver.launch.check_run_lengths)",
    "split": "nothing: the loop evaluates on dev, never on test",
    "holdout": "a corpus without an environment: its dev and test parts (--dev-ids, --test-ids; corpora.split)",
    "llm": "--model and the LLM options, LLMConfig's fields",
    "agent": "the --agent-* options, AgentLimits' fields",
}
# The fields of the nested specs no option of `run` sets, each with what sets it instead (and
# evolver.config.RUN_SETS: what the run adds to `eval` when it evaluates, never in run.json).
SET_IN_THE_SPECS = {
    "train.budget": "--max-length, --train-max-prompt-tokens (their profile's when 0), and the proxy's short SFT",
    "eval.steps": "--benchmark and --metric (single-turn tasks skip the step pass unless P is step_accuracy)",
    "eval.max_prompt_tokens": "nothing: the spec's default, as every evaluation of the project",
    "eval.memory_k": "nothing: the spec's default, as every evaluation of the project",
}
# One `run` command line giving every RunConfig option a value other than its default: the field's value.
EXAMPLES = {
    "corpus": (["--corpus", "c.jsonl"], (str(Path("c.jsonl").resolve()),)),
    "benchmark": (["--benchmark", "bfcl"], "bfcl"), "metric": (["--metric", "step_accuracy"], "step_accuracy"),
    "tasks": (["--tasks", "7"], 7), "train.base": (["--base", "tiny-random"], "tiny-random"),
    "train.profile": (["--profile", "test"], "test"), "epochs": (["--epochs", "5"], 5), "lam": (["--lambda", "0.5"], 0.5),
    "n_ref": (["--n-ref", "1000"], 1000.0), "margin": (["--margin", "0.25"], 0.25), "seeds": (["--seeds", "2"], (0, 1)),
    "seed": (["--seed", "3"], 3), "acceptance": (["--acceptance", "margin"], "margin"),
    "ablations": (["--ablate", "no-sft", "no-rl"], ("no-rl", "no-sft")), "sandbox": (["--sandbox", "docker"], "docker"),
    "curation_timeout_s": (["--timeout", "60"], 60.0), "eval.batch_size": (["--batch-size", "2"], 2),
    "eval.max_new_tokens": (["--max-new-tokens", "16"], 16),
    "eval.max_prompt_tokens": (["--max-prompt-tokens", "2048"], 2048),
    "on_error": (["--on-bad-line", "skip"], "skip"), "tools": (["--tools", "t.json"], str(Path("t.json").resolve())),
    "train.report_to": (["--report-to", "none"], "none"),
    "train.launcher": (["--launcher", "accelerate"], "accelerate"),
    "train.accelerate_config": (["--accelerate-config", "a.yaml"], str(Path("a.yaml").resolve())),
    "boundary_samples": (["--boundary-samples", "4"], 4), "boundary_temperature": (["--boundary-temperature", "0.7"], 0.7),
    "signal_window": (["--signal-window", "5"], 5), "rare_theta": (["--rare-theta", "10"], 10.0),
    "rare_n_min": (["--rare-n-min", "5"], 5), "candidates": (["--candidates", "2"], 2),
    "proxy_budget": (["--proxy-budget", "4"], 4), "proxy_sft_steps": (["--proxy-sft-steps", "3"], 3),
    "proxy_tasks": (["--proxy-tasks", "4"], 4), "backend": (["--backend", "ray"], "ray"),
    "ray_address": (["--ray-address", "head:6379"], "head:6379"), "storage": (["--storage", "/shared/run"], "/shared/run"),
    "proposer": (["--proposer", "agent"], "agent"), "diagnosis": (["--diagnosis", "rules+llm"], "rules+llm"),
    "final_rule": (["--final-rule", "accepted-best"], "accepted-best"),
    "strategy": (["--strategy", "mine"], str(Path("mine").resolve())),
}


def test_every_run_setting_is_an_option_of_run_and_recorded_in_run_json():
    """A new RunConfig field is an option (and then reaches run.json from it, checked here with
    a value other than its default), or it is named above with what sets it; `resolve` has no
    hand-written line for an option that gives its value as it is, so none keeps its default."""
    from evolver.config import RUN_SETS, resolve

    nested = {"train": TrainSpec, "eval": EvalSpec}
    models = {RunConfig: "", TrainSpec: "train.", EvalSpec: "eval."}
    options = {models[o.model] + o.field: o for o in RUN_OPTIONS if o.model in models}
    assert set(RunConfig.model_fields) == {p.split(".")[0] for p in options} | set(SET_BY_THE_RUN)
    assert not set(options) & set(SET_BY_THE_RUN)
    for key, spec in nested.items():   # a spec's field is an option, or set by the run
        fields = {f"{key}.{f}" for f in spec.model_fields} - {f"eval.{f}" for f in RUN_SETS}
        assert fields == {p for p in options if p.startswith(f"{key}.")} | {p for p in SET_IN_THE_SPECS
                                                                             if p.startswith(f"{key}.")}, key
    assert set(EXAMPLES) == set(options)
    argv = [a for flags, _ in EXAMPLES.values() for a in flags] + ["--model", "m", "--agent-steps", "5",
                                                                   "--max-length", "512", "--train-max-prompt-tokens", "256"]
    given = run_options(cli.build_parser().parse_args(["run", *argv]))
    config = resolve(given, tuple(str(Path(p).resolve()) for p in given["corpus"]), "abc")
    written = config.to_json()   # what RunStore.create writes to run.json
    for path, (_, value) in EXAMPLES.items():
        within, _, option = path.rpartition(".")
        model, holder, doc = (nested[within], getattr(config, within), written[within]) if within else \
            (RunConfig, config, written)
        assert getattr(holder, option) == value != model.model_fields[option].get_default(call_default_factory=True), path
        assert doc[model.model_fields[option].alias or option] == (list(value) if isinstance(value, tuple) else value), path
    assert config.llm.model == "m" and config.eval.steps   # bfcl: multi-turn
    assert config.agent == AgentLimits(step_limit=5) and "command_timeout_s" not in written["agent"]
    assert config.train.budget == written["train"]["budget"] == {"max_length": 512, "max_prompt_tokens": 256}
    assert (config.corpus_sha256, config.split) == ("abc", "dev")
    assert RunConfig.from_json(written) == config


def test_every_declared_setting_with_a_flag_is_an_option_and_a_config_key():
    names = {o.name for o in RUN_OPTIONS}
    declared = [f for model in (RunConfig, LaunchOptions, LLMConfig, AgentLimits) for f in flagged(model)]
    assert len(names) == len(RUN_OPTIONS) == len(declared)
    help_text = cli.build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    for o in RUN_OPTIONS:
        assert f"--{o.name}" in help_text
    # the defaults shown are the declared ones: one place
    by_name = {o.name: o for o in RUN_OPTIONS}
    assert by_name["epochs"].default == RunConfig().epochs and by_name["timeout"].default == RunConfig().curation_timeout_s
    assert by_name["seeds"].default == len(RunConfig().seeds) and by_name["lambda"].dest == "lam"
    assert by_name["benchmark"].default is None   # derived when not given (corpus kind, profile, seeds)


def test_a_setting_declared_with_a_flag_becomes_an_option_with_its_type_range_and_help():
    class Extra(RunConfig):
        warmup: Annotated[int, Field(ge=2), Flag("warm-up epochs before the first proposal")] = 2

    option = {o.name: o for o in options_of(Extra)}["warmup"]
    assert (option.type, option.default, option.help, option.dest) == (int, 2, "warm-up epochs before the first proposal",
                                                                      "warmup")
    with pytest.raises(UserError, match=re.escape("run config: warmup must be at least 2, not 1")):
        Extra(warmup=1)


@pytest.mark.parametrize("options, name, dest, default, help_text, choices", [
    (RUN_OPTIONS, "backend", "backend", "local", "where trainings and evaluations run: local, or ray (a Ray cluster, "
     "every candidate and seed of an epoch at once; pip install 'curateevo[ray]')", ("local", "ray")),
    (RUN_OPTIONS, "ray-address", "ray_address", None, "the Ray cluster's head, HOST:PORT (default: RAY_ADDRESS, or "
     "the cluster started on this machine)", None),
    (RUN_OPTIONS, "storage", "storage", None, "backend ray: where stages' inputs and outputs travel, a URI "
     "(s3://BUCKET/DIR, gs://..., or a path every node shares; default: Ray's object store)", None),
    (RESUME_OPTIONS, "backend", "backend", None, "run the rest on this backend instead of the run's", ("local", "ray")),
    (RESUME_OPTIONS, "ray-address", "ray_address", None, "the Ray cluster's head, HOST:PORT, when it moved since the "
     "run started", None),
    (RESUME_OPTIONS, "storage", "storage", None, "backend ray: where stages' inputs and outputs travel now (a URI)", None),
    (RESUME_OPTIONS, "base-url", "base_url", None, "the LLM's server now, when its address changed since the run "
     "started (it answers one request first; the journal records the move, and later stages, resumes and replays "
     "follow it)", None),
])
def test_the_cluster_options_of_run_and_resume_are_declared_fields_with_their_name_type_default_and_help(
        options, name, dest, default, help_text, choices):
    option = {o.name: o for o in options}[name]
    assert (option.dest, option.type, option.default, option.help, option.nargs, option.group, option.allowed()) == \
        (dest, str, default, help_text, None, "run", choices)


def test_the_cluster_options_are_checked_like_every_other_and_resume_moves_only_the_cluster(tmp_path, capsys):
    assert cli.main(["run", "--runs-dir", str(tmp_path / "runs"), "--corpus", str(SAMPLE_CORPUS), "--storage",
                     "s3://b/run"]) == 2
    assert capsys.readouterr().err == "curateevo: error: run config: storage must be empty unless backend is ray, " \
        "not 's3://b/run'\n"
    assert not (tmp_path / "runs").exists()
    with pytest.raises(UserError, match=re.escape("run config: backend must be one of local, ray, not 'slurm'")):
        RunConfig(backend="slurm")
    ray = RunConfig(backend="ray", ray_address="head:6379", storage="s3://b/run")
    assert on_backend(ray, {}) == ray and on_backend(ray, {"backend": None, "ray_address": ""}) == ray
    assert on_backend(ray, {"base_url": "http://localhost:8001/v1"}) == ray   # the LLM moves by the journal instead
    assert on_backend(ray, {"ray_address": "new:6379"}) == ray.replace(ray_address="new:6379")
    assert on_backend(ray, {"backend": "local"}) == ray.replace(backend="local", ray_address="", storage="")
    assert on_backend(RunConfig(), {"storage": "s3://b"}) == RunConfig(backend="ray", storage="s3://b")
    with pytest.raises(UserError, match=re.escape("--backend must be one of local, ray, not 'slurm'")):
        on_backend(ray, {"backend": "slurm"})


def test_a_run_json_that_names_no_decoding_budget_decoded_with_128_and_a_new_run_with_256():
    """The budget became 256 on 2026-11-29 (bench/decode_budget.py); a run made before, whose
    run.json names none, resumes and replays at the 128 it evaluated with."""
    old = json.loads((FIXTURES / "replay-1126.json").read_text())
    assert "max_new_tokens" not in old and "max_new_tokens" not in (old.get("eval") or {})
    assert RunConfig.from_json(old).eval.max_new_tokens == 128
    written = RunConfig.from_json(old).to_json()
    assert written["eval"]["max_new_tokens"] == 128 and RunConfig.from_json(written).eval.max_new_tokens == 128
    assert RunConfig().eval.max_new_tokens == 256
    assert RunConfig.from_json({**written, "eval": {**written["eval"], "max_new_tokens": 64}}).eval.max_new_tokens == 64


def test_the_old_spelling_of_the_training_prompt_cap_still_works_and_says_the_new_one(tmp_path, capsys):
    """Issue 72: the prompt cap of GRPO is `max_prompt_tokens`, as evaluation's; `run` names it
    --train-max-prompt-tokens (its --max-prompt-tokens is evaluation's cap). --max-prompt-length,
    as a flag of `run` and `curate` and as a key of a config file, means what it meant and says so."""
    def budget_of(argv: list[str]) -> dict:
        given = run_options(cli.build_parser().parse_args(["run", "--corpus", str(SAMPLE_CORPUS), *argv]))
        from evolver.config import resolve

        return resolve(given, (str(SAMPLE_CORPUS),), "abc").train.budget

    assert budget_of(["--train-max-prompt-tokens", "256"]) == {"max_prompt_tokens": 256}
    assert capsys.readouterr().err == ""
    assert budget_of(["--max-prompt-length", "256"]) == {"max_prompt_tokens": 256}
    assert capsys.readouterr().err == \
        "curateevo run: note: --max-prompt-length is the old spelling of --train-max-prompt-tokens\n"
    config = tmp_path / "run.yaml"
    config.write_text("max-prompt-length: 256\n")
    assert budget_of(["--config", str(config)]) == {"max_prompt_tokens": 256}
    assert capsys.readouterr().err == \
        f"note: {config}: max-prompt-length is the old spelling of --train-max-prompt-tokens\n"
    assert budget_of(["--max-prompt-tokens", "256"]) == {}   # evaluation's cap, as before
    curate = cli.build_parser().parse_args(["curate", "--max-prompt-length", "512"])
    assert curate.train_max_prompt_tokens == 512
    assert capsys.readouterr().err == \
        "curateevo curate: note: --max-prompt-length is the old spelling of --train-max-prompt-tokens\n"


def test_a_run_json_naming_the_prompt_cap_max_prompt_length_reads_as_the_same_config():
    """A run.json written before issue 72 named the training prompt cap `max_prompt_length`, flat
    (before the nesting) or in `train.budget`: it resumes and replays with the same config as one
    naming it `max_prompt_tokens`, and is written back under the new name (evolver/old_runs.py)."""
    doc = json.loads((FIXTURES / "nested-1206.json").read_text())
    new = RunConfig.from_json({**doc, "train": {**doc["train"], "budget": {"max_length": 512, "max_prompt_tokens": 256}}})
    old = RunConfig.from_json({**doc, "train": {**doc["train"], "budget": {"max_length": 512, "max_prompt_length": 256}}})
    assert old == new and old.train.resolved.max_prompt_tokens == 256
    assert old.to_json()["train"]["budget"] == {"max_length": 512, "max_prompt_tokens": 256}
    assert RunConfig.from_json(old.to_json()) == new
    flat = json.loads((FIXTURES / "flat-1129.json").read_text())   # flat, from before the nesting
    assert flat["max_prompt_length"] == 256 and RunConfig.from_json(flat).train.budget["max_prompt_tokens"] == 256
    assert RunConfig(max_prompt_length=300).train.budget == {"max_prompt_tokens": 300}   # the flat keyword, likewise

"""Each default once (issue 72): where a setting is nested or restated — the run's settings, the
quality bench's setting and flags, `eval`, `train`, the probe — its default is read from the one
declaration, so the two can never disagree. Each pair is checked twice: the values agree, and the
reader's default is written as a name, not as a literal a later edit could change on one side."""
import argparse
import ast
import inspect
from pathlib import Path

import pytest

from base import paired
from environments.evaluate import EvalSpec, evaluate_to_dir
from evolver.acceptance import PairedBootstrap
from evolver.config import RunConfig
from evolver.signals import SignalParams
from experiments import eval_cli, probe
from experiments.quality import cli as quality_cli
from experiments.quality import table
from experiments.quality.cells import Setting
from trainer import memory
from trainer.cli import add_cli as add_train_cli
from trainer.train import TrainSpec

ROOT = Path(__file__).resolve().parent.parent

# file → the names whose default it reads from a declaration elsewhere (a field, a keyword or a flag)
READERS = {
    "evolver/config.py": {"boundary_samples", "boundary_temperature", "signal_window", "rare_theta", "rare_n_min"},
    "environments/evaluate.py": {"DEFAULT_MEMORY_K", "memory_k", "batch_size", "max_prompt_tokens"},   # check_prompts_fit's max_new_tokens=0 is no budget
    "evolver/acceptance.py": {"DEFAULT_CONFIDENCE", "confidence"},
    "experiments/quality/table.py": {"confidence"},
    "experiments/quality/cells.py": {"tasks", "seeds"},
    "experiments/quality/cli.py": {"--seeds", "--batch-size", "--max-new-tokens", "--tasks"},
    "experiments/eval_cli.py": {"--base", "--threads", "--batch-size", "--max-new-tokens", "--memory-k"},
    "experiments/probe.py": {"--base", "--threads", "--max-new-tokens", "max_new_tokens", "max_prompt_tokens", "threads"},
    "trainer/train.py": {"profile"},
    "trainer/options.py": {"--profile"},
}


def _literal(node) -> bool:
    """A literal number or string, or a tuple of them: a default written here rather than read."""
    if isinstance(node, ast.Tuple):
        return bool(node.elts) and all(_literal(e) for e in node.elts)
    return isinstance(node, ast.Constant) and type(node.value) in (int, float, str)


def defaults_written_as_literals(path: Path) -> set[str]:
    """The names in `path` whose default is a literal: a module's constant, a class's annotated
    field, a function's keyword, or an `add_argument` flag's `default=`."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Module):
            found |= {t.id for s in node.body if isinstance(s, ast.Assign) and _literal(s.value)
                      for t in s.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.ClassDef):
            found |= {s.target.id for s in node.body if isinstance(s, ast.AnnAssign)
                      and isinstance(s.target, ast.Name) and s.value is not None and _literal(s.value)}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            positional = args.posonlyargs + args.args
            pairs = [*zip(positional[len(positional) - len(args.defaults):], args.defaults),
                     *((a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None)]
            found |= {a.arg for a, d in pairs if _literal(d)}
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument" and node.args \
                and isinstance(node.args[0], ast.Constant):
            found |= {node.args[0].value for k in node.keywords if k.arg == "default" and _literal(k.value)}
    return found


@pytest.mark.parametrize("path", sorted(READERS))
def test_a_default_restated_elsewhere_is_read_from_its_declaration_never_written_again(path):
    assert not defaults_written_as_literals(ROOT / path) & READERS[path]


def test_the_checker_sees_a_default_written_as_a_literal(tmp_path):
    source = tmp_path / "x.py"
    source.write_text("K = 3\nclass C:\n    k: int = 3\n    j: int = K\n    n: int | None = None\n"
                      "def f(a, b=0.9, *, c=(0, 1), d=N, e='cpu-small'):\n    pass\n"
                      "p.add_argument('--seeds', default=2)\np.add_argument('--tasks', default=TASKS)\n")
    assert defaults_written_as_literals(source) == {"K", "k", "b", "c", "e", "--seeds"}


def test_the_runs_signal_settings_are_coevolves_signal_parameters_and_diagnose_falls_back_to_them():
    cfg, params = RunConfig(), SignalParams()
    assert cfg.signal_params() == params
    assert (cfg.boundary_samples, cfg.boundary_temperature, cfg.signal_window, cfg.rare_theta, cfg.rare_n_min) == \
        (params.samples, params.temperature, params.window, params.theta, params.n_min)
    assert cfg.boundary_samples == 0   # a run samples no boundary rollouts unless asked, as before


def test_training_hints_and_evaluation_retrieve_the_same_k_memory_records():
    k = memory.DEFAULT_K
    assert EvalSpec().memory_k == k == RunConfig().eval.memory_k == Setting().eval.memory_k
    assert inspect.signature(evaluate_to_dir).parameters["memory_k"].default == k
    assert inspect.signature(memory.MemoryIndex.from_file).parameters["k"].default == k


def test_the_acceptance_the_default_margin_and_the_spread_report_use_one_confidence():
    assert PairedBootstrap().confidence == paired.CONFIDENCE
    assert inspect.signature(paired.acceptance_margin).parameters["confidence"].default == paired.CONFIDENCE
    assert inspect.signature(table.spread).parameters["confidence"].default == paired.CONFIDENCE


def _parser(add_cli) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_cli(parser.add_subparsers(dest="command"))
    return parser


def test_bench_qualitys_flags_default_to_the_settings_and_the_evaluations_declarations():
    args = _parser(quality_cli.add_cli).parse_args(["bench", "quality"])
    setting, default = quality_cli.setting_of(args), Setting()
    assert (args.seeds, args.batch_size, args.max_new_tokens) == \
        (len(default.seeds), EvalSpec().batch_size, EvalSpec().max_new_tokens)
    assert (setting.seeds, setting.tasks, setting.eval) == (default.seeds, default.tasks, default.eval)


def test_eval_train_and_the_probe_take_the_profile_that_trainings_take_by_default():
    evaluated = _parser(eval_cli.add_cli).parse_args(["eval"])
    trained = _parser(add_train_cli).parse_args(["train"])
    probed = probe.parser().parse_args(["--rl", "x.jsonl"])
    assert evaluated.profile == trained.profile == probed.profile == TrainSpec().profile == RunConfig().train.profile
    assert evaluated.base is None and evaluated.threads is None   # the profile's, resolved when it runs
    assert (probed.base, probed.threads, probed.max_new_tokens) == (None, None, EvalSpec().max_new_tokens)

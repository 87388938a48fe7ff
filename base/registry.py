"""The one registry of environments: name → the class implementing `base.environment`.

    get(name)                 the environment registered under `name` (UserError when unknown), as the
                              project calls it: `base.environment.Declared` over the plug-in
    names()                   every registered name, in registration order
    environments()            every environment, in registration order (the leakage index and the
                              ctx.env export walk them in this order)
    by_tag(tag)               the environment whose tasks carry `meta.env.benchmark == tag`, or None
    get_benchmark(name, **o)  get(name).benchmark(**o): its tasks, episodes and scoring
    NO_ENVIRONMENT            the environment a corpus without a known one is evaluated on
    OLD_NAMES, current(name)  names before issue 61 (`replay`), still read: current() maps a stored one
    given(name)               a name from a command line: an old one says its new one on stderr
    DEFAULT_CORPUS            the environment whose default corpus a run without one builds

    register(name, "mod:Cls") one more environment in this process (a test's toy environment)

Entries are "module:Class" strings imported on first use, so this module (the seam the sandbox
and the trainer import) loads no environment until one is asked for. A new environment is a
folder under environments/ and one line here; a package of its own registers one through the
`curateevo.environments` entry point group (name = "module:Class"), read once on first use.
"""
from __future__ import annotations

import functools
import importlib
import sys
from typing import Any

from base.errors import UserError
from base.benchmark import Benchmark
from base.environment import Declared

ENVIRONMENTS = {
    "bfcl": "environments.bfcl.environment:MultiTurnEnvironment",
    "bfcl-single": "environments.bfcl.environment:SingleTurnEnvironment",
    "next-call": "environments.next_call.environment:NextCallEnvironment",
    "scienceworld": "environments.scienceworld.environment:ScienceWorldEnvironment",
    "acebench": "environments.acebench.environment:ACEBenchEnvironment",
    "tau2": "environments.tau2.environment:Tau2Environment",
}
ENTRY_POINTS = "curateevo.environments"
NO_ENVIRONMENT = "next-call"
OLD_NAMES = {"replay": "next-call"}
"""Benchmarks by their name before issue 61, still read (`--benchmark`, a config file, a run.json, a quality
bench cell or calibration, the error types of the records it scored): "replay" is re-executing a curation and
comparing its bytes (`curateevo replay`), not scoring the agent's next call at held-out recorded steps."""
DEFAULT = "bfcl-single"   # the dev benchmark a run, eval and the quality bench use when none is named
DEFAULT_CORPUS = "bfcl"   # whose corpus a run builds when its benchmark builds none and no --corpus is given


@functools.cache
def _plugins() -> None:
    """Environments that installed packages register (`curateevo.environments` entry points), once."""
    from importlib.metadata import entry_points

    for point in entry_points(group=ENTRY_POINTS):
        ENVIRONMENTS.setdefault(point.name, point.value)


def register(name: str, spec: str) -> None:
    """Register the environment "module:Class" under `name` in this process (replacing one of that name)."""
    ENVIRONMENTS[name] = spec
    _load.cache_clear()


def names() -> list[str]:
    _plugins()
    return list(ENVIRONMENTS)


def current(name: Any) -> Any:
    """A stored benchmark name as it is called now (OLD_NAMES); any other value as it is."""
    return OLD_NAMES.get(name, name) if isinstance(name, str) else name


def given(name: str) -> str:
    """A benchmark named on a command line (argparse's `type`): an old name is read as its new one and
    says so on stderr, one line."""
    if name in OLD_NAMES:
        print(f"note: --benchmark {name} is the old spelling of --benchmark {OLD_NAMES[name]}", file=sys.stderr)
    return current(name)


@functools.cache
def _load(name: str) -> Declared:
    module, attr = ENVIRONMENTS[name].split(":")
    return Declared(getattr(importlib.import_module(module), attr)())


def get(name: str) -> Declared:
    """The environment registered under `name`."""
    if name not in names():
        raise UserError(f"unknown benchmark {name!r} (known: {', '.join(sorted(ENVIRONMENTS))})")
    return _load(name)


def environments() -> list[Declared]:
    return [_load(name) for name in names()]


def by_tag(tag: Any) -> Environment | None:
    """The environment whose records name it in `meta.env.benchmark`, or None."""
    if not isinstance(tag, str):
        return None
    return next((e for e in environments() if e.env_tag == tag), None)


def get_benchmark(name: str, **options: Any) -> Benchmark:
    """Build the benchmark of the environment registered under `name` (options go to it, e.g.
    allow_test=True)."""
    return get(name).benchmark(**options)

"""`ctx.env`: simulated interaction inside the sandbox, over the train-split scenarios the host
mounted (sandbox/simenv/export.py writes the folder).

    scenario = ctx.env.start(raw["meta"]["env"])          # None: no such train scenario here
    obs = scenario.execute({"function": {"name": "cd", "arguments": '{"folder": "docs"}'}})
    obs.content, obs.error                                 # the backend's real observation
    ctx.env.check_call(call, raw["tools"])                 # None, or why the call breaks the schema
    ctx.env.validate(messages, reference, raw["meta"]["env"])   # same end state and responses?

BFCL multi-turn scenarios run on BFCL's own backend classes (loaded from the folder's verbatim
copies of `func_source_code`), calls dispatched by sandbox/simenv/episode.py (JSON arguments or
literal-only call strings; nothing evaluated). A single-turn scenario is its function docs: it
checks calls, it has no backend to execute them. Every executed call counts against the
candidate's call budget; past it, EnvBudgetExceeded. Deterministic: the backends are seeded per
instance and nothing is shared between scenarios.
"""
from __future__ import annotations

import importlib.util
import json
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from curation_strategies.toolkit.calls import parse_arguments, validate_call
from curation_strategies.toolkit.errors import is_error_result
from sandbox.simenv.episode import Episode

SCENARIOS_FILE = "scenarios.json"
BACKENDS_DIR = "backends"
# The package BFCL's backend sources import each other under (long_context.py, chiefly).
BACKEND_PACKAGE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
MULTI_TURN, SINGLE_TURN = "bfcl_multi_turn", "bfcl_single_turn"
DEFAULT_MAX_CALLS = 200_000


class EnvError(RuntimeError):
    """A request ctx.env cannot serve (an unknown scenario, a single-turn execute)."""


class EnvBudgetExceeded(EnvError):
    """The candidate's call budget is spent."""


@dataclass(frozen=True)
class Observation:
    content: str     # the backend's return value as BFCL renders it, or its error
    error: bool      # the observation reports a failure


@dataclass(frozen=True)
class Validation:
    valid: bool
    reason: str | None = None   # one sentence naming the first turn that differs
    turn: int | None = None


def _call_parts(call: Mapping) -> tuple[str, Any]:
    """(name, decoded arguments or None) of an OpenAI tool call."""
    function = call.get("function") or {}
    return function.get("name"), parse_arguments(call)


class Scenario:
    """One rebuilt scenario: fresh backends (multi-turn) or the function docs (single-turn)."""

    def __init__(self, env: "Environment", key: str, benchmark: str, spec: Mapping):
        self.env, self.task_id, self.benchmark = env, key, benchmark
        self.tools: list[dict] = env.tools({"benchmark": benchmark, "task_id": key})
        self._episode = None
        if benchmark == MULTI_TURN:
            self._episode = Episode({"id": key, "involved_classes": spec["involved_classes"],
                                     "initial_config": spec["initial_config"]},
                                    spec["functions"], env.backend_class, spec["stateless"],
                                    long_context=spec["long_context"])

    @property
    def executable(self) -> bool:
        return self._episode is not None

    def execute(self, call: Mapping | str) -> Observation:
        """Run one tool call ({"function": {"name", "arguments"}}, or a python call string) on the
        scenario's backends, after the calls made so far; the real observation or error."""
        if self._episode is None:
            raise EnvError(f"{self.task_id} is a single-turn scenario: it has no backend; use check_call")
        self.env.spend(1)
        if isinstance(call, str):
            content = self._episode.execute(call)
        else:
            name, arguments = _call_parts(call)
            if arguments is None:
                content = f"Error during execution: {name}: arguments are not a JSON object"
            else:
                content = self._episode.call(name, arguments)
        return Observation(content, is_error_result(content))

    def run(self, messages: Sequence[Mapping]) -> list[Observation]:
        """Execute every assistant tool call of `messages` in order; their observations."""
        return [self.execute(call) for m in messages if m.get("role") == "assistant"
                for call in m.get("tool_calls") or ()]

    def state(self) -> dict:
        """Each backend's public attributes (what BFCL's state check compares)."""
        if self._episode is None:
            raise EnvError(f"{self.task_id} is a single-turn scenario: it has no state")
        return self._episode.state()

    def check_call(self, call: Mapping) -> str | None:
        return self.env.check_call(call, self.tools)


class Environment:
    """The scenarios of one execution and its call budget."""

    def __init__(self, folder: Path, max_calls: int = DEFAULT_MAX_CALLS):
        self.folder = Path(folder)
        data = json.loads((self.folder / SCENARIOS_FILE).read_text(encoding="utf-8"))
        self._scenarios: dict[str, dict] = data["scenarios"]
        self._modules: dict[str, str] = data["backend_modules"]
        self._tool_table: dict[str, dict] = data["multi_turn_tools"]
        self.max_calls = max_calls
        self.calls = 0

    # ---------------------------------------------------------------- what is here

    def task_ids(self, benchmark: str | None = None) -> list[str]:
        """The ids of the scenarios this execution can rebuild (train split only), sorted."""
        return sorted(k for k, v in self._scenarios.items() if benchmark in (None, v["benchmark"]))

    def has(self, meta_env: Mapping | None) -> bool:
        return self._key(meta_env) is not None

    def tools(self, meta_env: Mapping) -> list[dict]:
        """The scenario's offered tools (OpenAI function schemas)."""
        spec = self._spec(meta_env)
        tools = spec["tools"] if "tools" in spec else [self._tool_table[n] for n in spec["functions"]]
        return json.loads(json.dumps(tools))

    @property
    def calls_left(self) -> int:
        return self.max_calls - self.calls

    # ---------------------------------------------------------------- interaction

    def start(self, meta_env: Mapping | None) -> Scenario | None:
        """A fresh scenario for a record's `meta.env`, or None when it is not a train scenario here."""
        key = self._key(meta_env)
        if key is None:
            return None
        spec = self._scenarios[key]
        return Scenario(self, key, spec["benchmark"], spec)

    def check_call(self, call: Mapping, tools: Sequence[Mapping]) -> str | None:
        """None when `call` names an offered tool with schema-valid arguments, else why not."""
        return validate_call(call, tools)

    def validate(self, messages: Sequence[Mapping], reference: Sequence[Mapping], meta_env: Mapping) -> Validation:
        """Is `messages` as good as `reference` by execution? After every user turn the backends'
        state must equal the reference's, and every non-error observation the reference got in that
        turn must be among the observations `messages` got up to it (BFCL's state and response
        checks); both must have the same number of user turns."""
        ours, our_turns = self._per_turn_states(messages, meta_env)
        theirs, their_turns = self._per_turn_states(reference, meta_env)
        if len(our_turns) != len(their_turns):
            return Validation(False, f"{len(our_turns)} user turns, the reference has {len(their_turns)}")
        seen: list[str] = []
        for t, ((state, obs), (ref_state, ref_obs)) in enumerate(zip(our_turns, their_turns)):
            seen.extend(o.content for o in obs)
            if state != ref_state:
                return Validation(False, f"turn {t}: the backends' state differs from the reference's", t)
            missing = [o.content for o in ref_obs if not o.error and o.content not in seen]
            if missing:
                return Validation(False, f"turn {t}: the reference's result {missing[0][:80]!r} was never obtained", t)
        return Validation(True)

    def _per_turn_states(self, messages: Sequence[Mapping], meta_env: Mapping):
        scenario = self.start(meta_env)
        if scenario is None or not scenario.executable:
            raise EnvError(f"no executable train scenario for {dict(meta_env or {})}")
        turns: list[tuple[dict, list[Observation]]] = []
        current: list[Observation] = []
        started = False
        for message in messages:
            if message.get("role") == "user":
                if started:
                    turns.append((scenario.state(), current))
                current, started = [], True
            else:
                current.extend(scenario.run([message]))
        if started:
            turns.append((scenario.state(), current))
        return scenario, turns

    # ---------------------------------------------------------------- internals

    def spend(self, calls: int) -> None:
        if self.calls + calls > self.max_calls:
            raise EnvBudgetExceeded(f"ctx.env call budget of {self.max_calls} calls is spent")
        self.calls += calls

    def _key(self, meta_env: Mapping | None) -> str | None:
        if not isinstance(meta_env, Mapping):
            return None
        key = meta_env.get("task_id")
        spec = self._scenarios.get(key) if isinstance(key, str) else None
        return key if spec is not None and spec["benchmark"] == meta_env.get("benchmark") else None

    def _spec(self, meta_env: Mapping) -> dict:
        key = self._key(meta_env)
        if key is None:
            raise EnvError(f"no train scenario for {dict(meta_env or {})} in this execution")
        return self._scenarios[key]

    def backend_class(self, class_name: str) -> type:
        """BFCL's backend class, loaded once from the mounted verbatim source."""
        module_name = self._modules[class_name]
        full = f"{BACKEND_PACKAGE}.{module_name}"
        if full not in sys.modules:
            _install_packages()
            for dependency in ("long_context", module_name):
                _load_source(self.folder / BACKENDS_DIR / f"{dependency}.py", f"{BACKEND_PACKAGE}.{dependency}")
        return getattr(sys.modules[full], class_name)


def _install_packages() -> None:
    """Empty parent packages so the sources' own `from bfcl_eval...long_context import` resolves."""
    parts = BACKEND_PACKAGE.split(".")
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = []
            sys.modules[name] = package


def _load_source(path: Path, name: str) -> None:
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)

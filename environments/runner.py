"""The agent runner: a policy against a benchmark, turn by turn, recorded as canonical trajectories.

Episodes. Each (task, sample) is one episode. Episodes run in fixed groups of `group_size(batch_size)`
(at least `GROUP`), in the order of `tasks` (benchmarks hand them out sorted by id) — the group
depends on the task ids alone, never on timing. Inside a group the episodes advance in lockstep:
each round asks the policy once for the next assistant turn of every unfinished episode of the
group, in group order; the policy decodes them `batch_size` at a time (a local policy sorts them
by prompt length first, environments/policies/local.py). A turn:

1. the environment adds the next user messages (`Episode.next_turn()`; None ends the task, after
   the messages of its `closing`, if it has one: a simulated user's last words, never answered);
2. the policy answers; `chat_format.chat_format.parse_tool_calls` reads its calls;
3. calls → `Episode.execute` → one tool message per call, and the policy goes again; a reply
   without calls ends the turn; an unparseable answer is a *format error*: it is kept as the
   assistant's text, nothing runs, and the turn ends (BFCL's inference loop does the same); an
   episode with a simulated user hears the text that ended the turn (`Episode.hear`) and answers it
   in its next turn;
4. after `max_steps` answers with calls in one turn the episode ends there, as BFCL's inference
   loop force-terminates it (recorded in `meta.step_limit_turn`; the checker then fails the
   task). `max_steps` defaults to the task's `meta.max_steps_per_turn` (BFCL multi-turn 20,
   single-turn 1), else 20; a caller's value only lowers it.

The finished conversation is scored by `Benchmark.score` and recorded as a raw corpus record
(DESIGN: Formats): `id` (the task id, `/s<k>` appended when several samples are drawn), `source`,
`task`, `tools` (every tool offered during the episode, in order of first offer), `messages`,
`outcome` {success, reward}, and `meta` {env, benchmark, task_id, category, sample, turn_pass,
feedback φ, format_errors, generations, calls, step_limit_turn, max_steps, memory}.

Steps (`step_accuracy`). Every `StepItem` of the tasks (gold prefix, gold next action) is put to
the policy, `samples` answers each, in fixed groups of `group_size(batch_size)` items in task order; an
answer is right when it parses and `Benchmark.judge_step` accepts its calls; a benchmark with
`judge_calls` (next-call) also records each answer's verdict, why and call counts.

Sampling seeds derive from (seed, first task id of the group, round) — a rerun with the same
tasks, policy and options gives the same records.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

from trainer import memory as memory_mod
from base.benchmark import Benchmark, StepItem, Task
from environments.policies.local import derive_seed
from chat_format import chat_format as cf

DEFAULT_MAX_STEPS = 20  # BFCL's MAXIMUM_STEP_LIMIT per user turn
DEFAULT_BATCH_SIZE = 8
GROUP = 64
"""Episodes (or step items) handed to the policy at once: enough for it to batch prompts of like
length together and to keep decoding once a short answer has ended."""
MAX_RECORDED_TEXT = 2000


def group_size(batch_size: int) -> int:
    return max(batch_size, GROUP)


def jsonable(value: Any, depth: int = 0) -> Any:
    """`value` as plain JSON data a canonical record can hold: tuples and sets become lists,
    non-finite floats and unknown objects become strings, keys become strings."""
    if depth > 50:
        return repr(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((jsonable(v, depth + 1) for v in value), key=repr)
    return repr(value)


def _user_message(m: Any) -> dict:
    if isinstance(m, str):
        return {"role": "user", "content": m}
    return {k: v for k, v in dict(m).items() if k in ("role", "content", "name")}


def _tool_name(tool: Mapping) -> str:
    return tool.get("function", tool).get("name", "")


def parse_answer(text: str, tools: Sequence[Mapping]) -> tuple[cf.Parsed, list[dict] | None, str | None]:
    """(parsed, OpenAI tool_calls or None, format error or None) for one model answer."""
    parsed = cf.parse_tool_calls(text, tools)
    if parsed.error:
        return parsed, None, parsed.error
    if not parsed.calls:
        return parsed, None, None
    try:
        calls = cf.to_openai_tool_calls(parsed.calls)
    except (TypeError, ValueError) as exc:  # e.g. a set or bytes literal in a python-style call
        return parsed, None, f"arguments are not JSON values ({exc})"
    return parsed, calls, None


def _calls_for_judge(tool_calls: Sequence[Mapping]) -> list[dict]:
    return [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in tool_calls]


class _EpisodeState:
    """One (task, sample) episode in progress."""

    def __init__(self, benchmark: Benchmark, task: Task, sample: int, samples: int, max_steps: int,
                 memory: memory_mod.MemoryIndex | None):
        self.benchmark, self.task, self.sample, self.samples = benchmark, task, sample, samples
        self.max_steps = max_steps
        self.episode = benchmark.episode(task)
        self.messages: list[dict] = []
        self.tools: dict[str, dict] = {}
        self.memory, self.memory_ids = memory, []
        self.turn = -1
        self.steps = 0
        self.generations = 0
        self.n_calls = 0
        self.format_errors: list[dict] = []
        self.step_limit_turn: int | None = None
        self.done = False
        self._next_turn()

    def _next_turn(self) -> None:
        turn = self.episode.next_turn()
        if turn is None:
            self.messages.extend(_user_message(m) for m in getattr(self.episode, "closing", None) or [])
            self.done = True
            return
        self.turn += 1
        self.steps = 0
        new = [_user_message(m) for m in turn]
        if self.turn == 0 and self.memory is not None:
            hits = memory_mod.hints(self.memory, new, list(self.episode.offered_tools()),
                                    own={"meta": {"task_id": self.task.id}})
            self.memory_ids = [h["id"] for h in hits]
            new = memory_mod.inject(new, hits)
        self.messages.extend(new)
        if not new:  # an empty turn: nothing to answer
            self._next_turn()

    def prompt(self) -> tuple[list, list]:
        offered = list(self.episode.offered_tools())
        for tool in offered:
            self.tools.setdefault(_tool_name(tool), tool)
        return self.messages, offered

    def consume(self, text: str, offered: Sequence[Mapping]) -> None:
        self.generations += 1
        parsed, tool_calls, error = parse_answer(text, offered)
        if error is not None:
            self.format_errors.append({"turn": self.turn, "step": self.steps, "error": error,
                                       "text": text[:MAX_RECORDED_TEXT]})
            self.messages.append({"role": "assistant", "content": text})
            self._hear(text)
            return
        if tool_calls is None:
            self.messages.append({"role": "assistant", "content": parsed.content})
            self._hear(parsed.content)
            return
        for c in tool_calls:
            c["id"] = f"call_{self.turn}_{self.steps}_{c['id'].rsplit('_', 1)[1]}"
        self.messages.append({"role": "assistant", "content": parsed.content, "tool_calls": tool_calls})
        observations = self.episode.execute(_calls_for_judge(tool_calls))
        if len(observations) != len(tool_calls):
            raise RuntimeError(f"{self.task.id}: the environment answered {len(observations)} observations "
                               f"for {len(tool_calls)} calls")
        for c, obs in zip(tool_calls, observations):
            self.messages.append({"role": "tool", "tool_call_id": c["id"], "content": str(obs)})
        self.n_calls += len(tool_calls)
        self.steps += 1
        if self.steps >= self.max_steps:
            # BFCL's inference loop force-terminates the task here: no later turn is given.
            self.step_limit_turn = self.turn
            self.done = True

    def _hear(self, text: str) -> None:
        """The turn ended on `text`: a simulated user hears it, then the next turn starts."""
        hear = getattr(self.episode, "hear", None)
        if hear is not None:
            hear(text or "")
        self._next_turn()

    def record(self) -> dict:
        task = self.task
        verdict = self.benchmark.score(task, self.messages)
        env = (task.meta or {}).get("env")
        record_id = task.id if self.samples == 1 else f"{task.id}/s{self.sample}"
        first_user = memory_mod.query_of(self.messages)
        meta = {"benchmark": self.benchmark.name, "task_id": task.id, "category": task.category,
                "sample": self.sample, "turn_pass": [bool(x) for x in verdict.turn_pass],
                "feedback": jsonable(verdict.feedback), "format_errors": self.format_errors,
                "generations": self.generations, "calls": self.n_calls,
                "step_limit_turn": self.step_limit_turn, "max_steps": self.max_steps, "memory": self.memory_ids}
        if env is not None:
            meta["env"] = jsonable(env)
        tools = list(self.tools.values()) or list(task.tools)
        return {"id": record_id, "source": (env or {}).get("benchmark") or self.benchmark.name,
                "task": first_user, "tools": jsonable(tools), "messages": jsonable(self.messages),
                "outcome": {"success": bool(verdict.success), "reward": float(verdict.reward)}, "meta": meta}


def task_max_steps(task: Task, max_steps: int | None = None) -> int:
    """Answers with calls allowed per user turn: the task's own limit, lowered by `max_steps`."""
    own = (task.meta or {}).get("max_steps_per_turn") or DEFAULT_MAX_STEPS
    return min(own, max_steps) if max_steps is not None else own


def _chunks(items: Sequence, size: int) -> list[list]:
    return [list(items[i:i + size]) for i in range(0, len(items), size)]


def run_episodes(benchmark: Benchmark, tasks: Sequence[Task], policy, *, max_steps: int | None = None,
                 batch_size: int = DEFAULT_BATCH_SIZE, samples: int = 1, temperature: float = 0.0, seed: int = 0,
                 memory: memory_mod.MemoryIndex | None = None,
                 progress: Callable[[int], None] | None = None, group: int | None = None) -> list[dict]:
    """One trajectory record per (task, sample), in task order then sample order; `group`:
    episodes in lockstep (default `group_size(batch_size)`)."""
    if (max_steps is not None and max_steps < 1) or batch_size < 1 or samples < 1:
        raise ValueError("max_steps, batch_size and samples must be positive")
    runs = [(task, k) for task in tasks for k in range(samples)]
    records: list[dict] = []
    for members in _chunks(runs, group or group_size(batch_size)):
        states = [_EpisodeState(benchmark, task, k, samples, task_max_steps(task, max_steps), memory)
                  for task, k in members]
        key = f"{members[0][0].id}/{members[0][1]}"
        round_ = 0
        while True:
            active = [s for s in states if not s.done]
            if not active:
                break
            prompts = [s.prompt() for s in active]
            texts = policy.generate(prompts, n=1, temperature=temperature, seed=derive_seed(seed, "episode", key, round_))
            for state, prompt, out in zip(active, prompts, texts):
                state.consume(out[0], prompt[1])
            round_ += 1
        for state in states:
            records.append(state.record())
        if progress is not None:
            progress(len(states))
    return records


def step_items(benchmark: Benchmark, tasks: Sequence[Task]) -> list[StepItem]:
    """The step items of `tasks`, in task order."""
    if not hasattr(benchmark, "step_items"):   # a benchmark that scores no steps (base/benchmark.py)
        return []
    return [item for task in tasks for item in benchmark.step_items(task)]


def hinted(items: Sequence[StepItem], memory: memory_mod.MemoryIndex | None) -> list[StepItem]:
    """`items` as the policy is shown them: with THE retrieval's hints (trainer.memory.hints, one
    retrieval per task, never from the task itself) in their prompts; unchanged without a bank.
    The step pass and the gold-call likelihood both read this, so a bank that changes a prompt
    changes both."""
    if memory is None:
        return list(items)
    hits: dict[str, list] = {}
    out = []
    for item in items:
        if item.task_id not in hits:
            hits[item.task_id] = memory_mod.hints(memory, item.messages, item.tools,
                                                  own={"meta": {"task_id": item.task_id}})
        out.append(replace(item, messages=memory_mod.inject(item.messages, hits[item.task_id])))
    return out


def run_steps(benchmark: Benchmark, tasks: Sequence[Task], policy, *, batch_size: int = DEFAULT_BATCH_SIZE,
              samples: int = 1, temperature: float = 0.0, seed: int = 0,
              memory: memory_mod.MemoryIndex | None = None, limit: int | None = None,
              items: Sequence[StepItem] | None = None,
              progress: Callable[[int], None] | None = None) -> list[dict]:
    """One record per step item: {task_id, category, index, gold, samples: [{output, calls,
    format_error, correct, (verdict, why, tp, fp, fn with judge_calls)}], correct (share of right samples)}. `limit` caps the items;
    `items` (the step items of `tasks`, in order) saves asking the benchmark again."""
    if batch_size < 1 or samples < 1:
        raise ValueError("batch_size and samples must be positive")
    categories = {t.id: t.category for t in tasks}
    if items is None:
        items = step_items(benchmark, tasks)
    items = hinted(list(items)[:limit], memory)
    results: list[dict] = []
    judge_calls = getattr(benchmark, "judge_calls", None)   # call-by-call counts (next-call's call_f1)
    for chunk in _chunks(items, group_size(batch_size)):
        prompts = []
        for item in chunk:
            prompts.append(([dict(m) for m in item.messages], list(item.tools)))
        texts = policy.generate(prompts, n=samples, temperature=temperature,
                                seed=derive_seed(seed, "steps", chunk[0].task_id, chunk[0].index))
        for item, outs in zip(chunk, texts):
            sample_rows = []
            for text in outs:
                parsed, tool_calls, error = parse_answer(text, item.tools)
                calls = _calls_for_judge(tool_calls) if tool_calls else []
                correct = error is None and bool(benchmark.judge_step(item, calls))
                row = {"output": text[:MAX_RECORDED_TEXT], "calls": calls, "format_error": error, "correct": correct}
                if judge_calls is not None:
                    row.update(judge_calls(item, calls, error))
                sample_rows.append(row)
            results.append({"task_id": item.task_id, "index": item.index,
                            "category": categories.get(item.task_id, ""), "gold": jsonable(item.gold),
                            "samples": sample_rows,
                            "correct": sum(r["correct"] for r in sample_rows) / len(sample_rows)})
        if progress is not None:
            progress(len(chunk))
    return results


@dataclass
class Evaluation:
    trajectories: list
    steps: list
    timing: dict


def evaluate(benchmark: Benchmark, tasks: Sequence[Task], policy, *, episodes: bool = True, steps: bool = True,
             max_steps: int | None = None, batch_size: int = DEFAULT_BATCH_SIZE, samples: int = 1,
             temperature: float = 0.0, seed: int = 0, memory: memory_mod.MemoryIndex | None = None,
             step_limit: int | None = None, progress_factory: Callable[[str, int], Any] | None = None) -> Evaluation:
    """Episodes and/or step items of `tasks`, with wall times. `progress_factory(label, total)`
    returns a progress bar (anything with `update(n)`, and `close()` if it has one, e.g. tqdm)."""
    timing: dict[str, float] = {}
    trajectories: list = []
    step_rows: list = []

    def timed(label: str, total: int, run, started: float | None = None):
        """`run(update)` with a progress bar of `total`; the wall time since `started` (default:
        now) lands in timing[label_s]."""
        bar = progress_factory(label, total) if progress_factory else None
        started = time.perf_counter() if started is None else started
        try:
            return run(bar.update if bar else None)
        finally:
            getattr(bar, "close", lambda: None)()
            timing[f"{label}_s"] = time.perf_counter() - started

    common = dict(batch_size=batch_size, samples=samples, temperature=temperature, seed=seed, memory=memory)
    if episodes:
        trajectories = timed("episodes", len(tasks) * samples, lambda update: run_episodes(
            benchmark, tasks, policy, max_steps=max_steps, progress=update, **common))
    if steps:
        started = time.perf_counter()
        items = step_items(benchmark, tasks)[:step_limit]
        step_rows = timed("steps", len(items), lambda update: run_steps(
            benchmark, tasks, policy, items=items, progress=update, **common), started)
    return Evaluation(trajectories, step_rows, timing)

"""The next-call dev benchmark, for user corpora that come without an environment (paper §5.1): at each
recorded step of a held-out record the agent is given the recorded messages before it, and its next call
is scored against the recorded one.

`get_benchmark("next-call", corpus=PATH, holdout=SPEC)` loads a raw corpus (any format
`corpora.load_corpus` reads) and holds out a dev tenth and a test tenth of it with
`corpora.split.partition` (by the records' content, copies of one task kept on one side, or
the ids the user chose; the loop's train part is the same function).

`train_ids` is what a loop may curate; `dev_ids` the held-out dev part, which `tasks("dev")` hands
out (sorted by id); `test_ids` the test part, which only `curateevo test` reads (`allow_test`). A task has no environment: its step items alone are scored. Each
assistant message of a held-out record is a `StepItem` — the recorded prefix before it, and as
gold its tool calls (or `[]` for a reply without calls). Records whose outcome says they failed
(`outcome.success is false`) give no step items by default (their actions are not ones to copy).

Each held-out record is one `Task` here, but several may be trials of one published task (tau-bench
and tau2-bench publish a few trials of each): `meta.task_group` names the task a record belongs to
(`corpora.split.task_key`, the group the split keeps on one side) and `meta.published_task_id` the id
it was published with, on the task and on its scored trajectory. Intervals resample those tasks
(base/paired.py's cluster bootstrap), and `log`, `test` and the report count records of tasks.

The benchmark judges tool calls, so a held-out record that makes none gives no step items (its
text replies would be "correct" for any reply without a call: a random model scored P = 1.0 on
FireAct's text-ReAct corpus); a corpus whose held-out records give no step item at all (none
calls a tool, or those that do recorded a failure) is refused when the benchmark is built, and
`run` builds it before any work (`dev_size` says what the hold-out gives). In records that do call tools, a text reply's gold is `[]`: the model
must answer instead of calling.

`judge_step` accepts a next action when it makes the same calls as the recorded one, in any
order: equal tool names and equal arguments after normalisation (JSON-decoded, object key order
ignored, numbers compared by value, booleans kept apart from numbers, strings exact).
`judge_calls` scores it call by call for P = `call_f1`, and `episodes` writes the scored held-out
records for the diagnosis (environments/next_call/scoring.py): the old share of right steps, where
every text step is right for a model that never calls, stays a secondary figure.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from environments.next_call import scoring
from base.benchmark import SPLITS, StepItem, Task, Verdict
from environments.next_call.scoring import normalize_arguments, same_calls
from base.errors import UserError
from corpora.stored import by_id
from corpora.split import DEFAULT_SHARE, group_key, judgeable, partition, split_ids, task_id, task_key

NAME = "next-call"
DEFAULT_HOLDOUT = DEFAULT_SHARE
_group_key = group_key
__all__ = ["NextCallBenchmark", "normalize_arguments", "same_calls", "split_ids"]


def _user_turns(messages: Sequence[Mapping]) -> list[list[dict]]:
    turns: list[list[dict]] = []
    previous = None
    for m in messages:
        if m.get("role") == "user":
            if previous != "user":
                turns.append([])
            turns[-1].append(dict(m))
        previous = m.get("role")
    return turns


def _shown(corpus) -> str:
    return ", ".join(map(str, corpus)) if isinstance(corpus, (list, tuple)) else str(corpus)


def _calls_tools(record: Mapping) -> bool:
    return any(m.get("tool_calls") for m in record["messages"] if m.get("role") == "assistant")


class NextCallBenchmark:
    """The next call at each recorded step of a raw corpus's held-out records (no environment, no episodes)."""

    name = NAME
    executable = False  # no Episode: only the step items can be scored
    metric = "call_f1"  # P on this benchmark (environments/next_call/scoring.py)

    def __init__(self, corpus, holdout=None, fmt: str = "auto", include_failed: bool = False, allow_test: bool = False,
                 on_error: str = "abort", tools=None):
        from corpora import load_corpus

        if corpus is None:
            raise UserError("the next-call benchmark needs a corpus (--corpus FILE)")
        # the run's choices at load time hold here too: skipped lines stay skipped, --tools schemas stay given
        loaded = load_corpus(corpus, fmt, on_error=on_error, tools=tools)
        self.corpus_sha256 = loaded.sha256
        self.on_error, self.skipped_lines = on_error, len(loaded.skipped_lines)
        self.holdout, self.include_failed, self.allow_test = holdout, include_failed, allow_test
        self.records = by_id(loaded.records)   # ids and positions; a record decoded when read (corpora.stored)
        self.train_ids, self.dev_ids, self.test_ids = partition(loaded.records, holdout)
        if not self.dev_ids:
            raise UserError(self.too_small(corpus))
        self.dev = self.dev_size()
        if not self.dev["items"]:
            raise UserError(f"{_shown(corpus)}: {self.why_none()}")
        self.test = self.dev_size("test") if self.test_ids else None
        if self.test is not None and not self.test["items"]:   # said at launch, not after the run
            raise UserError(f"{_shown(corpus)}: {self.why_none('test')}")

    def too_small(self, corpus) -> str:
        """Why the corpus gives no held-out dev (or test) part, and the fix: the ids to choose when
        records sharing a first user message (counted as copies of one task, kept on one side) left
        no group to hold out; a larger corpus when it holds under three records or too few to judge."""
        n, held = len(self.records), set(self.dev_ids) | set(self.test_ids)
        missing = [part for part, ids in (("dev", self.dev_ids), ("test", self.test_ids)) if not ids]
        by_task = (self.holdout or {}).get("rank") == "task"
        groups = {group_key(r, True, by_task) for i, r in self.records.items() if i not in held}
        good = [i for i, r in self.records.items() if i not in held and judgeable(r)]
        why = (f"{n} record(s) cannot be split so" if n < 3 else
               f"its {n - len(held)} record(s) not held out count as copies of {len(groups)} task(s) (records sharing "
               "a task id or their first user message), and copies of one task stay on one side")
        if n >= 3 and len(good) >= len(missing) and n - len(held) > len(missing):
            fix = ("if they are different tasks, choose the held-out records yourself, one id a line: "
                   + " and ".join(f"`run --{part}-ids FILE` with {i!r}" for part, i in zip(missing, good)))
        elif n >= 3:
            fix = (f"only {len(good)} of them call tools without a failed outcome, and each held-out part needs one: "
                   "use a larger corpus, or one with more such records")
        else:
            fix = "use a corpus of at least 3 records of different tasks, 2 of them with tool calls"
        return (f"{_shown(corpus)}: the next-call benchmark holds records of the corpus out to judge the strategy on (a "
                "dev part for the run, a test part for `curateevo test`), each besides the records it curates, and "
                f"{why}: {fix}")

    def _held(self, part: str) -> tuple[list[str], list[str], list[str], list[str]]:
        """The held-out part's ids: all, those making no tool call, those that failed, the rest."""
        held_ids = self.test_ids if part == "test" else self.dev_ids
        no_call, failed = [], []
        for i in held_ids:   # each record read once
            record = self.records[i]
            if not _calls_tools(record):
                no_call.append(i)
            elif not self.include_failed and (record.get("outcome") or {}).get("success") is False:
                failed.append(i)
        left = set(no_call) | set(failed)
        return held_ids, no_call, failed, [i for i in held_ids if i not in left]

    def dev_size(self, part: str = "dev") -> dict:
        """What the held-out dev (or test) part gives to judge: records, those giving step items,
        step items (with tool calls as gold), and those giving none (`why_none` says why)."""
        held_ids, no_call, failed, counted = self._held(part)
        items = [it for i in counted for it in self.step_items(self._task(self.records[i]))]
        return {"records": len(held_ids), "records_with_items": len(counted), "items": len(items),
                "items_with_calls": sum(1 for it in items if it.gold), "failed_outcome": len(failed),
                "no_tool_call": len(no_call)}

    def why_none(self, part: str = "dev") -> str:
        """Why the held-out part gives no step item to judge, and the fix (reads the whole corpus:
        asked only when there is none)."""
        held_ids, no_call, failed, _ = self._held(part)
        why = []
        if failed:
            why.append(f"{len(failed)} recorded a failed outcome (their actions are not ones to copy)")
        if no_call:
            why.append(f"{len(no_call)} make no tool call (replies alone, or actions written as text such as "
                       "ReAct 'Action: x[...]' lines, cannot be judged)")
        held = ", ".join(held_ids[:3]) + (" …" if len(held_ids) > 3 else "")
        good = [i for i, r in self.records.items() if judgeable(r) or (self.include_failed and _calls_tools(r))]
        parts = 2 if self.test_ids or part == "test" else 1   # the held-out parts that each need one
        if len(good) >= parts and len(self.records) > parts:   # the user's choice held out others
            fix = (f"choose the held-out records yourself, one id a line: e.g. `run --dev-ids FILE` with {good[0]!r}"
                   + (f" and `--test-ids FILE` with {good[1]!r}" if parts == 2 else "") + " (records that call tools"
                   + ("" if self.include_failed else " and did not fail") + ")")
        elif any(map(_calls_tools, self.records.values())):
            fix = (f"only {len(good)} record(s) of the corpus call tools" + ("" if self.include_failed else
                   " without a failed outcome") + f", and the held-out part{'s need one each' if parts == 2 else ' needs one'} "
                   "besides what is curated: use a larger corpus, or one with more such records")
        else:
            fix = "no record of the corpus makes a tool call: use a corpus with tool calls"
        return (f"the next-call benchmark judges recorded tool calls, and the held-out {part} part "
                f"({len(held_ids)} record(s): {held}) gives none to judge: " + "; ".join(why) + f"; {fix}")

    def describe(self) -> dict:
        return {"benchmark": self.name, "corpus_sha256": self.corpus_sha256, "split": self.holdout or "default",   # the key metrics.json has always had
                "train": len(self.train_ids), "dev": len(self.dev_ids), "test": len(self.test_ids),
                "dev_items": self.dev["items"], "include_failed": self.include_failed,
                **({"on_error": "skip", "skipped_lines": self.skipped_lines} if self.on_error == "skip" else {})}

    def train_records(self) -> list[dict]:
        """The records a loop may curate (the 90%), in corpus order."""
        train = set(self.train_ids)
        return [r for rid, r in self.records.items() if rid in train]

    def _task(self, record: Mapping) -> Task:
        env = (record.get("meta") or {}).get("env")
        meta = {"source": record.get("source", ""), "outcome": record.get("outcome"),
                "task_group": task_key(record, self.holdout)}
        if task_id(record) is not None:   # the id it was published with (tau-bench `1`, a tau2 task id)
            meta["published_task_id"] = task_id(record)
        if env is not None:
            meta["env"] = env
        return Task(id=record["id"], benchmark=NAME, category=record.get("source") or NAME,
                    tools=list(record.get("tools") or []), turns=_user_turns(record["messages"]), meta=meta)

    def tasks(self, split: str, limit: int | None = None, categories=None) -> list[Task]:
        if split not in SPLITS:
            raise UserError(f"unknown split {split!r} (expected one of {', '.join(SPLITS)})")
        if split == "test" and not self.allow_test:
            raise UserError("the next-call benchmark's test part is read by `curateevo test` only")
        if split == "test" and not self.test_ids:
            raise UserError("this corpus split holds no test part (a run started before user corpora had one, "
                            "or a corpus under three records); its dev part is what it was judged on")
        ids = {"dev": self.dev_ids, "test": self.test_ids}.get(split, self.train_ids)
        tasks = [self._task(self.records[i]) for i in ids]
        if categories:
            wanted = set(categories)
            tasks = [t for t in tasks if t.category in wanted]
        return tasks[:limit] if limit is not None else tasks

    def episode(self, task: Task):
        raise UserError("the next-call benchmark has no environment to run episodes in; it scores the held-out steps")

    def score(self, task: Task, messages: list) -> Verdict:
        raise UserError("the next-call benchmark has no environment to score episodes; it scores the held-out steps")

    def step_items(self, task: Task) -> list[StepItem]:
        record = self.records[task.id]
        if not self.include_failed and (record.get("outcome") or {}).get("success") is False:
            return []
        if not _calls_tools(record):
            return []
        items = []
        messages = record["messages"]
        turn = -1
        for i, m in enumerate(messages):
            role = m.get("role")
            if role == "user" and (i == 0 or messages[i - 1].get("role") != "user"):
                turn += 1
            if role != "assistant" or turn < 0:
                continue
            gold = [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                    for c in m.get("tool_calls") or []]
            items.append(StepItem(task_id=task.id, index=len(items), messages=[dict(x) for x in messages[:i]],
                                  tools=list(record.get("tools") or []), gold=gold,
                                  meta={"message_index": i, "turn": turn, "source": record.get("source", "")}))
        return items

    def judge_step(self, item: StepItem, calls: list) -> bool:
        return same_calls(calls, item.gold)

    def judge_calls(self, item: StepItem, calls: list, format_error: str | None) -> dict:
        """{verdict, why, tp, fp, fn} of one answer at `item` (environments/next_call/scoring.py)."""
        offered = [(t.get("function") or t).get("name") for t in item.tools]
        return scoring.judge_calls(item.gold, calls, format_error, offered)

    def episodes(self, tasks: Sequence[Task], steps: Sequence[Mapping]) -> list[dict]:
        """The scored held-out records of `tasks` as trajectory records (scoring.episodes), each
        naming the task it is a record of (`meta.task_group`, `meta.published_task_id`)."""
        items = [i for t in tasks for i in self.step_items(t)]
        out = scoring.episodes(self.records, items, steps, {t.id: t.category for t in tasks})
        named = {t.id: t.meta for t in tasks}
        for t in out:
            t["meta"].update({k: named[t["id"]][k] for k in ("task_group", "published_task_id") if k in named[t["id"]]})
        return out

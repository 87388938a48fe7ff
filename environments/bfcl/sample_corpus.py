"""The bundled sample corpus: real multi-turn tool-use trajectories from BFCL-V4.

    python -m environments.bfcl.sample_corpus --out environments/data/sample_corpus.jsonl [--seed 0]

Every record is a `multi_turn_base` ground-truth trajectory executed on fresh, real BFCL
backends (environments.bfcl.Episode): the observations are what the backends returned. Besides
the clean trajectories, a few realistic noisy ones are made by real execution too, seeded:

- wrong_call_recovery: one wrong call (a mistyped value or a missing argument) answered by its
  real error observation, then the correct ground-truth call; the task still succeeds;
- redundant_read: a read-only ground-truth call made a second time right after the first;
- abandoned: the trajectory stops after a tool result part-way through; the task fails;
- duplicate: an exact copy of a clean record under a new id.

The noise kind of every record goes to `<out stem>.labels.json`, never into the corpus
records (whose ids are opaque). `outcome` is judged by re-executing each record's calls on
fresh backends against the ground truth, turn by turn, with the official multi-turn checker's
rules (state equal after every turn, ground-truth results contained in the results so far).
The same seed gives a byte-identical file.
"""
from __future__ import annotations

import argparse
import inspect
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Mapping, Sequence

from environments.bfcl.backends import (
    ERROR_PREFIX,
    Episode,
    format_call,
    load_ground_truth,
    load_tasks,
    tool_schemas,
)
from environments.bfcl.common import contains_all
from base.files import atomic_write
from environments.bfcl.splits import multi_turn_split
from base.schemas import canonical_json, check_raw

SOURCE = "bfcl_multi_turn"
CATEGORY = "multi_turn_base"
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "data" / "sample_corpus.jsonl"

# Base task numbers of the sample, spread over the backend-class combinations, all in the train
# split (environments/data/splits.json; build_corpus refuses any other): the sample never holds a
# dev or test scenario. In BFCL the ids are grouped by domain; ids >= 150 are all TravelAPI tasks,
# alone or with MathAPI, MessageAPI, TicketAPI or TwitterAPI. Tasks 167 and 180 are left out:
# some of their turns have an empty ground truth.
SAMPLE_TASKS: tuple[int, ...] = (
    161,                                             # MathAPI + TravelAPI (157, the other, is dev)
    154, 166, 169, 171, 197, 199,                    # MessageAPI + TravelAPI
    152, 156, 160, 162, 165, 173, 177, 181, 190,     # TicketAPI + TravelAPI
    150, 153, 155, 158, 159, 163, 164, 176, 179, 191,   # TravelAPI
    151, 170, 174, 183, 186, 189, 195,               # TravelAPI + TwitterAPI
)
# How many noisy records of each kind (made from seeded picks among SAMPLE_TASKS).
NOISE_COUNTS: dict[str, int] = {"wrong_call_recovery": 4, "redundant_read": 3, "abandoned": 3, "duplicate": 2}

_READ_PREFIXES = ("get_", "list_", "retrieve_", "view_", "search_", "display_", "check_")
_OPENERS = ("Done.", "All set.", "Finished.", "Completed.", "Here is the result.")

Call = tuple[str, dict]          # (function name, keyword arguments as JSON values)
Turns = list[list[Call]]         # per user turn, the calls made in order


def _json_roundtrip(value: Any) -> Any:
    return json.loads(json.dumps(value, ensure_ascii=False))


def _is_error(obs: str) -> bool:
    if obs.startswith(ERROR_PREFIX):
        return True
    try:
        parsed = json.loads(obs)
    except ValueError:
        return False
    return isinstance(parsed, dict) and "error" in parsed


def _gt_turns(task: Mapping, ground_truth: Sequence[Sequence[str]]) -> Turns:
    """Ground-truth call strings as (name, keyword arguments) per turn."""
    probe = Episode(task)
    turns: Turns = []
    for turn in ground_truth:
        calls = []
        for call_str in turn:
            name, kwargs = probe.to_tool_call(call_str)
            calls.append((name, _json_roundtrip(kwargs)))
        turns.append(calls)
    return turns


def _snapshot(ep: Episode) -> tuple:
    return ep.state(), ep.rng_states()


def _run(task: Mapping, turns: Turns, upto: tuple[int, int] | None = None) -> Episode:
    """A fresh episode after the calls of `turns` before position (turn, step) `upto`."""
    ep = Episode(task)
    for i, calls in enumerate(turns):
        for j, (name, kwargs) in enumerate(calls):
            if upto is not None and (i, j) >= upto:
                return ep
            ep.call(name, kwargs)
    return ep


# --------------------------------------------------------------------------------------------
# outcome: the official multi-turn checker's rules, on this module's executor


def judge(task: Mapping, ground_truth: Sequence[Sequence[str]], turns: Turns) -> bool:
    """True when the calls of `turns` pass every ground-truth turn: after each turn the backend
    state equals the ground truth's, and the ground truth's results of that turn are contained
    (as a multiset) in all results so far. A turn with ground truth but no call fails."""
    model, gold = Episode(task), Episode(task)
    so_far: list[str] = []
    for i, gt_calls in enumerate(ground_truth):
        calls = turns[i] if i < len(turns) else []
        so_far.extend(model.call(name, kwargs) for name, kwargs in calls)
        expected = gold.execute_all(gt_calls)
        if not gt_calls:
            continue
        if not calls:
            return False
        if model.state() != gold.state() or not contains_all(so_far, expected):
            return False
    return True


# --------------------------------------------------------------------------------------------
# records


class _Trajectory:
    """Messages of one trajectory, executed on one fresh episode as they are written."""

    def __init__(self, task: Mapping, rng: random.Random):
        self.ep = Episode(task)
        self.rng = rng
        self.messages: list[dict] = []
        self.turns: Turns = []
        self._n = 0
        self._last: tuple[str, str] | None = None

    def user(self, messages: Sequence[Mapping]) -> None:
        self.messages.extend({"role": m["role"], "content": m["content"]} for m in messages)
        self.turns.append([])
        self._last = None

    def call(self, name: str, kwargs: dict) -> str:
        call_id = f"call_{self._n}"
        self._n += 1
        self.messages.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(kwargs, ensure_ascii=False)}}]})
        obs = self.ep.call(name, kwargs)
        self.messages.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": obs})
        self.turns[-1].append((name, kwargs))
        self._last = (name, obs)
        return obs

    def close_turn(self) -> None:
        if self._last is None:
            text = "There is nothing I can do for that with the available tools."
        else:
            name, obs = self._last
            short = obs if len(obs) <= 200 else obs[:197] + "..."
            if _is_error(obs):
                text = f"That did not go through: {name} returned {short}"
            else:
                text = f"{self.rng.choice(_OPENERS)} {name} returned {short}"
        self.messages.append({"role": "assistant", "content": text})


def _record(record_id: str, task: Mapping, trajectory: _Trajectory, success: bool) -> dict:
    first_user = next(m["content"] for m in trajectory.messages if m["role"] == "user")
    return {
        "id": record_id,
        "source": SOURCE,
        "task": first_user,
        "tools": tool_schemas(task),
        "messages": trajectory.messages,
        "outcome": {"success": success, "reward": 1.0 if success else 0.0},
        "meta": {"env": {"benchmark": SOURCE, "task_id": task["id"], "variant": "base"}},
    }


def _build(task: Mapping, gt_turns: Turns, rng: random.Random, *,
           insert_before: dict[tuple[int, int], Call] | None = None,
           repeat_after: set[tuple[int, int]] | None = None,
           cut_after: tuple[int, int] | None = None) -> _Trajectory:
    """Write the ground-truth trajectory with the given edits, executing as it goes."""
    insert_before = insert_before or {}
    repeat_after = repeat_after or set()
    traj = _Trajectory(task, rng)
    for i, (question, calls) in enumerate(zip(task["question"], gt_turns)):
        traj.user(question)
        for j, (name, kwargs) in enumerate(calls):
            if (i, j) in insert_before:
                traj.call(*insert_before[(i, j)])
            traj.call(name, kwargs)
            if (i, j) in repeat_after:
                traj.call(name, kwargs)
            if cut_after == (i, j):
                return traj
        traj.close_turn()
    return traj


# --------------------------------------------------------------------------------------------
# noise, found by real execution


def _typo(value: str) -> str | None:
    """A near miss of a string value: the last digit bumped, else two letters swapped."""
    for k in range(len(value) - 1, -1, -1):
        if value[k].isdigit():
            return value[:k] + str((int(value[k]) + 1) % 10) + value[k + 1:]
    letters = [k for k in range(len(value) - 1) if value[k].isalpha() and value[k + 1].isalpha()
               and value[k] != value[k + 1]]
    if not letters:
        return None
    k = letters[-1]
    return value[:k] + value[k + 1] + value[k] + value[k + 2:]


def _wrong_calls(ep: Episode, name: str, kwargs: dict, rng: random.Random) -> list[tuple[Call, str]]:
    """Candidate wrong versions of a call, each with a description, in seeded order."""
    out: list[tuple[Call, str]] = []
    params = ep.signature(name).parameters
    for key, value in kwargs.items():
        if isinstance(value, str):
            wrong = _typo(value)
            if wrong is not None and wrong != value:
                out.append(((name, {**kwargs, key: wrong}), f"{name}: {key}={value!r} mistyped as {wrong!r}"))
        if key in params and params[key].default is inspect.Parameter.empty:
            out.append(((name, {k: v for k, v in kwargs.items() if k != key}),
                        f"{name}: required argument {key!r} left out"))
    rng.shuffle(out)
    return out


def _find_recovery(task: Mapping, gt_turns: Turns, rng: random.Random):
    """(position, wrong call, detail) such that the wrong call errors and changes nothing."""
    positions = [(i, j) for i, calls in enumerate(gt_turns) for j in range(len(calls))]
    rng.shuffle(positions)
    for i, j in positions:
        name, kwargs = gt_turns[i][j]
        if not kwargs:
            continue
        for wrong, detail in _wrong_calls(Episode(task), name, kwargs, rng):
            ep = _run(task, gt_turns, upto=(i, j))
            before = _snapshot(ep)
            obs = ep.call(*wrong)
            if _is_error(obs) and _snapshot(ep) == before:
                return (i, j), wrong, detail
    return None


def _find_redundant_read(task: Mapping, gt_turns: Turns, rng: random.Random):
    """A position whose call changes no state or RNG and returns the same thing twice
    (functions named like reads are tried first)."""
    positions = [(i, j) for i, calls in enumerate(gt_turns) for j in range(len(calls))]
    rng.shuffle(positions)
    positions.sort(key=lambda p: not gt_turns[p[0]][p[1]][0].startswith(_READ_PREFIXES))
    for i, j in positions:
        name, kwargs = gt_turns[i][j]
        ep = _run(task, gt_turns, upto=(i, j))
        before = _snapshot(ep)
        first = ep.call(name, kwargs)
        if _is_error(first) or _snapshot(ep) != before:
            continue
        if ep.call(name, kwargs) == first and _snapshot(ep) == before:
            return (i, j), f"{name} called twice"
    return None


def _find_cut(gt_turns: Turns, rng: random.Random):
    """A position after which to stop, before the last call (past the first turn if it can)."""
    positions = [(i, j) for i, calls in enumerate(gt_turns) for j in range(len(calls))]
    last = positions[-1]
    later = [p for p in positions if p[0] >= 1 and p != last]
    pool = later or [p for p in positions if p != last]
    if not pool:
        return None
    return rng.choice(pool)


# --------------------------------------------------------------------------------------------


def _record_id(seed: int, number: int, key: str, taken: set[str]) -> str:
    rng = random.Random(f"{seed}:id:{number}:{key}")
    while True:
        rid = f"bfcl-mt-{number}/{rng.getrandbits(32):08x}"
        if rid not in taken:
            taken.add(rid)
            return rid


def build_corpus(seed: int = 0) -> tuple[list[dict], dict]:
    """(records sorted by id, labels by record id)."""
    tasks = load_tasks(CATEGORY)
    ground_truth = load_ground_truth(CATEGORY)
    records: dict[str, dict] = {}
    labels: dict[str, dict] = {}
    taken: set[str] = set()
    gt_cache: dict[int, Turns] = {}
    clean_ids: dict[int, str] = {}

    def add(number: int, key: str, traj: _Trajectory, noise: str, expect: bool, **extra) -> str:
        task_id = f"{CATEGORY}_{number}"
        task = tasks[task_id]
        success = judge(task, ground_truth[task_id], traj.turns)
        if success != expect:
            raise RuntimeError(f"{task_id} {noise}: judged success={success}, expected {expect}")
        rid = _record_id(seed, number, key, taken)
        records[rid] = _record(rid, task, traj, success)
        labels[rid] = {"noise": noise, "task_id": task_id, **extra}
        return rid

    train = set(multi_turn_split("train"))
    for number in SAMPLE_TASKS:
        if number not in train:
            raise ValueError(f"sample task {number} is not in the train split (environments/data/splits.json)")
        task_id = f"{CATEGORY}_{number}"
        task = tasks[task_id]
        gt_cache[number] = _gt_turns(task, ground_truth[task_id])
        traj = _build(task, gt_cache[number], random.Random(f"{seed}:close:{number}:clean"))
        clean_ids[number] = add(number, "clean", traj, "clean", True)

    pick = random.Random(f"{seed}:noise")
    order = list(SAMPLE_TASKS)
    pick.shuffle(order)
    used: Counter = Counter()

    def candidates():
        # least-used tasks first, in the seeded order, so the noise spreads over tasks
        return sorted(order, key=lambda n: used[n])

    for kind in ("wrong_call_recovery", "redundant_read", "abandoned"):
        made = 0
        for number in candidates():
            if made == NOISE_COUNTS[kind]:
                break
            task = tasks[f"{CATEGORY}_{number}"]
            gt = gt_cache[number]
            rng = random.Random(f"{seed}:{kind}:{number}")
            close_rng = random.Random(f"{seed}:close:{number}:{kind}")
            if kind == "wrong_call_recovery":
                found = _find_recovery(task, gt, rng)
                if found is None:
                    continue
                pos, wrong, detail = found
                traj = _build(task, gt, close_rng, insert_before={pos: wrong})
                expect = True
            elif kind == "redundant_read":
                found = _find_redundant_read(task, gt, rng)
                if found is None:
                    continue
                pos, detail = found
                traj = _build(task, gt, close_rng, repeat_after={pos})
                expect = True
            else:
                pos = _find_cut(gt, rng)
                if pos is None:
                    continue
                detail = f"stopped after call {pos[1]} of turn {pos[0]} of {len(gt)} turns"
                traj = _build(task, gt, close_rng, cut_after=pos)
                expect = False
            add(number, f"{kind}:{made}", traj, kind, expect, turn=pos[0], step=pos[1], detail=detail)
            used[number] += 1
            made += 1
        if made < NOISE_COUNTS[kind]:
            raise RuntimeError(f"only {made} {kind} records could be made")

    for k, number in enumerate(candidates()[:NOISE_COUNTS["duplicate"]]):
        original = records[clean_ids[number]]
        rid = _record_id(seed, number, f"duplicate:{k}", taken)
        records[rid] = {**json.loads(json.dumps(original)), "id": rid}
        labels[rid] = {"noise": "duplicate", "task_id": f"{CATEGORY}_{number}", "duplicate_of": original["id"]}
        used[number] += 1

    out = [records[rid] for rid in sorted(records)]
    for rec in out:
        error = check_raw(rec)
        if error:
            raise RuntimeError(f"{rec['id']}: {error}")
    return out, {rid: labels[rid] for rid in sorted(labels)}


def render(records: Sequence[Mapping]) -> str:
    return "".join(canonical_json(r) + "\n" for r in records)


def render_labels(labels: Mapping, seed: int) -> str:
    counts = Counter(v["noise"] for v in labels.values())
    doc = {"seed": seed, "counts": dict(sorted(counts.items())), "labels": labels}
    return json.dumps(doc, sort_keys=True, ensure_ascii=False, indent=1) + "\n"


def labels_path(out: Path) -> Path:
    return out.with_name(out.name.removesuffix(".jsonl") + ".labels.json")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m environments.bfcl.sample_corpus", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="corpus JSONL to write")
    parser.add_argument("--labels", type=Path, default=None, help="noise labels (default: <out stem>.labels.json)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    records, labels = build_corpus(args.seed)
    text = render(records)
    atomic_write(args.out, text)
    atomic_write(args.labels or labels_path(args.out), render_labels(labels, args.seed))
    counts = Counter(v["noise"] for v in labels.values())
    print(f"wrote {len(records)} records ({len(text.encode('utf-8'))} bytes) to {args.out} in "
          f"{time.perf_counter() - started:.1f}s: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

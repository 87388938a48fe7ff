"""Generated corpora for the scale benchmark (bench/scale.py) and the suite's bounded-memory test.

Canonical raw records (DESIGN.md "Formats") with the variation of real agent logs, so that
deduplication does not collapse them: each record's id, request, tools offered, call arguments,
tool outputs, length and outcome are drawn from its own generator (`random.Random` seeded with
the shape, the seed and its index), so record n is the same whatever the corpus size and a
corpus of n records is the first n of a larger one.

- `short`: tool-use sessions of 1–6 calls (like the bundled sample, a few KB a record);
- `long`: coding-agent sessions of 50–300 messages with tool outputs of 0.5–8 KB (file views,
  test logs), tens to hundreds of KB a record.
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Iterator

SHAPES = ("short", "long")
WORDS = ("alpha bravo cargo delta engine filter gamma harbor index jungle kernel ledger matrix needle "
         "orbit parcel quartz radar signal timber update vector window yield zenith account budget "
         "cluster deploy export folder graph header invoice journal ticket request report schedule "
         "flight hotel weather stock order refund payment customer address account balance").split()
CITIES = ("Rivermist Stonebrook Oakridge Lakeview Pinecrest Silverton Maplewood Brookside Eastwick "
          "Fairhaven Glenmoor Highbury Ironwood Kingsbridge").split()
VERBS = ("find book cancel check update list compute send create delete fetch search move rename").split()
NOUNS = ("flight hotel order ticket invoice file branch report meeting payment account reservation "
         "package forecast route").split()
CODE = ("def return import class self if else for while try except raise with yield lambda assert "
        "None True False print len range dict list str int path open read write test fixture").split()


def _tool(name: str) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": f"{name.replace('_', ' ')} for the user",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "count": {"type": "integer"}, "city": {"type": "string"}},
            "required": ["query"]}}}


TOOLS = [_tool(f"{v}_{n}") for v in VERBS for n in NOUNS]   # 210 tools, a few offered per record
CODE_TOOLS = [_tool(name) for name in ("bash", "open_file", "edit_file", "search_dir", "run_tests", "submit")]


def _text(rng: random.Random, vocabulary, n: int) -> str:
    return " ".join(rng.choices(vocabulary, k=n))


def _call(rng: random.Random, tool: dict, n: int) -> dict:
    args = {"query": _text(rng, WORDS, rng.randint(2, 8)), "count": rng.randint(1, 500), "city": rng.choice(CITIES)}
    return {"id": f"call_{n}", "type": "function",
            "function": {"name": tool["function"]["name"], "arguments": json.dumps(args, sort_keys=True)}}


def _session(rng: random.Random, tools: list[dict], calls: int, output_words: tuple[int, int],
             vocabulary) -> list[dict]:
    """A user request, then `calls` assistant tool calls each answered by its tool, then an answer."""
    messages = [{"role": "user", "content": f"{rng.choice(VERBS).capitalize()} the {rng.choice(NOUNS)} "
                                           f"{_text(rng, WORDS, rng.randint(6, 30))} in {rng.choice(CITIES)}"}]
    for n in range(calls):
        call = _call(rng, rng.choice(tools), n)
        if rng.random() < 0.3:
            messages.append({"role": "assistant", "content": _text(rng, WORDS, rng.randint(5, 25)), "tool_calls": [call]})
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        output = _text(rng, vocabulary, rng.randint(*output_words))
        messages.append({"role": "tool", "tool_call_id": call["id"], "name": call["function"]["name"],
                         "content": ("Error: " if rng.random() < 0.1 else "") + output})
    messages.append({"role": "assistant", "content": _text(rng, WORDS, rng.randint(8, 40))})
    return messages


def record(shape: str, seed: int, index: int) -> dict:
    """Record `index` of the corpus of `shape` drawn with `seed`."""
    rng = random.Random(f"scale:{shape}:{seed}:{index}")
    if shape == "short":
        tools = rng.sample(TOOLS, rng.randint(2, 6))
        messages = _session(rng, tools, rng.randint(1, 6), (8, 120), WORDS)
    elif shape == "long":
        tools = CODE_TOOLS
        # 50–300 messages: a request, (messages - 2) / 2 calls with their outputs, an answer
        messages = _session(rng, tools, rng.randint(24, 149), (80, 1300), CODE)
    else:
        raise ValueError(f"unknown shape {shape!r} (one of {', '.join(SHAPES)})")
    success = rng.choice((True, True, False, None))
    return {"id": f"{shape}-{seed}-{index:07d}-{rng.getrandbits(32):08x}", "source": f"scale_{shape}",
            "task": messages[0]["content"], "tools": tools, "messages": messages,
            "outcome": {"success": success, "reward": None if success is None else float(success)},
            "meta": {"task_id": f"task-{rng.randrange(max(1, index // 3 + 1))}"}}


def records(shape: str, n: int, seed: int = 0) -> Iterator[dict]:
    return (record(shape, seed, i) for i in range(n))


def write(path: Path, shape: str, n: int, seed: int = 0) -> int:
    """Write the first `n` records of `shape` as JSONL to `path`; its size in bytes."""
    with open(path, "w", encoding="utf-8") as out:
        for item in records(shape, n, seed):
            out.write(json.dumps(item, ensure_ascii=False, sort_keys=True))
            out.write("\n")
    return Path(path).stat().st_size

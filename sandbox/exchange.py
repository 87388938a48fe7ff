"""The curated artifacts as files: the form TRL, axolotl, `datasets` and `pyarrow.json` read.

A strategy returns records in DESIGN's form (tools and `meta` as JSON objects, `weights` per
assistant turn). Written to `sft.jsonl` / `rl.jsonl` / `memory.jsonl`, a record becomes a row:

- `tools` is the tool list as one JSON string. Tool schemas are free-form JSON Schema: across rows
  a parameter's `default` is a bool, a number or a string, and each row names other parameters,
  so as nested columns Arrow either fails ("changed from number to string") or fills every row
  with every other row's parameters as nulls. TRL's trainers decode a string `tools` column
  themselves (`json.loads`), so the string is what they read.
- `tool_list` is the same tools as a list whose `function.parameters` is a JSON string: the shape
  axolotl's `chat_template` datasets take (`field_tools: tool_list`; axolotl decodes the
  parameters), and Arrow reads it (every leaf is a string).
- `meta` is a JSON string for the same reason (strategies put anything there).
- SFT: every message carries `training` (true on the weight-1 assistant turns, false elsewhere):
  axolotl's `message_field_training: training`, and the saved chat template puts exactly those
  turns inside `{% generation %}`, so TRL's `assistant_only_loss=True` trains them. `weights`
  stays beside it.
- RL: `prompt` is the prefix with the tools rendered into the system message
  (`chat_format.tools_in_system`): TRL's GRPOTrainer reads it as a conversational prompt, and with
  the saved template it renders to exactly the text this project trains and evaluates on.
  `reference`, `reward`, `tools` and `meta` reach TRL reward functions as keyword arguments
  (trainer.rewards).

`from_file` turns a row back into the record (either form is read, so older files still load).
"""
from __future__ import annotations

import json
from typing import Mapping

from base.canonical import Joined, canonical_json, shared, shared_json

ENCODED = ("tools", "meta")
DERIVED = ("tool_list", "prompt")
TRAINING = "training"  # chat_format.chat_format.TRAINING_FIELD (kept here: importing this module loads no transformers)


def to_file(kind: str, record: Mapping) -> dict:
    """The file row of one checked record (`kind`: "sft", "rl" or "memory")."""
    row = dict(record)
    for key in ENCODED:
        if key in row:
            row[key] = shared_json(row[key])   # a tool list the checker shares is encoded once
    if "tools" in record:
        row["tool_list"] = _tool_list(record["tools"])
    if kind == "sft":
        flags = iter(record.get("weights") or [])
        row["messages"] = [{**m, TRAINING: m["role"] == "assistant" and bool(next(flags, 1))}
                           for m in record["messages"]]
    elif kind == "rl":
        from chat_format.chat_format import tools_in_system   # transformers' renderer: loaded when an RL row is made

        # tools_in_system(messages, tools), past its first message the record's own messages: the
        # checker cuts its text from the messages' (base.canonical.Joined), not encoding them again
        messages = record["messages"]
        row["prompt"] = Joined(tools_in_system(messages[:1], record.get("tools")), messages, 1)
    return row


@shared
def _tool_list(tools: list) -> list:
    """`tool_list` of `tools` (the rows of one trajectory's RL records share it when the checker
    shares the tools: made once, not encoded again tool by tool). Made of the tools' own values,
    so the codec writes it as it writes them (base.canonical)."""
    return [{**t, "function": {**t["function"], "parameters": canonical_json(t["function"]["parameters"])}}
            if "parameters" in t.get("function", {}) else t for t in tools]


def from_file(kind: str, row: Mapping) -> dict:
    """The record of one file row; ValueError (one sentence) when its flags and weights disagree."""
    record = {k: v for k, v in row.items() if k not in DERIVED}
    for key in ENCODED:
        if isinstance(record.get(key), str):
            try:
                record[key] = json.loads(record[key])
            except ValueError:
                raise ValueError(f"{key}: not a JSON string ({record[key][:40]!r}…)") from None
    if kind == "sft" and any(isinstance(m, Mapping) and TRAINING in m for m in record.get("messages") or []):
        flags = [bool(m.get(TRAINING)) for m in record["messages"] if m.get("role") == "assistant"]
        weights = [int(f) for f in flags]
        if record.get("weights") is not None and list(record["weights"]) != weights:
            raise ValueError(f"weights {record['weights']} disagree with the messages' training flags {weights}")
        record["weights"] = weights
        record["messages"] = [{k: v for k, v in m.items() if k != TRAINING} for m in record["messages"]]
    return record

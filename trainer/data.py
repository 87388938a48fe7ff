"""SFT and RL records as training examples.

SFT: a record is rendered and tokenized by the tokenizer's chat template (chat_format.chat_format) as
a whole; a token is trained (label = its id) when the template's assistant mask marks it — the
weight-1 assistant turns' bodies and their `<|im_end|>` — else its label is -100 (the labels
TRL's `assistant_only_loss=True` computes from the file). Weight-0 turns, user and tool turns and the system prompt
stay in context, untrained. An example longer than `max_length` is truncated from the right (its
start is kept): the system prompt with the tools and the task come first, and without them the
trained turns would be learned in a context the model never sees at inference. An example left
with no trained token is dropped; both counts go to the summary.

RL: a record's prefix is rendered as a generation prompt. A prompt over `max_prompt_tokens` loses
whole messages after the first user message, oldest first (system prompt, tools, the task and the
latest turns are kept); one that still does not fit is dropped and counted.

A training reads at most `TRAIN_SAMPLE` records of each file (`training_sample`): a larger
curation gives a fixed uniform sample, the same one to the length report and the worker.
"""
from __future__ import annotations

import functools
import itertools
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Container, Iterator, Mapping, Sequence

from base.errors import UserError
from base.files import count_jsonl, iter_jsonl
from base.schemas import check_rl, check_sft
from chat_format import chat_format as cf
from sandbox import exchange

IGNORE = -100
REWARD_COLUMNS = ("reward", "reference", "tools", "meta", "messages")
_CHECKS = {"sft": check_sft, "rl": check_rl}


def read_records(path: str | Path | None, kind: str) -> list[dict]:
    """The records of an SFT or RL JSONL file (the file form of sandbox.exchange, or DESIGN's record
    form), each checked against DESIGN's format."""
    return [] if path is None else list(checked_records(path, kind))


def checked_records(path: str | Path, kind: str, only: Container[int] | None = None) -> Iterator[dict]:
    """`read_records`' records one at a time (`only`: the records at those places, 0-based; the
    others are not decoded, nor checked)."""
    for n, row in iter_jsonl(path, kind.upper(), only):
        try:
            record = exchange.from_file(kind, row)
        except (ValueError, TypeError, AttributeError) as exc:
            raise UserError(f"{path}:{n}: not a valid {kind.upper()} record: {exc}") from None
        problem = _CHECKS[kind](record)
        if problem:
            raise UserError(f"{path}:{n}: not a valid {kind.upper()} record: {problem}")
        yield record


TRAIN_SAMPLE = 5_000
"""Records of one kind a training reads at most. The recipe trains at most steps × batch ×
accumulation SFT examples (2,240 in the paper's profile) and steps × prompts RL prompts (1,600);
reading and tokenizing every record of a 10^5-trajectory curation to shuffle them took gigabytes
and minutes on the host. Above it, a uniform sample (`training_sample`): each record is as likely
to be trained as without it, and a curation of at most this many records trains as before."""


@dataclass(frozen=True)
class TrainingRecords:
    """The records a training of one file reads: all of them, or a sample of `TRAIN_SAMPLE`."""
    records: list[dict]
    of: int                           # records the file holds
    places: list[int] | None = None   # of a sample: each record's place in the file (0-based)

    @property
    def sampled(self) -> bool:
        return self.places is not None


def training_sample(path: str | Path | None, kind: str) -> TrainingRecords:
    """The records a training reads from an SFT or RL file: every one when the file holds at most
    `TRAIN_SAMPLE`, else `TRAIN_SAMPLE` of them drawn with a fixed seed and kept in file order —
    the same records for the length report, the worker and every seed (only those are decoded)."""
    if path is None:
        return TrainingRecords([], 0)
    total = count_jsonl(path, kind.upper())
    if total <= TRAIN_SAMPLE:
        return TrainingRecords(read_records(path, kind), total)
    places = sorted(random.Random(0).sample(range(total), TRAIN_SAMPLE))
    return TrainingRecords(list(checked_records(path, kind, frozenset(places))), total, places)


@dataclass
class SFTStats:
    """What `sft_examples` made of the SFT records (the training summary's `data.sft`)."""
    records: int = 0
    examples: int = 0               # records that kept a trained token after the cut at max_length
    tokens: int = 0                 # of the examples, as trained (after the cut)
    trained_tokens: int = 0         # of those, the ones with a label (weight-1 assistant turns)
    truncated: int = 0              # records longer than max_length (their end is lost)
    dropped_untrained: int = 0      # records left with no trained token after the cut
    trained_turns: int = 0          # weight-1 assistant turns over all records
    masked_turns: int = 0           # weight-0 assistant turns (in context, not trained)
    with_hints: int = 0             # examples given memory hints (trainer.memory.hints; 0 without a bank)


def sft_example(record: Mapping, tokenizer, max_length: int, style: str = cf.DEFAULT_STYLE) -> dict:
    """{"input_ids", "labels", "truncated"} for one SFT record (see the module docstring): the
    tokenizer's `apply_chat_template` with the assistant mask of the template's generation blocks,
    exactly what TRL's `assistant_only_loss=True` computes from the same record."""
    messages = cf.with_training_flags(cf.normalize_messages(record["messages"]), record.get("weights"))
    tools = record.get("tools") or None
    enc = _head_past(messages, tools, tokenizer, max_length, style) or _encode(messages, tools, tokenizer, style)
    ids = list(enc["input_ids"])
    labels = [tok if trained else IGNORE for tok, trained in zip(ids, enc["assistant_masks"])]
    truncated = len(ids) > max_length
    return {"input_ids": ids[:max_length], "labels": labels[:max_length], "truncated": truncated}


def _encode(messages: Sequence[Mapping], tools, tokenizer, style: str):
    return tokenizer.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=True,
                                         return_assistant_tokens_mask=True, tool_style=style)


HEAD_BYTES_PER_TOKEN = 4   # characters of a head tried first for each token it must hold (`_head_past`)


def _head_past(messages: Sequence[Mapping], tools, tokenizer, max_length: int, style: str):
    """The encoding of the fewest leading messages (1, 2, 4, … of them) that already run past
    `max_length` tokens, whose first `max_length` ids and assistant mask are then the whole
    record's — or None (the record is not that long, or no such head is safe). A long session
    (hundreds of KB) is tokenized only as far as training keeps it, not whole. Safe: the head's
    text is the start of the whole record's, and the whole continues there with a special token
    the tokenizer splits on as it is (no stripping or normalizing), so the tokens before it are
    the same either way."""
    need = HEAD_BYTES_PER_TOKEN * max_length
    sizes = list(itertools.accumulate(len(str(m.get("content") or "")) + 64 * len(m.get("tool_calls") or ())
                                      for m in messages))   # about the characters each head renders to
    if not sizes or sizes[-1] < 2 * need:   # a head would be most of the record: the whole costs about as much
        return None
    whole = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, tool_style=style)
    splits = _splitting_tokens(tokenizer)
    k = next(n + 1 for n, size in enumerate(sizes) if size >= need)
    while k < len(messages) and 2 * sizes[k - 1] <= sizes[-1]:   # a head of at most half the record
        head = tokenizer.apply_chat_template(messages[:k], tools=tools, tokenize=False, tool_style=style)
        if len(head.encode("utf-8")) <= max_length:
            k *= 2
            continue
        if not (whole.startswith(head) and any(whole.startswith(token, len(head)) for token in splits)):
            return None   # this template renders a head otherwise than the whole's start (or no split follows)
        enc = _encode(messages[:k], tools, tokenizer, style)
        if len(enc["input_ids"]) > max_length:
            return enc
        # short of the limit: the next head by this one's characters per token, a quarter more
        need = 1.25 * max_length * len(head) / max(1, len(enc["input_ids"]))
        k = max(k + 1, next((n + 1 for n, size in enumerate(sizes) if size >= need), len(messages)))
    return None


def _splitting_tokens(tokenizer) -> tuple[str, ...]:
    """The special tokens the tokenizer cuts its input at, as they are (no lstrip, rstrip or normalization)."""
    return tuple(t.content for t in getattr(tokenizer, "added_tokens_decoder", {}).values()
                 if t.special and not (t.lstrip or t.rstrip or t.normalized or t.single_word))


def sft_examples(records: Sequence[Mapping], tokenizer, max_length: int,
                 style: str = cf.DEFAULT_STYLE, memory=None,
                 places: Sequence[int] | None = None) -> tuple[list[dict], SFTStats]:
    """Training examples of SFT records (DESIGN's form or the file rows of sandbox.exchange), each
    with its `record`: its place in the file (`places[i]` for a sample, else `i`). With
    `memory` (a trainer.memory.MemoryIndex), each example's system prompt gets the hints that
    evaluation's retrieval gives its conversation (`trainer.memory.hints`, never its own record's)."""
    stats = SFTStats(records=len(records))
    out = []
    for index, r in enumerate(map(functools.partial(exchange.from_file, "sft"), records)):
        if memory is not None:
            from trainer.memory import hints, inject

            found = hints(memory, r["messages"], r.get("tools") or [], own=r)
            stats.with_hints += bool(found)
            r = {**r, "messages": inject(r["messages"], found)}
        weights = r.get("weights") or [1] * sum(m["role"] == "assistant" for m in r["messages"])
        stats.trained_turns += sum(weights)
        stats.masked_turns += len(weights) - sum(weights)
        ex = sft_example(r, tokenizer, max_length, style)
        stats.truncated += ex["truncated"]
        trained = sum(label != IGNORE for label in ex["labels"])
        if trained == 0:
            stats.dropped_untrained += 1
            continue
        stats.examples += 1
        stats.tokens += len(ex["input_ids"])
        stats.trained_tokens += trained
        out.append({"input_ids": ex["input_ids"], "labels": ex["labels"],
                    "record": index if places is None else places[index]})   # its record in the file
    return out, stats


@dataclass
class RLStats:
    """What `rl_rows` made of the RL records (the training summary's `data.rl`)."""
    records: int = 0
    prompts: int = 0                # prompts that fit max_prompt_tokens (after shortening)
    shortened: int = 0              # prompts that lost old messages to fit (of those fitted)
    dropped_too_long: int = 0       # prompts that cannot fit at all
    prompt_tokens: int = 0          # of the prompts fitted
    fitted: int = 0                 # prompts fitted: all of them, or those GRPO drew (rl_rows' on_demand)
    rewards: dict = field(default_factory=dict)   # reward name → prompts judged by it


def fit_prompt(messages: Sequence[Mapping], tools: Sequence[Mapping], tokenizer, max_tokens: int,
               style: str = cf.DEFAULT_STYLE) -> tuple[str, int, bool] | None:
    """(prompt text, tokens, shortened) within `max_tokens`, or None when it cannot fit."""
    messages, first_user = _prompt_messages(messages, tools, style)
    shortened = False
    while True:
        text = cf.render_prompt(messages, None, style=style)
        n = len(tokenizer(text, add_special_tokens=False)["input_ids"])
        if n <= max_tokens:
            return text, n, shortened
        # Oldest first, one call and its results at a time. Those whose removal cannot bring the
        # prompt within max_tokens (at most _most_tokens(m) tokens each) are removed without trying
        # the prompt in between: the first try that fits is the one-at-a-time loop's, in a handful
        # of renders rather than one per message of a long session.
        excess, removed = n - max_tokens, 0
        while removed < excess:
            gone = _remove_oldest_call(messages, first_user)
            if not gone:
                return None
            removed += sum(map(_most_tokens, gone))
            shortened = True


def can_fit(messages: Sequence[Mapping], tools: Sequence[Mapping], tokenizer, max_tokens: int,
            style: str = cf.DEFAULT_STYLE) -> bool:
    """Whether `fit_prompt` finds a prompt within `max_tokens`: whether its last try, every old call
    removed (the system messages, the first request and the latest message), fits. One render of a
    short prompt, where fit_prompt on a long session's prefix renders it several times whole."""
    messages, first_user = _prompt_messages(messages, tools, style)
    while _remove_oldest_call(messages, first_user):   # fit_prompt's removals, without its tries
        pass
    text = cf.render_prompt(messages, None, style=style)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"]) <= max_tokens


def _prompt_messages(messages: Sequence[Mapping], tools: Sequence[Mapping], style: str) -> tuple[list, int]:
    """The messages a prompt is rendered from, and the position of the first user request."""
    # The tool block goes into the system message once (the same text, cf.tools_in_system): rendering
    # it through the template again on every try costs ~5x the rest of the prompt.
    messages = cf.tools_in_system(cf.normalize_messages(messages), tools, style)
    return messages, next((i for i, m in enumerate(messages) if m["role"] == "user"), 0)


def _remove_oldest_call(messages: list, first_user: int) -> list:
    """Remove (in place) the oldest message after the first request and the tool results that follow
    it, never the last message (no orphaned results): what was removed, [] when nothing can be."""
    cut = first_user + 1
    if cut >= len(messages) - 1:
        return []
    gone = [messages.pop(cut)]
    while cut < len(messages) - 1 and messages[cut]["role"] == "tool":
        gone.append(messages.pop(cut))
    return gone


def _most_tokens(message: Mapping) -> int:
    """More tokens than removing `message` from a rendered prompt can take away: a token is at
    least a byte; the rendering writes its content as it is, its calls' arguments again as JSON
    (at most twice their bytes: a space after each separator) and a header; a cut can re-merge a
    few tokens at each side."""
    def size(text) -> int:
        return len(str(text).encode("utf-8", "surrogatepass"))

    calls = message.get("tool_calls") or ()
    return (size(json.dumps(message, ensure_ascii=False)) + sum(size(c.get("function", c)) for c in calls) + 64)


def rl_rows(records: Sequence[Mapping], tokenizer, max_prompt_tokens: int,
            style: str = cf.DEFAULT_STYLE, on_demand: bool = False) -> tuple[list[dict], RLStats]:
    """One GRPO row per usable RL record: the file form of sandbox.exchange (the columns TRL hands
    to trainer.rewards) with `prompt` the fitted prompt text. `records` may be file rows too.
    `on_demand`: whether a prompt fits is asked in one render (`can_fit`, the same verdict) and its
    text is left empty, with the row's place in `records` as `row`: GRPO fits the prompts it draws
    (`PromptsOnDemand`), not every one of a sample of thousands it draws a few of."""
    stats = RLStats(records=len(records))
    rows = []
    for place, r in enumerate(map(functools.partial(exchange.from_file, "rl"), records)):
        if on_demand:
            fitted = ("", 0, False) if can_fit(r["messages"], r.get("tools") or [], tokenizer, max_prompt_tokens, style) else None
        else:
            fitted = fit_prompt(r["messages"], r.get("tools") or [], tokenizer, max_prompt_tokens, style)
        if fitted is None:
            stats.dropped_too_long += 1
            continue
        text, n, shortened = fitted
        stats.prompts += 1
        stats.fitted += not on_demand
        stats.shortened += shortened
        stats.prompt_tokens += n
        stats.rewards[r["reward"]] = stats.rewards.get(r["reward"], 0) + 1
        row = exchange.to_file("rl", r)
        rows.append({"prompt": text, **({"row": place} if on_demand else {}), **{k: row.get(k) for k in REWARD_COLUMNS}})
    return rows, stats


class PromptsOnDemand:
    """The GRPO dataset's transform for rows made `on_demand` (`rl_rows`): each row drawn gets its
    prompt fitted then (`fit_prompt`, once a row) from its record, and `stats` counts it (`fitted`,
    `shortened`, `prompt_tokens`); the `row` column is not handed on, so TRL sees the rows it always did.

        Dataset.from_list(rows).with_transform(PromptsOnDemand(records, tokenizer, cap, stats))
    """

    def __init__(self, records: Sequence[Mapping], tokenizer, max_prompt_tokens: int, stats: RLStats,
                 style: str = cf.DEFAULT_STYLE):
        self.records, self.tokenizer, self.cap, self.stats, self.style = records, tokenizer, max_prompt_tokens, stats, style
        self.prompts: dict[int, str] = {}

    def prompt(self, place: int) -> str:
        if place not in self.prompts:
            r = exchange.from_file("rl", self.records[place])
            text, n, shortened = fit_prompt(r["messages"], r.get("tools") or [], self.tokenizer, self.cap, self.style)
            self.prompts[place] = text
            self.stats.fitted += 1
            self.stats.shortened += shortened
            self.stats.prompt_tokens += n
        return self.prompts[place]

    def __call__(self, batch: dict) -> dict:
        return {**{k: v for k, v in batch.items() if k != "row"}, "prompt": [self.prompt(p) for p in batch["row"]]}

"""How much of a curation a profile's length limits would cut or drop, before any training.

The records are rendered and tokenized as training will, through the chat format: an SFT record
longer than `max_length` is cut (its end is lost) and dropped when no trained token is left
(`trainer.data.sft_examples` itself); an RL prompt over `max_prompt_tokens` loses old messages
and is dropped when it still does not fit (`trainer.data.fit_prompt`). `fit_prompt` removes one
message at a time and tokenizes each shorter prompt; here only its two ends are tokenized — the
whole prompt, and the shortest one it would try (the messages up to the first user message plus
the last) — which give the same counts in two tokenizations per record, since dropping messages
never lengthens a prompt. A multi-turn
corpus with a long system prompt and many tool schemas (tau-bench: 14 tools) can lose every
record this way, so a run should check `LengthReport.survivors` before it trains.
"""
from __future__ import annotations

import functools
import math
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Iterable, Mapping, Sequence

from base.errors import RunFailed
from chat_format import chat_format as cf
from sandbox import exchange
from trainer.data import IGNORE, sft_example

if TYPE_CHECKING:
    from trainer.train import TrainSpec


@dataclass(frozen=True)
class LengthReport:
    max_length: int
    max_prompt_tokens: int
    sft_records: int
    sft_cut: int          # longer than max_length: their end is not trained
    sft_dropped: int      # nothing trained is left after the cut
    rl_records: int
    rl_cut: int           # prompts shortened by dropping old messages
    rl_dropped: int       # prompts that cannot fit at all
    sft_longest: int = 0  # tokens of the longest SFT record, whole
    rl_longest: int = 0   # tokens of the longest RL prompt, whole
    sft_of: int | None = None   # records the SFT file holds, where its records are training's sample
    rl_of: int | None = None    # (trainer.data.TRAIN_SAMPLE); None: the file's every record

    @property
    def survivors(self) -> int:
        """SFT examples plus RL prompts that training would use."""
        return self.sft_records - self.sft_dropped + self.rl_records - self.rl_dropped

    def to_json(self) -> dict:
        """The report as a run's journal keeps it: the prompt cap by its written name (trainer.recipe.WRITTEN_AS)."""
        from trainer.recipe import written_as

        fields = {k: v for k, v in asdict(self).items() if v is not None or k not in ("sft_of", "rl_of")}
        return {**written_as(fields), "survivors": self.survivors}

    def summary(self) -> str:
        def of(n: int | None) -> str:
            return "" if n is None else f" (a sample of the file's {n})"

        return (f"SFT {self.sft_records}{of(self.sft_of)}: {self.sft_cut} cut, {self.sft_dropped} dropped at "
                f"max_length {self.max_length}; RL {self.rl_records}{of(self.rl_of)}: {self.rl_cut} shortened, "
                f"{self.rl_dropped} dropped at max_prompt_tokens {self.max_prompt_tokens}")

    def advice(self) -> str:
        """What would keep the records ("" when nothing is cut or dropped): a --max-length for SFT
        (the longest record, rounded up to 256 tokens); RL prompts follow the profile."""
        parts = []
        if self.sft_cut or self.sft_dropped:
            parts.append(f"--max-length {math.ceil(self.sft_longest / 256) * 256} keeps every SFT record whole "
                         f"(the longest has {self.sft_longest} tokens)")
        if self.rl_dropped:
            parts.append(f"--train-max-prompt-tokens {math.ceil(self.rl_longest / 256) * 256} keeps every RL prompt "
                         f"(the longest has {self.rl_longest} tokens)")
        return "; ".join(parts)


def length_report(sft: Sequence[Mapping], rl: Sequence[Mapping], tokenizer, max_length: int,
                  max_prompt_tokens: int, style: str = cf.DEFAULT_STYLE) -> LengthReport:
    """What `max_length` / `max_prompt_tokens` do to these curated records (module docstring). Each
    SFT record is encoded as training encodes it (`sft_example`: a long one only as far as it is
    kept); what a cut one holds whole, and each RL prompt's two ends, are counted in batches
    (`_token_counts`: the tokenizer's own threads), the same counts one by one would give."""
    lengths, cut, dropped = [], 0, 0

    def cut_whole():   # the whole text of each record the cut shortens, made as the count reaches it
        nonlocal cut, dropped
        for r in map(functools.partial(exchange.from_file, "sft"), sft):
            ex = sft_example(r, tokenizer, max_length, style)   # cut here as trainer.data.sft_examples cuts
            cut += ex["truncated"]
            dropped += all(label == IGNORE for label in ex["labels"])
            if ex["truncated"]:   # its whole length: the advice's --max-length
                messages = cf.with_training_flags(cf.normalize_messages(r["messages"]), r.get("weights"))
                yield tokenizer.apply_chat_template(messages, tools=r.get("tools") or None, tokenize=False,
                                                    tool_style=style)
            else:
                lengths.append(len(ex["input_ids"]))

    longest = max(_token_counts(tokenizer, cut_whole()), default=0)
    fits = _prompts_fit(rl, tokenizer, max_prompt_tokens, style)
    return LengthReport(max_length=max_length, max_prompt_tokens=max_prompt_tokens,
                        sft_records=len(sft), sft_cut=cut, sft_dropped=dropped, rl_records=len(rl),
                        rl_cut=[f for f, _ in fits].count("shortened"), rl_dropped=[f for f, _ in fits].count("dropped"),
                        sft_longest=max(longest, max(lengths, default=0)), rl_longest=max((n for _, n in fits), default=0))


BATCH_CHARS = 4 << 20
"""Characters of text `_token_counts` encodes in one batch, at most (beyond a single longer text): a
batch's encodings take tens of bytes a token, so counting a long-session curation's cut records
all at once held gigabytes (a tiny run on 10^3 long sessions peaked at 3.6 GiB)."""


def _token_counts(tokenizer, texts: Iterable[str], batch: int = 256) -> list[int]:
    """Tokens of each text, as `tokenizer(text, add_special_tokens=False)` counts them, encoded
    `batch` at a time (a fast tokenizer encodes a batch on all cores) and never more than
    BATCH_CHARS characters but one text at once; `texts` is read as it is counted."""
    counts, pending, chars = [], [], 0

    def flush() -> None:
        counts.extend(map(len, tokenizer(pending, add_special_tokens=False, return_attention_mask=False)["input_ids"]))
        pending.clear()

    for text in texts:
        if pending and (len(pending) == batch or chars + len(text) > BATCH_CHARS):
            flush()
            chars = 0
        pending.append(text)
        chars += len(text)
    if pending:
        flush()
    return counts


def _prompts_fit(rl: Sequence[Mapping], tokenizer, limit: int, style: str) -> list[tuple[str, int]]:
    """('whole' | 'shortened' | 'dropped', tokens of the whole prompt) of each RL record: what
    `trainer.data.fit_prompt` does to it. Only its two ends are counted — the whole prompt, and
    the shortest one fit_prompt would try (the messages up to the first user message plus the
    last) — which give the same verdicts, since dropping messages never lengthens a prompt."""
    def prompt(r: Mapping) -> tuple[list, list]:
        r = exchange.from_file("rl", r)
        return cf.normalize_messages(r["messages"]), r.get("tools") or []

    whole = _token_counts(tokenizer, (cf.render_prompt(*prompt(r), style=style) for r in rl))

    def shortest(n: int) -> str | None:   # the shortest prompt fit_prompt would try; None: it removes nothing
        messages, tools = prompt(rl[n])
        first_user = next((i for i, m in enumerate(messages) if m["role"] == "user"), 0)
        if first_user + 1 < len(messages) - 1:
            return cf.render_prompt(messages[:first_user + 1] + messages[-1:], tools, style=style)
        return None

    removable = []   # the prompts over the limit that fit_prompt can shorten, in order

    def shortest_texts():
        for n, tokens in enumerate(whole):
            text = shortest(n) if tokens > limit else None
            if text is not None:
                removable.append(n)
                yield text

    counts = _token_counts(tokenizer, shortest_texts())   # fills `removable` as it reads
    fits_short = {n: tokens <= limit for n, tokens in zip(removable, counts)}
    return [("whole" if tokens <= limit else "shortened" if fits_short.get(n) else "dropped", tokens)
            for n, tokens in enumerate(whole)]


def trains_any(sft: Sequence[Mapping], rl: Sequence[Mapping], profile: str, max_length: int | None = None,
               max_prompt_tokens: int | None = None) -> bool:
    """Whether a profile's limits (as `profile_length_report` takes them) keep any of these records,
    asked one record at a time and stopped at the first kept: `LengthReport.survivors > 0` without
    counting the rest (a chunk of long sessions holds thousands of RL prompts)."""
    from trainer.data import can_fit
    from trainer.recipe import get_profile

    prof = get_profile(profile)
    tokenizer, max_length, cap = _profile_tokenizer(prof), max_length or prof.max_length, max_prompt_tokens or prof.max_prompt_tokens
    for r in map(functools.partial(exchange.from_file, "sft"), sft):
        if any(label != IGNORE for label in sft_example(r, tokenizer, max_length)["labels"]):
            return True
    return any(can_fit(r["messages"], r.get("tools") or [], tokenizer, cap)
               for r in map(functools.partial(exchange.from_file, "rl"), rl))


def profile_length_report(sft: Sequence[Mapping], rl: Sequence[Mapping], profile: str,
                          max_length: int | None = None, max_prompt_tokens: int | None = None) -> LengthReport:
    """`length_report` with a recipe profile's base tokenizer and limits (`max_length`, when
    given, overrides the profile's SFT limit, as a run option would)."""
    from trainer.recipe import get_profile

    prof = get_profile(profile)
    return length_report(sft, rl, _profile_tokenizer(prof), max_length or prof.max_length,
                         max_prompt_tokens or prof.max_prompt_tokens)


def files_length_report(sft: Path | None, rl: Path | None, profile: str, max_length: int | None = None,
                        max_prompt_tokens: int | None = None) -> LengthReport:
    """`profile_length_report` of the records a training reads from these files: all of them, or
    its sample of a larger file (trainer.data.training_sample), never more held at once."""
    from trainer.data import training_sample

    read = {"sft": training_sample(sft, "sft"), "rl": training_sample(rl, "rl")}
    report = profile_length_report(read["sft"].records, read["rl"].records, profile, max_length, max_prompt_tokens)
    return replace(report, **{f"{kind}_of": r.of for kind, r in read.items() if r.sampled})


def spec_length_report(spec: "TrainSpec", sft: Path | None, rl: Path | None) -> LengthReport:
    """What `spec`'s length limits (its profile's, or the budget's max_length / max_prompt_tokens)
    cut or drop of these files, said nowhere (UserError on a bad budget override, before any tokenizer loads)."""
    limits = spec.resolved
    return files_length_report(sft, rl, spec.profile, limits.max_length, limits.max_prompt_tokens)


def check_lengths(spec: "TrainSpec", sft: Path | None, rl: Path | None,
                  echo: IO[str] | None = sys.stderr) -> LengthReport:
    """What the profile's length limits cut or drop, said to `echo` before training (every training
    of the project: `curateevo train` and experiments.train_eval.train_on); RunFailed when nothing is
    left to train on (every SFT record and every RL prompt too long): one sentence with the numbers
    and the fix."""
    report = spec_length_report(spec, sft, rl)
    advice = report.advice()
    if report.survivors == 0:
        raise RunFailed(f"nothing would be trained: {report.summary()}; {advice or 'curate shorter records'} "
                        f"(profile {spec.profile})")
    say = (lambda text: print(text, file=echo, flush=True)) if echo is not None else (lambda text: None)
    say(f"length ({spec.profile}): {report.summary()}")
    if report.sft_records and report.sft_dropped == report.sft_records:
        say(f"warning: every one of the {report.sft_records} SFT records is dropped at max_length "
            f"{report.max_length}, so this training uses RL alone; {advice}")
    elif report.sft_dropped or report.rl_dropped:
        say(f"note: {advice}")
    return report


def context_tokens(sft: Sequence[Mapping], tokenizer, style: str = cf.DEFAULT_STYLE) -> int:
    """Tokens of the longest context an SFT record opens with — its leading system messages with
    the tools, and its first user message — as training renders them: what every window of a long
    session repeats, so what no length limit can go below."""
    longest = 0
    for r in map(functools.partial(exchange.from_file, "sft"), sft):
        messages = cf.normalize_messages(r["messages"])
        first_user = next((i for i, m in enumerate(messages) if m["role"] == "user"), None)
        head = [m for m in messages if m["role"] == "system"][:1] if first_user is None else messages[:first_user + 1]
        text = cf.render_prompt(head, r.get("tools") or [], style=style)
        longest = max(longest, len(tokenizer(text, add_special_tokens=False)["input_ids"]))
    return longest


def corpus_limits(sft: Sequence[Mapping], profile: str) -> tuple[int, int, int]:
    """(max_length, max_prompt_tokens, context): a profile's limits measured from after the longest
    context of these records (`context_tokens`), rounded up to 256 tokens — the limits a run on a
    corpus whose system prompt and tools alone outgrow the profile's trains at, so that each window
    of a session holds its context and about as much conversation as the profile's records do."""
    from trainer.recipe import get_profile

    prof = get_profile(profile)
    context = context_tokens(sft, _profile_tokenizer(prof))
    return (math.ceil((context + prof.max_length) / 256) * 256,
            math.ceil((context + prof.max_prompt_tokens) / 256) * 256, context)


def _profile_tokenizer(prof):
    from trainer.models import NAMES, check_name, embedded_tokenizer_dir

    # The embedded and tiny models share SmolLM2's tokenizer, which builds without the model.
    return _tokenizer(str(embedded_tokenizer_dir()) if prof.base in NAMES else check_name(prof.base))


@functools.lru_cache(maxsize=4)
def _tokenizer(source: str):
    """One load per tokenizer (a run's length check measures ρ0's records a few at a time)."""
    from trainer.models import load_tokenizer

    return load_tokenizer(source)

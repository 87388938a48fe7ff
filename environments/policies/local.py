"""A local `transformers` policy: base model + optional LoRA adapter, batched with left padding.

Prompts are rendered by `chat_format.chat_format` through `trainer.data.fit_prompt` (the function
training uses for RL prompts: a conversation too long for `max_prompt_tokens` loses its oldest
turns after the first user message; one that cannot fit at all gets an empty answer, counted in
`stats["prompts_too_long"]`). An adapter is merged into the base weights once at load (one matrix
product per layer at decoding, not three). Decoding is greedy at temperature 0: a call's prompts
are sorted by token length and decoded `batch_size` at a time, each row leaving its batch when it
emits the stop marker (environments/policies/decode.py). A positive temperature samples with
`transformers`' `generate` in call order, `torch.manual_seed(seed, batch)` set before each batch, so
a result depends only on the seed and the batch composition, which the caller fixes
(environments.runner). Thread count and
device are pinned at construction and recorded by `describe()`; device "auto" takes a GPU when
there is one and dtype "auto" is bfloat16 on a GPU that has it, float32 elsewhere
(trainer.devices.placement, the rule training uses).
"""
from __future__ import annotations

import hashlib
import os
import time
from typing import Sequence

from environments.policies.limits import DEFAULT_BATCH_SIZE, DEFAULT_MAX_NEW_TOKENS, DEFAULT_MAX_PROMPT_TOKENS
from chat_format import chat_format as cf

# OpenMP threads that spin while they wait are many times slower when the cores are shared with
# other work (greedy decoding of SmolLM2-135M on 2 loaded cores, docs/results/training.md). It only takes effect if set before torch is imported;
# a value the user set wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

MAX_DEFAULT_THREADS = 16


def derive_seed(*parts) -> int:
    """A 31-bit seed from any parts (stable across processes, unlike `hash`)."""
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def default_threads() -> int:
    return max(1, min(os.cpu_count() or 1, MAX_DEFAULT_THREADS))


class TransformersPolicy:
    name = "transformers"

    def __init__(self, base: str, adapter: str | None = None, *, device: str = "auto", dtype: str = "auto",
                 threads: int | None = None, batch_size: int = DEFAULT_BATCH_SIZE,
                 max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, max_prompt_tokens: int = DEFAULT_MAX_PROMPT_TOKENS,
                 style: str = cf.DEFAULT_STYLE, model=None, tokenizer=None, merge: bool = True):
        import torch

        from trainer.devices import choose
        from trainer.models import load_policy

        if batch_size < 1 or max_new_tokens < 1 or max_prompt_tokens < 1:
            raise ValueError("batch_size, max_new_tokens and max_prompt_tokens must be positive")
        if style not in cf.STYLES:
            raise ValueError(f"unknown chat style {style!r} (one of {', '.join(cf.STYLES)})")
        device, auto_dtype = choose(device, "auto")
        dtype = auto_dtype if dtype == "auto" else dtype
        self.threads = threads or default_threads()
        torch.set_num_threads(self.threads)
        if model is None or tokenizer is None:
            model, tokenizer = load_policy(base, adapter, dtype=dtype, device=device)
            if adapter is not None and merge:
                model = model.merge_and_unload()   # W + BA once: faster decoding (docs/results/training.md)
        else:
            model.to(device)
            model.eval()
        tokenizer.padding_side = "left"
        self.model, self.tokenizer = model, tokenizer
        self.base, self.adapter, self.device, self.dtype = base, adapter, device, dtype
        self.batch_size, self.max_new_tokens, self.max_prompt_tokens = batch_size, max_new_tokens, max_prompt_tokens
        self.style = style
        self.merged = adapter is not None and merge and not hasattr(model, "peft_config")
        self.stats = {"calls": 0, "batches": 0, "prompts": 0, "prompts_too_long": 0, "prompts_shortened": 0,
                      "prompt_tokens": 0, "padding_tokens": 0, "generated_tokens": 0, "row_steps": 0,
                      "padded_row_steps": 0, "generate_s": 0.0}

    def describe(self) -> dict:
        import torch
        import transformers

        return {"backend": self.name, "base": self.base, "adapter": None if self.adapter is None else str(self.adapter),
                "device": self.device, "dtype": self.dtype, "threads": torch.get_num_threads(),
                "batch_size": self.batch_size, "max_new_tokens": self.max_new_tokens,
                "max_prompt_tokens": self.max_prompt_tokens, "chat_style": self.style, "padding": "left",
                "adapter_merged": self.merged, "decoding": "greedy: sorted by prompt length, a row leaves its "
                                                           "batch at the stop marker; sampling: generate",
                "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
                "torch": torch.__version__, "transformers": transformers.__version__}

    def _generation_config(self, n: int, temperature: float):
        from transformers import GenerationConfig

        tok = self.tokenizer
        sampling = temperature > 0
        return GenerationConfig(max_new_tokens=self.max_new_tokens, do_sample=sampling,
                                temperature=temperature if sampling else None, top_p=1.0 if sampling else None,
                                top_k=0 if sampling else None, num_return_sequences=n,
                                eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)

    def generate(self, prompts: Sequence[tuple], n: int = 1, temperature: float = 0.0,
                 seed: int | None = None) -> list[list[str]]:
        import torch

        from trainer.data import fit_prompt

        if n < 1:
            raise ValueError("n must be at least 1")
        if temperature < 0:
            raise ValueError("temperature must be >= 0")
        if temperature == 0 and n > 1:
            raise ValueError("several samples need a positive temperature (greedy decoding repeats itself)")
        torch.set_num_threads(self.threads)  # pinned even if someone changed it since
        self.stats["calls"] += 1
        out: list[list[str]] = [[] for _ in prompts]
        texts: list[tuple[int, str]] = []
        lengths: dict[int, int] = {}
        for i, (messages, tools) in enumerate(prompts):
            fitted = fit_prompt(messages, tools or [], self.tokenizer, self.max_prompt_tokens, self.style)
            self.stats["prompts"] += 1
            if fitted is None:
                self.stats["prompts_too_long"] += 1
                out[i] = [""] * n
                continue
            text, n_tokens, shortened = fitted
            self.stats["prompts_shortened"] += int(shortened)
            self.stats["prompt_tokens"] += n_tokens
            texts.append((i, text))
            lengths[i] = n_tokens
        started = time.perf_counter()
        if temperature == 0:
            self._greedy(texts, lengths, out)
        else:
            self._sample(texts, out, n, temperature, seed)
        self.stats["generate_s"] += time.perf_counter() - started
        return out

    def _encode(self, chunk: list[tuple[int, str]]):
        enc = self.tokenizer([t for _, t in chunk], return_tensors="pt", padding=True,
                             add_special_tokens=False).to(self.device)
        self.stats["batches"] += 1
        self.stats["padding_tokens"] += int((enc["attention_mask"] == 0).sum())
        return enc

    def _greedy(self, texts: list[tuple[int, str]], lengths: dict[int, int], out: list[list[str]]) -> None:
        from environments.policies.decode import greedy_decode

        ordered = sorted(texts, key=lambda it: (lengths[it[0]], it[0]))   # stable: ties in call order
        for b in range(0, len(ordered), self.batch_size):
            chunk = ordered[b:b + self.batch_size]
            enc = self._encode(chunk)
            new, cost = greedy_decode(self.model, enc["input_ids"], enc["attention_mask"],
                                      max_new_tokens=self.max_new_tokens, stop_id=self.tokenizer.eos_token_id)
            self.stats["row_steps"] += cost["row_steps"]
            self.stats["padded_row_steps"] += cost["padded_row_steps"]
            for (i, _), ids in zip(chunk, new):
                self.stats["generated_tokens"] += len(ids)
                out[i].append(self.tokenizer.decode(ids, skip_special_tokens=False).split(cf.STOP)[0])

    def _sample(self, texts: list[tuple[int, str]], out: list[list[str]], n: int, temperature: float,
                seed: int | None) -> None:
        import torch

        config = self._generation_config(n, temperature)
        for b in range(0, len(texts), self.batch_size):
            chunk = texts[b:b + self.batch_size]
            enc = self._encode(chunk)
            torch.manual_seed(derive_seed(0 if seed is None else seed, b // self.batch_size))
            with torch.inference_mode():
                generated = self.model.generate(**enc, generation_config=config)
            new = generated[:, enc["input_ids"].shape[1]:]
            self.stats["generated_tokens"] += int((new != self.tokenizer.pad_token_id).sum())
            decoded = self.tokenizer.batch_decode(new.cpu(), skip_special_tokens=False)
            for row, text in enumerate(decoded):
                out[chunk[row // n][0]].append(text.split(cf.STOP)[0])

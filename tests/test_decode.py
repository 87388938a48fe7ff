"""Greedy decoding that drops a row from its batch at the stop marker (environments/policies/decode.py)
gives `transformers`' greedy `generate` tokens, at the cost of the rows' own lengths."""
from __future__ import annotations

import pytest
import torch

from environments.policies.decode import greedy_decode
from trainer.models import load_policy

PROMPTS = ["<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n",
           "<|im_start|>user\nWhat is the weather like in Paris today, and in Rome?<|im_end|>\n<|im_start|>assistant\n",
           "<|im_start|>user\nlist the files<|im_end|>\n<|im_start|>assistant\n",
           "<|im_start|>system\nYou call tools.<|im_end|>\n<|im_start|>user\nadd 2 and 3<|im_end|>\n<|im_start|>assistant\n"]


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(2)
    model, tok = load_policy("tiny-random")
    tok.padding_side = "left"
    return model, tok


def _generate(model, tok, enc, max_new: int, stop: int) -> list[list[int]]:
    """`generate`'s greedy rows, cut after the first stop token (generate pads the rest)."""
    with torch.inference_mode():
        out = model.generate(**enc, max_new_tokens=max_new, do_sample=False, eos_token_id=stop,
                             pad_token_id=tok.pad_token_id)
    rows = []
    for row in out[:, enc["input_ids"].shape[1]:].tolist():
        rows.append(row[:row.index(stop) + 1] if stop in row else row)
    return rows


def test_greedy_decode_gives_generates_tokens_and_drops_finished_rows(tiny):
    model, tok = tiny
    enc = tok(PROMPTS, return_tensors="pt", padding=True, add_special_tokens=False)
    free, _ = greedy_decode(model, enc["input_ids"], enc["attention_mask"], max_new_tokens=12,
                            stop_id=tok.eos_token_id)
    assert free == _generate(model, tok, enc, 12, stop=tok.eos_token_id)
    # the random model never says <|im_end|>: stop instead at a token the rows first say at
    # different steps, so they leave the batch at different times
    def first(token, row):
        return row.index(token) if token in row else len(row)

    stop = next(t for row in free for t in row if len({first(t, r) for r in free}) > 1)
    rows, cost = greedy_decode(model, enc["input_ids"], enc["attention_mask"], max_new_tokens=12, stop_id=stop)
    assert rows == _generate(model, tok, enc, 12, stop)
    assert [len(r) for r in rows] == [min(first(stop, f) + 1, 12) for f in free]
    assert cost["row_steps"] == sum(len(r) for r in rows)
    assert cost["padded_row_steps"] == len(rows) * max(len(r) for r in rows) > cost["row_steps"]


def test_greedy_decode_stops_at_max_new_tokens(tiny):
    model, tok = tiny
    enc = tok(PROMPTS[:2], return_tensors="pt", padding=True, add_special_tokens=False)
    rows, cost = greedy_decode(model, enc["input_ids"], enc["attention_mask"], max_new_tokens=5, stop_id=-1)
    assert [len(r) for r in rows] == [5, 5] and cost["decode_steps"] == 5

"""Greedy decoding that stops paying for an answer once it has ended.

`transformers`' `generate` keeps every row of a batch in the forward pass until the last row
stops: a batch with one answer running to `max_new_tokens` decodes every other row's padding as
long. `greedy_decode` drops a row from the batch — its key/value cache rows included
(`Cache.batch_select_indices`) — the step it emits the stop token, so a batch costs the sum of
its rows' lengths, not its longest row times its size. The arithmetic is `generate`'s greedy
search: left-padded prompts, position ids from the attention mask, the LM head on the last
position only, argmax over the logits, the stop token kept in the output. Rows still running see
the same tokens as under `generate`; a matrix product over fewer rows may round differently in
the last bit, so a near-tie can rarely break the other way (tests/test_decode.py bounds it).
"""
from __future__ import annotations


def greedy_decode(model, input_ids, attention_mask, *, max_new_tokens: int, stop_id: int) -> tuple:
    """(new token ids per row as lists, the stop token kept where it came; decode stats): greedy
    continuation of each left-padded prompt row up to `stop_id` or `max_new_tokens` tokens."""
    import torch
    from transformers import DynamicCache

    rows = input_ids.shape[0]
    out: list[list[int]] = [[] for _ in range(rows)]
    live = torch.arange(rows)
    mask = attention_mask
    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    step_ids, step_pos = input_ids, positions
    row_steps = 0   # rows × steps actually computed (the cost), against len(out)·steps for generate
    steps = 0
    with torch.inference_mode():
        while live.numel() and steps < max_new_tokens:
            logits = model(input_ids=step_ids, attention_mask=mask, position_ids=step_pos, cache=cache,
                           use_cache=True, logits_to_keep=1).logits[:, -1, :]
            nxt = logits.argmax(dim=-1)
            row_steps += live.numel()
            steps += 1
            keep = []
            for j, (row, token) in enumerate(zip(live.tolist(), nxt.tolist())):
                out[row].append(token)
                if token != stop_id:
                    keep.append(j)
            if len(keep) < live.numel():
                if not keep:
                    break
                index = torch.tensor(keep)
                cache.batch_select_indices(index)
                live, nxt, mask, step_pos = live[index], nxt[index], mask[index], step_pos[index]
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
            step_pos = step_pos[:, -1:] + 1
            step_ids = nxt[:, None]
    return out, {"decode_steps": steps, "row_steps": row_steps, "padded_row_steps": rows * steps}

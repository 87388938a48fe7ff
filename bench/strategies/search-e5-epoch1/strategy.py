"""A curation strategy composed from toolkit operators by the offline proposer
(evolver/proposers/offline.py). Each block is one operator, opened by its `# op:` line; the
commit message says why each was added. With no operator it curates exactly like ρ0."""

TAGS = ["seed"]   # ρ0's tag: an operator that changes no record leaves the artifacts' bytes as they were


def in_focus(trajectory, tk, categories, tools):
    """Whether a trajectory is of a diagnosed category (its environment's variant) or calls a
    diagnosed tool."""
    env = tk.env_of(trajectory) or {}
    names = {call["function"]["name"] for m in trajectory["messages"] for call in tk.tool_calls(m)}
    return env.get("variant") in categories or not names.isdisjoint(tools)


def select(raw, tk, rng):
    """The trajectories worth training on, in corpus order."""
    kept = [t for t in raw if not tk.is_empty(t)]
    return kept


def sft_records(kept, tk):
    records = []
    for trajectory in kept:
        weights = None
        records.append(tk.sft_record(trajectory, weights, tags=TAGS))
    return records


def rl_records(kept, tk, rng):
    records, rest = [], []
    for trajectory in kept:
        steps = tk.tool_call_steps(trajectory)
        records.extend(tk.rl_records(trajectory, steps, tags=TAGS))
    return records


def memory_records(raw, kept, tk):
    memory = []
    # op: tool_signatures(only_called=True)
    memory += tk.tool_signature_memories(kept, only_called=True)
    max_tokens = 2000
    return tk.cap_tokens(tk.unique_ids(memory), max_tokens) if memory else []


def curate(raw, ctx):
    tk = ctx.toolkit
    kept = select(raw, tk, ctx.rng("select"))
    # op: parallel_variants(calls=2, limit=50)
    kept += tk.parallel_variants(kept, ctx.rng("parallel_variants"), 50, calls=2)
    # op: irrelevance_items(k=1, limit=400)
    kept += tk.irrelevance_items(kept, ctx.rng("irrelevance_items"), 400, k=1)
    out = tk.Curated()
    out.sft = sft_records(kept, tk)
    out.rl = rl_records(kept, tk, ctx.rng("rl"))
    # op: fit_budget(passes='recipe')
    before = out.sft
    out.sft = tk.fit_budget(out.sft, tk.budget_examples(ctx.budget, 'recipe'), ctx.rng("fit_budget"),
                           priority=tk.recorded_success(raw))
    out.sft = tk.dropped("fit_budget", before, out.sft, "sft")
    out.memory = memory_records(raw, kept, tk)
    return out

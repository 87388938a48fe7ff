"""ρ0, the no-curation baseline: every trajectory is trained as it is.

Each raw trajectory with an assistant message becomes one SFT record training every assistant
turn; each assistant tool-call turn becomes one RL record (prefix = the messages before it,
reference = its recorded calls); no memory. When the run took its length limits from the corpus
(`ctx.budget["windows"]`: long sessions whose system prompt and tools alone outgrow the profile's
limits), a trajectory longer than `ctx.budget["max_length"]` is trained as windows that fit it
(`toolkit.windows`: each with the system messages and request before it), so its later turns are
trained rather than cut off; a trajectory within the bound, and every trajectory of a curation
whose budget does not say `windows` (or that has no budget), is one record as before. With a
budget, an RL prompt keeps what the trainer would keep of a long session's prefix (`toolkit.rl`'s
`max_tokens`: the request and the latest messages, within PROMPT_CHARS_PER_TOKEN characters a
token of max_length), so a session's RL records grow with its length, not its square."""


def curate(raw, ctx):
    tk = ctx.toolkit
    out = tk.Curated()
    budget = getattr(ctx, "budget", None) or {}
    max_length = budget.get("max_length") if budget.get("windows") else None
    max_prompt = budget.get("max_length")
    for trajectory in raw:
        if tk.is_empty(trajectory):
            continue
        windows = tk.windows(trajectory, max_length) if max_length else []
        if len(windows) > 1:
            out.sft.extend(tk.sft_record(trajectory, w.weights, id=f"{trajectory['id']}#win{n}", messages=w.messages,
                                         tags=["seed", "window"]) for n, w in enumerate(windows))
        else:
            out.sft.append(tk.sft_record(trajectory, tags=["seed"]))
        out.rl.extend(tk.rl_records(trajectory, tk.tool_call_steps(trajectory), tags=["seed"], max_tokens=max_prompt))
    return out

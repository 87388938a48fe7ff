"""ρ0, the no-curation baseline: every trajectory is trained as it is.

Each raw trajectory with an assistant message becomes one SFT record training every assistant
turn; each assistant tool-call turn becomes one RL record (prefix = the messages before it,
reference = its recorded calls); no memory. When the run's recipe bounds a record's tokens
(`ctx.budget["max_length"]`), a trajectory longer than that is trained as windows that fit it
(`toolkit.windows`: each with the system messages and request before it), so its later turns are
trained rather than cut off; a trajectory within the bound, or a curation without a budget, is
one record as before."""


def curate(raw, ctx):
    tk = ctx.toolkit
    out = tk.Curated()
    max_length = (getattr(ctx, "budget", None) or {}).get("max_length")
    for trajectory in raw:
        if tk.is_empty(trajectory):
            continue
        windows = tk.windows(trajectory, max_length) if max_length else []
        if len(windows) > 1:
            out.sft.extend(tk.sft_record(trajectory, w.weights, id=f"{trajectory['id']}#win{n}", messages=w.messages,
                                         tags=["seed", "window"]) for n, w in enumerate(windows))
        else:
            out.sft.append(tk.sft_record(trajectory, tags=["seed"]))
        out.rl.extend(tk.rl_records(trajectory, tk.tool_call_steps(trajectory), tags=["seed"]))
    return out

"""ρ0, the no-curation baseline: every trajectory is trained as it is.

Each raw trajectory with an assistant message becomes one SFT record training every assistant
turn; each assistant tool-call turn becomes one RL record (prefix = the messages before it,
reference = its recorded calls); no memory."""


def curate(raw, ctx):
    tk = ctx.toolkit
    out = tk.Curated()
    for trajectory in raw:
        if tk.is_empty(trajectory):
            continue
        out.sft.append(tk.sft_record(trajectory, tags=["seed"]))
        out.rl.extend(tk.rl_records(trajectory, tk.tool_call_steps(trajectory), tags=["seed"]))
    return out

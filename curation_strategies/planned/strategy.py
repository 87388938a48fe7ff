"""A toolkit strategy whose operators are data: the PLAN below says what runs and how.

The offline proposer (evolver/proposers/offline.py) evolves this strategy by editing PLAN — adding,
removing or tuning operators — so every revision is a readable diff of one literal. With the
PLAN as written here it curates exactly like the seed strategy ρ0 (no curation)."""

PLAN = {
    "dedup": {"exact": False, "near_threshold": None},
    "filters": {"drop_abandoned": False, "drop_failed": False, "drop_redundant": False, "max_turns": None},
    "memory": {"error_constraints": False, "max_tokens": 2000, "task_facts": False, "tool_signatures": False},
    "rl": {"enabled": True, "rest_fraction": 1.0, "steps": "all"},
    "sft": {"context_turns": 2, "enabled": True, "mask_corrected_errors": False, "segment_max_turns": None},
}


def select(raw, tk):
    """The trajectories worth training on, in corpus order."""
    plan = PLAN["filters"]
    kept = [t for t in raw if not tk.is_empty(t)]
    if PLAN["dedup"]["exact"]:
        kept = tk.exact_dedup(kept)
    if plan["drop_abandoned"]:
        kept = tk.drop_abandoned(kept)
    if plan["drop_failed"]:
        kept = tk.by_outcome(kept, success=True, keep_unknown=True)
    if plan["drop_redundant"]:
        kept = [t for t in kept if not tk.redundant_turns(t)]
    if plan["max_turns"]:
        kept = tk.by_turns(kept, max_turns=plan["max_turns"])
    if PLAN["dedup"]["near_threshold"]:
        kept = tk.near_dedup(kept, threshold=PLAN["dedup"]["near_threshold"])
    return kept


def sft_records(kept, tk):
    plan = PLAN["sft"]
    records = []
    for trajectory in kept:
        weights = tk.refinement_weights(trajectory) if plan["mask_corrected_errors"] else None
        if weights is not None and not tk.trainable(weights):
            continue
        if not plan["segment_max_turns"]:
            records.append(tk.sft_record(trajectory, weights, tags=["planned"]))
            continue
        segments = tk.segment(trajectory, weights, max_turns=plan["segment_max_turns"],
                              context_turns=plan["context_turns"])
        for n, seg in enumerate(segments):
            record_id = trajectory["id"] if len(segments) == 1 else f"{trajectory['id']}#seg{n}"
            records.append(tk.sft_record(trajectory, seg.weights, id=record_id, messages=seg.messages,
                                         tags=["planned", seg.kind]))
    return records


def rl_records(kept, tk, rng):
    plan = PLAN["rl"]
    records, rest = [], []
    for trajectory in kept:
        if plan["steps"] == "all":
            steps, others = tk.tool_call_steps(trajectory), []
        else:
            steps = tk.recovery_steps(trajectory)
            others = [i for i in tk.clean_steps(trajectory) if i not in steps]
            if plan["steps"] == "clean":
                steps, others = others, []
        records.extend(tk.rl_records(trajectory, steps, tags=["planned"]))
        rest.extend((trajectory, i) for i in others)
    if rest and plan["rest_fraction"]:
        for trajectory, i in tk.sample_steps(rest, rng, fraction=plan["rest_fraction"]):
            records.extend(tk.rl_records(trajectory, [i], tags=["planned", "sampled"]))
    return records


def memory_records(raw, kept, tk):
    plan = PLAN["memory"]
    memory = []
    if plan["error_constraints"]:
        memory += tk.error_constraints(tk.exact_dedup(raw))
    if plan["tool_signatures"]:
        memory += tk.tool_signature_memories(kept)
    if plan["task_facts"]:
        memory += tk.task_family_facts(kept)
    return tk.cap_tokens(tk.unique_ids(memory), plan["max_tokens"]) if memory else []


def curate(raw, ctx):
    tk = ctx.toolkit
    kept = select(raw, tk)
    out = tk.Curated()
    if PLAN["sft"]["enabled"]:
        out.sft = sft_records(kept, tk)
    if PLAN["rl"]["enabled"]:
        out.rl = rl_records(kept, tk, ctx.rng("rl-rest"))
    out.memory = memory_records(raw, kept, tk)
    return out

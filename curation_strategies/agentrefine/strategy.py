"""AgentRefine-style reference strategy (Fu et al., "AgentRefine", §3.3), from the toolkit.

Refinement data teaches an agent to recover from its errors: erroneous turns that are later
corrected stay in the context (the model sees the failure and the repair) but get weight 0.
Around that: duplicates, abandoned and failed trajectories out, long trajectories cut into
decision-centric segments, RL only where a decision follows an error (plus a seeded sample of
clean steps), and a memory of tool constraints mined from errors plus tool signatures."""

NEAR_DUP_THRESHOLD = 0.7     # Jaccard of task + call-sequence shingles that counts as a duplicate
MAX_SEGMENT_TURNS = 8        # longer trajectories are split at decision points
CONTEXT_TURNS = 2            # earlier turns a later segment keeps as weight-0 context
RL_REST_FRACTION = 0.1       # share of clean, non-recovery tool-call steps also sent to RL
MEMORY_TOKENS = 2000         # cap on the whole memory (key + content tokens)
MIN_CONSTRAINT_COUNT = 1     # an error template must be seen this often to become a constraint


def refinement_value(trajectory, tk):
    """Which of near-duplicate trajectories to keep: fewest redundant calls, then most repaired
    errors (the refinement signal this strategy is about), then corpus order."""
    return len(tk.redundant_turns(trajectory)), -len(tk.corrected_turns(trajectory))


def curate(raw, ctx):
    tk = ctx.toolkit
    # Refinement data ends in success: abandoned and failed trajectories go before dedup, so a
    # failed copy can never be the one a cluster keeps.
    kept = tk.by_outcome(tk.drop_abandoned(tk.exact_dedup(raw)), success=True, keep_unknown=True)
    kept = tk.near_dedup(kept, threshold=NEAR_DUP_THRESHOLD, prefer=lambda t: refinement_value(t, tk))
    out = tk.Curated()

    for trajectory in kept:
        weights = tk.refinement_weights(trajectory)
        if not tk.trainable(weights):
            continue
        segments = tk.segment(trajectory, weights, max_turns=MAX_SEGMENT_TURNS, context_turns=CONTEXT_TURNS)
        for n, seg in enumerate(segments):
            record_id = trajectory["id"] if len(segments) == 1 else f"{trajectory['id']}#seg{n}"
            out.sft.append(tk.sft_record(trajectory, seg.weights, id=record_id, messages=seg.messages,
                                         tags=["agentrefine", seg.kind]))

    rest = []   # (position in kept, step): a large corpus's trajectories are read again, not held
    for n, trajectory in enumerate(kept):
        recovery = tk.recovery_steps(trajectory)
        out.rl.extend(tk.rl_records(trajectory, recovery, tags=["agentrefine", "after_error"]))
        rest.extend((n, i) for i in tk.clean_steps(trajectory) if i not in recovery)
    for n, i in tk.sample_steps(rest, ctx.rng("rl-rest"), fraction=RL_REST_FRACTION):
        out.rl.extend(tk.rl_records(kept[n], [i], tags=["agentrefine", "sampled"]))

    # Failed trajectories were dropped from training, but what their errors teach goes to memory.
    constraints = tk.error_constraints(tk.exact_dedup(raw), min_count=MIN_CONSTRAINT_COUNT)
    memory = constraints + tk.tool_signature_memories(kept)
    out.memory = tk.cap_tokens(tk.unique_ids(memory), MEMORY_TOKENS)
    return out

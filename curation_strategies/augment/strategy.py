"""Augmenting reference strategy: the corpus's successful trajectories plus the data the toolkit
can add, so the code agent has an example of adding data (issue 12).

- single-turn (`bfcl_single_turn` records): parallel items composed from successful simple items
  over the same function and from argument variants of one item (a value the request states,
  changed in the request and the call alike), parallel-multiple, multiple-function and
  irrelevance items composed from successful simple items, then every item rebalanced towards an
  even mix of BFCL's five categories (ρ0 never sees a composed parallel or distractor-laden item);
- multi-turn (records ctx.env can rebuild): AgentRefine refinement synthesis (an erroneous call
  with its real error, weight 0, then the correct call) and CoEvolve variants (an argument swapped
  for a sibling in the scenario's state, re-executed and kept only when it validates);
- with ctx.llm: failed single-call answers whose call breaks the schema, rewritten by the LLM and
  kept only when the schema (and ctx.env, where it can execute) accepts the rewrite.
RL: every tool-call step of the kept and composed records, as ρ0 does. No memory. Without ctx.env
or ctx.llm the parts that need them add nothing; the strategy still runs."""

COMPOSED_PER_KIND = 150   # at most this many composed items of each single-turn kind
TARGET_MIX = {"simple_python": 1, "multiple": 1, "parallel": 1, "parallel_multiple": 1, "irrelevance": 1}
REFINE_EVERY = 2          # refinement synthesis for every n-th successful multi-turn trajectory
VARIANTS_PER_TRAJECTORY = 1
LLM_REWRITES = 16         # at most this many LLM refinement requests


def single_turn(raw):
    return ((raw.get("meta") or {}).get("env") or {}).get("benchmark") == "bfcl_single_turn"


def curate(raw, ctx):
    tk = ctx.toolkit
    kept = tk.schema_valid(tk.by_outcome(tk.exact_dedup(raw), success=True, keep_unknown=True))
    single = [r for r in kept if single_turn(r)]
    composed = (tk.compose_parallel(single, ctx.rng("parallel"), COMPOSED_PER_KIND)
                + tk.parallel_variants(single, ctx.rng("parallel_variants"), COMPOSED_PER_KIND)
                + tk.compose_parallel_multiple(single, ctx.rng("parallel_multiple"), COMPOSED_PER_KIND)
                + tk.add_distractors(single, ctx.rng("multiple"), COMPOSED_PER_KIND)
                + tk.irrelevance_items(single, ctx.rng("irrelevance"), COMPOSED_PER_KIND))
    single = tk.rebalance(single + composed, TARGET_MIX, ctx.rng("rebalance"))
    others = [r for r in kept if not single_turn(r)]

    out = tk.Curated()
    for record in single + others:
        out.sft.append(tk.sft_record(record, tags=["augment"]))
        out.rl.extend(tk.rl_records(record, tk.tool_call_steps(record), tags=["augment"]))

    rng = ctx.rng("env")
    for n, record in enumerate(r for r in others if ctx.env is not None and ctx.env.has(tk.env_of(r))):
        if n % REFINE_EVERY == 0:
            refined = tk.refinement_synthesis(record, ctx.env, rng, tags=["augment"])
            out.sft.extend([refined] if refined else [])
        out.sft.extend(tk.environment_variants(record, ctx.env, rng, VARIANTS_PER_TRAJECTORY, tags=["augment"]))

    if ctx.llm is not None:
        for record, index, error in malformed_answers(raw, tk)[:LLM_REWRITES]:
            rewritten = tk.llm_refine(record, ctx.llm, ctx.env, index, error, tags=["augment"])
            out.sft.extend([rewritten] if rewritten else [])
    return out


def malformed_answers(raw, tk):
    """(record, assistant index, schema error) of failed single-call answers that break the schema."""
    found = []
    for record in raw:
        if (record.get("outcome") or {}).get("success") is True:
            continue
        for i in tk.assistant_indices(record["messages"]):
            calls = tk.tool_calls(record["messages"][i])
            error = tk.validate_call(calls[0], record.get("tools") or []) if len(calls) == 1 else None
            if error:
                found.append((record, i, error))
                break
    return found

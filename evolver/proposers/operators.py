"""The operators the offline proposer composes into a strategy's code, and the composer.

A strategy composed here is real Python over `curation_strategies.toolkit`: a fixed skeleton
(select → SFT records → RL records → memory) with slots, and one block of code per operator in
its slots. Each block opens with a comment `# op: NAME(PARAMS)` that the proposer reads back to
know what the parent holds (`read_genome`). The genome — operator name → parameters — is the
strategy's identity: `compose(genome)` is deterministic, operators appear in OPERATORS order, and
the empty genome curates exactly like the seed strategy ρ0.

Adding an operator is one entry in OPERATORS: its slot code (a format string over its
parameters), the values each tunable parameter may take, and a line of why. Parameters named
`categories` and `tools` are a *focus* the proposer derives from the diagnosis.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

SLOTS = ("select", "add", "weights", "emit", "repeat", "rl_steps", "rl_repeat", "rl_after", "memory", "memory_cap",
         "add_sft", "fit", "fit_rl")
FOCUS = ("categories", "tools")


@dataclass(frozen=True)
class Operator:
    name: str
    code: Mapping[str, str]                          # slot → code (format string over the parameters)
    domain: Mapping[str, tuple] = field(default_factory=dict)   # tunable parameter → its values
    why: str = ""
    drops: Mapping[str, tuple[str, str]] = field(default_factory=dict)   # slot → (the list it may shrink, its kind)


# Where an operator's code may drop what it is given: the list, and what its ids name (tk.dropped's kind).
DROPPING_SLOTS = {"select": ("kept", "raw"), "fit": ("out.sft", "sft"), "fit_rl": ("out.rl", "rl")}


def op(name: str, why: str, domain: Mapping[str, tuple] | None = None, drops: Mapping | None = None,
       **code: str) -> Operator:
    found = {slot: DROPPING_SLOTS[slot] for slot in code if slot in DROPPING_SLOTS}
    return Operator(name, code, domain or {}, why, {**found, **(drops or {})})


REPEAT_SFT = ("records += [tk.repeated(tk.sft_record(trajectory, weights, id=f\"{{trajectory['id']}}#{name}{{i}}\", "
              "tags=TAGS + [\"repeat\"]), \"{op}\", i) for i in range(1, {copies})]")
# The operator table: one entry per operator (the adding operators of the toolkit join here).
OPERATORS = (
    op("exact_dedup", "remove exact duplicate trajectories", select="kept = tk.exact_dedup(kept)"),
    op("drop_abandoned", "drop trajectories that end without an answer", select="kept = tk.drop_abandoned(kept)"),
    op("drop_failed", "drop trajectories whose recorded outcome is a failure",
       select="kept = tk.by_outcome(kept, success=True, keep_unknown=True)"),
    op("drop_uncorrected", "drop trajectories with an erroneous call that was never corrected",
       select="kept = [t for t in kept if not tk.uncorrected_turns(t)]"),
    op("drop_redundant", "drop trajectories with redundant repeated calls",
       select="kept = [t for t in kept if not tk.redundant_turns(t)]"),
    op("with_tool_calls", "keep only trajectories that act through tools", select="kept = tk.with_tool_calls(kept)"),
    op("max_turns", "drop trajectories longer than a number of assistant turns", {"max_turns": (6, 10, 16)},
       select="kept = tk.by_turns(kept, max_turns={max_turns})"),
    op("max_tokens", "drop trajectories longer than a token budget", {"max_tokens": (2048, 4096)},
       select="kept = tk.by_tokens(kept, max_tokens={max_tokens})"),
    op("near_dedup", "remove near-duplicate trajectories (task + call-sequence MinHash)", {"threshold": (0.9, 0.8, 0.7)},
       select="kept = tk.near_dedup(kept, threshold={threshold})"),
    op("focus_prune", "keep the diagnosed categories, tools and every recovery; sample the rest",
       {"keep_share": (0.75, 0.5, 0.25)},
       select="kept = [t for t in kept if in_focus(t, tk, {categories!r}, {tools!r}) or tk.corrected_turns(t)\n"
              "        or rng.random() < {keep_share}]"),
    op("mask_corrected", "mask erroneous calls that were later corrected out of the SFT loss (AgentRefine)",
       {"mask_uncorrected": (False, True)},
       weights="weights = tk.refinement_weights(trajectory, mask_uncorrected={mask_uncorrected})\n"
               "if not tk.trainable(weights):\n"
               "    tk.dropped(\"mask_corrected\", [trajectory], [], \"sft\")\n    continue"),
    op("segment", "train decision segments instead of whole trajectories", {"max_turns": (2, 4, 8), "context_turns": (1, 2)},
       emit="segments = tk.segment(trajectory, weights, max_turns={max_turns}, context_turns={context_turns})\n"
            "for n, seg in enumerate(segments):\n"
            "    record_id = trajectory[\"id\"] if len(segments) == 1 else f\"{{trajectory['id']}}#seg{{n}}\"\n"
            "    records.append(tk.sft_record(trajectory, seg.weights, id=record_id, messages=seg.messages,\n"
            "                                 tags=TAGS + [seg.kind]))"),
    op("repeat_no_call", "repeat the trajectories that answer without tools", {"copies": (2, 3)},
       repeat="if not tk.has_tool_call(trajectory):\n    " + REPEAT_SFT.replace("{name}", "no-call").replace("{op}", "repeat_no_call")),
    op("repeat_focus", "repeat the trajectories of the diagnosed categories and tools", {"copies": (2, 3)},
       repeat="if in_focus(trajectory, tk, {categories!r}, {tools!r}):\n    " + REPEAT_SFT.replace("{name}", "focus").replace("{op}", "repeat_focus")),
    op("rl_recovery", "RL on the steps that follow an error, a sample of the clean steps", {"clean_share": (0.5, 0.25, 0.1)},
       rl_steps="steps = tk.recovery_steps(trajectory)\n"
                "rest += [(trajectory, i) for i in tk.clean_steps(trajectory) if i not in steps]",
       rl_after="for trajectory, i in tk.sample_steps(rest, rng, fraction={clean_share}):\n"
                "    records.extend(tk.rl_records(trajectory, [i], tags=TAGS + [\"sampled\"]))"),
    op("rl_focus", "repeat the RL steps of the diagnosed categories and tools", {"copies": (2, 3)},
       rl_repeat="if in_focus(trajectory, tk, {categories!r}, {tools!r}):\n"
                 "    records += [tk.repeated(r, \"rl_focus\", c) for i in steps for c in range(1, {copies})\n"
                 "                if (r := tk.rl_record(trajectory, i, id=f\"{{trajectory['id']}}#step{{i}}-focus{{c}}\",\n"
                 "                                      tags=TAGS + [\"repeat\"])) is not None]"),
    # which RL records GRPO's few prompts go to (curation_strategies/toolkit/rl_select.py): groups whose
    # completions all score alike teach nothing, so references that are right and tasks near the boundary
    op("rl_successes", "RL references only from trajectories not recorded as failures (a failed call as the "
                       "reference rewards the failure)", {"keep_unknown": (True, False)}, drops={"rl_after": ("records", "rl")},
       rl_after="records = tk.from_successes(records, kept, keep_unknown={keep_unknown})"),
    op("rl_boundary", "fill the RL budget with the steps of tasks the corpus both solved and failed (neither always "
                      "nor never solved) whose reference is a recorded success, then other successes; balanced over "
                      "categories", {"multiple": (1, 4)},
       fit_rl="out.rl = tk.fit_rl(out.rl, raw, tk.rl_budget(ctx.budget, {multiple}), ctx.rng(\"rl_boundary\"))"),
    # operators that add data (curation_strategies/toolkit/compose.py, variants.py, synthesis.py):
    # single-turn items composed from the kept ones, each under its own ctx.rng stream
    op("compose_parallel", "add parallel items: two kept single-call items over the same function, joined",
       {"limit": (50, 150, 400)}, add="kept += tk.compose_parallel(kept, ctx.rng(\"compose_parallel\"), {limit})"),
    op("parallel_variants", "add parallel items: a kept single-call item joined with argument variants of itself",
       {"limit": (50, 150, 400), "calls": (2, 3)},
       add="kept += tk.parallel_variants(kept, ctx.rng(\"parallel_variants\"), {limit}, calls={calls})"),
    op("argument_variants", "add items like the kept single-call ones with the values the request states changed, in the call too",
       {"limit": (50, 150, 400)},
       add="kept += tk.argument_variants(kept, ctx.rng(\"argument_variants\"), {limit})"),
    op("compose_parallel_multiple", "add parallel-multiple items: kept single-call items over different functions, joined",
       {"limit": (50, 150, 400)},
       add="kept += tk.compose_parallel_multiple(kept, ctx.rng(\"compose_parallel_multiple\"), {limit})"),
    op("add_distractors", "add multiple-function items: a kept single-call item with other items' functions offered",
       {"limit": (50, 150, 400), "k": (2, 3, 5)},
       add="kept += tk.add_distractors(kept, ctx.rng(\"add_distractors\"), {limit}, k={k})"),
    op("irrelevance_items", "add irrelevance items: a kept request without its function, answered with no call",
       {"limit": (50, 150, 400), "k": (1, 2)},
       add="kept += tk.irrelevance_items(kept, ctx.rng(\"irrelevance_items\"), {limit}, k={k})"),
    op("rebalance", "resample the categorised trajectories towards an even mix of their categories",
       {"max_repeat": (1, 2)}, drops={"add": ("kept", "raw")},
       add="typed = [t for t in kept if tk.category(t)]\n"
           "mix = {{c: 1 for c in sorted({{tk.category(t) for t in typed}})}}\n"
           "kept = tk.rebalance(typed, mix, ctx.rng(\"rebalance\"), max_repeat={max_repeat}) + "
           "[t for t in kept if not tk.category(t)]"),
    # multi-turn trajectories synthesised by execution in ctx.env (nothing without it)
    op("refinement_synthesis", "add AgentRefine refinements: an erroneous call with its real error (weight 0), "
                               "then the correct call, executed in ctx.env", {"every": (1, 2, 4)},
       add_sft="if ctx.env is not None:\n"
               "    rng = ctx.rng(\"refinement_synthesis\")\n"
               "    for n, t in enumerate(t for t in kept if ctx.env.has(tk.env_of(t))):\n"
               "        refined = tk.refinement_synthesis(t, ctx.env, rng, tags=TAGS + [\"refined\"]) "
               "if n % {every} == 0 else None\n"
               "        out.sft.extend([refined] if refined else [])"),
    op("environment_variants", "add CoEvolve variants: an argument swapped within the scenario's state, kept when "
                               "execution in ctx.env validates it", {"per_trajectory": (1, 2)},
       add_sft="if ctx.env is not None:\n"
               "    rng = ctx.rng(\"environment_variants\")\n"
               "    for t in [t for t in kept if ctx.env.has(tk.env_of(t))]:\n"
               "        out.sft.extend(tk.environment_variants(t, ctx.env, rng, {per_trajectory}, tags=TAGS + [\"variant\"]))"),
    # the budget: what the recipe trains (ctx.budget); beyond it a curated record is never trained
    op("fit_budget", "keep the SFT set within what the recipe trains (ctx.budget: the recipe's passes, or each "
                     "record once), balanced over categories, records of recorded successes first",
       {"passes": ("recipe", "once")},
       fit="out.sft = tk.fit_budget(out.sft, tk.budget_examples(ctx.budget, {passes!r}), ctx.rng(\"fit_budget\"),\n"
           "                       priority=tk.recorded_success(raw))"),
    op("tool_signatures", "put the offered tools' exact signatures into memory", {"only_called": (False, True)},
       memory="memory += tk.tool_signature_memories(kept, only_called={only_called})"),
    op("error_constraints", "turn recurring tool errors into constraints in memory", {"min_count": (1, 2)},
       memory="memory += tk.error_constraints(tk.exact_dedup(raw), min_count={min_count})"),
    op("task_facts", "remember task-family facts", memory="memory += tk.task_family_facts(kept)"),
    op("worked_examples", "remember worked examples: a recorded success's request and its calls, retrieved "
                          "for similar requests", {"limit": (100, 400)},
       memory="memory += tk.worked_examples(kept, limit={limit})"),
    op("memory_budget", "a different token budget for memory", {"max_tokens": (500, 1000, 4000)},
       memory_cap="max_tokens = {max_tokens}"),
)
BY_NAME = {o.name: o for o in OPERATORS}
assert all(set(o.code) <= set(SLOTS) for o in OPERATORS), "operators use known slots"

TEMPLATE = Path(__file__).resolve().parents[2] / "curation_strategies" / "planned" / "strategy.py"
"""The skeleton: the empty genome's strategy, a file a user can read and run as it is."""
ANCHORS = (   # where each slot's block goes in the skeleton: (the line, the slots before it, replaced?, after it)
    ("    return kept\n", "{select}", False, ""),
    ("        records.append(tk.sft_record(trajectory, weights, tags=TAGS))\n", "{weights}{emit}{repeat}", True, ""),
    ("        steps = tk.tool_call_steps(trajectory)\n", "{rl_steps}", True, ""),
    ("{rl_steps}        records.extend(tk.rl_records(trajectory, steps, tags=TAGS))\n", "", False, "{rl_repeat}{rl_after}"),
    ("    max_tokens = 2000\n", "{memory}", False, "{memory_cap}"),
    ("    out = tk.Curated()\n", "{add}", False, ""),
    ("    out.memory = memory_records(raw, kept, tk)\n", "{add_sft}{fit}{fit_rl}", False, ""),
)


def _skeleton(source: str) -> str:
    """The skeleton with a `{slot}` where each slot's blocks go (each anchor stands once)."""
    for line, before, replaced, after in ANCHORS:
        if source.count(line) != 1:
            raise ValueError(f"{TEMPLATE}: the line {line.strip()!r} must stand exactly once (a slot's anchor)")
        source = source.replace(line, before + ("" if replaced else line) + after)
    return source


HEADER = _skeleton(TEMPLATE.read_text())
DEFAULTS = {  # slot code when no operator fills it
    "emit": "records.append(tk.sft_record(trajectory, weights, tags=TAGS))",
    "rl_steps": "steps = tk.tool_call_steps(trajectory)",
}
INDENT = {"select": 4, "add": 4, "add_sft": 4, "fit": 4, "fit_rl": 4, "weights": 8, "emit": 8, "repeat": 8, "rl_steps": 8, "rl_repeat": 8, "rl_after": 4,
          "memory": 4, "memory_cap": 4}

Genome = Mapping[str, Mapping]   # operator name → its parameters


def _call(name: str, params: Mapping) -> str:
    return f"{name}(" + ", ".join(f"{k}={params[k]!r}" for k in sorted(params)) + ")"


def compose(genome: Genome) -> str:
    """The strategy source of a genome."""
    unknown = sorted(set(genome) - set(BY_NAME))
    if unknown:
        raise KeyError(f"unknown operator(s): {', '.join(unknown)}")
    blocks = {slot: "" for slot in SLOTS}
    for operator in OPERATORS:
        if operator.name not in genome:
            continue
        params = dict(genome[operator.name])
        for slot, code in operator.code.items():
            pad = " " * INDENT[slot]
            body = code.format(**params)
            if slot in operator.drops:   # what it drops is noted, so lineage names it (tk.dropped)
                var, kind = operator.drops[slot]
                body = f"before = {var}\n{body}\n{var} = tk.dropped(\"{operator.name}\", before, {var}, \"{kind}\")"
            text = f"# op: {_call(operator.name, params)}\n{body}"
            blocks[slot] += "".join(pad + line + "\n" for line in text.splitlines())
    for slot, code in DEFAULTS.items():
        if not blocks[slot]:
            blocks[slot] = " " * INDENT[slot] + code + "\n"
    source = HEADER
    for slot, block in blocks.items():
        source = source.replace("{" + slot + "}", block)
    return source


def read_genome(source: str) -> dict[str, dict] | None:
    """The genome of a composed strategy (None when `source` is not one compose() wrote)."""
    genome: dict[str, dict] = {}
    for line in source.splitlines():
        text = line.strip()
        if not text.startswith("# op: "):
            continue
        try:
            node = ast.parse(text[len("# op: "):], mode="eval").body
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
                return None
            genome.setdefault(node.func.id, {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords})
        except (SyntaxError, ValueError):
            return None
    try:
        return genome if compose(genome) == source else None
    except (KeyError, ValueError, IndexError):
        return None


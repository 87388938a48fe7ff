"""The operator library curation strategies import (`from curation_strategies import toolkit`,
or `ctx.toolkit`). It runs inside the sandbox: pure Python on stdlib + datasketch + numpy (+ the
offline tiktoken encoding), deterministic — no global random, no clock, no set order in output.

Records are plain dicts in the formats of DESIGN.md; operators take raw corpus records (dicts
with `messages` and `tools`) and never modify them."""
import sys

from .budget import budget_examples, fit_budget, recorded_success
from .calls import (STATE_CHANGING_VERBS, call_sequence, call_signature, is_state_changing, parse_arguments,
                    tool_calls, tool_schema, validate_call)
from .compose import (NO_CALL_REPLY, add_distractors, category, compose_parallel, compose_parallel_multiple, text_calls,
                      irrelevance_items, join_requests, rebalance, schema_valid, single_call_items, synthesised)
from .dedup import (content_hash, exact_dedup, exact_duplicates, near_dedup, near_duplicates,
                    task_shingles, call_shingles)
from .errors import (ERROR_PATTERNS, corrected_turns, corrections, erroneous_turns, error_message,
                     is_error_result, redundant_turns, turn_errors, uncorrected_turns)
from .filters import (by_outcome, by_tokens, by_turns, drop_abandoned, has_tool_call, is_abandoned,
                      is_empty, n_turns, truncate, with_tool_calls)
from .masking import masked_indices, refinement_weights, trainable
from .memory import (cap_tokens, error_constraints, error_template, family_of, memory_record,
                     memory_tokens, retrieval_key, task_family_facts, tool_signature,
                     tool_signature_memories, unique_ids, worked_examples)
from .provenance import HOWS, dropped, steps_of
from .records import Curated, record_meta, repeated, sft_record
from .rl import clean_steps, recovery_steps, rl_record, rl_records, sample_steps, tool_call_steps
from .rl_select import (boundary_tasks, fit_rl, from_successes, outcome_spread, reference_priority, rl_budget,
                        task_of)
from .spill import RecordList
from .segment import DECISION_KINDS, WINDOW_SHARE, Segment, decision_points, segment, window_tokens, windows
from .stats import corpus_stats, curated_stats
from .synthesis import ERROR_KINDS, environment_variants, erroneous_call, llm_refine, refinement_synthesis
from .variants import argument_variant, argument_variants, parallel_variants
from .tokens import count_tokens, message_tokens, trajectory_tokens
from .trajectory import (assistant_indices, canonical_json, env_of, last_user_before, same_user_turn,
                         step_boundaries, task_text, tool_results, user_indices)

__all__ = sorted(name for name, obj in globals().items()
                 if not name.startswith("_") and not isinstance(obj, type(sys)))

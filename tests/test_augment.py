"""Toolkit operators that add data, on real BFCL data: single-turn compositions, rebalancing and
the schema filter on the wild bfcl-single corpus; refinement synthesis, environment variants and
LLM refinement on the bundled multi-turn sample through ctx.env; the augment reference strategy."""
from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from environments.bfcl import corpus_builder
from curation_strategies import toolkit as tk
from corpora import load_corpus
from sandbox.curate import execute
from sandbox.process_executor import ProcessExecutor
from base.schemas import canonical_json, check_sft
from sandbox.simenv.environment import Environment
from sandbox.simenv.export import prepare
from workspace.repository import strategy_files
from conftest import ROOT, read_artifact


@pytest.fixture(scope="module")
def single():
    raws, labels, _ = corpus_builder.build("bfcl-single", "wild", 0)
    return raws, labels


@pytest.fixture(scope="module")
def sample(sample_corpus):
    return [json.loads(line) for line in sample_corpus.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def env(sample, tmp_path_factory):
    folder = tmp_path_factory.mktemp("env")
    prepare(sample, folder)
    return Environment(folder)


def names(tools):
    return [t["function"]["name"] for t in tools]


def assert_valid_sft(items):
    for item in items:
        assert check_sft(tk.sft_record(item)) is None, item["id"]


# ------------------------------------------------------------------------ single-turn


def test_parallel_multiple_items_join_requests_and_answer_every_function(single):
    raws, _ = single
    items = tk.compose_parallel_multiple(raws, random.Random(1), 40)
    assert len(items) == 40 and len({i["id"] for i in items}) == 40
    assert_valid_sft(items)
    for item in items:
        answer = item["messages"][1]
        called = [c["function"]["name"] for c in answer["tool_calls"]]
        assert len(set(called)) == 2 and sorted(called) == sorted(names(item["tools"]))
        assert all(tk.validate_call(c, item["tools"]) is None for c in answer["tool_calls"])
        assert item["meta"]["category"] == "parallel_multiple" and len(item["meta"]["origin"]) == 2
        assert " Also, " in item["messages"][0]["content"]
    assert canonical_json(items) == canonical_json(tk.compose_parallel_multiple(raws, random.Random(1), 40))
    assert canonical_json(items) != canonical_json(tk.compose_parallel_multiple(raws, random.Random(2), 40))


def test_parallel_items_call_one_function_with_different_arguments(single):
    items = tk.compose_parallel(single[0], random.Random(0), 10)
    assert items, "the wild corpus holds simple items over the same function"
    for item in items:
        calls = item["messages"][1]["tool_calls"]
        assert len(names(item["tools"])) == 1 and {c["function"]["name"] for c in calls} == set(names(item["tools"]))
        assert len({c["function"]["arguments"] for c in calls}) == len(calls) == 2


def test_parallel_variants_call_an_items_function_again_with_the_values_changed_in_the_request_too(single):
    raws, _ = single
    items = tk.parallel_variants(raws, random.Random(0), 500)
    assert len(items) > 50 > len(tk.compose_parallel(raws, random.Random(0), 500)), "variants reach what pairs cannot"
    assert_valid_sft(items)
    sources = {r["id"]: r for r in raws}
    for item in items:
        source = sources[item["meta"]["origin"][0]]
        first, variant = (json.loads(c["function"]["arguments"]) for c in item["messages"][1]["tool_calls"])
        assert item["meta"]["category"] == "parallel" and len(item["tools"]) == 1 and first != variant
        assert first == json.loads(source["messages"][1]["tool_calls"][0]["function"]["arguments"])
        request = item["messages"][0]["content"]
        original, _, rest = request.partition(" Also, ")
        assert original.rstrip(".") == source["messages"][0]["content"].strip().rstrip(".")
        changed = [n for n in variant if variant[n] != first[n]]
        assert all(str(variant[n]) in rest for n in changed), request
        texts = [original.lower().rstrip(".?!"), rest.lower().rstrip(".?!")]
        for value in sorted({str(v) for n in changed for v in (first[n], variant[n])}, key=len, reverse=True):
            texts = [t.replace(value.lower(), "#") for t in texts]
        assert texts[0] == texts[1], request   # the variant's request differs only where its values do
        assert all(tk.validate_call(c, item["tools"]) is None for c in item["messages"][1]["tool_calls"])
    assert canonical_json(items) == canonical_json(tk.parallel_variants(raws, random.Random(0), 500))
    assert canonical_json(items) != canonical_json(tk.parallel_variants(raws, random.Random(1), 500))


def test_an_argument_variant_needs_a_value_the_request_states_once_as_a_whole_token():
    tool = {"type": "function", "function": {"name": "rate", "parameters": {"type": "object", "properties": {
        "top": {"type": "integer"}, "unit": {"type": "string", "enum": ["km", "mi"]}, "city": {"type": "string"}},
        "required": ["top"]}}}

    def call(**args):
        return {"id": "c", "type": "function", "function": {"name": "rate", "arguments": json.dumps(args)}}
    rng = random.Random(0)
    assert tk.argument_variant("Top restaurants above 4/5 in Tokyo", tool, call(top=5, city="Tokyo"), rng) is None
    assert tk.argument_variant("The 5 best of 5 lists", tool, call(top=5), rng) is None      # stated twice
    assert tk.argument_variant("The top five in Tokyo", tool, call(top=5, city="Tokyo"), rng) is None
    text, variant = tk.argument_variant("The top 12 within 3 km", tool, call(top=12, unit="km"), rng)
    args = json.loads(variant["function"]["arguments"])
    assert args["unit"] == "mi" and args["top"] != 12 and text == f"The top {args['top']} within 3 mi"


def test_distractors_and_irrelevance(single):
    raws, _ = single
    multiple = tk.add_distractors(raws, random.Random(3), 30, k=3)
    irrelevant = tk.irrelevance_items(raws, random.Random(3), 30, k=2)
    assert_valid_sft(multiple + irrelevant)
    sources = {r["id"]: r for r in raws}
    for item in multiple:
        source = sources[item["meta"]["origin"][0]]
        needed = source["messages"][1]["tool_calls"][0]["function"]["name"]
        assert needed in names(item["tools"]) and len(set(names(item["tools"]))) == 4
        assert item["messages"][1]["tool_calls"][0]["function"] == source["messages"][1]["tool_calls"][0]["function"]
    for item in irrelevant:
        source = sources[item["meta"]["origin"][0]]
        needed = source["messages"][1]["tool_calls"][0]["function"]["name"]
        assert needed not in names(item["tools"]) and len(item["tools"]) == 2
        assert item["messages"][1] == {"role": "assistant", "content": tk.NO_CALL_REPLY}
        assert item["messages"][0] == source["messages"][0]


def test_rebalance_moves_towards_the_target_mix(single):
    raws, _ = single
    before = Counter(tk.category(r) for r in raws)
    mixed = tk.rebalance(raws, {"parallel": 1, "simple_python": 1}, random.Random(0), total=600, max_repeat=2)
    after = Counter(tk.category(r) for r in mixed)
    assert after == {"parallel": 300, "simple_python": 300} and before["parallel"] < 300 < 2 * before["parallel"]
    assert len({r["id"] for r in mixed}) == len(mixed)
    assert sum(r["id"].endswith("#rep1") for r in mixed) == 300 - before["parallel"]


def test_schema_filter_drops_hallucinated_functions_missing_and_mistyped_arguments(single):
    raws, labels = single
    kept = {r["id"] for r in tk.schema_valid(raws)}
    for kind in ("hallucinated_function", "missing_required", "wrong_type"):
        ids = [i for i, label in labels.items() if label["noise"] == kind]
        assert ids and not kept & set(ids), kind
    clean = [i for i, label in labels.items() if label["noise"] == "clean"]
    assert set(clean) <= kept


# ------------------------------------------------------------------------ through ctx.env


def test_refinement_synthesis_inserts_a_real_error_with_weight_zero(sample, env):
    rng = random.Random(0)
    made = [r for r in (tk.refinement_synthesis(raw, env, rng) for raw in sample) if r]
    assert len(made) >= 20 and {r["meta"]["tags"][1] for r in made} == set(tk.ERROR_KINDS)
    originals = {r["id"]: r for r in sample}
    for record in made:
        assert check_sft(record) is None
        original = originals[record["meta"]["origin"][0]]
        assistants = [i for i, m in enumerate(record["messages"]) if m["role"] == "assistant"]
        wrong = assistants[record["weights"].index(0)]
        assert record["weights"].count(0) == 1
        scenario = env.start(original["meta"]["env"])
        scenario.run(record["messages"][:wrong])
        observation = scenario.execute(record["messages"][wrong]["tool_calls"][0])
        assert observation.error and record["messages"][wrong + 1]["content"] == observation.content
        assert env.validate(record["messages"], original["messages"], original["meta"]["env"]).valid
    rng = random.Random(0)
    assert canonical_json(made) == canonical_json([r for r in (tk.refinement_synthesis(raw, env, rng)
                                                               for raw in sample) if r])


@pytest.fixture(scope="module")
def labeled(tmp_path_factory):
    """Executed ground truth of the first 60 train base scenarios (the sample's TravelAPI state
    offers no sibling values to vary)."""
    raws, _, _ = corpus_builder.build("bfcl", "labeled", 0, limit=60, variants=["base"])
    folder = tmp_path_factory.mktemp("env-labeled")
    prepare(raws, folder)
    return raws, Environment(folder)


def test_environment_variants_are_new_requests_that_execute_like_the_original(labeled):
    raws, env = labeled
    rng = random.Random(0)
    made = [v for raw in raws for v in tk.environment_variants(raw, env, rng)]
    assert len(made) >= 4
    originals = {r["id"]: r for r in raws}
    for variant in made:
        assert check_sft(variant) is None
        original = originals[variant["meta"]["origin"][0]]
        users = [[m["content"] for m in r["messages"] if m["role"] == "user"] for r in (variant, original)]
        assert users[0] != users[1] and len(users[0]) == len(users[1])
        fresh = env.start(original["meta"]["env"]).run(variant["messages"])
        assert [o.content for o in fresh] == [m["content"] for m in variant["messages"] if m["role"] == "tool"]
        recorded = env.start(original["meta"]["env"]).run(original["messages"])
        assert [o.error for o in fresh] == [o.error for o in recorded]


class ScriptedLLM:
    """A test double for ctx.llm (the host channel is tested in test_llm_channel.py)."""

    def __init__(self, *replies):
        self.replies, self.prompts = list(replies), []

    def complete(self, messages, max_tokens=512):
        self.prompts.append(messages[-1]["content"])
        return self.replies.pop(0)


def test_llm_refinement_keeps_a_rewrite_only_when_schema_and_environment_accept_it(sample, env):
    raw = next(r for r in sample if r["outcome"]["success"])
    i = next(n for n, m in enumerate(raw["messages"]) if m.get("tool_calls"))
    good = raw["messages"][i]["tool_calls"][0]["function"]
    fixed = json.dumps({"name": good["name"], "arguments": json.loads(good["arguments"])})
    llm = ScriptedLLM(f"Here it is: {fixed}", '{"name": "no_such_tool", "arguments": {}}')
    record = tk.llm_refine(raw, llm, env, i, "made-up error")
    assert record["weights"][-1] == 1 and record["messages"][-1]["tool_calls"][0]["function"]["name"] == good["name"]
    assert "made-up error" in llm.prompts[0] and check_sft(record) is None
    assert tk.llm_refine(raw, llm, env, i, "made-up error") is None
    assert tk.llm_refine(raw, None, env, i, "x") is None


# ------------------------------------------------------------------------ the reference strategy


def test_the_augment_strategy_adds_data_and_replays(tmp_path, sample_corpus):
    files = strategy_files(ROOT / "curation_strategies" / "augment")
    corpus = load_corpus([str(sample_corpus)])
    first = execute(files, corpus, tmp_path / "a", executor=ProcessExecutor())
    again = execute(files, corpus, tmp_path / "b", executor=ProcessExecutor())
    assert (first.out_dir / "sft.jsonl").read_bytes() == (again.out_dir / "sft.jsonl").read_bytes()
    tags = Counter(t for record in read_artifact(first.out_dir / "sft.jsonl") for t in record["meta"]["tags"])
    assert tags["refinement"] >= 10 and tags["augment"] == len((first.out_dir / "sft.jsonl").read_text().splitlines())


def test_argument_variants_are_single_calls_with_the_requests_values_changed_in_the_call_too(single):
    raws, _ = single
    items = tk.argument_variants(raws, random.Random(0), 60)
    assert 0 < len(items) <= 60
    assert_valid_sft(items)
    sources = {r["id"]: r for r in raws}
    for item in items:
        source = sources[item["meta"]["origin"][0]]
        assert item["id"] == source["id"] + "#argument-variant" and item["tools"] == source["tools"]
        assert item["meta"]["category"] == tk.category(source)
        [call] = item["messages"][1]["tool_calls"]
        original = json.loads(source["messages"][1]["tool_calls"][0]["function"]["arguments"])
        variant = json.loads(call["function"]["arguments"])
        assert call["function"]["name"] == source["messages"][1]["tool_calls"][0]["function"]["name"]
        changed = [n for n in variant if variant[n] != original[n]]
        assert changed and all(str(variant[n]) in item["messages"][0]["content"] for n in changed)
        assert tk.validate_call(call, item["tools"]) is None
    assert len({i["id"] for i in items}) == len(items)
    assert canonical_json(items) == canonical_json(tk.argument_variants(raws, random.Random(0), 60))
    assert canonical_json(items) != canonical_json(tk.argument_variants(raws, random.Random(1), 60))

"""ρ0's RL prompts on long sessions (issue 74): with a budget, a step's prompt keeps what the trainer
would keep of the session before it (toolkit.rl.recent_prefix), so a session's RL records grow with
its length, not its square; the trainer fits each to the same prompt text; a corpus of short
sessions (the sample) is curated byte for byte as before."""
import json
from types import SimpleNamespace

from conftest import SAMPLE_CORPUS

from bench import scale_corpus
from curation_strategies import toolkit as tk
from curation_strategies.seed.strategy import curate
from curation_strategies.toolkit.rl import PROMPT_CHARS_PER_TOKEN, recent_prefix
from trainer.data import fit_prompt
from trainer.models import embedded_tokenizer_dir, load_tokenizer

TEST_LIMITS = {"max_length": 1024}   # the test profile's; its max_prompt_tokens is 1536


def _rl(records, budget):
    return curate(records, SimpleNamespace(toolkit=tk, budget=budget)).rl


def test_a_long_sessions_prompts_are_bounded_and_fit_to_the_prompts_the_trainer_made_of_the_whole_prefix():
    session = scale_corpus.record("long", 0, 1)
    whole, bounded = _rl([session], None), _rl([session], TEST_LIMITS)
    assert [r["id"] for r in whole] == [r["id"] for r in bounded]
    cut = [(a, b) for a, b in zip(whole, bounded) if len(a["messages"]) != len(b["messages"])]
    assert len(cut) > len(whole) // 2
    size = lambda rows: sum(len(json.dumps(r)) for r in rows)   # noqa: E731
    assert size(bounded) * 5 < size(whole)
    tokenizer = load_tokenizer(str(embedded_tokenizer_dir()))
    for a, b in cut[:3]:   # the first three cut (the trainer's fit of a long prefix drops one message a try: slow)
        assert fit_prompt(a["messages"], a["tools"], tokenizer, 1536)[0] == fit_prompt(b["messages"], b["tools"], tokenizer, 1536)[0]
    for record in bounded:
        messages = record["messages"]
        assert messages[-1]["role"] in ("user", "tool")
        step = record["meta"]["provenance"]["steps"][-1]
        if step.get("params"):
            assert step["params"]["max_tokens"] == 1024
            first_user = next(i for i, m in enumerate(messages) if m["role"] == "user")
            latest = messages[first_user + 1:]
            assert latest[0]["role"] != "tool"   # a call's results stay with their call
            assert sum(len(m.get("content") or "") for m in latest[1:]) <= PROMPT_CHARS_PER_TOKEN * 1024


def test_the_step_s_own_observation_is_kept_when_it_alone_is_over_the_bound():
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "fix it"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "a", "type": "function",
                                                                        "function": {"name": "view", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "a", "content": "x" * 40_000},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "b", "type": "function",
                                                                        "function": {"name": "edit", "arguments": "{}"}}]}]
    assert recent_prefix(messages, 4, 100) == [0, 1, 2, 3]   # nothing to cut: the whole prefix
    messages[2:2] = [{"role": "assistant", "content": "y" * 40_000}, {"role": "user", "content": "go on"}]
    assert recent_prefix(messages, 6, 100) == [0, 1, 4, 5]   # the request, then the step's call and its result


def test_short_sessions_are_curated_as_before():
    records = [json.loads(line) for line in SAMPLE_CORPUS.read_text().splitlines()]
    budget = {"max_length": 1024, "sft_examples": 8}
    assert _rl(records, budget) == _rl(records, None)


def _one_at_a_time(messages, tools, tokenizer, max_tokens):
    """trainer.data.fit_prompt before it skipped tries: one call (and its results) removed per render."""
    from chat_format import chat_format as cf

    messages = cf.tools_in_system(cf.normalize_messages(messages), tools, "compact")
    first_user = next((i for i, m in enumerate(messages) if m["role"] == "user"), 0)
    shortened, tries = False, 0
    while True:
        text = cf.render_prompt(messages, None, style="compact")
        n, tries = len(tokenizer(text, add_special_tokens=False)["input_ids"]), tries + 1
        if n <= max_tokens:
            return (text, n, shortened), tries
        cut = first_user + 1
        if cut >= len(messages) - 1:
            return None, tries
        del messages[cut]
        while cut < len(messages) - 1 and messages[cut]["role"] == "tool":
            del messages[cut]
        shortened = True


def test_the_trainer_fits_a_long_prompt_in_a_few_tries_to_what_one_message_at_a_time_gives():
    """The whole prefix of a late step of a long session (what evaluation's step items and an RL
    record without a budget hold): the same prompt, or the same refusal, in far fewer renders."""
    tokenizer = load_tokenizer(str(embedded_tokenizer_dir()))
    session = scale_corpus.record("long", 0, 1)
    tries = []
    counting = lambda text, **kw: tries.append(1) or tokenizer(text, **kw)   # noqa: E731
    steps = tk.tool_call_steps(session)
    for index in (steps[len(steps) // 4],):   # a prefix of ~70 messages: the reference loop is the slow part
        prefix = session["messages"][:index]
        for cap in (64, 1536):
            tries.clear()
            fitted = fit_prompt(prefix, session["tools"], counting, cap)
            expected, reference_tries = _one_at_a_time(prefix, session["tools"], tokenizer, cap)
            assert fitted == expected
            assert len(tries) * 2 < reference_tries


def test_whether_a_prompt_can_fit_is_what_fitting_it_says_in_one_render():
    from trainer.data import can_fit

    tokenizer = load_tokenizer(str(embedded_tokenizer_dir()))
    session = scale_corpus.record("long", 0, 1)
    steps = tk.tool_call_steps(session)
    tries = []
    counting = lambda text, **kw: tries.append(1) or tokenizer(text, **kw)   # noqa: E731
    for index in (steps[0], steps[len(steps) // 4]):
        prefix = session["messages"][:index]
        floor = fit_prompt(prefix, session["tools"], tokenizer, 1 << 30)[1]
        for cap in (16, 512, 1536, floor):
            tries.clear()
            assert can_fit(prefix, session["tools"], counting, cap) == (fit_prompt(prefix, session["tools"], tokenizer, cap) is not None)
            assert len(tries) == 1


def test_a_long_sessions_sft_example_is_tokenized_only_as_far_as_training_keeps_it(monkeypatch):
    """trainer.data.sft_example encodes the fewest leading messages past max_length (`_head_past`):
    the same ids, labels and cut as the whole record's, in a fraction of the tokens encoded; a
    record not that long, or one whose template renders a head otherwise, is encoded whole."""
    import trainer.data as data

    tokenizer = load_tokenizer(str(embedded_tokenizer_dir()))
    sessions = [scale_corpus.record("long", 0, n) for n in range(3)]
    records = [r for s in sessions for r in curate([s], SimpleNamespace(toolkit=tk, budget=TEST_LIMITS)).sft]
    records += [r for r in curate([json.loads(line) for line in SAMPLE_CORPUS.read_text().splitlines()][:20],
                                  SimpleNamespace(toolkit=tk, budget=TEST_LIMITS)).sft]
    encoded = []
    real = data._encode
    monkeypatch.setattr(data, "_encode", lambda m, *a: encoded.append(len(m)) or real(m, *a))
    for max_length in (64, 1024, 4096):
        for record in records:
            encoded.clear()
            fast = data.sft_example(record, tokenizer, max_length)
            with monkeypatch.context() as whole_only:
                whole_only.setattr(data, "_head_past", lambda *a: None)
                assert data.sft_example(record, tokenizer, max_length) == fast
            if len(record["messages"]) > 50 and max_length == 1024:   # a long session: a head of it, once
                assert fast["truncated"] and encoded and encoded[0] < len(record["messages"]) // 4
    plain = data._splitting_tokens(tokenizer)   # a template whose head is not the whole's start: encoded whole
    monkeypatch.setattr(data, "_splitting_tokens", lambda tok: ())
    long_one = max(records, key=lambda r: len(r["messages"]))
    assert plain and data._head_past(data.cf.normalize_messages(long_one["messages"]), long_one.get("tools"),
                                     tokenizer, 64, data.cf.DEFAULT_STYLE) is None

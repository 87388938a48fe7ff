"""The chat format: one renderer, one parser, one template that agrees with both."""
import json

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from chat_format import chat_format as cf
from trainer import models


def sample_records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def records(sample_corpus):
    return sample_records(sample_corpus)


@pytest.fixture(scope="module")
def tokenizer():
    return models.load_tokenizer(str(models.embedded_tokenizer_dir()))


TOOL = {"type": "function", "function": {
    "name": "book", "description": "This tool belongs to X. Tool description: Book a seat.\nMore text.",
    "parameters": {"type": "object", "required": ["when", "where"], "properties": {
        "seat": {"type": "string", "enum": ["aisle", "window"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "when": {"type": "string"},
        "where": {"type": "integer"}}}}}


def test_compact_tool_line_is_a_signature_with_the_tools_own_description():
    assert cf.tool_line(TOOL) == '- book(when: str, where: int, seat?: "aisle"|"window", tags?: list[str]): Book a seat.'


def test_long_descriptions_are_cut():
    tool = {"function": {"name": "f", "description": "x" * 500}}
    assert cf.tool_line(tool) == "- f(): " + "x" * cf.DESCRIPTION_CHARS + "..."


def test_the_python_helpers_render_through_the_one_template(records):
    """render/render_tools/render_assistant are views of CHAT_TEMPLATE, not a second copy."""
    r = records[0]
    for style in cf.STYLES:
        text = render_jinja_template(conversations=[r["messages"]], tools=r["tools"], chat_template=cf.CHAT_TEMPLATE,
                                     tool_style=style)[0][0]
        assert text == cf.render(r["messages"], r["tools"], style=style)
        assert "\n\n" + cf.render_tools(r["tools"], style) + cf.IM_END in text
    for m in r["messages"]:
        if m["role"] == "assistant":
            assert cf.GENERATION_PROMPT + cf.render_assistant(m) + cf.IM_END in text
    assert "{% generation %}" in cf.CHAT_TEMPLATE.replace("{%- generation -%}", "{% generation %}")
    with pytest.raises(ValueError, match="unknown tool style"):
        cf.render_tools(r["tools"], "yaml")


def test_a_tool_block_is_the_templates_own_from_lines_remembered_per_tool(records, monkeypatch):
    """render_tools puts the block together from each tool's line, rendered once per tool, in the
    frame the template puts around them: the text is the template's for every list, either style,
    and without the frame (a template not made so) the whole list is rendered."""
    odd = [TOOL, {"name": "bare", "description": "no function wrapper"}, {"function": {"name": "f", "description": ""}},
           {"type": "function", "function": {"name": "g", "parameters": {"properties": {"x": {"type": ["string", "null"]}}}}}]
    lists = [r["tools"] for r in records] + [odd, odd[::-1], odd[:1], []]
    user = [{"role": "user", "content": "x"}]

    def template(tools, style):
        text = render_jinja_template(conversations=[user], tools=tools or None, chat_template=cf.CHAT_TEMPLATE,
                                     tool_style=style)[0][0]
        return text[len(cf.IM_START + "system\n" + cf.DEFAULT_SYSTEM):].split(cf.IM_END)[0].removeprefix("\n\n")

    for style in cf.STYLES:
        assert [cf.render_tools(tools, style) for tools in lists] == [template(tools, style) for tools in lists]
    seen = cf._tool_line.cache_info().hits
    cf.render_tools(odd)
    assert cf._tool_line.cache_info().hits == seen + len(odd)
    monkeypatch.setattr(cf, "_block_frame", lambda style: None)
    assert [cf.render_tools(tools) for tools in lists] == [template(tools, cf.DEFAULT_STYLE) for tools in lists]


def test_tools_rendered_into_the_system_message_give_the_same_text(records):
    for r in records[:5]:
        assert cf.render_prompt(cf.tools_in_system(r["messages"], r["tools"]), []) == cf.render_prompt(r["messages"], r["tools"])


def test_the_model_directories_carry_the_template(tokenizer, records):
    r = records[0]
    assert tokenizer.apply_chat_template(r["messages"], tools=r["tools"], tokenize=False) == cf.render(r["messages"], r["tools"])


def test_spans_cover_exactly_the_trained_assistant_turns_and_their_end_token():
    messages = [{"role": "user", "content": "go"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "type": "function",
                                                                      "function": {"name": "cd", "arguments": "{\"d\": 1}"}}]},
                {"role": "tool", "content": "ok", "tool_call_id": "1"},
                {"role": "assistant", "content": "wrong"},
                {"role": "assistant", "content": "done"}]
    text, spans = cf.render_with_spans(messages, [TOOL], weights=[1, 0, 1])
    assert [text[a:b] for a, b in spans] == ['<tool_call>{"name": "cd", "arguments": {"d": 1}}</tool_call><|im_end|>',
                                           "done<|im_end|>"]
    assert text[spans[0][0] - len(cf.GENERATION_PROMPT):spans[0][0]] == cf.GENERATION_PROMPT
    with pytest.raises(ValueError, match="2 weights for 3 assistant messages"):
        cf.render_with_spans(messages, [], weights=[1, 1])


def test_every_assistant_turn_of_the_corpus_parses_back_to_its_calls(records):
    for r in records:
        for m in r["messages"]:
            if m["role"] != "assistant":
                continue
            parsed = cf.parse_tool_calls(cf.render_assistant(m) + cf.STOP, r["tools"])
            assert parsed.error is None
            assert [c.as_dict() for c in parsed.calls] == [
                {"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}
                for c in m.get("tool_calls") or []]
            assert parsed.content == (m["content"] or "")


def test_a_prompt_tokenizes_as_a_prefix_of_the_full_conversation(records, tokenizer):
    """Generation continues the prompt's tokens: what training saw must begin with them."""
    for r in records[:8]:
        for i, m in enumerate(r["messages"]):
            if m["role"] == "assistant":
                prompt = tokenizer(cf.render_prompt(r["messages"][:i], r["tools"]))["input_ids"]
                full = tokenizer(cf.render(r["messages"][:i + 1], r["tools"]))["input_ids"]
                assert full[:len(prompt)] == prompt


@pytest.mark.parametrize("text, calls, content", [
    ('<tool_call>{"name": "cd", "arguments": {"folder": "x"}}</tool_call>', [("cd", {"folder": "x"})], ""),
    ('Sure.\n<tool_call>{"name": "a", "arguments": {}}</tool_call>\n<tool_call>{"name": "b", "arguments": "{\\"k\\": 2}"}'
     '</tool_call><|im_end|>junk', [("a", {}), ("b", {"k": 2})], "Sure."),
    ('<tool_call>{"name": "a", "arguments": {"x": 1}}', [("a", {"x": 1})], ""),  # unclosed last block
    ("[cd(folder='x'), ls(a=True)]", [("cd", {"folder": "x"}), ("ls", {"a": True})], ""),
    ("```python\nmath.factorial(number=5)\n```", [("math.factorial", {"number": 5})], ""),
    ("[book('today', 3, seat='aisle')]", [("book", {"when": "today", "where": 3, "seat": "aisle"})], ""),
    ("The answer is 4.", [], "The answer is 4."),
])
def test_parses_hermes_blocks_and_python_call_lists(text, calls, content):
    parsed = cf.parse_tool_calls(text, [TOOL])
    assert parsed.error is None
    assert [(c.name, c.arguments) for c in parsed.calls] == calls
    assert parsed.content == content
    assert parsed.parseable == bool(calls)


@pytest.mark.parametrize("text, error", [
    ('<tool_call>{"name": "a", "arguments": {</tool_call>', "not valid JSON"),
    ('<tool_call>{"function": "a"}</tool_call>', "is not {"),
    ('<tool_call>["a"]</tool_call>', "is not {"),
    ("[cd('x')]", "positional arguments cannot be named"),
    ("[cd(folder=__import__('os').system('touch /tmp/pwned'))]", "not a literal"),
    ("[cd(folder=x)]", "not a literal"),
    ("[cd(**{'folder': 'x'})]", "**kwargs"),
    ("[cd(folder='x'", "not a list of function calls"),
    ("[f()[0]()]", "not a plain or dotted name"),
])
def test_malformed_calls_are_errors_and_nothing_is_evaluated(text, error, tmp_path):
    parsed = cf.parse_tool_calls(text, [TOOL])
    assert error in parsed.error
    assert not parsed.parseable


def test_arguments_are_written_canonically():
    messages = cf.normalize_messages([{"role": "assistant", "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "a", "arguments": '{"b":1,  "a":"é"}'}}]}])
    assert messages[0]["tool_calls"][0]["function"]["arguments"] == '{"b": 1, "a": "é"}'
    assert cf.to_openai_tool_calls([cf.ToolCall("a", {"x": [1]})]) == [
        {"id": "call_0", "type": "function", "function": {"name": "a", "arguments": '{"x": [1]}'}}]

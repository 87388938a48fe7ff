"""Whatever a candidate writes, the host checker answers with one rejected candidate and one
bounded sentence, never an exception of its own, and its memory does not follow the output."""
import dataclasses
import json
import subprocess
import sys
import textwrap

import pytest

from sandbox import checker
from sandbox.checker import CAPS, HOST_MEMORY_BUDGET, CandidateRejected, check_output
from corpora import load_corpus
from sandbox.curate import CurationFailed, execute
from conftest import curate_files
from sandbox.process_executor import ProcessExecutor
from sandbox.strategy_files import strategy_files

from conftest import ROOT, SAMPLE_CORPUS

SFT = {"id": "s1", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
       "tools": []}
TOOLS = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]


def output(folder, sft=(), rl=(), memory=()):
    """An output directory as a candidate leaves it: each artifact file from lines (str) or records."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("sft", sft), ("rl", rl), ("memory", memory)):
        text = "".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows)
        (folder / f"{name}.jsonl").write_text(text, encoding="utf-8", errors="surrogatepass")
    return folder


def rejection(tmp_path, **files) -> str:
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(CandidateRejected) as caught:
        check_output(output(tmp_path / "out", **files), dest, [])
    reason = str(caught.value)
    assert len(reason) < 500 and reason.isprintable(), reason
    return reason


def sft_line(**meta) -> str:
    return json.dumps({**SFT, "meta": meta})[:-1]


@pytest.mark.parametrize("line, reason", [
    (sft_line() + ', "meta": {"x": NaN}}', r"sft.jsonl:1: not JSON \(NaN is not valid JSON\)"),
    (sft_line() + ', "meta": {"x": -Infinity}}', r"sft.jsonl:1: not JSON \(-Infinity is not valid JSON\)"),
    (sft_line() + ', "meta": {"x": 1e999}}', r"sft.jsonl:1: a number is out of range \(NaN or Infinity\)"),
    (json.dumps({**SFT, "id": "\ud800"}), r"sft.jsonl:1: a string holds a lone surrogate"),
    (json.dumps({**SFT, "id": "x" + "\ud800"}, ensure_ascii=False), r"sft.jsonl:1: not UTF-8"),
    ("[" * 100_000 + "]" * 100_000, r"sft.jsonl:1: not JSON \(nested deeper than 64 levels\)"),
    (json.dumps({**SFT, "meta": json.loads("[" * 70 + "]" * 70)}), r"sft.jsonl:1: .*nested deeper than 64 levels"),
    ('{"id": ' + "1" * 5000 + "}", r"sft.jsonl:1: not JSON \(Exceeds the limit"),
])
def test_numbers_text_and_nesting_that_break_json_tools_are_one_sentence(tmp_path, line, reason):
    assert __import__("re").match(reason, rejection(tmp_path, sft=[line]))


def test_call_arguments_nested_too_deep_are_rejected(tmp_path):
    deep = {"a": json.loads("[" * 80 + "]" * 80)}
    call = {"id": "c", "type": "function", "function": {"name": "ls", "arguments": json.dumps(deep)}}
    record = {"id": "s", "tools": TOOLS, "messages": [{"role": "user", "content": "go"},
                                                       {"role": "assistant", "content": None, "tool_calls": [call]}]}
    assert rejection(tmp_path, sft=[record]) == "sft.jsonl:1: tool call arguments nested deeper than 64 levels"


def test_a_record_over_the_size_cap_is_rejected_without_reading_it_whole(tmp_path):
    huge = json.dumps({**SFT, "meta": {"blob": "x" * (CAPS.max_record_bytes + 10)}})
    assert rejection(tmp_path, sft=[json.dumps(SFT), huge]) == \
        f"sft.jsonl:2: a record longer than {CAPS.max_record_bytes} bytes (the cap of one record)"


def test_more_records_than_the_cap_are_rejected(tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    out = output(tmp_path / "out", sft=[{**SFT, "id": f"s{i}"} for i in range(3)], memory=[
        {"id": "m", "key": "k", "content": "c"}])
    with pytest.raises(CandidateRejected, match=r"memory.jsonl:1: more than 3 records in all \(the cap\)"):
        check_output(out, dest, [], caps=checker.OutputCaps(max_records=3))


def test_a_long_quoted_value_is_cut_and_its_control_characters_escaped(tmp_path):
    name = "\x1b[2J" + "A" * 5000
    reason = rejection(tmp_path, sft=[{**SFT, "id": name}, {**SFT, "id": name}])
    assert reason.startswith("sft.jsonl:2: duplicate id '\\x1b[2JAAAA") and "more characters]" in reason


def test_unexpected_entry_names_are_escaped(tmp_path):
    out = output(tmp_path / "out", sft=[SFT])
    (out / "\x1b]0;owned\x07").write_text("")
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(CandidateRejected) as caught:
        check_output(out, dest, [])
    assert "\x1b" not in str(caught.value) and "\\x1b]0;owned\\x07" in str(caught.value)


def test_the_toolkits_notes_of_what_it_dropped_are_checked_and_written_canonically(tmp_path):
    out = output(tmp_path / "out", sft=[SFT])
    (out / "dropped.jsonl").write_text('{"op": "drop_failed", "kind": "raw", "id": "t1"}\n'
                                       '{"id": "s9", "kind": "sft", "op": "fit_budget"}\n')
    dest = tmp_path / "dest"
    dest.mkdir()
    checked = check_output(out, dest, [])
    assert checked.artifacts["dropped.jsonl"]["count"] == 2
    assert (dest / "dropped.jsonl").read_text() == ('{"id":"t1","kind":"raw","op":"drop_failed"}\n'
                                                    '{"id":"s9","kind":"sft","op":"fit_budget"}\n')


@pytest.mark.parametrize("lines, reason", [
    (['{"op": "x", "kind": "raw"}'], r"dropped.jsonl:1: not a dropped-id line"),
    (['{"op": "x", "kind": "test", "id": "t"}'], r"dropped.jsonl:1: not a dropped-id line"),
    (['{"op": "x y", "kind": "raw", "id": "t"}'], r"dropped.jsonl:1: not a dropped-id line"),
    (['{"op": "x", "kind": "raw", "id": "' + "i" * 2000 + '"}'], r"dropped.jsonl:1: not a dropped-id line"),
    (['{"op": "x", "kind": "raw", "id": "t"}', '{"op": "y", "kind": "raw", "id": "t"}'],
     r"dropped.jsonl:2: raw id 't' dropped twice \(first on line 1\)"),
    (["[" * 100_000 + "]" * 100_000], r"dropped.jsonl:1: not JSON \(nested deeper than 64 levels\)"),
])
def test_notes_of_what_was_dropped_that_break_the_format_are_one_sentence(tmp_path, lines, reason):
    out = output(tmp_path / "out", sft=[SFT])
    (out / "dropped.jsonl").write_text("".join(line + "\n" for line in lines))
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(CandidateRejected, match=reason):
        check_output(out, dest, [])
    (out / "dropped.jsonl").unlink()
    (out / "dropped.jsonl").symlink_to(out / "sft.jsonl")   # read as regular files only, like the records
    with pytest.raises(CandidateRejected, match="dropped.jsonl is a symbolic link, not a regular file"):
        check_output(out, dest, [])


def _rl(env, reward="state_match"):
    call = {"id": "c", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    return {"id": "r", "messages": [{"role": "user", "content": "list"}], "tools": TOOLS,
            "reference": {"tool_calls": [call]}, "reward": reward, "meta": {"env": env}}


@pytest.mark.parametrize("env, reason", [
    ({"benchmark": "bfcl_multi_turn", "task_id": "multi_turn_base_99999", "variant": "base"},
     "meta.env.task_id: 'multi_turn_base_99999' is not a task of BFCL multi_turn_base"),
    ({"benchmark": "bfcl_multi_turn", "task_id": "multi_turn_base_150", "variant": "nope"},
     "meta.env.variant: 'nope' is not a BFCL multi-turn category"),
    ({"benchmark": "bfcl_multi_turn", "task_id": 150}, "meta.env.task_id: 150 is not a task of BFCL multi_turn_base"),
    ([1, 2], "meta.env: must be an object"),
])
def test_rl_records_whose_reward_would_crash_grpo_are_rejected(tmp_path, env, reason):
    assert rejection(tmp_path, rl=[_rl(env)]) == f"rl.jsonl:1: {reason}"


def test_rl_record_of_a_known_multi_turn_task_passes(tmp_path):
    from trainer.rewards import score

    record = _rl({"benchmark": "bfcl_multi_turn", "task_id": "multi_turn_base_150", "variant": "base"})
    (tmp_path / "dest").mkdir()
    checked = check_output(output(tmp_path / "out", rl=[record]), tmp_path / "dest", [])
    assert checked.artifacts["rl.jsonl"]["count"] == 1
    assert -1 <= score("", record) <= 1   # what GRPO will do with it: no KeyError


@pytest.mark.parametrize("returned, kind", [("None", "NoneType"), ("[honest(raw)]", "list"),
                                            ("{'sft': [], 'rl': [], 'extra': []}", "dict with key 'extra'"),
                                            ("{'sft': 'abc'}", "sft is str")])
def test_a_candidate_returning_something_other_than_curated_is_rejected(strategy, tmp_path, returned, kind):
    s = strategy(f"""
        def curate(raw, ctx):
            return {returned}
    """)
    with pytest.raises(CurationFailed, match=f"strategy failed: TypeError: curate returned .*{kind}"):
        curate_files(s, [SAMPLE_CORPUS], tmp_path / "out", executor=ProcessExecutor())
    assert not (tmp_path / "out").exists()


def test_a_hostile_output_through_curate_is_a_rejected_candidate_not_a_crash(strategy, tmp_path):
    s = strategy("""
        import __main__ as runtime
        real_write = runtime.write_records
        def write_records(out_dir, curated):
            real_write(out_dir, curated)
            (out_dir / "sft.jsonl").open("a").write("[" * 200000 + "]" * 200000 + "\\n")
        runtime.write_records = write_records
        def curate(raw, ctx):
            return honest(raw)
    """)
    with pytest.raises(CurationFailed, match=r"sft.jsonl:\d+: not JSON \(nested deeper than 64 levels\)"):
        curate_files(s, [SAMPLE_CORPUS], tmp_path / "out", executor=ProcessExecutor())
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("strategy")) == []


# A child process checks output at the caps and reports its own peak RSS and that of the child it
# forks for a file's second half: the budget holds for each, for the largest records (and one
# 200 MB line) and for the most records a candidate may write.
MEASURE = textwrap.dedent("""
    import json, resource, sys, tempfile
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from sandbox import checker
    out = Path(sys.argv[2])
    with tempfile.TemporaryDirectory() as dest:
        try:
            checked = checker.check_output(out, Path(dest), [])
            verdict = sum(a["count"] for a in checked.artifacts.values())
        except checker.CandidateRejected as exc:
            verdict = str(exc)
    # VmHWM, not ru_maxrss: the latter keeps the forking parent's peak across exec
    hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
    half = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024   # the forked half's checker
    print(json.dumps({"verdict": verdict, "rss": int(hwm.split()[1]) * 1024, "half_rss": half}))
""")


def _measure(out):
    done = subprocess.run([sys.executable, "-c", MEASURE, str(ROOT), str(out)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def _fill(out, rows):
    out.mkdir()
    with open(out / "sft.jsonl", "w") as f:
        f.writelines(rows)
    (out / "rl.jsonl").touch()
    (out / "memory.jsonl").touch()
    return out


def test_host_memory_stays_under_the_budget_at_the_caps(tmp_path):
    # records of the largest allowed size (tool names distinct, so counters grow too), then a 200 MB line
    blob = "y" * (CAPS.max_record_bytes - 300)
    big = [json.dumps({**SFT, "id": f"b{i}", "meta": {"blob": blob}}) + "\n" for i in range(48)]
    many_objects = json.dumps({**SFT, "id": "objects", "meta": {"l": [[]] * (CAPS.max_record_bytes // 4 - 1000)}})
    tokens = [{"role": "user", "content": "a b " * (CAPS.max_record_bytes // 4 - 1000)}, SFT["messages"][1]]
    big += [many_objects + "\n", json.dumps({**SFT, "id": "tokens", "messages": tokens}) + "\n"]
    largest = _measure(_fill(tmp_path / "largest", big + ['{"id": "' + "z" * 200_000_000 + '"}\n']))
    assert largest["verdict"] == f"sft.jsonl:51: a record longer than {CAPS.max_record_bytes} bytes (the cap of one record)"
    # the most records, the first of them calling as many distinct tools of the longest name as counted
    def calling(i):
        name = f"{i:0256d}"
        call = {"id": "c", "type": "function", "function": {"name": name, "arguments": "{}"}}
        return json.dumps({"id": f"t{i}", "tools": [{"type": "function", "function": {"name": name}}],
                           "messages": [{"role": "assistant", "content": None, "tool_calls": [call]}]}) + "\n"
    tiny = (calling(i) if i < CAPS.max_tool_names else
            '{"id":"%d","messages":[{"role":"assistant","content":"a"}],"tools":[]}\n' % i
            for i in range(CAPS.max_records + 1))
    most = _measure(_fill(tmp_path / "most", tiny))
    assert most["verdict"] == f"sft.jsonl:{CAPS.max_records + 1}: more than {CAPS.max_records} records in all (the cap)"
    for measured in (largest, most):
        print(f"peak RSS {measured['rss'] / 2**20:.0f} MiB, its half's {measured['half_rss'] / 2**20:.0f} MiB: "
              f"{measured['verdict'][:60]}")
        assert measured["rss"] < HOST_MEMORY_BUDGET and measured["half_rss"] < HOST_MEMORY_BUDGET
    assert most["half_rss"] > 0   # the most records were checked in two halves


def test_a_candidate_that_fails_only_on_the_real_inputs_is_a_rejected_candidate(strategy, tmp_path):
    s = strategy("""
        def curate(raw, ctx):
            if len(raw) > 5:   # the agent's dry run uses a handful of trajectories; the host, all of them
                return {"sft": [{"id": "x"}]}
            return honest(raw)
    """)
    corpus = load_corpus([str(SAMPLE_CORPUS)])
    small = dataclasses.replace(corpus, records=corpus.records[:3])
    curate_files = strategy_files(s)
    assert execute(curate_files, small, tmp_path / "sample", executor=ProcessExecutor()).manifest
    with pytest.raises(CurationFailed, match=r"sft.jsonl:1: .*'messages' is a required property"):
        execute(curate_files, corpus, tmp_path / "full", executor=ProcessExecutor())
    assert not (tmp_path / "full").exists()

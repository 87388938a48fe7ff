"""The code agent proposer: mini-swe-agent rewrites the strategy from the diagnosis (paper §4).

Per revision (effectiveness, then efficiency) one `DefaultAgent` works over a plain checkout of
the best strategy (no `.git`): its model is `LLMModel` over our LLM layer (recorded, budgeted,
no litellm), its environment `SandboxEnvironment`, which runs every command in the sandbox image
with no network and no host secret (DockerExecutor.run_command). The checkout holds the strategy
files, the host-owned `inputs/` and a `context/` with a sample of the raw corpus and the rejected
attempts; `python3 -m sandbox.dry_run` is the agent's validation command.

When the agent stops, the host validates: regular files only, nothing outside the strategy's
`*.py` files changed, no `.git`, it compiles, the code changed (not just its comments), and the
loop's dry run on the whole corpus passes the host checker with artifacts that differ from the
parent's. A failed validation goes back to the agent with the error, a bounded number of times;
then the revision is rejected and the run goes on.

With `--candidates k`, `candidates` makes k such runs from the same brief, sampled apart (the
second and later at `candidate_temperature`, each with its own seed; both are part of every
recorded request), for the loop's proxy to rank.
"""
from __future__ import annotations

import ast
import functools
import json
import logging
import os
import stat
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from base.lifetime import owned_temporary_directory, owned_temporary_folder
from base.errors import RunFailed
from evolver.llm import BudgetExceeded, ContextExceeded, LLMError
from evolver.proposers.agent_limits import AgentLimits
from evolver.diagnose import trade_text
from evolver.proposers.brief import Brief, Outcome, Verdict
from evolver.proposers.operators import read_genome
from evolver.proposers.protected import won_lines
from sandbox.executor import CommandRunner, Limits
from base.schemas import canonical_json

PROMPTS = Path(__file__).resolve().parents[1] / "prompts"
ACTION = r"```(?:bash|sh)\s*\n(.*?)\n```"
SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
VALIDATE = "python3 -m sandbox.dry_run"
HOST_OWNED = ("inputs", "context")
SAMPLE_RECORDS, SAMPLE_BYTES = 48, 1 << 20
MAX_FILE_BYTES = 1 << 20


@functools.lru_cache(maxsize=None)
def _minisweagent():
    """Import mini-swe-agent without its side effects: no banner, no ~/.config, no .env loaded
    into our environment (FIELD-NOTES), no DEBUG logging to stdout."""
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    if "MSWEA_GLOBAL_CONFIG_DIR" not in os.environ:
        import atexit
        import shutil

        os.environ["MSWEA_GLOBAL_CONFIG_DIR"] = folder = str(owned_temporary_folder("mswea"))
        atexit.register(shutil.rmtree, folder, True)   # nothing of it is left in $TMPDIR after the process
    import minisweagent.agents.default as default
    import minisweagent.exceptions as exceptions
    import minisweagent.models.utils.actions_text as actions

    for name in ("minisweagent", "agent"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = False
    return default, exceptions, actions


@functools.lru_cache(maxsize=None)
def template(name: str) -> str:
    """A prompt template's text (mini-swe-agent renders it with StrictUndefined)."""
    return (PROMPTS / name).read_text(encoding="utf-8")


def outcome_lines(outcomes: Sequence[Mapping], last: int = 4) -> list[str]:
    """The outcome deltas of the last evaluated edits, one line each (context/outcomes.json has them whole)."""
    def tasks(rows):
        return ", ".join(f"{r['task']} ({r.get('family_before') or 'pass'} → {r.get('family_after') or 'pass'})"
                         for r in rows[:6]) + (" …" if len(rows) > 6 else "") or "none"
    lines = []
    for d in list(outcomes)[-last:]:
        added = ", ".join(f"{op} +{n}" for op, n in list(d["records"]["added"].items())[:4]) or "none"
        removed = ", ".join(f"{op} −{n}" for op, n in list(d["records"]["removed"].items())[:4]) or "none"
        lines.append(f"epoch {d['epoch']} ({'accepted' if d['accepted'] else 'rejected'}; edits: "
                     f"{'; '.join(d['edits']) or 'code agent'}): fixed {tasks(d['fixed'])}; broke {tasks(d['broken'])}; "
                     f"records added {added}; removed {removed}")
    return lines


class LLMModel:
    """mini-swe-agent's model protocol over `evolver.llm.LLM`: one text reply, one bash action;
    `sampling` ({"temperature", "seed"}, either optional) is asked of every call."""

    def __init__(self, llm, purpose: str, sampling: Mapping | None = None):
        self.llm, self.purpose, self.sampling = llm, purpose, dict(sampling or {})
        self.config = {"purpose": purpose, **self.sampling}
        self.calls: list[dict] = []

    def query(self, messages: list[dict], **kwargs) -> dict:
        _, exceptions, actions = _minisweagent()
        chat = [{"role": m["role"], "content": m["content"]} for m in messages if m["role"] in ("system", "user", "assistant")]
        reply = self.llm.complete(chat, purpose=self.purpose, **self.sampling)
        self.calls.append({"record": reply.record, "prompt_tokens": reply.prompt_tokens,
                           "completion_tokens": reply.completion_tokens, "usd": reply.usd, "from_record": reply.from_record})
        extra = {"cost": reply.usd, "record": reply.record}
        try:
            parsed = actions.parse_regex_actions(reply.text, action_regex=ACTION,
                                                 format_error_template=template("evolve_format_error.jinja"))
        except exceptions.FormatError as error:
            error.messages = ({"role": "assistant", "content": reply.text, "extra": extra},
                              *({**m, "extra": {**m.get("extra", {}), "cost": 0.0}} for m in error.messages))
            raise
        return {"role": "assistant", "content": reply.text, "extra": {**extra, "actions": parsed}}

    def format_message(self, **kwargs) -> dict:
        return dict(kwargs)

    def format_observation_messages(self, message: dict, outputs: list[dict], template_vars: dict | None = None) -> list[dict]:
        _, _, actions = _minisweagent()
        return actions.format_observation_messages(outputs, observation_template=template("evolve_observation.jinja"),
                                                   template_vars=template_vars)

    def get_template_vars(self, **kwargs) -> dict:
        return {}

    def serialize(self) -> dict:
        return {"info": {"config": {"model": self.config, "model_type": "curateevo.LLMModel"}}}


class SandboxEnvironment:
    """mini-swe-agent's environment protocol: each command in a fresh sandbox container over
    the checkout, with no network and only the sandbox's fixed environment (no host secret)."""

    def __init__(self, executor, workdir: Path, timeout_s: float = 120.0):
        self.executor, self.workdir, self.timeout_s = executor, Path(workdir), timeout_s
        self.config = {"timeout_s": timeout_s}
        self.commands: list[dict] = []

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        _, exceptions, _ = _minisweagent()
        command = action.get("command", "")
        result = self.executor.run_command(command, self.workdir, Limits(timeout_s=timeout or self.timeout_s,
                                                                        memory_bytes=2 * 2**30, max_processes=64))
        self.commands.append({"command": command, "returncode": result.returncode, "wall_s": round(result.wall_s, 3)})
        output = {"output": result.output, "returncode": -1 if result.returncode is None else result.returncode,
                  "exception_info": result.reason if result.timed_out else ""}
        lines = output["output"].lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT and output["returncode"] == 0:
            summary = "".join(lines[1:])
            raise exceptions.Submitted({"role": "exit", "content": summary,
                                        "extra": {"exit_status": "Submitted", "submission": summary}})
        return output

    def get_template_vars(self, **kwargs) -> dict:
        return {}

    def serialize(self) -> dict:
        return {"info": {"config": {"environment": {"timeout_s": self.timeout_s}, "environment_type": "curateevo.SandboxEnvironment"}}}


# ---------------------------------------------------------------------------- the checkout


def _is_strategy_file(rel: str) -> bool:
    return "/" not in rel and rel.endswith(".py") and not rel.startswith(".")


def corpus_sample(corpus, seed: int, k: int = SAMPLE_RECORDS) -> bytes:
    """A deterministic sample of the raw corpus (canonical JSONL, in corpus order, ≤ 1 MiB)."""
    import random

    records = corpus.records   # a sequence read on access (corpora.stored): only the picked ones are decoded
    picked = sorted(random.Random(f"curateevo:{seed}:agent-sample").sample(range(len(records)), min(k, len(records))))
    lines, size = [], 0
    for i in picked:
        line = canonical_json(records[i]).encode("utf-8") + b"\n"
        if size + len(line) > SAMPLE_BYTES and lines:
            continue
        lines.append(line)
        size += len(line)
    return b"".join(lines)


def write_checkout(root: Path, files: Mapping[str, bytes], context: Mapping[str, bytes]) -> dict[str, bytes]:
    """The agent's plain checkout: strategy files, inputs/, context/. Returns what was written."""
    written = {**{k: v for k, v in files.items() if _is_strategy_file(k) or k.startswith("inputs/")},
               **{f"context/{k}": v for k, v in context.items()}}
    for rel, data in written.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return written


def scan_checkout(root: Path, written: Mapping[str, bytes]) -> tuple[dict[str, bytes] | None, str | None]:
    """The strategy files the agent left, or why they cannot be taken (one sentence per fault)."""
    faults, files = [], {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            mode = os.lstat(path).st_mode
            if name.startswith(".git"):
                faults.append(f"{rel}: a git directory or file; the checkout must stay plain (no .git, no hooks)")
            elif stat.S_ISLNK(mode):
                faults.append(f"{rel}: a symbolic link; only regular files are accepted")
            elif stat.S_ISDIR(mode):
                if name == "__pycache__" or rel in HOST_OWNED:
                    continue
                faults.append(f"{rel}/: a new directory outside the strategy files")
            elif not stat.S_ISREG(mode):
                faults.append(f"{rel}: not a regular file")
            elif "__pycache__" in rel.split("/"):
                continue
            elif rel in written and not _is_strategy_file(rel):
                if path.read_bytes() != written[rel]:
                    faults.append(f"{rel}: host-owned and read-only, but it was changed")
            elif _is_strategy_file(rel):
                if os.lstat(path).st_size > MAX_FILE_BYTES:
                    faults.append(f"{rel}: larger than {MAX_FILE_BYTES} bytes")
                else:
                    files[rel] = path.read_bytes()
            else:
                faults.append(f"{rel}: outside the strategy files (only top-level *.py files may change)")
        dirnames[:] = [d for d in dirnames if not d.startswith(".git") and not os.path.islink(Path(dirpath) / d)]
    faults += [f"{rel}: host-owned and read-only, but it was deleted" for rel in written
               if not _is_strategy_file(rel) and not (root / rel).is_file()]
    if faults:
        return None, "; ".join(faults[:8])
    return files, None


def code_fault(files: Mapping[str, bytes], parent: Mapping[str, bytes]) -> str | None:
    """Why the agent's strategy files are no usable revision: missing, not Python, or no change."""
    if "strategy.py" not in files:
        return "strategy.py was removed; the strategy must keep curate(raw, ctx) in strategy.py"
    trees = {}
    for rel, data in sorted(files.items()):
        try:
            trees[rel] = ast.dump(ast.parse(data.decode("utf-8"), filename=rel))
            compile(data, rel, "exec")
        except UnicodeDecodeError:
            return f"{rel} is not UTF-8 text"
        except SyntaxError as exc:
            return f"{rel}:{exc.lineno}: {exc.msg} (it does not compile)"
    old = {k: v for k, v in parent.items() if _is_strategy_file(k)}
    if files == old:
        return "no strategy file changed"
    try:
        if trees == {rel: ast.dump(ast.parse(data.decode("utf-8"))) for rel, data in old.items()}:
            return "only comments or formatting changed; the code is the same"
    except (SyntaxError, UnicodeDecodeError):
        pass
    return None


def stats_summary(stats: Mapping) -> str:
    """The curated scale of the curation stats (profile.json) in one line (records per artifact, raw retention)."""
    parts = [f"{kind} {stats[kind]['records']} records" for kind in ("sft", "rl", "memory") if kind in stats]
    raw = stats.get("raw") or {}
    if "records" in raw and "retained" in raw:
        parts.append(f"{raw['retained']} of {raw['records']} raw trajectories retained")
    return ", ".join(parts) or "no profile"


# ---------------------------------------------------------------------------- the proposer


class AgentProposer:
    name = "agent"

    def __init__(self, llm, executor, limits: AgentLimits = AgentLimits()):
        if not isinstance(executor, CommandRunner):
            raise RunFailed(f"the code agent's commands need the Docker sandbox; the {executor.name} executor cannot run them")
        self.llm, self.executor, self.limits = llm, executor, limits

    def revise(self, phase: str, brief: Brief, validate: Callable[[dict], Verdict], out_dir: Path) -> Outcome:
        """Run the agent for one revision of `brief.files`; `validate(files)` is the loop's dry
        run of the whole corpus through the host checker; the agent's trajectories go to
        `out_dir/<phase>/`."""
        return self._run(phase, brief, validate, Path(out_dir), None)

    def sampling(self, i: int, seed: int) -> dict | None:
        """How candidate i of an epoch samples: candidate 0 as one revision would (the LLM's
        temperature, no seed), candidate i ≥ 1 at `candidate_temperature` with seed = run seed + i."""
        return None if i == 0 else {"temperature": self.limits.candidate_temperature, "seed": seed + i}

    def candidates(self, phase: str, brief: Brief, validate: Callable[[dict], Verdict], k: int,
                   out_dir: Path) -> list[Outcome]:
        """k agent runs from the same brief, each sampling differently (`sampling`), each dry-run
        by `validate`: one Outcome per run, in order (files None where a run found nothing
        acceptable); their trajectories go to `out_dir/candidate-<i>/<phase>/`. A spent budget
        ends the list there."""
        if k < 1:
            raise ValueError("k must be at least 1")
        outcomes = []
        for i in range(k):
            sampling = self.sampling(i, brief.seed)
            outcome = self._run(phase, brief, validate, Path(out_dir) / f"candidate-{i}", sampling,
                                f"candidate {i + 1} of {k}")
            for attempt in outcome.attempts:
                attempt.update(candidate=i, **(sampling or {}))
            outcomes.append(outcome)
            if outcome.budget_exhausted:
                break
        return outcomes

    def _run(self, phase: str, brief: Brief, validate: Callable[[dict], Verdict], out_dir: Path,
             sampling: Mapping | None, label: str = "") -> Outcome:
        default, _, _ = _minisweagent()
        context = {"corpus_sample.jsonl": corpus_sample(brief.corpus, brief.seed),
                   "rejected.json": (json.dumps(brief.history, indent=1, ensure_ascii=False) + "\n").encode(),
                   **({"budget.json": (json.dumps(dict(brief.budget), indent=1, sort_keys=True) + "\n").encode()}
                      if brief.budget is not None else {}),
                   **({"outcomes.json": (json.dumps(list(brief.outcomes), indent=1, ensure_ascii=False) + "\n").encode()}
                      if brief.outcomes else {})}
        out = Path(out_dir) / phase
        attempts, error, steps_left, started = [], None, self.limits.step_limit, time.monotonic()
        with owned_temporary_directory("agent") as tmp:
            work = Path(tmp) / "strategy"
            work.mkdir()
            written = write_checkout(work, brief.files, context)
            for attempt in range(self.limits.repairs + 1):
                wall_left = int(self.limits.wall_time_s - (time.monotonic() - started))
                if steps_left <= 0 or wall_left <= 0:
                    attempts.append({"attempt": attempt, "exit_status": "LimitsExceeded", "error": "no model calls or time left"})
                    break
                model, env = LLMModel(self.llm, f"agent:{phase}", sampling), SandboxEnvironment(self.executor, work, self.limits.command_timeout_s)
                agent = default.DefaultAgent(
                    model, env, system_template=template("evolve_system.jinja"), instance_template=template("evolve_instance.jinja"),
                    step_limit=steps_left, cost_limit=self.limits.cost_limit_usd, wall_time_limit_seconds=wall_left,
                    output_path=out / f"attempt-{attempt}.traj.json")
                record = {"attempt": attempt}
                attempts.append(record)
                try:
                    result = agent.run("", **self.variables(phase, brief, error))
                except BudgetExceeded as exc:
                    record.update(exit_status="BudgetExceeded", error=str(exc))
                    return Outcome(None, attempts=attempts, budget_exhausted=True)
                except ContextExceeded as exc:   # the conversation outgrew the model: this revision ends, not the run
                    record.update(exit_status="ContextExceeded", error=str(exc))
                    break
                except LLMError as exc:
                    record.update(exit_status="LLMError", error=str(exc))
                    break
                except RunFailed as exc:   # the sandbox refused a command: e.g. the agent made a .git
                    record.update(exit_status="SandboxRefused", error=str(exc))
                    break
                finally:
                    steps_left -= agent.n_calls
                    record.update(model_calls=agent.n_calls, commands=len(env.commands),
                                  tokens=sum(c["prompt_tokens"] + c["completion_tokens"] for c in model.calls),
                                  usd=round(sum(c["usd"] for c in model.calls), 6))
                record["exit_status"] = result.get("exit_status", "")
                summary = (result.get("submission") or "").strip()
                if record["exit_status"] != "Submitted":
                    record["error"] = f"the agent stopped without submitting ({record['exit_status']})"
                    break
                files, error = scan_checkout(work, written)
                if error is None:
                    error = code_fault(files, brief.files)
                if error is None:
                    verdict = validate({**{k: v for k, v in brief.files.items() if k.startswith("inputs/")}, **files})
                    error = verdict.error
                    if verdict.ok:
                        record.update(validated=True, summary=summary)
                        how = ", ".join([label] * bool(label) + [f"{k} {v}" for k, v in (sampling or {}).items()])
                        return Outcome(files, self._message(phase + (f" ({how})" if how else ""), summary, files, brief.files),
                                       attempts=attempts)
                record.update(validated=False, error=error, summary=summary)
        return Outcome(None, attempts=attempts)

    @staticmethod
    def variables(phase: str, brief: Brief, error: str | None) -> dict:
        """What the instance prompt (evolve_instance.jinja) is rendered with."""
        stats = dict(brief.curation_stats)   # the prompt template's names stay `profile`, `profile_summary`
        return {"phase": phase, "lam": brief.lam, "profile": {"cost_train": stats.get("cost_train", 0), "C": stats.get("C", 0.0)},
                "profile_summary": stats_summary(stats),
                "failed_points": [{"family": p.get("family", "?"), "count": p.get("count", 1), "task_ids": list(p.get("task_ids", [])),
                                   "failed_point": p.get("failed_point", ""), "evidence": p.get("evidence", ""),
                                   "curation_hint": p.get("curation_hint", "")} for p in brief.failed_points],
                "signals": _signal_lines(brief.signals), "score": dict(brief.score) if brief.score else None,
                "rejected": brief.history, "lessons": _lesson_lines(brief.rejected), "previous_error": error or "",
                "validate_command": VALIDATE, "outcomes": outcome_lines(brief.outcomes),
                "won": won_lines(brief.outcomes, _genome(brief.files))}

    @staticmethod
    def _message(phase: str, summary: str, files: Mapping[str, bytes], parent: Mapping[str, bytes]) -> str:
        changed = sorted(k for k in set(files) | {k for k in parent if _is_strategy_file(k)} if files.get(k) != parent.get(k))
        first = next((line.strip() for line in summary.splitlines() if line.strip()), "the code agent's revision")
        return f"{phase}: {first[:100]}\n\nFiles: {', '.join(changed)}\n\n{summary[:4000]}".rstrip() + "\n"


def _genome(files: Mapping[str, bytes]) -> dict | None:
    """The best strategy's operator settings when it is a composed strategy, else None."""
    source = files.get("strategy.py")
    return read_genome(source.decode("utf-8", errors="replace")) if source is not None else None


def _ids(items) -> str:
    items = list(items)
    return ", ".join(map(str, items[:8])) + (f" … ({len(items)} in all)" if len(items) > 8 else "")


def _lesson_lines(lessons) -> list[str]:
    """inputs/rejected.json, one line per rolled-back candidate: what it broke (and how the broken
    tasks fail now), what it fixed, its scores against the best's."""
    lines = []
    for x in lessons:
        against = x.get("against") or {}
        how = "; ".join(f"{p['family']} ×{p['count']} ({p['evidence']})" for p in (x.get("broke_as") or ())[:4])
        lines.append(f"epoch {x.get('epoch')} — {x.get('summary') or 'no summary'} (J = {x.get('J')} against the best's "
                     f"{against.get('J')}): broke {len(x.get('broke') or ())} task(s) the best solves"
                     + (f" [{_ids(x['broke'])}]" if x.get("broke") else "") + (f", now failing as {how}" if how else "")
                     + f"; fixed {len(x.get('fixed') or ())}" + (f" [{_ids(x['fixed'])}]" if x.get("fixed") else "")
                     + (f"; per category fixed/broken: {trade_text(x['by_category'])}" if x.get("by_category") else ""))
    return lines


def _signal_lines(signals: Mapping) -> list[str]:
    """CoEvolve's signals of inputs/signals.json, one line each (task ids cut after 8)."""
    ids = _ids
    lines = []
    if signals.get("forgetting"):
        lines.append(f"forgetting — passed in a recent evaluated epoch, fail now: {ids(signals['forgetting'])}")
    if signals.get("boundary"):
        lines.append(f"boundary — mixed outcomes among sampled rollouts of one policy: {ids(signals['boundary'])}")
    for r in (signals.get("rare") or ())[:8]:
        lines.append(f"rare action pattern {r['pattern']!r} — {r['count']} cumulative occurrence(s), in {ids(r.get('task_ids', ()))}")
    return lines

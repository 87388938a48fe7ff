"""What `curateevo run` checks about a new run before its directory exists (evolver/run_cli.py
`create_run`): the record ids a user holds out, the held-out parts a corpus without an environment
is judged on, that ρ0's records survive the profile's length limits, and that a user's own strategy
(`--strategy DIR`) passes the checks every candidate passes."""
from __future__ import annotations

from pathlib import Path

from base.lifetime import owned_temporary_directory
from base.errors import UserError
from base import registry
from evolver.config import RunConfig


def read_ids(path: str, option: str) -> list[str]:
    """`--dev-ids` / `--test-ids FILE`: one record id a line (blank lines ignored), each once."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--{option} {path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    ids, seen = [], {}
    for n, line in enumerate(text.splitlines(), 1):
        rid = line.strip()
        if not rid:
            continue
        if rid in seen:
            raise UserError(f"{path}:{n}: id {rid[:60]!r} repeats line {seen[rid]}; list each record once")
        seen[rid] = n
        ids.append(rid)
    if not ids:
        raise UserError(f"--{option} {path}: no ids (one record id a line)")
    return ids


def dev_check(config: RunConfig) -> dict:
    """The next-call benchmark's held-out dev and test parts, built as evaluation will build them: UserError now, before
    any work, when it gives nothing to judge; else what it gives (NextCallBenchmark.dev_size)."""
    from base.registry import get_benchmark

    spec = config.eval_spec   # the options evaluation builds it with: the same benchmark, built once a process
    bench = get_benchmark(config.benchmark, corpus=list(spec.corpus), on_error=spec.corpus_on_error,
                          tools=spec.corpus_tools, holdout=spec.holdout)
    if not bench.test_ids and (config.effective_holdout.get("test_share") or config.effective_holdout.get("test_ids")):
        raise UserError(bench.too_small(list(config.corpus)))   # `curateevo test` would have nothing to read
    from corpora.split import sides
    from corpora.stored import in_order

    # the records read from their file as sides() scans them: a list of them held 1.6 GiB at 10^5 trajectories
    return {**bench.dev, "test_records": len(bench.test_ids), "sides": sides(in_order(bench.records), config.effective_holdout)}


def dev_note(dev: dict, tasks: int) -> str:
    """The real dev size, and a warning when it cannot tell strategies apart."""
    from environments.metrics import resolution_warning
    from corpora.split import sides_note

    used = min(tasks, dev["records"])
    text = (f"dev: the held-out dev part holds {dev['records']} record(s); {dev['records_with_items']} give "
            f"{dev['items']} step items ({dev['items_with_calls']} with tool calls as gold); {dev['test_records']} "
            "more are held out for `curateevo test` (split by task; --dev-ids/--test-ids choose them)")
    if dev["failed_outcome"] or dev["no_tool_call"]:
        text += (f"; {dev['failed_outcome']} with a failed outcome and {dev['no_tool_call']} without tool calls "
                 "give none")
    if tasks < dev["records"]:
        text += f"; --tasks {tasks} evaluates {used} of them"
    warning = resolution_warning(dev["items"])
    return text + (f"\nwarning: {warning}" if warning else "") + (f"\n{sides_note(dev['sides'])}" if "sides" in dev else "")


def check_run_prompts(config: RunConfig) -> None:
    """Every dev prompt the run's evaluation will show its base model fits the run's prompt cap (as
    `evaluate_on` raises it for the benchmark), checked with the base's tokenizer before the run
    directory exists: UserError naming the cap that fits (environments.evaluate.check_prompts_fit)."""
    from environments.evaluate import check_prompts_fit, opening_prompts
    from base.registry import get_benchmark
    from experiments.train_eval import prompt_cap
    from trainer.models import load_tokenizer, resolve

    spec = config.eval_spec
    options = ({"corpus": list(spec.corpus), "on_error": spec.corpus_on_error, "tools": spec.corpus_tools,
                "holdout": spec.holdout} if spec.corpus else {})
    bench = get_benchmark(config.benchmark, **options)
    prompts = opening_prompts(bench, bench.tasks(config.split, limit=config.tasks), registry.get(config.benchmark).executable)
    source = resolve(config.train.base or config.train.resolved.base)
    context = None
    try:
        from transformers import AutoConfig

        context = getattr(AutoConfig.from_pretrained(source), "max_position_embeddings", None)
    except (OSError, ValueError):
        pass
    check_prompts_fit(config.benchmark, prompts, load_tokenizer(source), prompt_cap(spec), context=context,
                      max_new_tokens=spec.max_new_tokens)


def check_run_lengths(config: RunConfig, corpus) -> tuple[RunConfig, str | None]:
    """ρ0's records (curation_strategies/seed) are made here on the host, from the part of `corpus`
    a strategy sees, and measured as epoch 0's training will measure them (trainer.length.check_lengths):
    (config, None) when some would be trained. When none would be at the profile's limits because
    the corpus's system prompt and tools alone outgrow them, and the user named no limit, the run
    takes limits measured from the corpus (trainer.length.corpus_limits) and says `windows` in its
    candidates' ctx.budget (RunConfig.windows), so ρ0 trains each trajectory longer than that
    max_length as windows that fit it: (that config, the sentence saying so). Only then: ρ0 keeps
    every trajectory whole in every other run. Else UserError, before the run directory exists,
    naming the limits that would keep them. `corpus` None (the project's default corpus, sized to
    the profile) is not measured."""
    if corpus is None:
        return config, None
    from trainer.length import corpus_limits

    view = registry.get(config.benchmark).train_view(corpus, config.effective_holdout)
    budget = config.train.budget
    if _rho0_trains_some(config, view.records):
        return config, None   # usually decided by the first trajectories: the whole report only when none is trained
    report = _rho0_lengths(config, view.records)
    if report is None or report.survivors:
        return config, None   # nothing to train is epoch 0's own verdict ("nothing to train"), not a length limit
    if not (budget.get("max_length") or budget.get("max_prompt_tokens")):
        max_length, max_prompt_tokens, context = corpus_limits(_rho0(config, view.records)[0], config.train.profile)
        if max_length > report.max_length:
            train = config.train.with_budget(max_length=max_length,
                                             max_prompt_tokens=max(max_prompt_tokens, report.max_prompt_tokens))
            chosen = config.replace(train=train.model_dump(), windows=True)
            fitted = _rho0_lengths(chosen, view.records)
            if fitted.survivors:
                return chosen, (f"length: profile {config.train.profile}'s limits ({report.max_length} / "
                                f"{report.max_prompt_tokens} tokens) hold no record of this corpus: its system prompt, "
                                f"tools and first request take up to {context} tokens; this run trains at --max-length "
                                f"{fitted.max_length} --train-max-prompt-tokens {fitted.max_prompt_tokens} (the profile's "
                                f"on top of them), and ρ0 trains each session longer than that as windows that fit: "
                                f"{fitted.summary()}")
    raise UserError(f"nothing would be trained: ρ0 keeps every record whole and, at profile {config.train.profile}'s "
                    f"limits, {report.summary()}; " + (f"a run with {report.advice()}" if report.advice() else
                                                        "curate shorter records") + "; nothing was run")


def _rho0(config: RunConfig, records) -> tuple[list, list]:
    """ρ0's SFT and RL records of `records` with the run's ctx.budget (`config.curation_budget`: windows
    only when it says `windows`), as the sandbox will make them."""
    from types import SimpleNamespace

    from curation_strategies import toolkit as tk
    from curation_strategies.seed.strategy import curate

    out = curate(records, SimpleNamespace(toolkit=tk, budget=config.curation_budget))
    return ([] if "no-sft" in config.ablations else out.sft), ([] if "no-rl" in config.ablations else out.rl)


RHO0_CHUNK = 64   # trajectories ρ0 curates and measures at a time while looking for one it trains


def _rho0_trains_some(config: RunConfig, records) -> bool:
    """Whether ρ0 trains any record of `records` at the run's limits, read a few trajectories at a
    time and stopped at the first record that survives (`trainer.length.trains_any`): ρ0 curates each
    trajectory on its own, so a part's records are the records it makes of the whole corpus, and a
    large corpus is not curated and tokenised whole on the host before its run exists (10^5
    trajectories: minutes, silently; 64 long sessions' thousands of RL prompts: a minute)."""
    from trainer.length import trains_any

    budget = config.train.budget
    for start in range(0, len(records), RHO0_CHUNK):
        sft, rl = _rho0(config, records[start:start + RHO0_CHUNK])
        if trains_any(sft, rl, config.train.profile, budget.get("max_length") or None,
                      budget.get("max_prompt_tokens") or None):
            return True
    return False


def _rho0_lengths(config: RunConfig, records):
    """What the run's limits do to ρ0's records (trainer.length), None when there are none."""
    from trainer.length import profile_length_report

    sft, rl = _rho0(config, records)
    if not sft and not rl:
        return None
    budget = config.train.budget
    return profile_length_report(sft, rl, config.train.profile, budget.get("max_length") or None,
                                 budget.get("max_prompt_tokens") or None)


def check_own_strategy(cfg: RunConfig) -> RunConfig:
    """`cfg` with the sha256 of its user's strategy, once that strategy passed the candidate gate's
    checks on the run's corpus (evolver/own_strategy.py); `cfg` itself without one. UserError: one sentence
    naming the directory, why, and how to see it."""
    if not cfg.strategy:
        return cfg
    from corpora import load_corpus
    from evolver.candidate import check_candidate
    from evolver.own_strategy import own_files, own_sha256
    from sandbox.executor import make_executor

    files = own_files(cfg)
    where = f"--strategy {cfg.strategy}"
    corpus = registry.get(cfg.benchmark).train_view(load_corpus(list(cfg.corpus), on_error=cfg.on_error,
                                                                tools=cfg.tools or None), cfg.effective_holdout)
    with owned_temporary_directory("own-strategy") as tmp:
        verdict, _ = check_candidate(files, corpus, make_executor(cfg.sandbox), {}, Path(tmp) / "dry-run",
                                     seed=cfg.seed, n_ref=cfg.n_ref, timeout_s=cfg.curation_timeout_s,
                                     budget=cfg.curation_budget)
    if not verdict.ok:
        raise UserError(f"{where}: it fails the checks every candidate passes ({verdict.error}); nothing was "
                        f"trained; `curateevo curate --strategy {cfg.strategy} --corpus …` shows its output")
    return cfg.replace(strategy_sha256=own_sha256(cfg.strategy))

"""The results leaderboard and every figure the docs quote, generated from the raw files under
bench/results/ and from the code's own defaults.

    .venv/bin/python bench/leaderboard.py           # rewrite docs/leaderboard.md and every generated block
    .venv/bin/python bench/leaderboard.py --check   # exit 1, one line per disagreement (file:line)

A document (the READMEs, every page under docs/) quotes a figure only between markers, inline
or as a block:

    <!-- gen NAME -->the text NAME generates<!-- /gen -->

NAME is one of
- `leaderboard`: the one table, a row per raw file (date, what, result, command, commit, raw file);
- `raw:FILE:PATH|FORMAT`: a value read from bench/results/FILE — PATH walks keys and list items
  (`rows[id=oracle].P`, `pairs[a=oracle&b=rho0-wild]`, `runs[0].wall_s`), FORMAT is one of FORMATS (`ci`, `dci`, `pct`, `n`, `dur`, …);
- `date:FILE`: the date of FILE's row on the leaderboard (the file's `date`, its provenance entry, its name);
- `quality:FILE`: a `bench quality` table's rows (P and its interval, each against ρ0 on the wild corpus);
- `grpo-budget:FILE`: a GRPO-budget sweep's table (bench/grpo_budget.py's own rendering);
- `table:FILE:PATH`: the list of flat records at PATH (a run's epochs) as a table, a column per key
  (`table:FILE:PATH|a,b`: columns a and b, in that order);
- `const:MODULE:NAME`: a setting as the code declares it (`const:sandbox.checker:SPLIT_BYTES|mib`,
  `const:sandbox.artifact_records:OutputCaps.max_records|n`): a bound, not a measurement, read from the code;
- `run:FIELD`, `profile:NAME:FIELD`, `recipe:FIELD`: a default read from evolver.config.RunConfig,
  trainer.recipe.PROFILES and trainer.recipe.Recipe; `margin` (`margin:TASKS`): the margin a default run
  (at --tasks TASKS) derives, evolver.acceptance.default_margin.

A raw file gives its row's date, command and commit as top-level keys (`date`, `command`,
`commit`); a file written before that convention has them in bench/results/provenance.toml.
The row's result is read by its kind (KINDS, told by the file's shape or its `kind` key): a new
file of a known kind becomes a row with no change here.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import tomllib
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PROVENANCE = RESULTS / "provenance.toml"
LEADERBOARD = ROOT / "docs" / "leaderboard.md"
GEN = re.compile(r"(?<!`)<!-- gen (.+?) -->(.*?)<!-- /gen -->", re.S)   # not one quoted in `code`
DATE = re.compile(r"20\d\d-\d\d-\d\d")


def documents(root: Path = ROOT) -> list[Path]:
    """The documents whose generated blocks are kept: the READMEs and every page under docs/."""
    return [p for p in [root / "README.md", root / "trainer" / "README.md", *sorted((root / "docs").rglob("*.md"))]
            if p.is_file()]


# ---- formats: how a raw value is written in prose ----

def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _signed(x: float) -> str:
    return f"{100 * x + 0.0:+.1f}"   # + 0.0: a zero difference reads +0.0, not -0.0


def _duration(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    h, m = divmod(m, 60)
    return (f"{h} h {m} min" if h else f"{m} min {s} s" if m else f"{s} s")


def _number(x: float) -> str:
    """A default as the docs write it: 186, 0.3, 2e-4, 2.5e-5."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, float) and x and abs(x) < 1e-3:
        mantissa, exponent = f"{x:.1e}".split("e")
        return f"{mantissa.removesuffix('.0')}e{int(exponent)}"
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


FORMATS: dict[str, Callable[[Any], str]] = {
    "ci": lambda e: f"{_pct(e['value'])} [{_pct(e['low'])}, {_pct(e['high'])}]",        # an estimate in %
    "dci": lambda e: f"{_signed(e['value'])} [{_signed(e['low'])}, {_signed(e['high'])}]",   # a difference in points
    "d4": lambda e: f"{e['value'] + 0.0:+.4f} [{e['low'] + 0.0:+.4f}, {e['high'] + 0.0:+.4f}]",   # one in nats/token
    "pct": _pct,
    "n": _number,
    "dur": _duration,
    "f1": lambda x: f"{x:.1f}",
    "f2": lambda x: f"{x:.2f}",
    "f3": lambda x: f"{x:.3f}",
    "mib": lambda b: _number(b / 2**20),   # a size in bytes (a cap in the code) written in MiB
    "gib": lambda kib: f"{kib / 2**20:.1f}",   # a size in KiB (`max_rss_kib`, /usr/bin/time's) written in GiB
    "size_mib": lambda b: f"{b / 2**20:,.0f} MiB",   # a size in bytes, with its unit
    "size_gib": lambda b: f"{b / 2**30:.2f} GiB",
    "rho": lambda e: f"{e['spearman']:+.2f} [{e['low']:+.2f}, {e['high']:+.2f}]",
    "yes": lambda x: "yes" if x else "no",
    "x405": lambda s: f"{405 / s:,.0f}×",   # seconds per 1K retained turns as a factor under the paper's 405 s
    "str": str,
}


def walk(doc: Any, path: str) -> Any:
    """The value at PATH in a parsed JSON document: `a.b`, `a[0]`, `rows[id=oracle]`."""
    for key, index in re.findall(r"\.?([^.\[\]]+)|\[([^\]]+)\]", path):
        if key:
            doc = doc[key]
        elif "=" in index:   # `[id=oracle]`, `[a=run:x&b=rho0-wild]`: the item whose fields read so
            wants = [condition.partition("=")[::2] for condition in index.split("&")]
            doc = next(item for item in doc if all(str(item.get(field)) == want for field, want in wants))
        else:
            doc = doc[int(index)]
    return doc


# ---- kinds: what a raw file's row says ----

def _quality(d: dict) -> str:
    s = d["setting"]
    ranked = sorted((r for r in d["rows"] if "P" in r), key=lambda r: -r["P"]["value"])   # a pending row has no P
    named = ranked if len(ranked) <= 3 else [ranked[0]] + [r for r in ranked[1:] if r["id"] == "rho0-wild"]
    where = f"{s['split']} {d['tasks']} tasks × {len(s['seeds'])} seed(s)"
    return f"P {' · '.join(r['id'] + ' ' + FORMATS['ci'](r['P']) for r in named)} ({len(ranked)} rows, {where})"


def _rank(d: dict) -> str:
    return (f"dev P ranks like test P at ρ {FORMATS['rho'](d['dev_P'])}, dev gold LL at {FORMATS['rho'](d['dev_gold_ll'])}"
            f" ({len(d['rows'])} rows)")


def _identity(d: dict) -> str:
    files, journal = d["files"], d["journal"]
    return (f"identical: {FORMATS['yes'](d['identical'])} (refs {FORMATS['yes'](d['strategy_refs']['equal'])}, decisions "
            f"{FORMATS['yes'](d['decisions']['equal'])}, {len(files['different'])} of {files['compared']} files and "
            f"{len(journal['different'])} of {journal['compared']} journal entries differ)")


def _calibration(d: dict) -> str:
    return (f"sees poison: {FORMATS['yes'](d['sees_poison'])}; resolves {_pct(d['minimal_detectable_difference']['value'])}"
            f" points ({d['tasks']} tasks)")


def _suite(d: dict) -> str:
    setup = f" ({_duration(d['with_setup_s'])} with setup)" if "with_setup_s" in d else ""   # a run in a built tree has none
    return f"{_number(d['passed'])} passed, {d['failed']} failed in {_duration(d['wall_s'])}{setup}"


def _run(d: dict) -> str:
    epochs = "; ".join(f"{e['epoch']}: P {e['solved']}/{e['tasks']} {e['decision']}" for e in d["epochs"])
    return f"{_duration(d['wall_s'])} for {len(d['epochs'])} epochs ({epochs})"


def _grpo_budget(d: dict) -> str:
    def one(e: dict) -> str:
        diff = e.get("full_minus_no_rl")
        d_rl = f"full − w/o RL {_signed(diff['value'])} [{_signed(diff['low'])}, {_signed(diff['high'])}]" if diff else "–"
        return f"{e['candidate']}: {d_rl}, zero-variance {e.get('zero_variance_share', '–')}, GRPO {e.get('grpo_wall_s', '–')} s"
    return f"chosen {d['chosen']} ({d['why']}); " + "; ".join(one(e) for e in d["candidates"])


def _scale(d: dict) -> str:
    def one(r: dict) -> str:
        if "skipped" in r:
            return f"{r['trajectories']:,}: skipped ({r['skipped']})"
        steps = [f"{name[len('curate_'):]} {c['curation_s_per_1k_records']} s/1K records, {c['s_per_1k_turns']} s/1K turns, "
                 f"host {c['host_peak_rss_bytes'] >> 20} MiB, sandbox {(c.get('sandbox_peak_rss_bytes') or 0) >> 20} MiB, "
                 f"replay {_replayed(r.get('replay_' + name[len('curate_'):]))}"
                 for name, c in sorted(r.items()) if name.startswith("curate_") and c.get("rc") == 0]
        steps += [f"{name[len('curate_'):]} gave no artifacts (host {c['host_peak_rss_bytes'] >> 20} MiB)"
                  for name, c in sorted(r.items()) if name.startswith("curate_") and c.get("rc") != 0]
        loaded = r.get("load_split") or {}
        load = f"load + split host {loaded['host_peak_rss_bytes'] >> 20} MiB; " if loaded.get("rc") == 0 else ""
        for side in r.get("launch", ()):   # `run`'s launch (run_cli.create_run) timed at several commits
            steps.append(f"launch at {side['commit']} {', '.join(f'{s} s' for s in side['create_run_s'])}")
        if r.get("paired"):   # one step at two commits, run in turn: each side's wall and their ratio, min/median/max
            sides = " vs ".join(f"{side['commit']} {side['wall_s']['median']} s" for side in r["paired"])
            ratio = r["ratio_wall"]
            steps.append(f"{r['step']} paired, median wall {sides}, ratio {ratio['median']} [{ratio['min']}, {ratio['max']}]")
        run = r.get("tiny_run")
        if run:
            stages = ", ".join(f"{stage} {_duration(took)}" for stage, took in run.get("stage_s", {}).items())
            state = "finished" if run["rc"] == 0 else f"stopped (rc {run['rc']})"
            steps.append(f"tiny run {state} after {_duration(run['wall_s'])}, host {run['host_peak_rss_bytes'] >> 20} MiB"
                         + (f" ({stages})" if stages else ""))
        return f"{r['trajectories']:,}: " + load + "; ".join(steps)
    return " · ".join(one(r) for r in d["rows"])


def _replayed(step: dict | None) -> str:
    """A scale row's replay: identical, differs, or not run (--no-replay)."""
    return "not run" if step is None else "identical" if step.get("identical") else "differs"


def _identity_meta(d: dict) -> dict:
    return {"command": "bench/loop_identity.py --before TREE, the run: curateevo run " + " ".join(d["run"]),
            "commit": f"{d['before']} → {d['after']}"}


@dataclasses.dataclass(frozen=True)
class Kind:
    name: str
    matches: Callable[[dict], bool]
    result: Callable[[dict], str]
    page: str   # the topic page under docs/results/ that reads this kind
    meta: Callable[[dict], dict] = lambda d: {}   # the row's date/command/commit where the file holds them elsewhere


KINDS = [
    Kind("suite", lambda d: {"passed", "wall_s"} <= d.keys(), _suite, "suite.md"),
    Kind("run", lambda d: {"epochs", "wall_s"} <= d.keys(), _run, "evolution.md"),
    Kind("loop-identity", lambda d: {"identical", "strategy_refs"} <= d.keys(), _identity, "infrastructure.md",
         _identity_meta),
    Kind("rank-agreement", lambda d: {"dev_P", "dev_gold_ll", "per_row"} <= d.keys(), _rank, "instrument.md"),
    Kind("calibration", lambda d: {"sees_poison", "verdict"} <= d.keys(), _calibration, "instrument.md"),
    Kind("grpo-budget", lambda d: {"candidates", "chosen", "why"} <= d.keys(), _grpo_budget, "training.md"),
    Kind("scale", lambda d: d.get("kind") == "scale", _scale, "scale.md"),
    Kind("quality", lambda d: {"rows", "setting", "interval"} <= d.keys() and isinstance(d["rows"], list), _quality,
         "quality.md"),
]


def kind_of(d: dict) -> Kind | None:
    named = [k for k in KINDS if k.name == d.get("kind")] if isinstance(d, dict) else []
    return (named or [k for k in KINDS if isinstance(d, dict) and k.matches(d)] or [None])[0]


# ---- rows ----

@dataclasses.dataclass(frozen=True)
class Row:
    date: str
    what: str
    result: str
    command: str
    commit: str
    raw: str
    page: str


class Problems(list):
    """Disagreements, each one line: `file[:line]: what is wrong (the fix)`."""


def provenance() -> dict[str, dict]:
    return tomllib.loads(PROVENANCE.read_text(encoding="utf-8")) if PROVENANCE.is_file() else {}


def load(name: str) -> Any:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def row_of(name: str, d: Any, given: dict, problems: Problems) -> Row | None:
    kind = kind_of(d)
    held = {k: d[k] for k in ("date", "command", "commit", "what", "page") if isinstance(d, dict) and k in d}
    meta = {**(kind.meta(d) if kind else {}), **held, **given}   # provenance.toml has the last word
    if "date" not in meta and isinstance(d, dict) and "measured_on" in d:
        meta["date"] = d["measured_on"]
    if "date" not in meta and DATE.search(name):
        meta["date"] = DATE.search(name).group()
    missing = [k for k in ("date", "command", "commit") if not meta.get(k)]
    if missing:
        problems.append(f"bench/results/{name}: no {', '.join(missing)} (write them as top-level keys of the file, "
                        f"or in bench/results/provenance.toml under [\"{name}\"]; \"—\" where unknown)")
        return None
    figures = meta.get("figures", {})
    try:
        parts = [kind.result(d)] if kind else []
        parts += [f"{label} {render_raw(name, spec)}" for label, spec in figures.items()]
    except (KeyError, IndexError, TypeError, StopIteration, ValueError) as e:
        problems.append(f"bench/results/{name}: its result cannot be read ({type(e).__name__}: {e}); "
                        "fix the file or its `figures` in bench/results/provenance.toml")
        return None
    page = meta.get("page") or (kind.page if kind else "")
    what = meta.get("what") or (kind.name if kind else name)
    return Row(meta["date"], " ".join(str(what).split()), "; ".join(parts) or "—", " ".join(str(meta["command"]).split()),
               str(meta["commit"]), name, page)


def rows(problems: Problems) -> list[Row]:
    given = provenance()
    names = sorted(p.name for p in RESULTS.glob("*.json"))
    problems.extend(f"bench/results/provenance.toml: [\"{n}\"] names no file under bench/results/ (remove the entry)"
                    for n in sorted(set(given) - set(names)))
    found = []
    for n in names:
        try:
            d = load(n)
        except ValueError as e:
            problems.append(f"bench/results/{n}: not JSON ({e}); fix or remove the file")
            continue
        found.append(row_of(n, d, given.get(n, {}), problems))
    return sorted((r for r in found if r), key=lambda r: (r.date, r.raw), reverse=True)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def leaderboard(problems: Problems) -> str:
    lines = ["| date | what was measured | result | command | commit | raw |", "|---|---|---|---|---|---|"]
    for r in rows(problems):
        what = f"[{_cell(r.what)}](results/{r.page})" if r.page else _cell(r.what)
        sidecar = RESULTS / r.raw.replace(".json", ".md")
        raw = f"[{r.raw}](../bench/results/{r.raw})" + (f" ([table](../bench/results/{sidecar.name}))"
                                                         if sidecar.is_file() else "")
        lines.append(f"| {r.date} | {what} | {_cell(r.result)} | `{_cell(r.command)}` | {_cell(r.commit)} | {raw} |")
    return "\n".join(lines)


# ---- generated blocks ----

def render_raw(name: str, spec: str) -> str:
    path, _, fmt = spec.partition("|")
    return FORMATS[fmt or "str"](walk(load(name), path))


def quality_table(name: str) -> str:
    d = load(name)
    pairs = {(p["a"], p["b"]): p for p in d.get("pairs", [])}
    table2 = any(r.get("full_minus_this") for r in d["rows"])   # Table 2: what each ablated component is worth
    # where a difference is: the tasks that want a call and those that want none (experiments.quality.table.by_kind)
    kinds = [(key, label) for key, label in (("vs_rho0_wild_by_kind", "Δ vs ρ0 wild"), ("full_minus_this_by_kind", "full − row"))
             if any(r.get(key) for r in d["rows"])]
    head = [f"{label}, {kind} tasks" for _, label in kinds for kind in ("calling", "declining")]
    lines = ["| row | P [95% CI] | Δ vs ρ0 wild [95% CI] |" + (" full − row [95% CI] |" if table2 else "")
             + "".join(f" {h} |" for h in head),
             "|---|---|---|" + ("---|" if table2 else "") + "---|" * len(head)]
    for r in d["rows"]:
        pair = pairs.get((r["id"], "rho0-wild"))
        full = r.get("full_minus_this")
        split = "".join(f" {FORMATS['dci'](r[key][kind]) if r.get(key) else '—'} |"
                        for key, _ in kinds for kind in ("calling", "declining"))
        lines.append(f"| {_cell(r['label'])} | {FORMATS['ci'](r['P'])} | {FORMATS['dci'](pair) if pair else '—'} |"
                     + (f" {FORMATS['dci'](full) if full else '—'} |" if table2 else "") + split)
    return "\n".join(lines)


def table(name: str, path: str) -> str:
    """A list of flat records in a raw file as a table, one column per key, in the records' order
    (`PATH|a,b,c`: those columns, in that order)."""
    path, _, columns = path.partition("|")
    records = walk(load(name), path) if path else load(name)
    keys = columns.split(",") if columns else list(dict.fromkeys(k for r in records for k in r))
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(_cell(_number(r.get(k, "—"))) for k in keys) + " |" for r in records]
    return "\n".join(lines)


def default(name: str) -> str:
    """A default as the code holds it (RunConfig, PROFILES, Recipe), never read off the source text."""
    kind, _, rest = name.partition(":")
    if kind == "margin":   # `margin`: a default run's; `margin:60`: the same run at --tasks 60
        from evolver.acceptance import default_margin
        from evolver.config import RunConfig
        cfg = RunConfig()   # every default, the base the profile's
        tasks = int(rest) if rest else cfg.tasks
        return f"{default_margin(cfg.train.profile, cfg.train.base, cfg.benchmark, tasks, len(cfg.seeds), 'margin')[0]:.3f}"
    if kind == "run":   # a field of RunConfig or of a spec it nests (`run:profile`: TrainSpec's)
        from evolver.config import default_of
        return _number(default_of(rest))
    if kind == "profile":
        from trainer.recipe import PROFILES
        profile, _, field = rest.partition(":")
        return _number(getattr(PROFILES[profile], field))
    if kind == "recipe":
        from trainer.recipe import Recipe
        return _number(getattr(Recipe(), rest))
    if kind == "const":   # `const:sandbox.checker:SPLIT_BYTES|mib`: a module's constant (or a class's default)
        import importlib
        module, _, spec = rest.partition(":")
        attr, _, fmt = spec.partition("|")
        value: Any = importlib.import_module(module)
        for part in attr.split("."):
            value = getattr(value, part)
        return FORMATS[fmt or "n"](value)
    raise KeyError(name)


def generate(name: str, problems: Problems) -> str:
    if name == "leaderboard":
        return "\n" + leaderboard(problems) + "\n"
    if name.startswith("raw:"):
        file, _, spec = name[4:].partition(":")
        return render_raw(file, spec)
    if name.startswith("date:"):   # the date of a raw file's row on the leaderboard
        found = row_of(name[5:], load(name[5:]), provenance().get(name[5:], {}), Problems())
        if not found:
            raise KeyError(name)
        return found.date
    if name.startswith("quality:"):
        return "\n" + quality_table(name[8:]) + "\n"
    if name.startswith("table:"):
        file, _, path = name[6:].partition(":")
        return "\n" + table(file, path) + "\n"
    if name.startswith("grpo-budget:"):   # bench/grpo_budget.py's own table of its raw file
        import importlib.util

        spec = importlib.util.spec_from_file_location("grpo_budget", Path(__file__).with_name("grpo_budget.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        d = load(name[12:])
        return "\n" + module.markdown(d["candidates"], (d["chosen"], d["why"])) + "\n"
    return default(name)


def blocks(path: Path, problems: Problems, root: Path = ROOT) -> tuple[str, list[str]]:
    """The document with every generated block regenerated, and one line per block that differs."""
    text = path.read_text(encoding="utf-8")
    where = path.relative_to(root)
    out, at, stale = [], 0, []
    for m in GEN.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        try:
            want = generate(m.group(1), problems)
        except (KeyError, IndexError, TypeError, StopIteration, ValueError, FileNotFoundError, AttributeError) as e:
            problems.append(f"{where}:{line}: no figure named {m.group(1)!r} ({type(e).__name__}: {e}; "
                            "see bench/leaderboard.py for the names)")
            want = m.group(2)
        if want != m.group(2):
            stale.append(f"{where}:{line}: {m.group(1)} reads {_short(m.group(2))!r}, its source gives {_short(want)!r} "
                         "(run bench/leaderboard.py)")
        out += [text[at:m.start()], f"<!-- gen {m.group(1)} -->{want}<!-- /gen -->"]
        at = m.end()
    return "".join(out) + text[at:], stale


# what a measured figure looks like in prose: a date, a duration, a share, an interval, a count in thousands
FIGURE = re.compile(r"20\d\d-\d\d-\d\d|\b\d+(?:\.\d+)? ?(?:min|s|h|%)(?![\w-])|\[[−+-]?\d+(?:\.\d+)?, |\b\d{1,3}(?:,\d{3})+\b")
# what looks like one and is not: code, a link's target, a date inside a file's name
# (`…-2026-11-28.json`), the confidence level of an interval ("95% interval", "[95% CI]"), a bound
# set before measuring ("≤ 10%")
NOT_FIGURE = re.compile(r"`[^`]*`|\]\([^)]*\)|[\w/.-]*\d-\d\d-\d\d[\w-]*\.\w+|[\w-]+-20\d\d-\d\d-\d\d\b|"
                        r"\b20\d\d-\d\d-\d\d-[\w-]+|\b\d\d ?% ?(?=CI\b|interval|confidence|one-sided|two-sided|bootstrap)|[≤≥] ?\d+(?:\.\d+)? ?%")
HEADING_DATE = re.compile(r"^#+ .*")   # a section's date in its heading labels the section, as in a changelog

def unquoted(path: Path, root: Path = ROOT) -> list[str]:
    """A document's figures that stand outside generated blocks (a document quotes only generated ones)."""
    text = GEN.sub(lambda m: "\n" * m.group(0).count("\n"), path.read_text(encoding="utf-8"))
    found, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        prose = NOT_FIGURE.sub("", line)
        if HEADING_DATE.match(prose):
            prose = DATE.sub("", prose)
        if not fenced and (m := FIGURE.search(prose)):
            found.append(f"{path.relative_to(root)}:{number}: the figure {m.group().strip()!r} is not generated "
                         "(quote it between <!-- gen … --> markers from its raw file, or link the leaderboard)")
    return found


def _short(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= 80 else flat[:77] + "…"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 where a quoted figure or "
                        "default disagrees with its raw file or the code")
    args = parser.parse_args(argv)
    problems = Problems()
    for path in documents():
        new, stale = blocks(path, problems)
        if args.check:
            problems.extend(stale)
        elif stale:
            path.write_text(new, encoding="utf-8")
    for path in documents():
        problems.extend(unquoted(path))
    if not LEADERBOARD.is_file() or "<!-- gen leaderboard -->" not in LEADERBOARD.read_text(encoding="utf-8"):
        problems.append(f"{LEADERBOARD.relative_to(ROOT)}: no `<!-- gen leaderboard --><!-- /gen -->` block")
    for line in dict.fromkeys(problems):   # a raw file's problem is met once per block that reads it
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())

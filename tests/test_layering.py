"""The drawn import structure (DESIGN: the floors) holds: every import of the project's packages,
those inside functions included, parsed with `ast` and checked against these rules —

- `base/` (the ground floor) imports no project package;
- nothing below the loop (`sandbox/`, `corpora/`, `formats/`, `workspace/`, `trainer/`, `benchmarks/`,
  `curation_strategies/`, `base/`) imports `evolver/`, and nothing but `bench/`'s scripts imports `bench/`;
- `sandbox/`, `corpora/`, `formats/`, `workspace/` and `trainer/` reach environment knowledge only through the seam
  (`benchmarks.environment`, `benchmarks.registry`, `benchmarks.base`), never an environment's modules;
- no module imports a private (underscore) name of another unit — a unit is a top-level package,
  and each environment's folder under `benchmarks/` is a unit of its own — by `from m import _x`
  or by `m._x` on an imported module;
- between packages, arrows go down the floors (`FLOORS`): base < sandbox, corpora (reading users'
  corpora), formats (the chat format), workspace (a run's strategy repository) and
  curation_strategies (the code the sandbox runs) < trainer < benchmarks < evolver < bench (the
  measurement scripts); the one way up is into the environment seam, which is how the floors
  below reach what an environment knows;
- no import cycle between modules.

The rules are tested on small made-up trees first, so a checker that found nothing could not pass.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("base", "sandbox", "corpora", "formats", "workspace", "trainer", "benchmarks", "curation_strategies",
            "evolver", "bench")
BELOW_LOOP = ("base", "sandbox", "corpora", "formats", "workspace", "trainer", "benchmarks", "curation_strategies")
BELOW_SEAM = ("sandbox", "corpora", "formats", "workspace", "trainer")   # environment knowledge only through the seam
SEAM = ("benchmarks.base", "benchmarks.environment", "benchmarks.registry")
ENVIRONMENT_HOME = "benchmarks"   # each sub-package of it is an environment's folder: a unit
FLOORS = {"base": 0, "sandbox": 1, "corpora": 1, "formats": 1, "workspace": 1, "curation_strategies": 1, "trainer": 2,
          "benchmarks": 3, "evolver": 4, "bench": 5}


def modules(root: Path) -> dict[str, Path]:
    """Dotted module name → file, for every .py of the project packages under `root`."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")) if (root / pkg).is_dir() else ():
            parts = path.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _resolve(name: str, known: dict) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(name: str, path: Path, known: dict) -> list[tuple[str, str | None, int]]:
    """(imported project module, private name taken from it or None, line) of every import in
    the file, at any depth, and of every `alias._name` on a module it imported."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                target = _resolve(a.name, known)
                if target:
                    found.append((target, None, node.lineno))
                    if a.asname:
                        aliases[a.asname] = a.name if a.name in known else None
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for a in node.names:
                sub = f"{module}.{a.name}"
                if sub in known:   # `from pkg import module`
                    found.append((sub, None, node.lineno))
                    aliases[a.asname or a.name] = sub
                    continue
                target = _resolve(module, known)
                if target:
                    private = a.name.startswith("_") and not a.name.startswith("__")
                    found.append((target, a.name if private else None, node.lineno))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and aliases.get(node.value.id)
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            found.append((aliases[node.value.id], node.attr, node.lineno))
    return found


def unit(module: str) -> str:
    parts = module.split(".")
    if parts[0] == ENVIRONMENT_HOME and len(parts) > 2:
        return ".".join(parts[:2])   # benchmarks.bfcl, benchmarks.next_call, …
    return parts[0]


def _cycles(graph: dict[str, set]) -> list[list[str]]:
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def breaches(root: Path) -> list[str]:
    """Every rule broken under `root`, one line each (empty when the structure holds)."""
    known = modules(root)
    graph: dict[str, set] = {m: set() for m in known}
    problems = []
    for name, path in known.items():
        where = f"{path.relative_to(root)}"
        floor = name.split(".")[0]
        for target, private, line in imports(name, path, known):
            if target == name:
                continue
            graph[name].add(target)
            to = target.split(".")[0]
            if floor == "base" and to != "base":
                problems.append(f"{where}:{line}: base imports {target}")
            elif floor in BELOW_LOOP and to == "evolver":
                problems.append(f"{where}:{line}: {floor} (below the loop) imports {target}")
            elif floor in BELOW_SEAM and to == ENVIRONMENT_HOME and target not in SEAM:
                problems.append(f"{where}:{line}: {floor} imports {target}, not the environment seam")
            elif FLOORS[to] > FLOORS[floor] and target not in SEAM:
                problems.append(f"{where}:{line}: {floor} imports {target}, a floor above it")
            if private and unit(target) != unit(name):
                problems.append(f"{where}:{line}: imports the private name {private} of {target}")
    problems += [f"import cycle: {' -> '.join(c)}" for c in _cycles(graph)]
    return list(dict.fromkeys(problems))   # one line per breach, however often the file repeats it


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir(exist_ok=True)
        (tmp_path / pkg / "__init__.py").touch()
    return tmp_path


def test_each_rule_is_caught_on_a_made_up_tree(tmp_path):
    root = _tree(tmp_path, {
        "base/files.py": "def f():\n    import sandbox.curate\n",                              # base → project
        "sandbox/curate.py": "def g():\n    from evolver.loop import run\n",                 # below → loop
        "trainer/rewards.py": "from benchmarks.bfcl.backends import Episode\n",              # past the seam
        "benchmarks/registry.py": "", "evolver/loop.py": "def run():\n    pass\n",
        "benchmarks/bfcl/__init__.py": "", "benchmarks/bfcl/backends.py": "class Episode: pass\n_x = 1\n",
        "benchmarks/next_call/__init__.py": "",
        "benchmarks/next_call/judge.py": "from benchmarks.bfcl.backends import _x\n",          # private name, other unit
        "benchmarks/next_call/calls.py": "from benchmarks.bfcl import backends\ny = backends._x\n",   # private by attribute
        "curation_strategies/a.py": "def h():\n    from curation_strategies import b\n",
        "curation_strategies/b.py": "from . import a\n",                                     # a cycle
        "sandbox/exchange.py": "def row():\n    from trainer.chat_format import render\n",     # a floor up
        "trainer/chat_format.py": "def render():\n    pass\n",
        "corpora/loader.py": "from benchmarks.bfcl.backends import Episode\n",             # past the seam
        "evolver/cli.py": "def main():\n    import bench.throughput\n",                     # a floor up: bench
        "bench/throughput.py": "",
    })
    found = "\n".join(breaches(root))
    assert "base/files.py:2: base imports sandbox.curate" in found
    assert "sandbox/curate.py:2: sandbox (below the loop) imports evolver.loop" in found
    assert "trainer/rewards.py:1: trainer imports benchmarks.bfcl.backends, not the environment seam" in found
    assert "benchmarks/next_call/judge.py:1: imports the private name _x of benchmarks.bfcl.backends" in found
    assert "benchmarks/next_call/calls.py:2: imports the private name _x of benchmarks.bfcl.backends" in found
    assert "import cycle: curation_strategies.a -> curation_strategies.b" in found
    assert "sandbox/exchange.py:2: sandbox imports trainer.chat_format, a floor above it" in found
    assert "corpora/loader.py:1: corpora imports benchmarks.bfcl.backends, not the environment seam" in found
    assert "evolver/cli.py:2: evolver imports bench.throughput, a floor above it" in found
    assert len(breaches(root)) == 9


def test_what_the_rules_allow_passes_on_a_made_up_tree(tmp_path):
    root = _tree(tmp_path, {
        "base/files.py": "import json\n",
        "sandbox/leakage.py": "def f():\n    from benchmarks import registry\n    from base.files import json\n",
        "benchmarks/registry.py": "from base import files\n",
        "benchmarks/bfcl/__init__.py": "", "benchmarks/bfcl/backends.py": "_x = 1\n",
        "benchmarks/bfcl/leakage.py": "from benchmarks.bfcl.backends import _x\nfrom sandbox.leakage import f\n",
        "evolver/loop.py": "from sandbox import leakage\nfrom benchmarks.bfcl import leakage as bl\n",
        "trainer/rewards.py": "from benchmarks.registry import x\nfrom sandbox import leakage\n",    # the seam; down
        "curation_strategies/toolkit.py": "from sandbox import leakage\n",              # the same floor
        "sandbox/runtime.py": "def load():\n    import curation_strategies.toolkit\n",
        "corpora/loader.py": "from sandbox import leakage\nfrom benchmarks import registry\n",    # same floor; the seam
        "sandbox/curate.py": "from corpora import loader\n",                            # the same floor
        "bench/throughput.py": "from evolver import loop\nfrom sandbox import leakage\n",   # the top floor: down
    })
    assert breaches(root) == []


def test_the_project_import_structure_holds():
    problems = breaches(ROOT)
    assert not problems, "\n".join(problems)

"""The drawn import structure (DESIGN: the floors) holds: every import of the project's packages,
those inside functions included, parsed with `ast` and checked against these rules —

- the floors (`FLOORS`), ground up: base (records, canonical encoding, the environment seam) <
  corpora (reading users' corpora), chat_format (the chat format), curation_strategies (the code the
  sandbox runs) < sandbox < trainer, workspace (a run's strategy repository) < environments (the
  plug-ins, their policies, the runner, `evaluate`) < experiments (`train_on` / `evaluate_on`, the
  quality bench, `curateevo eval`) < evolver (the loop) < bench (the measurement scripts);
- an import goes down the floors or stays on its own; the one way up is the registry's declared
  plug-in point: `base/registry.py` names each environment as a "module:Class" string, imported on
  first use — those by-name imports are followed too, and must name a module of `environments/`;
- `base/` imports no other project package (but for that plug-in point);
- no package cycle: among rooms of one floor, arrows go one way only;
- no module imports a private (underscore) name of another unit — a unit is a top-level package,
  and each environment's folder under `environments/` is a unit of its own — by `from m import _x`
  or by `m._x` on an imported module;
- no import cycle between modules. The registry's by-name imports are followed, not drawn: each
  must name a class that a module of `environments/` defines (a stale string after a move fails
  here, not at a user's first run); they are the plug-in point, loaded on first use, so the floors
  below reach the environments only through `base.registry` and never by an `import` line.

The rules are tested on small made-up trees first, so a checker that found nothing could not pass.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLOORS = {"base": 0, "corpora": 1, "chat_format": 1, "curation_strategies": 1, "sandbox": 2, "trainer": 3,
          "workspace": 3, "environments": 4, "experiments": 5, "evolver": 6, "bench": 7}
PACKAGES = tuple(FLOORS)
REGISTRY = "base.registry"   # the declared plug-in point: its "module:Class" strings are imports by name
ENVIRONMENT_HOME = "environments"   # each sub-package of it is an environment's folder: a unit


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
        return ".".join(parts[:2])   # environments.bfcl, environments.next_call, …
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


def by_name(name: str, path: Path) -> list[tuple[str, str, int]]:
    """(module, class, line) of every "module:Class" string in the registry `path`: its imports by name."""
    if name != REGISTRY:
        return []
    return [(*node.value.split(":", 1), node.lineno) for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value.count(":") == 1 and node.value.split(".")[0] in PACKAGES]


def defines(path: Path, cls: str) -> bool:
    return any(isinstance(n, ast.ClassDef) and n.name == cls for n in ast.parse(path.read_text(encoding="utf-8")).body)


def breaches(root: Path) -> list[str]:
    """Every rule broken under `root`, one line each (empty when the structure holds)."""
    known = modules(root)
    graph: dict[str, set] = {m: set() for m in known}
    rooms: dict[str, set] = {pkg: set() for pkg in PACKAGES}
    problems = []
    for name, path in known.items():
        where = f"{path.relative_to(root)}"
        floor = name.split(".")[0]
        for target, cls, line in by_name(name, path):   # the one declared way up: followed, not drawn
            if target.split(".")[0] != ENVIRONMENT_HOME:
                problems.append(f"{where}:{line}: the registry names {target}, outside {ENVIRONMENT_HOME}/")
            elif target not in known or not defines(known[target], cls):
                problems.append(f"{where}:{line}: the registry names {target}:{cls}, which the project does not define")
        for target, private, line in imports(name, path, known):
            if target == name:
                continue
            graph[name].add(target)
            to = target.split(".")[0]
            if to != floor:
                rooms[floor].add(to)
            if floor == "base" and to != "base":
                problems.append(f"{where}:{line}: base imports {target}")
            elif FLOORS[to] > FLOORS[floor]:
                problems.append(f"{where}:{line}: {floor} imports {target}, a floor above it")
            if private and unit(target) != unit(name):
                problems.append(f"{where}:{line}: imports the private name {private} of {target}")
    problems += [f"package cycle: {' -> '.join(c)}" for c in _cycles(rooms)]
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
        "sandbox/curate.py": "def g():\n    from evolver.loop import run\n",                 # a floor up: the loop
        "trainer/rewards.py": "from environments.bfcl.backends import Episode\n",             # a floor up, not the seam
        "base/registry.py": 'ENVIRONMENTS = {"bfcl": "environments.bfcl.backends:Episode",\n'
                            '                "x": "evolver.loop:run", "y": "environments.gone:E"}\n',
        "evolver/loop.py": "def run():\n    pass\n",
        "environments/bfcl/__init__.py": "", "environments/bfcl/backends.py": "class Episode: pass\n_x = 1\n",
        "environments/next_call/__init__.py": "",
        "environments/next_call/judge.py": "from environments.bfcl.backends import _x\n",          # private name, other unit
        "environments/next_call/calls.py": "from environments.bfcl import backends\ny = backends._x\n",   # private by attribute
        "curation_strategies/a.py": "def h():\n    from curation_strategies import b\n",
        "curation_strategies/b.py": "from . import a\n",                                     # a module cycle
        "sandbox/exchange.py": "def row():\n    from trainer.chat_format import render\n",     # a floor up
        "trainer/chat_format.py": "def render():\n    pass\n",
        "corpora/loader.py": "from chat_format import chat\n",                                    # one floor, both ways:
        "chat_format/chat.py": "from corpora import loader as _l\n",                              # a package cycle
        "evolver/cli.py": "def main():\n    import bench.throughput\n",                     # a floor up: bench
        "bench/throughput.py": "",
    })
    found = "\n".join(breaches(root))
    assert "base/files.py:2: base imports sandbox.curate" in found
    assert "sandbox/curate.py:2: sandbox imports evolver.loop, a floor above it" in found
    assert "trainer/rewards.py:1: trainer imports environments.bfcl.backends, a floor above it" in found
    assert "base/registry.py:2: the registry names evolver.loop, outside environments/" in found
    assert "base/registry.py:2: the registry names environments.gone:E, which the project does not define" in found
    assert "environments/next_call/judge.py:1: imports the private name _x of environments.bfcl.backends" in found
    assert "environments/next_call/calls.py:2: imports the private name _x of environments.bfcl.backends" in found
    assert "import cycle: curation_strategies.a -> curation_strategies.b" in found
    assert "sandbox/exchange.py:2: sandbox imports trainer.chat_format, a floor above it" in found
    assert "package cycle: chat_format -> corpora" in found
    assert "import cycle: chat_format.chat -> corpora.loader" in found
    assert "evolver/cli.py:2: evolver imports bench.throughput, a floor above it" in found
    assert len(breaches(root)) == 12


def test_a_registered_class_that_moved_away_is_caught(tmp_path):
    root = _tree(tmp_path, {
        "base/registry.py": 'ENVIRONMENTS = {"bfcl": "environments.bfcl.environment:BFCL"}\n',
        "environments/bfcl/__init__.py": "",
        "environments/bfcl/environment.py": "class SingleTurn:\n    pass\n",
    })
    assert breaches(root) == ["base/registry.py:1: the registry names environments.bfcl.environment:BFCL, "
                              "which the project does not define"]


def test_what_the_rules_allow_passes_on_a_made_up_tree(tmp_path):
    root = _tree(tmp_path, {
        "base/files.py": "import json\n",
        "sandbox/leakage.py": "def f():\n    from base import registry\n    from base.files import json\n",
        "base/registry.py": 'from base import files\nENVIRONMENTS = {"bfcl": "environments.bfcl.backends:E"}\n',
        "environments/bfcl/__init__.py": "", "environments/bfcl/backends.py": "_x = 1\nclass E: pass\n",
        "environments/bfcl/leakage.py": "from environments.bfcl.backends import _x\nfrom sandbox.leakage import f\n",
        "experiments/train_eval.py": "from environments.bfcl import leakage\n",           # a floor down
        "evolver/loop.py": "from sandbox import leakage\nfrom environments.bfcl import leakage as bl\n",
        "trainer/rewards.py": "from base.registry import x\nfrom sandbox import leakage\n",    # the seam; down
        "curation_strategies/toolkit.py": "from base import files\n",
        "sandbox/runtime.py": "def load():\n    import curation_strategies.toolkit\n",     # a floor down
        "corpora/loader.py": "from base import registry\n",                               # the seam
        "chat_format/chat.py": "from corpora import loader\n",                                # one floor, one way
        "sandbox/curate.py": "from corpora import loader\n",
        "bench/throughput.py": "from evolver import loop\nfrom sandbox import leakage\n",   # the top floor: down
    })
    assert breaches(root) == []


def test_the_project_import_structure_holds():
    problems = breaches(ROOT)
    assert not problems, "\n".join(problems)

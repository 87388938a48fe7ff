"""`Manifest` (sandbox/manifest.py) is the only way to read manifest.json (issue 72): no module of
the project's packages spells the file's name (a path, a join, a message's f-string) or takes
`MANIFEST_FILE` to open it itself; a place that needs the file goes through `Manifest.read`,
`found`, `checked`, `exists`, `write` or `manifest_path`. The two that compare the file's bytes,
never its fields, are named below. The scan is tried on a made-up tree first, so a scan that
found nothing could not pass."""
from __future__ import annotations

import ast
from pathlib import Path

from test_layering import PACKAGES, ROOT

HOME = "sandbox/manifest.py"
BYTES_ONLY = {"sandbox/replay.py": "a replay compares the recorded and replayed bytes",
              "bench/loop_identity.py": "the loop-identity benchmark hashes the bytes of two runs"}


def raw_reads(root: Path, packages=PACKAGES) -> list[str]:
    """`file:line` of every spelling of manifest.json or use of MANIFEST_FILE outside the manifest's module."""
    found = []
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel == HOME or rel in BYTES_ONLY:
                continue
            lines = set()
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                named = isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and node.value.rsplit("/", 1)[-1] == "manifest.json"
                taken = (isinstance(node, ast.Name) and node.id == "MANIFEST_FILE") or \
                    (isinstance(node, ast.alias) and node.name == "MANIFEST_FILE")
                if named or taken:
                    lines.add(node.lineno)
            found += [f"{rel}:{n}" for n in sorted(lines)]
    return found


def test_the_scan_finds_a_raw_read_a_join_a_message_and_the_constant_taken(tmp_path):
    pkg = tmp_path / "evolver"
    pkg.mkdir()
    (pkg / "reads.py").write_text(
        'import json\n'
        'from base.files import read_json\n'
        'from sandbox.manifest import MANIFEST_FILE\n'
        'def c(folder):\n'
        '    return read_json(folder / "manifest.json")["C"]\n'
        'def s(folder):\n'
        '    return json.loads((folder / MANIFEST_FILE).read_text())\n'
        'def say(folder):\n'
        '    return f"{folder / \'manifest.json\'} is damaged"\n'
        'RUN = "epochs/0/artifacts/manifest.json"\n'
        'HELP = "a curation output directory (with manifest.json)"\n')
    assert raw_reads(tmp_path, ("evolver",)) == ["evolver/reads.py:3", "evolver/reads.py:5", "evolver/reads.py:7",
                                                 "evolver/reads.py:9", "evolver/reads.py:10"]


def test_no_module_reads_manifest_json_but_through_its_class():
    assert raw_reads(ROOT) == [], "read it with sandbox.manifest.Manifest (read, found, checked, exists)"

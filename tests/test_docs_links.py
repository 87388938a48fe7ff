"""Every relative link in the README, trainer/README.md and docs/**/*.md reaches a file that exists,
and every #anchor a heading of that file (GitHub's rule for heading ids)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "trainer" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def prose(path: Path) -> list[tuple[int, str]]:
    """The file's lines outside fenced code blocks, numbered from 1."""
    lines, fenced = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line.lstrip()):
            fenced = not fenced
        elif not fenced:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    ids = set()
    for _, line in prose(path):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            base = slug(match.group(1))
            n = seen.get(base, 0)
            ids.add(base if n == 0 else f"{base}-{n}")
            seen[base] = n + 1
    return ids


def relative_links(path: Path):
    for number, line in prose(path):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):     # http:, https:, mailto:
                continue
            yield number, target


def test_the_documents_checked_exist():
    assert {ROOT / "docs" / "results.md", ROOT / "docs" / "leaderboard.md", ROOT / "docs" / "results" / "evolution.md"} <= set(DOCS) and all(p.is_file() for p in DOCS)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_an_existing_file_and_heading(doc: Path):
    broken = []
    for number, target in relative_links(doc):
        file_part, _, anchor = target.partition("#")
        dest = (doc.parent / file_part).resolve() if file_part else doc
        where = f"{doc.relative_to(ROOT)}:{number}: {target}"
        if not dest.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{where} (no heading #{anchor} in {dest.relative_to(ROOT)})")
    assert not broken, "\n".join(broken)


def test_the_readme_leads_with_the_smoke_run_and_the_corpora_its_commands_name_ship_in_the_checkout():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = [line for line in readme.splitlines() if "curateevo run" in line and not line.startswith("bash ")]
    assert "--profile test --base tiny-random" in commands[0], commands[0]   # the first run a newcomer starts
    assert readme.index(commands[0]) < readme.index("## Your own corpus")
    followed = [ROOT / "README.md", ROOT / "docs" / "corpora.md", ROOT / "docs" / "running.md",
                ROOT / "examples" / "corpora" / "README.md"]
    named = {path for doc in followed for path in re.findall(r"--corpus (\S+\.jsonl?)\b", doc.read_text(encoding="utf-8"))
             if not path.startswith("path/to/")}
    assert named and all(not path.startswith("..") and (ROOT / path).is_file() for path in named), named   # no ../shared/…

"""Host side of ctx.env: the scenario folder one execution mounts read-only.

    files, summary = prepare(corpus.records, job_root / "env")   # {} when the corpus names no scenario

Each environment that has ctx.env scenarios (`base.environment`: `export_group`,
`export_scenarios`) writes those of the *train-split* tasks the records' `meta.env` name;
environments of one export group (BFCL's two) share one folder and are asked together. Questions,
ground truth and every dev or test scenario stay outside: a record that names a dev or test task
gets no scenario. The folder's bytes depend on the corpus and the environments' installed data
only; their hash goes into the manifest.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence


def _exporting():
    """{export group: [environments]} of the registered environments with scenarios, in order."""
    from base import registry

    groups: dict[str, list] = {}
    for environment in registry.environments():
        if environment.export_group and environment.env_tag:
            groups.setdefault(environment.export_group, []).append(environment)
    return groups


def named_tasks(records: Sequence[Mapping]) -> dict[str, set[str]]:
    """{env tag: task ids} of the tasks with scenarios that the records' `meta.env` name."""
    out: dict[str, set[str]] = {e.env_tag: set() for group in _exporting().values() for e in group}
    for record in records:
        env = (record.get("meta") or {}).get("env")
        if isinstance(env, Mapping) and env.get("benchmark") in out and isinstance(env.get("task_id"), str):
            out[env["benchmark"]].add(env["task_id"])
    return out


def prepare(records: Sequence[Mapping], dest: Path) -> tuple[dict[str, bytes], dict]:
    """Write the scenario folder of the records' train-split tasks into `dest`; the files
    written (relative path → bytes; empty, and nothing written, when no record names a task with
    scenarios) and a summary {env tag: scenarios, "withheld": records' tasks outside train}."""
    named = named_tasks(records)
    if not any(named.values()):
        return {}, {}
    files: dict[str, bytes] = {}
    summary: dict = {}
    for group in _exporting().values():
        part = {e.env_tag: named[e.env_tag] for e in group}
        if any(part.values()):
            more, said = group[0].export_scenarios(part)
            clash = sorted(set(files) & set(more))
            if clash:
                raise ValueError(f"two environments export {clash[0]}")
            files.update(more)
            withheld = summary.pop("withheld", 0) + said.get("withheld", 0)
            summary.update(said, withheld=withheld)
    for rel, data in files.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(data)
    return files, summary

"""The curation manifest (`manifest.json` beside a curation's artifacts), typed: what keys one
execution of a strategy (DESIGN: artifacts and replay). The host writes it (sandbox.curate.execute),
the loop binds it to a workspace commit and reads it back (evolver.candidate), `replay` and
`repair` check a re-execution against it. `to_json()` is exactly the JSON object the file holds;
`from_json` reads a file written before this class (every field it knows, the same shape).
This module is the one reader and writer of the file (`Manifest.read`, `found`, `checked`,
`write`; `manifest_path` names it): tests/test_manifest_reads.py fails on a raw read elsewhere.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

MANIFEST_VERSION = 1
MANIFEST_FILE = "manifest.json"
CURATION_STATS_FILE = "profile.json"   # the curation stats Σ: an artifact that describes, not feeds: no count, not in `hashes()`
# (the file keeps its name: it is hashed into manifests and run directories)
REQUIRED = ("corpus.sha256", "corpus.skipped_lines", "strategy.files_sha256", "strategy.commit",
            "runtime_sha256", "seed", "hash_seed", "n_ref")
"""The fields a replay needs, checked first (`Manifest.checked`) so a damaged manifest names the first one missing."""


def manifest_path(folder: Path) -> Path:
    """Where the manifest of the curation in `folder` is (to say so, or to compare its bytes)."""
    return Path(folder) / MANIFEST_FILE


def read_output_json(path: Path) -> dict:
    """A curation output's JSON file, or UserError: missing (no output directory?) or not JSON."""
    from base.errors import UserError

    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path} does not exist: is this a curation output directory?") from None
    except ValueError as exc:
        raise UserError(f"{path}: not valid JSON ({exc})") from None


def check_fields(path: Path, doc, fields) -> None:
    """UserError naming the first missing field: a damaged manifest is one sentence, not a KeyError."""
    for name in fields:
        value = doc
        for part in name.split("."):
            if not isinstance(value, dict) or part not in value:
                raise _missing(path, name)
            value = value[part]


def _missing(path: Path, name: str):
    from base.errors import UserError

    return UserError(f"{path}: the field {name!r} is missing, so this is no whole curation output "
                     "(made by `curateevo curate` or a run); nothing was run")


@dataclass(frozen=True)
class StrategyKey:
    """Which strategy was executed."""
    files_sha256: str
    """sha256 over the strategy's files (name and bytes), `inputs/` included."""
    commit: str | None = None
    """The workspace commit holding exactly those files; None until the loop binds the dry run to it."""

    def to_json(self) -> dict:
        return {"commit": self.commit, "files_sha256": self.files_sha256}


@dataclass(frozen=True)
class CorpusKey:
    """Which corpus it was executed on (the part a strategy sees)."""
    sha256: str
    """sha256 of the corpus files' bytes."""
    records: int
    """Records the strategy got (after the held-out parts and skipped lines)."""
    format: str
    skipped_lines: int
    """Invalid lines skipped (`--on-bad-line skip`); 0 when the corpus was read whole."""
    holdout: Mapping | None = None
    """The dev and test parts held out (corpora.split); absent for a corpus with an environment."""
    tools_sha256: str | None = None
    """sha256 of the `--tools` schema file, when one was given."""

    def to_json(self) -> dict:
        return {"sha256": self.sha256, "records": self.records, "format": self.format,
                **({"holdout": dict(self.holdout)} if self.holdout else {}),
                **({"tools_sha256": self.tools_sha256} if self.tools_sha256 else {}),
                "skipped_lines": self.skipped_lines}


@dataclass(frozen=True)
class Manifest:
    """One curation's key and result: strategy × corpus × seed × runtime (× LLM record × env
    scenarios × budget) → artifacts, Cost_train and C."""
    strategy: StrategyKey
    corpus: CorpusKey
    seed: int
    hash_seed: Any
    """The PYTHONHASHSEED the strategy ran under."""
    runtime_sha256: str
    """sandbox.curate.runtime_sha256 of the machine that executed it."""
    llm_record_sha256: str | None
    """Hash of the LLM records ctx.llm answered from (None: no LLM)."""
    env_sha256: str | None
    """Hash of the train-split scenarios mounted for ctx.env (None: none)."""
    artifacts: Mapping[str, Mapping] = field(default_factory=dict)
    """Artifact file name → {"sha256", and "count" (its records) for sft/rl/memory.jsonl}; `profile.json` (the curation stats) has its sha256 only."""
    cost_train: int = 0
    C: float = 0.0
    n_ref: float = 1e5
    budget: Mapping | None = None
    """ctx.budget the strategy was given (what the recipe trains on); absent in manifests made before it."""
    manifest_version: int = MANIFEST_VERSION

    def to_json(self) -> dict:
        """manifest.json's object, key for key as it has always been written."""
        return {"manifest_version": self.manifest_version, "strategy": self.strategy.to_json(),
                "corpus": self.corpus.to_json(), "seed": self.seed, "hash_seed": self.hash_seed,
                "runtime_sha256": self.runtime_sha256, "llm_record_sha256": self.llm_record_sha256,
                "env_sha256": self.env_sha256, "artifacts": {k: dict(v) for k, v in self.artifacts.items()},
                "cost_train": self.cost_train, "C": self.C, "n_ref": self.n_ref,
                **({"budget": dict(self.budget)} if self.budget is not None else {})}

    @classmethod
    def from_json(cls, doc: Mapping) -> "Manifest":
        s, c = doc["strategy"], doc["corpus"]
        return cls(strategy=StrategyKey(files_sha256=s["files_sha256"], commit=s.get("commit")),
                   corpus=CorpusKey(sha256=c["sha256"], records=c["records"], format=c["format"],
                                    skipped_lines=c["skipped_lines"], holdout=c.get("holdout"),
                                    tools_sha256=c.get("tools_sha256")),
                   seed=doc["seed"], hash_seed=doc.get("hash_seed"), runtime_sha256=doc["runtime_sha256"],
                   llm_record_sha256=doc.get("llm_record_sha256"), env_sha256=doc.get("env_sha256"),
                   artifacts=doc["artifacts"], cost_train=doc["cost_train"], C=doc["C"], n_ref=doc["n_ref"],
                   budget=doc.get("budget"), manifest_version=doc.get("manifest_version", MANIFEST_VERSION))

    @classmethod
    def read(cls, folder: Path) -> "Manifest":
        """The manifest of the curation in `folder`."""
        from base.files import read_json

        return cls.from_json(read_json(manifest_path(folder)))

    @classmethod
    def exists(cls, folder: Path) -> bool:
        """Whether `folder` holds a manifest (a curation made whole: it is written last)."""
        return manifest_path(folder).is_file()

    @classmethod
    def found(cls, folder: Path) -> "Manifest | None":
        """The manifest in `folder`, or None when it is missing or damaged (not JSON, a field gone)."""
        try:
            return cls.read(folder)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    @classmethod
    def checked(cls, folder: Path) -> "Manifest":
        """The manifest in `folder`, or UserError in one sentence naming the file: missing, not JSON,
        or without a field (`REQUIRED` first, then any other this class reads)."""
        path = manifest_path(folder)
        doc = read_output_json(path)
        check_fields(path, doc, REQUIRED)
        try:
            return cls.from_json(doc)
        except KeyError as exc:
            raise _missing(path, str(exc.args[0])) from None

    def write(self, folder: Path) -> bytes:
        """manifest.json into `folder`, atomically (base.files.atomic_json); returns the bytes written."""
        from base.files import atomic_json

        return atomic_json(manifest_path(folder), self.to_json())

    def bound_to(self, commit: str) -> "Manifest":
        """The same manifest naming the workspace commit that holds the executed files."""
        return replace(self, strategy=replace(self.strategy, commit=commit))

    def counts(self) -> dict[str, int]:
        """Records per record file (`sft.jsonl` → n)."""
        return {name: a["count"] for name, a in self.artifacts.items() if "count" in a}

    def hashes(self) -> dict[str, str]:
        """Record file → sha256 (what the trainer and the agent read; the curation stats aside)."""
        return {name: a["sha256"] for name, a in self.artifacts.items() if name != CURATION_STATS_FILE}

"""The curation manifest (`manifest.json` beside a curation's artifacts), typed: what keys one
execution of a strategy (DESIGN: artifacts and replay). The host writes it (sandbox.curate.execute),
the loop binds it to a workspace commit and reads it back (evolver.candidate), `replay` and
`repair` check a re-execution against it. `to_json()` is exactly the JSON object the file holds;
`from_json` reads a file written before this class (every field it knows, the same shape).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

MANIFEST_VERSION = 1
PROFILE_FILE = "profile.json"   # an artifact that describes, not feeds: no count, not in `hashes()`


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
    """Artifact file name → {"sha256", and "count" (its records) for sft/rl/memory.jsonl}; `profile.json` has its sha256 only."""
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

        return cls.from_json(read_json(Path(folder) / "manifest.json"))

    def bound_to(self, commit: str) -> "Manifest":
        """The same manifest naming the workspace commit that holds the executed files."""
        return replace(self, strategy=replace(self.strategy, commit=commit))

    def counts(self) -> dict[str, int]:
        """Records per record file (`sft.jsonl` → n)."""
        return {name: a["count"] for name, a in self.artifacts.items() if "count" in a}

    def hashes(self) -> dict[str, str]:
        """Record file → sha256 (what the trainer and the agent read; the profile aside)."""
        return {name: a["sha256"] for name, a in self.artifacts.items() if name != PROFILE_FILE}

"""The git-tracked strategy workspace of a run (`runs/<run>/strategy/`).

A strategy is a directory of regular files: `strategy.py`, helper `*.py` modules beside it, and
`inputs/*.json` (`failed_points`, `signals`, `profile`, `params`). `main` holds the accepted
lineage; each candidate is committed on `candidates/epoch-<e>` (effectiveness revision, then
efficiency revision); the evaluated one is tagged `epoch-<e>`. Accepting fast-forwards `main` and
moves the annotated tag `best`; rejecting leaves both (the rollback). Every decision is an
annotated tag `accepted/epoch-<e>` or `rejected/epoch-<e>` carrying its message, because the
candidate's commits are made before it is evaluated. Nothing is deleted: no branch deletion, no
reset, reflogs and unreachable objects never expire.

Trust: a candidate arrives as a mapping of files (path → bytes) that the host has read; only
strategy files are committed (sandbox/strategy_files.py: `.git*` names, other paths and oversized
files are refused with one sentence naming the path). Hooks never run: `core.hooksPath` is
/dev/null in the repo config *and* on every git command line (workspace/git_calls.py), and commits go
through gitpython's `IndexFile.commit(skip_hooks=True)`. Git runs with the user's global and system
config ignored and a fixed identity, so a machine without a git identity works and a hostile
~/.gitconfig (hooks, signing, commit encoding) changes nothing.

Determinism: commit dates come from a logical clock, not the wall clock. A commit for epoch e is
dated `clock_base + e * 3600` seconds UTC, or one second after its parent when that is later (so
the efficiency revision is the effectiveness revision + 1 s). `clock_base` is fixed when the
workspace is created (the `clock_base` argument, else $SOURCE_DATE_EPOCH, else 2000-01-01T00:00Z)
and stored in the repo config (`curateevo.clockbase`), so a resumed run keeps it. A tag object is
dated like the commit it names. The same sequence of operations therefore gives the same shas.
"""
from __future__ import annotations

import difflib
import io
import logging
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Mapping

import git
from git.index.typ import BaseIndexEntry, IndexEntry
from gitdb.base import IStream

from base.errors import RunFailed, UserError
from base.files import is_empty_or_missing
from workspace.git_calls import EMAIL, NAME, REPO_CONFIG, git_env, run_git
from sandbox.strategy_files import check_files, check_tree_path, inputs_files, strategy_files

log = logging.getLogger(__name__)

ACTOR = git.Actor(NAME, EMAIL)
CLOCK_BASE = 946684800  # 2000-01-01T00:00:00Z
EPOCH_SECONDS = 3600
SEED_MESSAGE = "seed strategy ρ0"
ZERO = "0" * 40


def _epoch(epoch, minimum: int = 0) -> int:
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < minimum:
        raise UserError(f"epoch must be an integer >= {minimum}, not {epoch!r}.")
    return epoch


# ---------------------------------------------------------------------------------------------
# The workspace


class Workspace:
    """One run's strategy repository. Create it with `Workspace.create`, reopen with `open`."""

    def __init__(self, path) -> None:
        self.path = Path(path).absolute()
        self.git_dir = self.path / ".git"
        try:
            self.repo = git.Repo(self.path)  # only writes objects (in Python); reads go through _git
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            raise UserError(f"{self.path} is not a strategy workspace (not a git repository).") from None
        env = git_env(self.git_dir)  # for any git gitpython runs: name this repo, whatever is inherited
        self.repo.git.update_environment(
            **{k: v for k, v in env.items() if k.startswith(("GIT_", "LC_"))},
            GIT_INDEX_FILE=str(self.git_dir / "index"), GIT_OBJECT_DIRECTORY=str(self.git_dir / "objects"),
            GIT_COMMON_DIR=str(self.git_dir), GIT_ALTERNATE_OBJECT_DIRECTORIES="")
        stored = self._git_proc("config", "--get", "curateevo.clockbase").stdout.decode().strip()
        self.clock_base = int(stored or CLOCK_BASE)

    def __repr__(self) -> str:
        return f"Workspace({str(self.path)!r})"

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def create(cls, path, seed_dir, params: Mapping, *, inputs: Mapping[str, object] | None = None,
               clock_base: int | None = None, message: str = SEED_MESSAGE) -> "Workspace":
        """A new workspace at `path` (absent or empty) holding the seed strategy's `*.py` files and
        `inputs/params.json` (plus any other `inputs`), committed on `main` as `message` (default
        "seed strategy ρ0") and tagged `epoch-0` and `best`. Built in a sibling temp dir and renamed into place."""
        path = Path(path)
        if not is_empty_or_missing(path):
            raise UserError(f"{path} already exists and is not empty; reopen it with Workspace.open "
                            "or choose a new path.")
        seed = {k: v for k, v in strategy_files(seed_dir).items() if not k.startswith("inputs/")}
        files = {**seed, **inputs_files({**(inputs or {}), "params.json": params})}
        if clock_base is None:
            clock_base = int(os.environ.get("SOURCE_DATE_EPOCH") or CLOCK_BASE)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent)).absolute()
        try:
            run_git(["init", "--quiet", "--initial-branch=main", "--template=", str(tmp)], None, cwd=tmp)
            for key, value in {**REPO_CONFIG, "curateevo.clockbase": str(int(clock_base))}.items():
                run_git(["config", key, value], tmp / ".git", cwd=tmp)
            ws = cls(tmp)
            sha = ws._commit(files, [], message, ws.clock_base)
            ws._update_refs([("refs/heads/main", sha, ZERO), ("refs/tags/epoch-0", sha, ZERO),
                             ("refs/tags/best", ws._tag_object("best", sha, message), ZERO)],
                            message)
            ws._sync_worktree(None, sha)
            ws.close()
            if path.exists():
                path.rmdir()
            tmp.rename(path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return cls.open(path)

    @classmethod
    def open(cls, path) -> "Workspace":
        """The existing workspace at `path`; UserError when it is not one."""
        path = Path(path)
        if not (path / ".git").is_dir():
            raise UserError(f"{path} is not a strategy workspace (it has no .git directory).")
        ws = cls(path)
        missing = [r for r in ("refs/heads/main", "refs/tags/best") if ws._sha(r) is None]
        if missing:
            raise UserError(f"{path} is not a strategy workspace: it lacks {' and '.join(missing)}.")
        return ws

    def close(self) -> None:
        self.repo.close()

    # -- the git model of a run -----------------------------------------------------------------

    def commit_candidate(self, epoch: int, files: Mapping[str, bytes], message: str, parent="best") -> str:
        """Commit exactly `files` (path → bytes: `strategy.py`, helper `*.py` modules and the
        candidate's `inputs/*.json`) on `candidates/epoch-<e>`: the branch starts at `parent` when
        it does not exist, else the commit continues it (effectiveness, then efficiency revision).
        Anything but strategy files is refused (UserError naming the path). Returns the commit sha;
        when the branch tip already has exactly these files and this message (a resumed run
        repeating the call), no commit is made and the tip is returned."""
        e = _epoch(epoch, minimum=1)
        if not isinstance(message, str) or not message.strip():
            raise UserError("a candidate commit needs a non-empty message.")
        files = check_files(files, f"the candidate of epoch {e}")
        branch = f"refs/heads/candidates/epoch-{e}"
        tip = self._sha(branch)
        base = tip or self.resolve(parent)
        if tip and self._git("log", "-1", "--format=%B", tip).rstrip("\n") == message.rstrip("\n") \
                and self.files(tip) == files:
            return tip
        date = max(self._date(base) + 1, self.clock_base + e * EPOCH_SECONDS)
        sha = self._commit(files, [base], message, date)
        self._update_refs([(branch, sha, tip or ZERO)], f"candidate epoch {e}")
        return sha

    def tag_epoch(self, epoch: int, rev) -> None:
        """Tag `rev` as the evaluated candidate `epoch-<e>`; an epoch tag never moves once set
        (tagging the same commit again is a no-op, so a resumed run may repeat it)."""
        e = _epoch(epoch)
        sha, existing = self.resolve(rev), self._sha(f"refs/tags/epoch-{e}")
        if existing == sha:
            return
        if existing is not None:
            raise UserError(f"epoch-{e} already tags {existing[:12]}; it cannot be moved to {rev} ({sha[:12]}).")
        self._update_refs([(f"refs/tags/epoch-{e}", sha, ZERO)], f"evaluated epoch {e}")

    def accept(self, rev, message: str, *, epoch: int | None = None) -> None:
        """Fast-forward `main` to `rev` (which must descend from main), move the annotated tag
        `best` there with `message`, and record the decision as tag `accepted/epoch-<e>`."""
        sha, main = self.resolve(rev), self.resolve("main")
        if not self._is_ancestor(main, sha):
            raise UserError(f"cannot accept {rev} ({sha[:12]}): it does not descend from main "
                            f"({main[:12]}), so main cannot fast-forward to it.")
        updates = self._decision("accepted", sha, message, epoch)
        updates += [("refs/heads/main", sha, main),
                     ("refs/tags/best", self._tag_object("best", sha, message), self._raw("refs/tags/best"))]
        self._update_refs(updates, f"accept {sha[:12]}")
        self._sync_worktree(main, sha)

    def reject(self, rev, message: str, *, epoch: int | None = None) -> None:
        """Leave `main` and `best` where they are (the rollback) and record the decision as the
        annotated tag `rejected/epoch-<e>`; the candidate branch stays for inspection."""
        sha, main = self.resolve(rev), self.resolve("main")
        if self._is_ancestor(sha, main):
            raise UserError(f"cannot reject {rev} ({sha[:12]}): it is already part of main, the accepted lineage.")
        self._update_refs(self._decision("rejected", sha, message, epoch), f"reject {sha[:12]}")

    # -- reading --------------------------------------------------------------------------------

    def resolve(self, rev) -> str:
        """The commit sha of `rev`: an epoch (`3`, `"3"`, `"epoch-3"`), `"best"`, `"main"`, a
        branch, a tag or a (short) sha. UserError naming the rev and what exists otherwise."""
        if isinstance(rev, int) and not isinstance(rev, bool):
            rev = f"epoch-{rev}"
        rev = str(rev)
        if rev.isascii() and rev.isdigit():
            rev = f"epoch-{int(rev)}"
        sha = None
        if rev and not rev.startswith("-") and not any(c.isspace() or ord(c) < 32 for c in rev):
            proc = self._git_proc("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")  # no leading "-"
            sha = proc.stdout.decode().strip() if proc.returncode == 0 else None
        if not sha:
            names = self.refs()
            shown = ", ".join(names[:30]) + (", …" if len(names) > 30 else "")
            raise UserError(f"unknown revision {rev!r} in workspace {self.path}; it has {shown}.")
        return sha

    def files(self, rev) -> dict[str, bytes]:
        """Path → content of every file of the commit `rev` (regular files only)."""
        sha = self.resolve(rev)
        blobs = {}
        for line in self._git("ls-tree", "-r", "-z", "--full-tree", sha).split("\0"):
            if not line:
                continue
            meta, rel = line.split("\t", 1)
            mode, kind, blob = meta.split()
            if kind != "blob" or mode not in ("100644", "100755"):
                raise UserError(f"revision {rev} holds {rel} as mode {mode} {kind}, not a regular file; refusing it.")
            check_tree_path(rel, str(rev))
            blobs[rel] = blob
        raw = self._git_bytes("cat-file", "--batch", stdin="".join(f"{b}\n" for b in blobs.values()))
        pos, out = 0, {}
        for rel, blob in blobs.items():  # --batch answers "<sha> blob <size>\n<data>\n" in order
            end = raw.index(b"\n", pos)
            got, kind, size = raw[pos:end].decode().split()
            if got != blob or kind != "blob":
                raise RunFailed(f"git cat-file answered {got} {kind} for {rel} ({blob}) in {self.path}.")
            out[rel] = raw[end + 1:end + 1 + int(size)]
            pos = end + 2 + int(size)
        return out

    def diff(self, a, b, *, include_inputs: bool = True) -> str:
        """Unified diff (`a/path`, `b/path`) of the files of two revisions, computed in Python so
        no git config, textconv or external diff tool can change or intercept it."""
        fa, fb = self.files(a), self.files(b)
        out = []
        for rel in sorted(set(fa) | set(fb)):
            old, new = fa.get(rel), fb.get(rel)
            if old == new or (not include_inputs and rel.startswith("inputs/")):
                continue
            out.append(f"diff a/{rel} b/{rel}\n")
            try:
                old_lines = (old or b"").decode("utf-8").splitlines(keepends=True)
                new_lines = (new or b"").decode("utf-8").splitlines(keepends=True)
            except UnicodeDecodeError:
                out.append(f"Binary files a/{rel} and b/{rel} differ\n")
                continue
            for line in difflib.unified_diff(old_lines, new_lines, "/dev/null" if old is None else f"a/{rel}",
                                             "/dev/null" if new is None else f"b/{rel}"):
                out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
        return "".join(out)

    def diff_summary(self, a, b) -> list[dict]:
        """Per changed file: path, status (added/removed/modified), lines added and removed —
        the short form of a rejected attempt shown to the next proposer."""
        fa, fb = self.files(a), self.files(b)
        rows = []
        for rel in sorted(set(fa) | set(fb)):
            old, new = fa.get(rel), fb.get(rel)
            if old == new:
                continue
            old_lines = (old or b"").decode("utf-8", "replace").splitlines()
            new_lines = (new or b"").decode("utf-8", "replace").splitlines()
            ops = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False).get_opcodes()
            rows.append({"path": rel,
                         "status": "added" if old is None else "removed" if new is None else "modified",
                         "added": sum(j2 - j1 for tag, _, _, j1, j2 in ops if tag in ("replace", "insert")),
                         "removed": sum(i2 - i1 for tag, i1, i2, _, _ in ops if tag in ("replace", "delete"))})
        return rows

    def log(self, rev="main") -> list[dict]:
        """The commits reachable from `rev`, newest first: sha, message, tags, branches, parents
        and the (logical) date."""
        sha = self.resolve(rev)
        by_commit: dict[str, dict[str, list[str]]] = {}
        for kind, name, _, commit in self._ref_table():
            by_commit.setdefault(commit, {"tags": [], "branches": []})[kind].append(name)
        rows = []
        for record in self._git("log", "--topo-order", "-z", "--format=%H%n%P%n%ct%n%B", sha).split("\0"):
            if not record:
                continue
            commit_sha, parents, date, message = record.split("\n", 3)
            names = by_commit.get(commit_sha, {"tags": [], "branches": []})
            rows.append({"sha": commit_sha, "message": message.rstrip("\n"), "tags": sorted(names["tags"]),
                         "branches": sorted(names["branches"]), "parents": parents.split(), "date": int(date)})
        return rows

    def epochs(self) -> dict[int, str]:
        """Epoch number → sha of each `epoch-<e>` tag."""
        epochs = {}
        for kind, name, _, commit in self._ref_table():
            m = re.fullmatch(r"epoch-(\d+)", name)
            if kind == "tags" and m:
                epochs[int(m.group(1))] = commit
        return dict(sorted(epochs.items()))

    def refs(self) -> list[str]:
        """Short names of all branches and tags, branches first."""
        return [name for _, name, _, _ in self._ref_table()]

    # -- internals ------------------------------------------------------------------------------

    def _git_proc(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return run_git(list(args), self.git_dir, cwd=self.path, stdin=stdin, check=False)

    def _git_bytes(self, *args: str, stdin: str | None = None) -> bytes:
        proc = self._git_proc(*args, stdin=stdin)
        if proc.returncode != 0:
            detail = (proc.stderr.strip().splitlines() or ["no message"])[-1]
            raise RunFailed(f"git {args[0]} failed in {self.path}: {detail}")
        return proc.stdout

    def _git(self, *args: str, stdin: str | None = None) -> str:
        return self._git_bytes(*args, stdin=stdin).decode("utf-8")

    def _ref_table(self) -> list[tuple[str, str, str, str]]:
        """(branches|tags, short name, object id, commit id) of every branch and tag."""
        rows = []
        out = self._git("for-each-ref", "--format=%(refname)%00%(objectname)%00%(*objectname)",
                        "refs/heads", "refs/tags")
        for line in out.splitlines():
            ref, obj, peeled = line.split("\0")
            kind = "branches" if ref.startswith("refs/heads/") else "tags"
            rows.append((kind, ref.split("/", 2)[2], obj, peeled or obj))
        return sorted(rows)

    def _raw(self, ref: str) -> str:
        """The object a ref points at (a tag object for annotated tags), or ZERO when absent."""
        proc = self._git_proc("rev-parse", "--verify", "--quiet", ref)
        return proc.stdout.decode().strip() if proc.returncode == 0 else ZERO

    def _sha(self, ref: str) -> str | None:
        proc = self._git_proc("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        return proc.stdout.decode().strip() if proc.returncode == 0 else None

    def _date(self, sha: str) -> int:
        return int(self._git("log", "-1", "--format=%ct", sha))

    def _is_ancestor(self, a: str, b: str) -> bool:
        proc = self._git_proc("merge-base", "--is-ancestor", a, b)
        if proc.returncode not in (0, 1):
            raise RunFailed(f"git merge-base failed in {self.path}: {proc.stderr.strip()}")
        return proc.returncode == 0

    def _commit(self, files: Mapping[str, bytes], parents: list[str], message: str, date: int) -> str:
        """One commit of exactly `files` (all mode 100644) with the fixed identity and date,
        built in an in-memory index; hooks skipped. Moves no ref."""
        index = git.IndexFile(self.repo, file_path=str(self.git_dir / "curateevo-unused.index"))
        index.entries = {}
        for rel, data in sorted(files.items()):
            blob = self.repo.odb.store(IStream("blob", len(data), io.BytesIO(data)))
            index.entries[(rel, 0)] = IndexEntry.from_base(BaseIndexEntry((0o100644, blob.binsha, 0, rel)))
        when = f"{int(date)} +0000"
        message = message.rstrip("\n") + "\n"  # what `git commit` stores
        parent_commits = [git.Commit(self.repo, bytes.fromhex(p)) for p in parents]  # by id; nothing read
        commit = index.commit(message, parent_commits=parent_commits, head=False,
                              author=ACTOR, committer=ACTOR, author_date=when, commit_date=when,
                              skip_hooks=True)
        return commit.hexsha

    def _tag_object(self, name: str, sha: str, message: str) -> str:
        """An annotated tag object for commit `sha`, dated like the commit (deterministic)."""
        body = message.rstrip("\n") + "\n"
        text = (f"object {sha}\ntype commit\ntag {name}\n"
                f"tagger {NAME} <{EMAIL}> {self._date(sha)} +0000\n\n{body}")
        return self._git("mktag", stdin=text).strip()

    def _decision(self, decision: str, sha: str, message: str, epoch: int | None) -> list[tuple]:
        """The ref update recording a decision (none when the same one is already recorded)."""
        if not isinstance(message, str) or not message.strip():
            raise UserError(f"the {decision} decision needs a non-empty message.")
        name = self._decision_name(sha, epoch)
        other = "rejected" if decision == "accepted" else "accepted"
        if self._sha(f"refs/tags/{other}/{name}") is not None:
            raise UserError(f"{name} is already {other}; a decision is recorded once.")
        existing = self._sha(f"refs/tags/{decision}/{name}")
        if existing == sha:
            return []
        if existing is not None:
            raise UserError(f"{decision}/{name} already names {existing[:12]}, not {sha[:12]}.")
        ref = f"{decision}/{name}"
        return [(f"refs/tags/{ref}", self._tag_object(ref, sha, message), ZERO)]

    def _decision_name(self, sha: str, epoch: int | None) -> str:
        if epoch is not None:
            return f"epoch-{_epoch(epoch)}"
        tagged = [n for n, s in self.epochs().items() if s == sha]
        if tagged:
            return f"epoch-{max(tagged)}"
        tips = self._git("for-each-ref", "--points-at", sha, "--format=%(refname:strip=3)",
                         "refs/heads/candidates").split()
        return tips[0] if tips else f"commit-{sha[:12]}"

    def _update_refs(self, updates: list[tuple[str, str, str]], reason: str) -> None:
        """Apply `(ref, new, expected old)` updates in one atomic transaction (ZERO = must not
        exist), so a crash never leaves main and best disagreeing."""
        if updates:
            self._git("update-ref", "-m", reason, "--stdin",
                      stdin="".join(f"update {ref} {new} {old}\n" for ref, new, old in updates))

    def _sync_worktree(self, old: str | None, new: str) -> None:
        """Show `main` in the working tree for people reading the run. Nothing reads it back, so
        local edits there that block the update only cost a warning."""
        args = ["read-tree", "-u", "--reset", new] if old is None else ["read-tree", "-m", "-u", old, new]
        proc = self._git_proc(*args)
        if proc.returncode != 0:
            log.warning("workspace %s: working tree not updated to %s (%s); the commits are unaffected.",
                        self.path, new[:12], proc.stderr.strip())

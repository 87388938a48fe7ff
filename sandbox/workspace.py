"""The git-tracked strategy workspace of a run (`runs/<run>/strategy/`).

A strategy is a directory of regular files: `strategy.py`, helper `*.py` modules beside it, and
`inputs/*.json` (`failed_points`, `signals`, `profile`, `params`). `main` holds the accepted
lineage; each candidate is committed on `candidates/epoch-<e>` (effectiveness revision, then
efficiency revision); the evaluated one is tagged `epoch-<e>`. Accepting fast-forwards `main` and
moves the annotated tag `best`; rejecting leaves both (the rollback). Every decision is an
annotated tag `accepted/epoch-<e>` or `rejected/epoch-<e>` carrying its message, because the
candidate's commits are made before it is evaluated. Nothing is deleted: no branch deletion, no
reset, reflogs and unreachable objects never expire.

Trust: candidate files come from an untrusted directory. Only regular files are read (opened with
O_NOFOLLOW and checked with fstat), `.git*` names, links, pipes, devices and oversized files are
refused with one sentence naming the path. Hooks never run: `core.hooksPath` is /dev/null in the
repo config *and* on every git command line, and commits go through gitpython's
`IndexFile.commit(skip_hooks=True)`. Git runs with the user's global and system config ignored
and a fixed identity, so a machine without a git identity works and a hostile ~/.gitconfig (hooks,
signing, commit encoding) changes nothing.

Determinism: commit dates come from a logical clock, not the wall clock. A commit for epoch e is
dated `clock_base + e * 3600` seconds UTC, or one second after its parent when that is later (so
the efficiency revision is the effectiveness revision + 1 s). `clock_base` is fixed when the
workspace is created (the `clock_base` argument, else $SOURCE_DATE_EPOCH, else 2000-01-01T00:00Z)
and stored in the repo config (`curateevo.clockbase`), so a resumed run keeps it. A tag object is
dated like the commit it names. The same sequence of operations therefore gives the same shas.
"""
from __future__ import annotations

import difflib
import errno
import io
import logging
import os
import re
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Mapping

import git
from git.index.typ import BaseIndexEntry, IndexEntry
from gitdb.base import IStream

from evolver.errors import RunFailed, UserError
from sandbox.schemas import canonical_json

log = logging.getLogger(__name__)

NAME, EMAIL = "curateevo", "curateevo@localhost"
ACTOR = git.Actor(NAME, EMAIL)
MAX_FILE_BYTES = 1 << 20  # one strategy module
MAX_INPUT_BYTES = 16 << 20  # one inputs/*.json (a profile can be large)
MAX_FILES = 256
CLOCK_BASE = 946684800  # 2000-01-01T00:00:00Z
EPOCH_SECONDS = 3600
SEED_MESSAGE = "seed strategy ρ0"
ZERO = "0" * 40
# Interpreter and tool byproducts a candidate directory may hold; never committed.
_SKIPPED_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
_INPUT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\.json")
_REPO_CONFIG = {
    "core.hooksPath": os.devnull,
    "core.logAllRefUpdates": "always",
    "core.autocrlf": "false",
    "user.name": NAME,
    "user.email": EMAIL,
    "i18n.commitEncoding": "UTF-8",  # gitpython would otherwise take it from ~/.gitconfig
    "gc.pruneExpire": "never",
    "gc.reflogExpire": "never",
    "gc.reflogExpireUnreachable": "never",
}


# ---------------------------------------------------------------------------------------------
# Reading strategy files from a directory


def strategy_files(path) -> dict[str, bytes]:
    """The strategy files of a directory (or of `DIR/strategy.py`): its `*.py` files, not
    recursive, plus `inputs/*.json`; anything else in it is ignored. A selected name that is a
    link, a pipe, a device, a `.git*` name or over the size cap is refused (UserError)."""
    root = Path(path)
    if root.is_file():
        if root.name != "strategy.py":
            raise UserError(f"{root} is not a strategy: name a strategy directory or its strategy.py.")
        root = root.parent
    files = _scan(root, strict=False)
    if "strategy.py" not in files:
        raise UserError(f"{root} has no strategy.py, so it is not a strategy directory.")
    return files


def _scan(root: Path, *, strict: bool) -> dict[str, bytes]:
    """Top-level `*.py` and `inputs/*.json` of `root`, read race-free through directory fds.
    strict (a candidate's directory): anything else is refused, except `.git` and caches."""
    try:
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        raise UserError(f"strategy directory {root} does not exist or is not a directory.") from None
    files: dict[str, bytes] = {}
    try:
        for name, mode in _entries(root_fd):
            shown = root / name
            if name == ".git" or (name in _SKIPPED_DIRS and stat.S_ISDIR(mode)):
                continue
            if name == "inputs":
                if not stat.S_ISDIR(mode):
                    raise UserError(f"{shown} is {_kind(mode)}; inputs/ must be a directory.")
                files.update(_scan_inputs(root_fd, shown, strict=strict))
            elif name.endswith(".py") or strict:
                _check_name(name, shown)
                if not stat.S_ISREG(mode):
                    raise UserError(f"{shown} is {_kind(mode)}; only regular files can be strategy files.")
                if not name.endswith(".py"):
                    raise UserError(f"{shown} is not a strategy file: a strategy is *.py modules beside "
                                    "strategy.py plus inputs/*.json.")
                files[name] = _read_regular(root_fd, name, shown, MAX_FILE_BYTES)
    finally:
        os.close(root_fd)
    if len(files) > MAX_FILES:
        raise UserError(f"{root} holds {len(files)} strategy files, over the limit of {MAX_FILES}.")
    return files


def _scan_inputs(root_fd: int, shown_dir: Path, *, strict: bool) -> dict[str, bytes]:
    try:
        fd = os.open("inputs", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root_fd)
    except OSError:
        raise UserError(f"{shown_dir} is not a directory (a link or it vanished); refusing it.") from None
    files = {}
    try:
        for name, mode in _entries(fd):
            shown = shown_dir / name
            if not name.endswith(".json") and not strict:
                continue
            _check_name(name, shown)
            if not stat.S_ISREG(mode):
                raise UserError(f"{shown} is {_kind(mode)}; only regular files can be strategy inputs.")
            if not _INPUT_NAME.fullmatch(name):
                raise UserError(f"{shown} is not a strategy input: inputs/ holds only *.json files.")
            files[f"inputs/{name}"] = _read_regular(fd, name, shown, MAX_INPUT_BYTES)
    finally:
        os.close(fd)
    return files


def _entries(dir_fd: int) -> list[tuple[str, int]]:
    with os.scandir(dir_fd) as it:
        return sorted((e.name, e.stat(follow_symlinks=False).st_mode) for e in it)


def _check_name(name: str, shown: Path) -> None:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise UserError(f"{shown!s} has a file name that is not UTF-8; refusing it.") from None
    if any(ord(c) < 32 or c in "\\\x7f" for c in name):
        raise UserError(f"{shown!r} has control characters or a backslash in its name; refusing it.")
    if name.lower().startswith(".git"):
        raise UserError(f"{shown} is a .git* file, which a strategy may not contain.")


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _read_regular(dir_fd: int, name: str, shown: Path, cap: int) -> bytes:
    """Read `name` only if it is (still) a regular file within the cap: no link is followed and
    a pipe is never waited on."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError as exc:
        why = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise UserError(f"cannot read {shown}: {why}; only regular files can be strategy files.") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{shown} is {_kind(st.st_mode)}; only regular files can be strategy files.")
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(cap + 1)
    finally:
        os.close(fd)
    if len(data) > cap:
        raise UserError(f"{shown} is larger than the {cap}-byte limit for a strategy file.")
    return data


def _inputs_files(inputs: Mapping[str, object]) -> dict[str, bytes]:
    """`inputs/<name>.json` in canonical JSON for each entry (`"signals"` or `"signals.json"`)."""
    out = {}
    for key, value in inputs.items():
        name = key if str(key).endswith(".json") else f"{key}.json"
        if not isinstance(key, str) or not _INPUT_NAME.fullmatch(name):
            raise UserError(f"input name {key!r} is not a plain file name (letters, digits, _ . -).")
        try:
            out[f"inputs/{name}"] = (canonical_json(value) + "\n").encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise UserError(f"input {name} cannot be written as canonical JSON: {exc}.") from None
    return out


def _check_tree_path(rel: str, rev: str) -> None:
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") or p.lower().startswith(".git") or "\\" in p
                                  for p in parts):
        raise UserError(f"revision {rev} holds the path {rel!r}, which escapes or names .git; refusing it.")


# ---------------------------------------------------------------------------------------------
# Running git


def _git_env(git_dir: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment of every git command: no inherited GIT_* variables, no global or system
    config, hooks off, the fixed identity, and this repository named explicitly."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_TERMINAL_PROMPT="0",
        GIT_CONFIG_COUNT="1", GIT_CONFIG_KEY_0="core.hooksPath", GIT_CONFIG_VALUE_0=os.devnull,
        GIT_AUTHOR_NAME=NAME, GIT_AUTHOR_EMAIL=EMAIL, GIT_COMMITTER_NAME=NAME, GIT_COMMITTER_EMAIL=EMAIL,
        LC_ALL="C",
    )
    if git_dir is not None:  # never discover: a missing .git must not fall through to a parent repo
        env.update(GIT_DIR=str(git_dir), GIT_WORK_TREE=str(git_dir.parent))
    env.update(extra)
    return env


def _run_git(args: list[str], git_dir: Path | None, *, cwd: Path, stdin: str | None = None,
             check: bool = True) -> subprocess.CompletedProcess:
    """Run git; stdout stays bytes (file contents), stderr is text."""
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, env=_git_env(git_dir), capture_output=True,
                              input=None if stdin is None else stdin.encode("utf-8"))
    except FileNotFoundError:
        raise UserError("git is not installed; install git (the strategy workspace is a git repo).") from None
    proc.stderr = proc.stderr.decode("utf-8", "replace")
    if check and proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise RunFailed(f"git {args[0]} failed in {cwd}: {detail}")
    return proc


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
        env = _git_env(self.git_dir)  # for any git gitpython runs: name this repo, whatever is inherited
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
               clock_base: int | None = None) -> "Workspace":
        """A new workspace at `path` (absent or empty) holding the seed strategy's `*.py` files and
        `inputs/params.json` (plus any other `inputs`), committed on `main` as "seed strategy ρ0"
        and tagged `epoch-0` and `best`. Built in a sibling temp dir and renamed into place."""
        path = Path(path)
        if path.is_symlink() or (path.exists() and (not path.is_dir() or any(path.iterdir()))):
            raise UserError(f"{path} already exists and is not empty; reopen it with Workspace.open "
                            "or choose a new path.")
        seed = {k: v for k, v in strategy_files(seed_dir).items() if not k.startswith("inputs/")}
        files = {**seed, **_inputs_files({**(inputs or {}), "params.json": params})}
        if clock_base is None:
            clock_base = int(os.environ.get("SOURCE_DATE_EPOCH") or CLOCK_BASE)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent)).absolute()
        try:
            _run_git(["init", "--quiet", "--initial-branch=main", "--template=", str(tmp)], None, cwd=tmp)
            for key, value in {**_REPO_CONFIG, "curateevo.clockbase": str(int(clock_base))}.items():
                _run_git(["config", key, value], tmp / ".git", cwd=tmp)
            ws = cls(tmp)
            sha = ws._commit(files, [], SEED_MESSAGE, ws.clock_base)
            ws._update_refs([("refs/heads/main", sha, ZERO), ("refs/tags/epoch-0", sha, ZERO),
                             ("refs/tags/best", ws._tag_object("best", sha, SEED_MESSAGE), ZERO)],
                            SEED_MESSAGE)
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

    def commit_candidate(self, epoch: int, files_dir, inputs: Mapping[str, object], message: str,
                         parent="best") -> str:
        """Commit the strategy files of `files_dir` (a candidate's checkout) on
        `candidates/epoch-<e>`: the branch starts at `parent` when it does not exist, else the
        commit continues it (effectiveness, then efficiency revision). The `*.py` files replace
        the strategy; `inputs/` is host-owned: the parent's inputs updated with `inputs` (written
        as canonical JSON), whatever `files_dir/inputs` holds. Anything in `files_dir` other than
        `*.py` files, `inputs/*.json`, `.git` and caches is refused. Returns the commit sha; when
        the branch tip already has exactly these files and this message (a resumed run repeating
        the call), no commit is made and the tip is returned."""
        e = _epoch(epoch, minimum=1)
        if not isinstance(message, str) or not message.strip():
            raise UserError("a candidate commit needs a non-empty message.")
        root = Path(files_dir)
        strategy = {k: v for k, v in _scan(root, strict=True).items() if not k.startswith("inputs/")}
        if "strategy.py" not in strategy:
            raise UserError(f"{root} has no strategy.py, so it is not a candidate strategy.")
        branch = f"refs/heads/candidates/epoch-{e}"
        tip = self._sha(branch)
        base = tip or self.resolve(parent)
        kept_inputs = {k: v for k, v in self.files(base).items() if k.startswith("inputs/")}
        files = {**strategy, **kept_inputs, **_inputs_files(inputs)}
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
            _check_tree_path(rel, str(rev))
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

    def checkout(self, rev, dest) -> Path:
        """Write the files of `rev` into `dest` (a new or empty directory), without `.git`; what
        the sandbox executes and a replay re-runs."""
        files, dest = self.files(rev), Path(dest)
        if dest.is_symlink() or (dest.exists() and (not dest.is_dir() or any(dest.iterdir()))):
            raise UserError(f"checkout destination {dest} must be a new or empty directory.")
        dest.mkdir(parents=True, exist_ok=True)
        for rel, data in sorted(files.items()):
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "xb") as fh:  # O_EXCL: never writes through an existing entry
                fh.write(data)
        return dest

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

    def decisions(self) -> list[dict]:
        """Every recorded decision, by epoch: decision (accepted/rejected), name (`epoch-<e>`),
        epoch (int or None), sha and message — the history of attempts the proposer is shown."""
        rows = []
        for kind, name, obj, commit in self._ref_table():
            decision, _, rest = name.partition("/")
            if kind != "tags" or decision not in ("accepted", "rejected") or not rest:
                continue
            text = self._git("cat-file", "-p", obj)
            message = text.split("\n\n", 1)[1].rstrip("\n") if obj != commit else ""
            m = re.fullmatch(r"epoch-(\d+)", rest)
            rows.append({"decision": decision, "name": rest, "epoch": int(m.group(1)) if m else None,
                         "sha": commit, "message": message})
        return sorted(rows, key=lambda r: (r["epoch"] is None, r["epoch"] or 0, r["name"], r["decision"]))

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

    @property
    def best(self) -> str:
        return self.resolve("best")

    @property
    def main(self) -> str:
        return self.resolve("main")

    # -- internals ------------------------------------------------------------------------------

    def _git_proc(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return _run_git(list(args), self.git_dir, cwd=self.path, stdin=stdin, check=False)

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

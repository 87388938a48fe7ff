"""Every git command of the strategy workspace, hardened: hooks off (`core.hooksPath` is /dev/null
in the repository's config and on every command line), the user's global and system config
ignored, no inherited GIT_* variable, a fixed identity, and the repository named explicitly, so a
missing .git never falls through to a parent repository. workspace/repository.py runs git through
`run_git` and gives gitpython the same environment (`git_env`).
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from base.errors import RunFailed, UserError

NAME, EMAIL = "curateevo", "curateevo@localhost"
REPO_CONFIG = {
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


def git_env(git_dir: Path | None = None, **extra: str) -> dict[str, str]:
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


def run_git(args: list[str], git_dir: Path | None, *, cwd: Path, stdin: str | None = None,
             check: bool = True) -> subprocess.CompletedProcess:
    """Run git; stdout stays bytes (file contents), stderr is text."""
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, env=git_env(git_dir), capture_output=True,
                              input=None if stdin is None else stdin.encode("utf-8"))
    except FileNotFoundError:
        raise UserError("git is not installed; install git (the strategy workspace is a git repo).") from None
    proc.stderr = proc.stderr.decode("utf-8", "replace")
    if check and proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise RunFailed(f"git {args[0]} failed in {cwd}: {detail}")
    return proc

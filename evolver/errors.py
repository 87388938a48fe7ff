"""Errors a user can cause: reported as one line, exit code 2, never a traceback."""
from sandbox.text import MAX_MESSAGE_CHARS, printable  # noqa: F401  (every user-facing error goes through it)


class UserError(Exception):
    """Bad input (a corpus line, a missing file, a wrong option): one clear sentence."""

    exit_code = 2


class RunFailed(Exception):
    """A run or an execution failed for a reason that is not the user's input (exit code 1)."""

    exit_code = 1


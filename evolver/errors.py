"""Errors a user can cause: reported as one line, exit code 2, never a traceback."""
import re


class UserError(Exception):
    """Bad input (a corpus line, a missing file, a wrong option): one clear sentence."""

    exit_code = 2


class RunFailed(Exception):
    """A run or an execution failed for a reason that is not the user's input (exit code 1)."""

    exit_code = 1


MAX_MESSAGE_CHARS = 1000
# C0 and C1 controls (escape sequences, carriage return, bell) and the bidirectional overrides
# that reorder text on screen; newline and tab stay.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def printable(text: object, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text` as it may reach a terminal: cut to `limit` characters (the cut said), control
    characters and escape sequences shown escaped (`\\x1b`), never interpreted. Every user-facing
    error goes through it: a strategy's message or a file name is not ours to print raw."""
    text = str(text)
    if len(text) > limit:
        text = f"{text[:limit]} [... {len(text) - limit} more characters]"
    return _UNSAFE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)

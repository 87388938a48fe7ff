"""Errors a user can cause: reported as one line, exit code 2, never a traceback."""
from base.text import MAX_MESSAGE_CHARS, printable  # noqa: F401  (every user-facing error goes through it)


class UserError(Exception):
    """Bad input (a corpus line, a missing file, a wrong option): one clear sentence."""

    exit_code = 2


class RunFailed(Exception):
    """A run or an execution failed for a reason that is not the user's input (exit code 1)."""

    exit_code = 1



# argparse types for numeric options: NaN, infinities and values out of range are refused at
# parse time with one line (exit 2), before any work.
def _number(text: str, kind, low: float, strict: bool, what: str):
    import argparse
    import math

    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < low or (strict and value == low):
        raise argparse.ArgumentTypeError(f"{text!r}: give {what}")
    return value


def positive_seconds(text: str) -> float:
    """A finite number of seconds above 0 (a timeout)."""
    return _number(text, float, 0.0, True, "a finite number of seconds above 0")


def nonnegative_number(text: str) -> float:
    """A finite number of 0 or more (a temperature, a margin)."""
    return _number(text, float, 0.0, False, "a finite number of 0 or more")


def positive_int(text: str) -> int:
    """A whole number of 1 or more (a count, a length)."""
    return _number(text, int, 1, False, "a whole number of 1 or more")

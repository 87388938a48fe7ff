"""Text from a candidate, a file name or a server, made safe to show on a terminal.

It lives on the ground floor (no imports) so that the in-sandbox runtime (through `sandbox.text`,
mounted with `base/` in the sandbox), the host checker and `base.errors` share one definition.
"""
from __future__ import annotations

import re

MAX_MESSAGE_CHARS = 1000
# C0 and C1 controls (escape sequences, carriage return, bell) and the bidirectional overrides
# that reorder text on screen; newline and tab stay unless one line is asked for.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_UNSAFE_IN_A_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def printable(text: object, limit: int = MAX_MESSAGE_CHARS, *, one_line: bool = False) -> str:
    """`text` as it may reach a terminal: cut to `limit` characters (the cut said), control
    characters and escape sequences shown escaped (`\\x1b`), never interpreted; with `one_line`
    newlines and tabs too. Every user-facing error goes through it: a strategy's message or a
    file name is not ours to print raw."""
    text = str(text)
    if len(text) > limit:
        text = f"{text[:limit]} [... {len(text) - limit} more characters]"
    unsafe = _UNSAFE_IN_A_LINE if one_line else _UNSAFE
    return unsafe.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)

"""Options several commands take, declared once: how an invalid corpus line is handled
(`--on-bad-line abort|skip`, as `run` spells it) and the profile's budget overrides
(`--set FIELD=VALUE`, as `train` spells it). An older spelling still works and says the new one."""
from __future__ import annotations

import argparse
import sys

ON_BAD_LINE = ("abort", "skip")


class _OldSpelling(argparse.Action):
    """An option kept for old command lines: stores like its new spelling and says that spelling on stderr."""

    def __init__(self, option_strings, dest, new: str, const=None, nargs=0, **kwargs):
        self.new = new
        super().__init__(option_strings, dest, nargs=nargs, const=const, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: note: {option_string} is the old spelling of {self.new}", file=sys.stderr)
        if self.nargs == 0:
            setattr(namespace, self.dest, self.const)
        elif self.nargs is None:   # one value, stored as its new spelling stores it
            setattr(namespace, self.dest, values)
        else:
            setattr(namespace, self.dest, (getattr(namespace, self.dest, None) or []) + list(values))


def add_on_bad_line(parser, what: str = "corpus") -> None:
    """`--on-bad-line abort|skip` (dest `on_bad_line`), and `--skip-bad-lines`, its old spelling."""
    parser.add_argument("--on-bad-line", dest="on_bad_line", choices=ON_BAD_LINE, default="abort",
                        help=f"an invalid {what} line: abort with file:line (default), or skip and count it")
    parser.add_argument("--skip-bad-lines", dest="on_bad_line", action=_OldSpelling, const="skip",
                        new="--on-bad-line skip", help="old spelling of --on-bad-line skip")


def add_old_spelling(parser, old: str, new: str, dest: str, **kwargs) -> None:
    """`old`, an option kept for old command lines that takes one value: stored in `dest` as its new
    spelling `new` stores it (`kwargs`: its type), and said on stderr."""
    parser.add_argument(old, dest=dest, action=_OldSpelling, nargs=None, new=new, help=f"old spelling of {new}",
                        **kwargs)


def add_set(parser, what: str = "the profile's budgets") -> None:
    """`--set FIELD=VALUE ...` (dest `set`, a list of strings; repeatable), and `--budget`, its old spelling."""
    parser.add_argument("--set", dest="set", action="extend", nargs="+", default=[], metavar="FIELD=VALUE",
                        help=f"override single fields of {what} (trainer.recipe.Profile, e.g. sft_max_steps=2)")
    parser.add_argument("--budget", dest="set", action=_OldSpelling, nargs="+", new="--set", metavar="FIELD=VALUE",
                        help="old spelling of --set")

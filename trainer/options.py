"""Options of the commands that train the recipe (train, bench quality), declared once: the
`--profile` and its overrides (`--set FIELD=VALUE`, base/options.py)."""
from __future__ import annotations

from base.options import add_set
from trainer.recipe import DEFAULT_PROFILE, PROFILE_HELP, PROFILES


def add_profile(parser, what: str = "recipe profile", overrides: str | None = "the profile") -> None:
    """`--profile NAME` (default `DEFAULT_PROFILE`) and, unless `overrides` is None, `--set FIELD=VALUE ...`."""
    parser.add_argument("--profile", default=DEFAULT_PROFILE, choices=list(PROFILES),
                        help=f"{what}: {PROFILE_HELP} (default: {DEFAULT_PROFILE})")
    if overrides is not None:
        add_set(parser, overrides)

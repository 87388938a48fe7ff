"""The old name of sandbox/package_lock.py, kept so `python -m sandbox.environment_lock ...` still works."""
import sys

from sandbox.package_lock import main

if __name__ == "__main__":
    print("note: `python -m sandbox.environment_lock` is now `python -m sandbox.package_lock`", file=sys.stderr)
    sys.exit(main())

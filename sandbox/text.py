"""The in-sandbox runtime's and the checker's name for `base.text` (their bytes, and so the
runtime hash, stay as they were); `base/` is mounted in the sandbox beside `sandbox/`."""
from base.text import MAX_MESSAGE_CHARS, printable  # noqa: F401

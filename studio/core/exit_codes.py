"""The exit codes of `studio-train` and of the trainer (`python -m studio.train`): one set for both.

Scripts and the studio read them: 0 the work is done (or stopped on request), 1 it failed,
2 the input was wrong (a config, a flag, a path), 130 interrupted from the keyboard.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID = 2
EXIT_INTERRUPTED = 130


def signal_exit_code(returncode: int) -> int:
    """A child's return code as a shell reports it: a death by signal N is 128 + N, not a negative number."""
    return 128 - returncode if returncode < 0 else returncode

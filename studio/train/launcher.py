"""`python -m studio.train.launcher ARGS`: `accelerate launch ARGS` that ends when the trainer ends.

accelerate's launcher imports torch to start the trainer processes. Once they have ended,
its interpreter would spend one to three seconds tearing torch down before the trainer's
exit code reaches the GUI or the terminal; this one leaves at once. The arguments and
what they start are accelerate's own; a trainer's failure becomes this process's exit
code (the trainer has reported it in its events and console) instead of a traceback of
the launcher.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from accelerate.commands.launch import launch_command, launch_command_parser

    args = launch_command_parser().parse_args(argv)
    try:
        launch_command(args)
    except subprocess.CalledProcessError as failed:
        return failed.returncode
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

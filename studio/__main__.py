"""`python -m studio`: the desktop app (and its `--self-test`)."""

import multiprocessing
import sys

from studio.core.resources import restore_library_path
from studio.core.studio_command import run_module_argv

if __name__ == "__main__":
    # The Dataset page's helper processes are spawned; a frozen build needs this first.
    multiprocessing.freeze_support()
    # The programs it starts (ssh, the training environment, a file manager) use the system's libraries.
    restore_library_path()
    # `studio --run-module studio.core.X ARGS`: the desktop app runs its own helpers (the SSH askpass)
    # with its own binary, before anything of the window loads.
    code = run_module_argv(sys.argv)
    if code is not None:
        sys.exit(code)
    from studio.gui.shell.app import main

    sys.exit(main())

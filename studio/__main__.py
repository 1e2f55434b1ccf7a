"""`python -m studio`: the desktop app (and its `--self-test`)."""

import multiprocessing
import sys

from studio.gui.shell.app import main

if __name__ == "__main__":
    # The Dataset page's helper processes are spawned; a frozen build needs this first.
    multiprocessing.freeze_support()
    sys.exit(main())

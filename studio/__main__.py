"""`python -m studio`: the desktop app (and its `--self-test`)."""

import sys

from studio.gui.app import main

sys.exit(main())

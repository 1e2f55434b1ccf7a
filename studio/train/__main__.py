"""`python -m studio.train CONFIG.toml` or `python -m studio.train --resume RUN_DIR`."""

import sys

from studio.train.entry import main

sys.exit(main())

"""`python -m studio.train CONFIG.toml` or `python -m studio.train --resume RUN_DIR`."""

from studio.train.entry import leave, main

leave(main())

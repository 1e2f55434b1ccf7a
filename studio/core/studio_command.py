"""How this process starts a studio command as a child process.

A source checkout has a Python: `python -m studio.cli ARGS`. The frozen desktop app has none
of its own (`sys.executable` is the window's binary, which would read `-m` as a project
folder), so:

- commands that need the training libraries (download, caption, tiny, torch probes) run in
  the training environment's Python, which reads the studio's source through a .pth file;
- the studio's pure-Python helpers (the SSH askpass) run in the app's own binary, which
  dispatches `--run-module MODULE ARGS` before anything of the window loads
  (`run_module_argv`, called first by `studio/__main__.py`).
"""

from __future__ import annotations

import runpy
import sys
from collections.abc import Sequence

from studio.core.resources import is_frozen
from studio.core.training_python import default_training_python

CLI_MODULE = "studio.cli"
RUN_MODULE_FLAG = "--run-module"
# What the app's own binary may run: modules that need nothing beyond what it carries.
OWN_BINARY_PREFIX = "studio.core."


def studio_command(args: Sequence[str], module: str = CLI_MODULE, python: str | None = None) -> list[str]:
    """The command line that runs `module` (default: the `studio-train` commands) with `args`.

    `python` names the interpreter (launch.python); otherwise a studio.core module runs in this
    program (the frozen app's own binary, or this interpreter), and everything else in the
    training environment's Python (raises NoTrainingPython in the frozen app before it is set up).
    """
    if python:
        return [python, "-m", module, *args]
    if module.startswith(OWN_BINARY_PREFIX):
        if is_frozen():
            return [sys.executable, RUN_MODULE_FLAG, module, *args]
        return [sys.executable, "-m", module, *args]
    return [default_training_python(), "-m", module, *args]


def run_module_argv(argv: Sequence[str]) -> int | None:
    """Run `--run-module MODULE ARGS` as `python -m MODULE ARGS` would; None when argv asks for the window."""
    if len(argv) < 3 or argv[1] != RUN_MODULE_FLAG:
        return None
    module = argv[2]
    if not module.startswith(OWN_BINARY_PREFIX):
        print(f"studio: {module} does not run in the desktop app's own binary (only {OWN_BINARY_PREFIX}* "
              "modules); run it with the training environment's Python", file=sys.stderr)
        return 2
    sys.argv = [module, *argv[3:]]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as done:
        code = done.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0

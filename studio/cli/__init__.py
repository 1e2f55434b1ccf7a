"""`studio-train`: the headless command line.

Each subcommand lives in its own module of this package or of one of its
groups (runs/, models/, dataset/) and exposes `register(subparsers)`; modules
are found at start-up, so adding a command is adding a file. Modules whose
name starts with "_" are helpers, not commands. Heavy imports (torch, diffusers) happen inside the
command's function, never at module level, so `studio-train presets` stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from studio import __version__
from studio.core.config.errors import ConfigError
from studio.core.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVALID
from studio.core.families import FAMILY_NAMES, title


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="studio-train",
        description=f"Train LoRAs, LyCORIS and DreamBooth models of {', '.join(map(title, FAMILY_NAMES))} headless.",
    )
    parser.add_argument("--version", action="version", version=f"studio-train {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    found = [m for m in pkgutil.walk_packages(__path__, prefix=f"{__name__}.") if not m.ispkg]
    for info in sorted(found, key=lambda m: m.name.rsplit(".", 1)[-1]):
        if info.name.rsplit(".", 1)[-1].startswith("_"):
            continue
        module = importlib.import_module(info.name)
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):
        # Windows writes a redirected output in its code page (cp1252): a file named in Chinese is written as
        # \\u732b there instead of ending the command with a UnicodeEncodeError.
        with contextlib.suppress(AttributeError, ValueError, OSError):
            stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_INVALID
    try:
        code = args.func(args)
    except ConfigError as exc:
        # Every command reports a bad config the same way: each key, its value, what is allowed.
        print(exc.describe(), file=sys.stderr)
        return EXIT_INVALID
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `studio-train ... | head` stopped reading: the rest was not wanted
        from studio.cli._follow import Terminal

        Terminal().hang_up()
        return EXIT_FAILED
    except OSError as exc:
        if exc.filename is None:
            raise
        # A folder given that is a file, one not to be written, a full disk: what and where, not a traceback.
        where = f"{exc.filename} -> {exc.filename2}" if exc.filename2 else str(exc.filename)
        print(f"error: {where}: {exc.strerror or exc}; check the path and its permissions",
              file=sys.stderr)
        return EXIT_FAILED
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())

"""`studio-train env status|install|repair|doctor`: the training environment the studio sets up.

    studio-train env install             # venv + the torch build for this driver + pinned packages
    studio-train env install --wheelhouse DIR   # offline, from a folder of wheels
    studio-train env doctor              # what is wrong, and how to fix it
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from studio.core.exit_codes import EXIT_FAILED, EXIT_INVALID, EXIT_OK

EXIT_CANCELLED = 130


def register(sub: Any) -> None:
    parser = sub.add_parser("env", help="set up, check or repair the training environment (PyTorch and friends)")
    actions = parser.add_subparsers(dest="env_action", metavar="ACTION", required=True)
    for name, text in (("status", "where the environment is and whether it is ready"),
                       ("install", "make the environment, or continue an install that stopped"),
                       ("repair", "install every package again (and remake a venv that does not run)"),
                       ("doctor", "name what is wrong and how to fix it")):
        action = actions.add_parser(name, help=text, description=text)
        action.add_argument("--json", action="store_true", help="print JSON instead of text")
        action.add_argument("--folder", type=Path, help="the environment's folder (default: the user data folder)")
        action.add_argument("--torch", dest="torch_tag", metavar="BUILD",
                            help="a torch build instead of the one the driver suggests: cu130, cu128, cu126, cpu, "
                                 "default (PyPI's)")
        action.add_argument("--wheelhouse", type=Path, metavar="DIR",
                            help="install only from this folder of wheels, with no network ($STUDIO_WHEELHOUSE)")
        action.add_argument("--tool", choices=("uv", "venv"), help="uv or Python's venv + pip (default: uv if found)")
        action.add_argument("--hardware", metavar="FILE", help="plan for a hardware profile instead of this machine")
        action.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from studio.core.hardware.machine.probe import load_hardware
    from studio.core.hardware.report import HardwareProfileError
    from studio.core.trainenv.packages import PackageListError
    from studio.core.trainenv.tools import NoEnvTool
    from studio.core.training_python import env_dir

    try:
        report = load_hardware(args.hardware)
    except HardwareProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    folder = args.folder or env_dir()
    if args.env_action == "doctor":
        return _doctor(args, report, folder)
    from studio.core.trainenv.plan import make_plan

    try:
        plan = make_plan(folder, args.tool, args.torch_tag, args.wheelhouse, report)
    except (NoEnvTool, PackageListError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if args.env_action == "status":
        return _status(args, plan)
    return _install(args, plan, force=args.env_action == "repair")


def _status(args: argparse.Namespace, plan: Any) -> int:
    from studio.core.trainenv.doctor import status_facts

    facts = status_facts(plan)
    if args.json:
        print(json.dumps(facts))
    else:
        state = "ready" if facts["ready"] else "not ready"
        print(f"Training environment: {facts['folder']} ({state}"
              + (", up to date)" if facts["up_to_date"] else ")"))
        for key in ("python", "python_version", "torch", "torch_build_needed", "torch_build_reason", "tool", "source",
                    "error"):
            if facts[key]:
                print(f"  {key.replace('_', ' ')}: {facts[key]}")
    return EXIT_OK if facts["ready"] else EXIT_FAILED


def _doctor(args: argparse.Namespace, report: Any, folder: Path) -> int:
    from dataclasses import asdict

    from studio.core.trainenv.doctor import ERROR, diagnose

    findings = diagnose(report, folder, args.torch_tag, args.wheelhouse, args.tool)
    if args.json:
        print(json.dumps({"folder": str(folder), "findings": [asdict(f) for f in findings]}))
    elif not findings:
        print(f"No problems found: the training environment in {folder} is ready.")
    else:
        print("\n".join(f.describe() for f in findings))
    return EXIT_FAILED if any(f.severity == ERROR for f in findings) else EXIT_OK


class _Printer:
    """One line per step and package; JSON lines with --json."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.last: tuple[str, str | None] | None = None

    def __call__(self, progress: Any) -> None:
        if self.as_json:
            print(json.dumps({"step": progress.step, "index": progress.index, "count": progress.count,
                              "package": progress.package, "bytes_done": progress.bytes_done,
                              "bytes_total": progress.bytes_total}), flush=True)
            return
        key = (progress.step, progress.package)
        if key != self.last:
            self.last = key
            print(progress.describe(), flush=True)


def _install(args: argparse.Namespace, plan: Any, force: bool) -> int:
    from studio.core.trainenv.installer import install
    from studio.core.trainenv.steps import Cancelled, StepFailed

    if not args.json:
        print(f"Training environment: {plan.folder}\n  torch: {plan.build.reason}\n  with {plan.tool.describe()}",
              flush=True)
    try:
        result = install(plan, progress=_Printer(args.json), force=force)
    except (Cancelled, KeyboardInterrupt):
        print("Cancelled: what finished is kept; run `studio-train env install` to continue.", file=sys.stderr)
        return EXIT_CANCELLED
    except StepFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as exc:
        print(f"error: could not write the environment in {plan.folder}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    summary = {"python": str(result.python), "up_to_date": result.up_to_date, "steps": result.steps_run,
               "seconds": round(result.seconds, 2), **result.facts}
    if args.json:
        print(json.dumps(summary))
    elif result.up_to_date:
        print(f"Up to date: nothing to do ({result.seconds:.1f} s). The studio trains with {result.python}")
    else:
        print(f"Ready in {result.seconds:.0f} s: the studio trains with {result.python}")
    return EXIT_OK

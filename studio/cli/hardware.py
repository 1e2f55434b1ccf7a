"""`studio-train hardware [--json] [--hardware FILE] [--torch]`: what this machine (or a profile) has."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from studio.core.exit_codes import EXIT_INVALID, EXIT_OK


def register(sub: Any) -> None:
    parser = sub.add_parser("hardware", help="show the GPUs, CPU, RAM and disk (or a fake profile)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("--hardware", metavar="FILE",
                        help="a hardware profile (JSON file or shipped name, e.g. rtx4090-24gb) instead of probing")
    parser.add_argument("--torch", action="store_true",
                        help="also ask torch (in a separate process) what it sees; slower")
    parser.add_argument("--path", default=".", help="folder whose free disk space is reported (default: here)")
    parser.set_defaults(func=run)


def describe(report: Any) -> str:
    from studio.core.estimate.estimate import other_processes_warning

    lines = [f"Source: {report.source}"]
    if not report.gpus:
        lines.append("GPUs:   none")
    for g in report.gpus:
        extra = [f"compute {g.compute_capability}" if g.compute_capability else "",
                 "bf16" if g.bf16 else ("no bf16" if g.bf16 is False else ""),
                 f"driver {g.driver}" if g.driver else "", f"CUDA {g.cuda}" if g.cuda else "",
                 f"NVLink to {', '.join(map(str, g.nvlink))}" if g.nvlink else
                 (f"P2P to {', '.join(map(str, g.p2p))}" if g.p2p else "")]
        lines.append(f"GPU {g.index}:  {g.name}, {g.total_mb / 1024:.1f} GB ({g.free_mb / 1024:.1f} GB free)"
                     + "".join(f", {e}" for e in extra if e))
        warning = other_processes_warning(g)
        if warning:
            lines.append(f"        ! {warning}")
    cores = f"{report.cores} threads" + (f", {report.physical_cores} cores" if report.physical_cores else "")
    lines.append(f"CPU:    {report.cpu_model} ({cores})")
    lines.append(f"RAM:    {report.ram_mb / 1024:.1f} GB")
    if report.disk_free_mb is not None:
        lines.append(f"Disk:   {report.disk_free_mb / 1024:.0f} GB free at {report.disk_path}")
    if report.torch:
        lines.append(f"torch:  {report.torch}")
    lines.extend(f"Note:   {n}" for n in report.notes)
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from studio.core.hardware.machine.probe import load_hardware
    from studio.core.hardware.report import HardwareProfileError

    try:
        report = load_hardware(args.hardware, disk_path=args.path, use_torch=args.torch)
    except HardwareProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    print(report.to_json() if args.json else describe(report))
    return EXIT_OK

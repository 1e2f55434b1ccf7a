"""`studio-train estimate CONFIG [--hardware FILE] [--json]`: peak VRAM of a config, and what makes it fit."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from studio.cli import EXIT_INVALID, EXIT_OK

FIT_WORDS = {"fits": "fits", "tight": "fits, but tight (within 10%)", "does_not_fit": "does NOT fit"}


def register(sub: Any) -> None:
    parser = sub.add_parser("estimate", help="estimate the peak VRAM of a config on this GPU or a profile")
    parser.add_argument("config", help="a TrainConfig TOML file")
    parser.add_argument("--hardware", metavar="FILE",
                        help="a hardware profile (JSON file or shipped name, e.g. rtx3060-12gb) instead of probing")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from studio.core.config.toml_file import load_config
    from studio.core.hardware.batch_plan import plan_batch
    from studio.core.hardware.estimate import estimate_vram, fit, other_processes_warning
    from studio.core.hardware.fixes import suggest_fixes
    from studio.core.hardware.probe import load_hardware
    from studio.core.hardware.report import HardwareProfileError

    config = load_config(args.config)
    try:
        report = load_hardware(args.hardware)
    except HardwareProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    # Every process of a data-parallel run holds a full copy, so one GPU is representative.
    gpu = report.gpus[0] if report.gpus else None
    estimate = estimate_vram(config, gpu)
    verdict = fit(estimate, gpu) if gpu else None
    suggestions = suggest_fixes(config, gpu) if gpu else []
    warning = other_processes_warning(gpu) if gpu else None
    plan = plan_batch(config, gpu)
    if args.json:
        print(json.dumps({
            "hardware": report.summary(), "gpu": gpu.name if gpu else None,
            "available_mb": gpu.free_mb if gpu else None, "fit": verdict, "estimate": estimate.to_dict(),
            "warning": warning,
            "batch_plan": None if plan is None else {
                "largest_batch": plan.largest, "capped": plan.capped, "largest_mb": round(plan.largest_mb),
                "keep_batch": plan.keep_batch, "keep_accumulation": plan.keep_accumulation,
                "fill_learning_rate": plan.fill_learning_rate, "scaling": plan.scaling, "text": plan.describe()},
            "suggestions": [{"title": s.title, "description": s.description, "changes": s.changes,
                             "total_mb": round(s.estimate.total_mb), "fit": s.fit} for s in suggestions],
        }, indent=2))
        return EXIT_OK
    where = f"{gpu.name} ({gpu.free_mb / 1024:.1f} of {gpu.total_mb / 1024:.1f} GB free)" if gpu else \
        "no GPU: the CPU (fp32; peak RAM)"
    print(f"{config.model.family} {config.method.kind}, {config.dataset.resolution} px, "
          f"batch {config.training.batch_size} on {where}")
    for part in estimate.parts:
        print(f"  {part.label:<34} {part.mb / 1024:7.2f} GB  {part.detail}")
    print(f"  {'Peak':<34} {estimate.total_gb:7.2f} GB")
    if estimate.caching_peak_mb:
        print(f"  {'(caching phase peak)':<34} {estimate.caching_peak_mb / 1024:7.2f} GB")
    for note in estimate.notes:
        print(f"  note: {note}")
    if warning:
        print(f"Warning: {warning}")
    if verdict:
        print(f"Verdict: {FIT_WORDS[verdict]}")
    if plan is not None:
        print(f"Batch: {plan.badge}")
        for line in plan.describe().split("; "):
            print(f"  {line}")
    for i, s in enumerate(suggestions, 1):
        changes = ", ".join(f"{k} = {json.dumps(v)}" for k, v in s.changes.items())
        print(f"  {i}. {s.title}: {changes} -> {s.estimate.total_gb:.1f} GB ({FIT_WORDS[s.fit]})")
        print(f"     {s.description}")
    if verdict == "does_not_fit" and (not suggestions or suggestions[-1].fit == "does_not_fit"):
        print("  No combination of these changes fits this GPU; choose a larger GPU or a smaller model.")
    return EXIT_OK

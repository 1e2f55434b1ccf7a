"""`studio-train estimate [CONFIG] [--preset NAME] [--hardware PROFILE] [--gpus N] [--json]`: peak VRAM of a
config or a preset, and what makes it fit.

With several GPUs (`--gpus N`, or the config's launch.num_processes) it also prints the peak per
GPU as data parallel (DDP) and fully sharded (FSDP) side by side.

A preset (a shipped id, one of the person's own, or a preset file) is estimated as a
person runs it: applied to CONFIG when one is given (else to a placeholder project), with
its sample images on; its promise (min_vram_gb) is printed against the estimate.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from studio.core.exit_codes import EXIT_INVALID, EXIT_OK

if TYPE_CHECKING:
    from studio.core.config.files.paths import ResolvedConfig
    from studio.core.config.files.presets import Preset
    from studio.core.estimate.plans.preset_estimate import PresetEstimate
    from studio.core.hardware.report import GPUInfo

FIT_WORDS = {"fits": "fits", "tight": "fits, but tight (within 10%)", "does_not_fit": "does NOT fit"}
SHORT_FIT_WORDS = {"fits": "fits", "tight": "tight", "does_not_fit": "does NOT fit"}


def register(sub: Any) -> None:
    parser = sub.add_parser("estimate", help="estimate the peak VRAM of a config or a preset on this GPU or a profile")
    parser.add_argument("config", nargs="?", help="a TrainConfig TOML file (or a preset file)")
    parser.add_argument("--preset", metavar="NAME",
                        help="a preset id (`studio-train presets` lists them) or a preset file, "
                             "estimated with its sample images on")
    parser.add_argument("--hardware", metavar="PROFILE",
                        help="a hardware profile (JSON file or shipped name, e.g. rtx3060-12gb) instead of probing")
    parser.add_argument("--gpus", type=int, metavar="N",
                        help="also show the peak per GPU on N GPUs, DDP beside FSDP (default: launch.num_processes)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from studio.core.hardware.machine.probe import load_hardware
    from studio.core.hardware.report import HardwareProfileError

    try:
        preset, project = _inputs(args)
    except LookupError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return EXIT_INVALID
    try:
        report = load_hardware(args.hardware)
    except HardwareProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    # Every process of a data-parallel run holds a full copy, so one GPU is representative: the smallest of
    # those the project's launch.gpu_ids chooses.
    gpu = report.run_gpus(project.launch)[0] if project is not None else report.training_gpu()
    if project is not None and gpu is None:
        from studio.core.project.preflight import check_gpu_ids

        # launch.gpu_ids naming a card this machine lacks (a config from a machine of two GPUs): the run would
        # train on the CPU, and the estimate is the CPU's; why, and not as though the machine had no GPU.
        wrong_ids = check_gpu_ids(project, report)
        if wrong_ids is not None:
            print(f"warning: {wrong_ids}", file=sys.stderr)
    if args.gpus is not None and args.gpus < 1:
        print(f"error: --gpus {args.gpus}: give a number of GPUs of 1 or more", file=sys.stderr)
        return EXIT_INVALID
    if preset is None:
        assert project is not None  # _inputs refuses neither
        return _report(project, gpu, report.summary(), None, args.json, args.gpus, report.ram_mb)
    from studio.core.estimate.plans.preset_estimate import estimate_preset, preset_config

    result = estimate_preset(preset, gpu, project)
    if gpu is None and not args.json:
        print("No GPU found here: the preset is estimated on a card of its promised size "
              "(--hardware PROFILE picks another).")
    return _report(preset_config(preset, project), result.gpu, report.summary(), result, args.json, args.gpus,
                   report.ram_mb)


def _inputs(args: argparse.Namespace) -> tuple[Preset | None, ResolvedConfig | None]:
    """(preset or None, the project's config, its paths resolved against its folder, or None);
    LookupError names what is missing."""
    from studio.core.config.files.paths import load_resolved
    from studio.core.config.files.presets import get_preset, load_preset

    preset = None
    config_path = Path(args.config) if args.config else None
    if config_path is not None and _is_preset_file(config_path):
        preset, config_path = load_preset(config_path), None
    if args.preset:
        named = Path(args.preset)
        if named.suffix == ".toml" and named.is_file():
            preset = load_preset(named)
        else:
            try:
                preset = get_preset(args.preset)
            except KeyError as exc:
                raise LookupError(f"{exc.args[0]} (or give a preset file's path)") from None
    if preset is None and config_path is None:
        raise LookupError("give a config file, or --preset NAME (`studio-train presets` lists the names)")
    return preset, load_resolved(config_path) if config_path is not None else None


def _is_preset_file(path: Path) -> bool:
    from studio.core.config.files.toml_file import parse_toml

    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError:
        return False  # load_config says what is wrong with it
    return "preset" in parse_toml(text, str(path))


def _report(config: ResolvedConfig, gpu: GPUInfo | None, hardware: str, preset_result: PresetEstimate | None,
            as_json: bool, gpus: int | None, ram_mb: int = 0) -> int:
    from studio.core.estimate.estimate import estimate_vram, fit, other_processes_warning
    from studio.core.estimate.plans.batch_plan import plan_batch
    from studio.core.estimate.plans.fixes import suggest_fixes
    from studio.core.estimate.sharded.sharded_estimate import plan_gpus

    estimate = preset_result.estimate if preset_result else estimate_vram(config, gpu)
    verdict = fit(estimate, gpu) if gpu else None
    count = gpus or config.launch.num_processes
    suggestions = suggest_fixes(config, gpu, count) if gpu else []
    warning = other_processes_warning(gpu) if gpu else None
    gpu_plan = plan_gpus(config, gpu, count) if count > 1 else None
    plan = plan_batch(config, gpu)
    ram = _ram(config, gpu, ram_mb)
    if as_json:
        print(json.dumps({
            "hardware": hardware, "gpu": gpu.name if gpu else None,
            "available_mb": gpu.free_mb if gpu else None, "fit": verdict, "estimate": estimate.to_dict(),
            "per_gpu": _gpu_plan_json(gpu_plan), "warning": warning, "preset": _preset_json(preset_result),
            "batch_plan": _plan_json(plan), "ram": ram,
            "suggestions": [{"title": s.title, "description": s.description, "changes": s.changes,
                             "total_mb": round(s.estimate.total_mb), "fit": s.fit} for s in suggestions],
        }, indent=2))
        return EXIT_OK
    if preset_result is not None:
        _print_promise(preset_result)
    where = f"{gpu.name} ({gpu.free_mb / 1024:.1f} of {gpu.total_mb / 1024:.1f} GB free)" if gpu else \
        "no GPU: the CPU (fp32; peak RAM)"
    print(f"{config.model.family} {config.method.kind}, {config.dataset.resolution} px, "
          f"batch {config.training.batch_size} on {where}")
    for part in estimate.parts:
        print(f"  {part.label:<34} {part.mb / 1024:7.2f} GB  {part.detail}")
    print(f"  {'Peak':<34} {estimate.total_gb:7.2f} GB")
    if estimate.caching_peak_mb:
        print(f"  {'(caching phase peak)':<34} {estimate.caching_peak_mb / 1024:7.2f} GB")
    if estimate.sampling_peak_mb:
        print(f"  {'(sample images peak)':<34} {estimate.sampling_peak_mb / 1024:7.2f} GB")
    for note in estimate.notes:
        print(f"  note: {note}")
    if warning:
        print(f"Warning: {warning}")
    if verdict:
        print(f"Verdict: {FIT_WORDS[verdict]}")
    _print_ram(ram)
    if plan is not None:
        print(f"Batch: {plan.badge}")
        for line in plan.describe().split("; "):
            print(f"  {line}")
    if gpu_plan is not None:
        _print_gpu_plan(gpu_plan, gpu)
    _print_suggestions(suggestions, verdict)
    return EXIT_OK


def _ram(config: ResolvedConfig, gpu: GPUInfo | None, ram_mb: int) -> dict[str, Any]:
    """The system-RAM estimate beside the VRAM one: its parts, the machine's RAM, the verdict and what to do."""
    from studio.core.estimate.ram.ram_estimate import describe_ram, estimate_ram, ram_fit, ram_problem

    estimate = estimate_ram(config, gpu)
    problem = ram_problem(config, gpu, ram_mb, estimate)
    return {"text": describe_ram(estimate, ram_mb), "machine_mb": ram_mb or None, "fit": ram_fit(estimate, ram_mb),
            "message": problem[1] if problem else None, "estimate": estimate.to_dict()}


def _print_ram(ram: dict[str, Any]) -> None:
    from studio.core.estimate.ram.ram_estimate import PHASE_WORDS

    estimate = ram["estimate"]
    print(ram["text"])
    for part in estimate["parts"]:
        print(f"  {part['label']:<34} {part['mb'] / 1024:7.2f} GB  {part['detail']}")
    others = [f"{PHASE_WORDS[name]} {mb / 1024:.1f} GB" for name, mb in estimate["phases"].items()
              if name != estimate["phase"]]
    if others:
        print(f"  (other phases: {', '.join(others)})")
    for note in estimate["notes"]:
        print(f"  note: {note}")
    if ram["message"]:
        print(f"{'Warning' if ram['fit'] == 'tight' else 'Does NOT fit in RAM'}: {ram['message']}")


def _plan_json(plan: Any) -> dict[str, Any] | None:
    if plan is None:
        return None
    return {"largest_batch": plan.largest, "capped": plan.capped, "largest_mb": round(plan.largest_mb),
            "keep_batch": plan.keep_batch, "keep_accumulation": plan.keep_accumulation,
            "fill_learning_rate": plan.fill_learning_rate, "scaling": plan.scaling, "text": plan.describe()}


def _gpu_plan_json(plan: Any) -> dict[str, Any] | None:
    if plan is None:
        return None
    return {"gpus": plan.gpus, "ddp": plan.ddp.to_dict(), "ddp_fit": plan.ddp_fit,
            "fsdp": plan.fsdp.to_dict() if plan.fsdp else None, "fsdp_fit": plan.fsdp_fit,
            "fsdp_refused": plan.fsdp_refused, "proposes_fsdp": plan.proposes_fsdp}


def _print_gpu_plan(plan: Any, gpu: Any) -> None:
    """The per-GPU parts of DDP and FSDP in two columns (the union of both estimates' parts)."""
    card = f"{gpu.name}, {gpu.free_mb / 1024:.1f} GB free each" if gpu else "the CPU"
    print(f"Per GPU on {plan.gpus} GPUs ({card}):")
    print(f"  {'':<34} {'DDP':>12}  {'FSDP':>12}")
    estimates = [plan.ddp] + ([plan.fsdp] if plan.fsdp else [])
    labels = list(dict.fromkeys(p.label for e in estimates for p in e.parts))
    for label in labels:
        cells = [sum(p.mb for p in e.parts if p.label == label) / 1024 for e in estimates]
        print(f"  {label:<34} " + "  ".join(f"{c:9.2f} GB" for c in cells))
    print(f"  {'Peak':<34} " + "  ".join(f"{e.total_gb:9.2f} GB" for e in estimates))
    if plan.ddp_fit:
        words = [SHORT_FIT_WORDS[plan.ddp_fit]] + ([SHORT_FIT_WORDS[plan.fsdp_fit]] if plan.fsdp_fit else [])
        print(f"  {'Verdict':<34} " + "  ".join(f"{w:>12}" for w in words))
    if plan.fsdp is None:
        print(f"  FSDP does not apply: {plan.fsdp_refused}")
    elif plan.proposes_fsdp:
        changes = ", ".join(f"{k} = {json.dumps(v)}" for k, v in plan.changes.items())
        print(f"  FSDP fits where DDP does not: set {changes}")


def _preset_json(result: Any) -> dict[str, Any] | None:
    if result is None:
        return None
    return {"id": result.preset.id, "title": result.preset.title, "promise_gb": result.promise_gb,
            "estimate_gb": round(result.estimate.total_gb, 2), "with_samples": True,
            "keeps_promise": result.keeps_promise, "card": result.gpu.name}


def _print_promise(result: Any) -> None:
    preset = result.preset
    print(f"Preset {preset.id} ({preset.title}): {result.summary()} on {result.gpu.name}")
    if result.keeps_promise:
        print("  The estimate keeps the promise.")
    else:
        print(f"  The estimate is over the promise by {result.estimate.total_gb - result.promise_gb:.1f} GB.")


def _print_suggestions(suggestions: list[Any], verdict: str | None) -> None:
    for i, s in enumerate(suggestions, 1):
        changes = ", ".join(f"{k} = {json.dumps(v)}" for k, v in s.changes.items())
        print(f"  {i}. {s.title}: {changes} -> {s.estimate.total_gb:.1f} GB ({FIT_WORDS[s.fit]})")
        print(f"     {s.description}")
    if verdict == "does_not_fit" and (not suggestions or suggestions[-1].fit == "does_not_fit"):
        print("  No combination of these changes fits this GPU; choose a larger GPU or a smaller model.")

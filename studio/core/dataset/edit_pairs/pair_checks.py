"""The problems of edit pairs, named with their file and what to do, as captions' are: a target without its
control image, a control without its target, a control that cannot be read, two of one name in one place, and
one whose shape differs strongly from its target's (resized to the target, as musubi-tuner and ai-toolkit do by
default, it would be stretched). Only image headers are read.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from studio.core.dataset.image_facts import Problem, inspect_image
from studio.core.dataset.image_rules import size_problem
from studio.core.dataset.scan import ImageEntry, ScanResult

# Aspect ratios (long side / short side, oriented) further apart than this factor are "strongly different":
# a 4:3 control for a 3:2 target is fine (1.13), a square one for a 16:9 target is not (1.78).
ASPECT_TOLERANCE = 1.25


def expected_control(entry: ImageEntry, scan: ScanResult) -> Path:
    """Where the first control image of `entry` would be, in the layout the concept was read with."""
    name = entry.path.stem + ".png"
    if scan.control_layout == "suffix":
        return entry.path.with_name(entry.path.stem + "_control.png")
    if scan.control_layout == "separate" and scan.control_folders:
        return scan.control_folders[0] / name
    return entry.path.parent / "control" / name


def _where_looked(scan: ScanResult) -> str:
    if scan.control_layout == "suffix":
        return "beside it as name_control"
    if scan.control_layout == "separate":
        return "in " + ", ".join(str(f) for f in scan.control_folders)
    return "in the control/ folder beside it"


def _aspect(size: tuple[int, int]) -> float:
    return size[0] / max(1, size[1])


def control_problems(scan: ScanResult, target_sizes: Mapping[Path, tuple[int, int] | None]) -> list[Problem]:
    """The edit-pair problems of one scanned concept; `target_sizes` holds each target's size as shown
    (None when it cannot be read: its own check names it)."""
    out: list[Problem] = []
    for folder in scan.missing_control_folders:
        out.append(Problem("error", "control_folder_missing", str(folder),
                           "the control folder (dataset.control_folders) does not exist",
                           "create it with a control image named as each target, or fix dataset.control_folders"))
    targets = [e for e in scan.entries if not e.is_class]
    if targets and not any(e.controls for e in targets) and not scan.missing_control_folders:
        out.append(Problem("error", "no_controls", str(scan.folder),
                           f"dataset.kind is \"edit\" but no target has a control image ({_where_looked(scan)})",
                           f"put each target's control image at {expected_control(targets[0], scan)} "
                           "(and so on), set dataset.control_folders, or set dataset.kind = \"images\""))
        return out
    for entry in targets:
        if not entry.controls:
            if not scan.missing_control_folders:
                out.append(Problem("error", "missing_control", str(entry.path),
                                   f"this target has no control image ({_where_looked(scan)})",
                                   f"add {expected_control(entry, scan)} (the image the instruction "
                                   "edits), or remove the target"))
            continue
        out.extend(_control_file_problems(entry, target_sizes.get(entry.path)))
    for path in scan.orphan_controls:
        out.append(Problem("warning", "orphan_control", str(path), "control image without a target image",
                           "add the target with the same name, rename the control to its target's name, "
                           "or delete it"))
    return out


def _control_file_problems(entry: ImageEntry, size: tuple[int, int] | None) -> list[Problem]:
    out: list[Problem] = []
    named: dict[tuple[Path, str], Path] = {}
    for control in entry.controls:
        # The same name twice in one place (cat.jpg beside cat.png, a copy saved as another format): both matched,
        # the pair would train with the picture twice as two references.
        twin = named.setdefault((control.parent, control.stem.lower()), control)
        if twin != control:
            out.append(Problem("error", "duplicate_control", str(control),
                               f"{twin.name} and {control.name} in {control.parent} are both the control image of "
                               f"{entry.path.name}", "keep one of them (delete or move the other)"))
        facts = inspect_image(control)
        if facts.error is not None or facts.truncated:
            why = facts.error or "the file is cut off (truncated)"
            out.append(Problem("error", "unreadable_control", str(control),
                               f"the control image of {entry.path.name} cannot be read: {why}",
                               "replace it with a working copy (save it again as PNG or JPEG), or remove the pair"))
            continue
        if facts.size is None:
            continue
        too = size_problem(*facts.size)
        if too is not None:  # the trainer could not open it (or fit it) at the pair's first step
            out.append(Problem("error", "unreadable_control", str(control), f"the control image of {entry.path.name} "
                               f"{too}", "replace it with a copy of a few megapixels, or remove the pair"))
            continue
        if size is None:
            continue
        target, found = _aspect(size), _aspect(facts.size)
        if max(target, found) / min(target, found) > ASPECT_TOLERANCE:
            out.append(Problem("warning", "control_aspect", str(control),
                               f"the control is {facts.size[0]}x{facts.size[1]} but its target {entry.path.name} "
                               f"is {size[0]}x{size[1]}: resized to the target's shape it would be stretched",
                               f"crop the control to the target's shape ({size[0]}:{size[1]}), or the target "
                               "to the control's"))
    return out


def sample_control_problem(path: Path) -> str | None:
    """Why `path` (sampling.control_image) cannot be the image samples edit, as the end of a sentence naming it ("is
    no image file", "cannot be read: ..."); None when it can. Only its header is read."""
    if not path.is_file():
        return "is no image file"
    facts = inspect_image(path)
    if facts.error is not None or facts.truncated:
        return f"cannot be read: {facts.error or 'the file is cut off (truncated)'}"
    return size_problem(*facts.size) if facts.size is not None else None

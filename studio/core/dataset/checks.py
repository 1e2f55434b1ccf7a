"""Dataset validation: every problem a person should fix before training, with where and what to do.

Images are inspected from their headers (plus the last bytes, to catch truncated files);
nothing decodes whole pictures, so a folder of thousands checks in seconds.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from studio.core.dataset.captions.caption_tags import estimate_tokens
from studio.core.dataset.edit_pairs.controls import ControlSettings
from studio.core.dataset.edit_pairs.pair_checks import control_problems
from studio.core.dataset.image_facts import ImageFacts, Problem, inspect_image
from studio.core.dataset.image_headers import is_image_name
from studio.core.dataset.image_rules import size_problem
from studio.core.dataset.mask_checks import mask_problems
from studio.core.dataset.scan import DatasetError, ImageEntry, ScanResult, scan_concept_report
from studio.core.families import DEFAULT_FAMILY, family, is_family
from studio.core.files import leftover_temp_files

if TYPE_CHECKING:
    from studio.core.config.schema import ConceptSection

MAX_ASPECT = 3.0  # beyond this, buckets clamp and crops lose most of the picture
HUGE_PIXELS = 50_000_000  # ~7000 x 7000: slow to load and resized away anyway
SORTABLE_MODES = {"RGB", "RGBA", "L", "LA", "P", "PA"}


@dataclass
class CheckReport:
    images: int = 0
    problems: list[Problem] = field(default_factory=list)
    sizes: dict[Path, tuple[int, int]] = field(default_factory=dict)  # readable images, as shown
    control_layouts: list[str] = field(default_factory=list)  # edit pairs: the layouts the controls were read in

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]

    def by_path(self) -> dict[str, list[Problem]]:
        found: dict[str, list[Problem]] = defaultdict(list)
        for problem in self.problems:
            found[problem.path].append(problem)
        return dict(found)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "images": self.images,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "problems": [asdict(p) for p in self.problems],
        }
        if self.control_layouts:
            out["control_layouts"] = self.control_layouts
        return out



def inspect_images(
    paths: Sequence[Path], progress: Callable[[int, int], None] | None = None
) -> dict[Path, ImageFacts]:
    facts: dict[Path, ImageFacts] = {}
    for n, path in enumerate(paths, start=1):
        facts[path] = inspect_image(path)
        if progress is not None and (n % 200 == 0 or n == len(paths)):
            progress(n, len(paths))
    return facts


def image_problems(entry: ImageEntry, facts: ImageFacts, resolution: int) -> list[Problem]:
    where = str(entry.path)
    out: list[Problem] = []
    if facts.error is not None:
        out.append(Problem("error", "unreadable_image", where, f"cannot be read: {facts.error}",
                           "replace the file with a working copy or remove it"))
        return out
    if facts.truncated:
        out.append(Problem("error", "truncated_image", where, "the file is cut off (truncated)",
                           "download or export it again, or remove it"))
    if facts.mode is not None and facts.mode not in SORTABLE_MODES:
        out.append(Problem("warning", "unusual_mode", where, f"colour mode {facts.mode} is converted to RGB for training",
                           "check that colours look right; save it as 8-bit RGB to be sure"))
    if facts.size is not None:
        width, height = facts.size
        unusable = size_problem(width, height)
        if unusable is not None:
            out.append(Problem("error", "untrainable_size", where, f"{unusable}; the trainer skips it",
                               "replace it with a picture of a usual size (downscale a huge one), or remove it"))
            return out
        if width * height < resolution * resolution:
            out.append(Problem("warning", "too_small", where,
                               f"{width}x{height} is smaller than the training resolution {resolution}x{resolution}",
                               "it will be upscaled and look soft; use a larger image or a lower resolution"))
        aspect = max(width, height) / max(1, min(width, height))
        if aspect > MAX_ASPECT:
            out.append(Problem("warning", "extreme_aspect", where,
                               f"aspect ratio {aspect:.1f}:1 is extreme ({width}x{height})",
                               "crop it closer to the subject; most of it would be cut away"))
        if width * height > HUGE_PIXELS:
            out.append(Problem("warning", "huge_image", where, f"{width}x{height} is very large",
                               "it loads slowly and is resized anyway; downscale it to speed up caching"))
    return out


def caption_problems(entry: ImageEntry, family_name: str = DEFAULT_FAMILY, use_t5: bool = False) -> list[Problem]:
    """A caption's problems; it is too long past what `family_name`'s text encoder reads (75 CLIP tokens
    for SD1.x and SDXL, and SD3 without T5 (`use_t5`), 512 Qwen3 tokens for FLUX.2 [klein] and Z-Image)."""
    where = str(entry.path)
    if entry.caption_error is not None:
        return [Problem("error", "unreadable_caption", str(entry.caption_path),
                        f"cannot be read ({entry.caption_error}); the trainer skips {entry.path.name}",
                        "give your user read access to the file, or write the caption again")]
    if entry.caption_source == "none":
        return [Problem("warning", "missing_caption", where, "has no caption",
                        f"write one in the studio or add {entry.path.with_suffix('.txt').name}")]
    out: list[Problem] = []
    if not (entry.caption or "").strip():
        out.append(Problem("warning", "empty_caption", where, f"caption in {entry.caption_path} is empty",
                           "write a caption describing the image"))
    if not entry.caption_utf8:
        out.append(Problem("warning", "non_utf8_caption", str(entry.caption_path),
                           "is not UTF-8; it was read with a Western (cp1252) fallback",
                           "check the text; saving it from the studio rewrites it as UTF-8"))
    tokens = estimate_tokens(entry.caption)
    limit, encoder = family(family_name if is_family(family_name) else DEFAULT_FAMILY).text_reader(use_t5)
    if tokens > limit:
        out.append(Problem("warning", "long_caption", where,
                           f"caption is about {tokens} tokens; {encoder} reads only the first {limit}",
                           "shorten it or put the important words first"))
    return out


def duplicate_problems(paths: Iterable[Path]) -> list[Problem]:
    """Exact duplicates by content (files of equal size are hashed)."""
    by_size: dict[int, list[Path]] = defaultdict(list)
    for path in paths:
        try:
            by_size[path.stat().st_size].append(path)
        except OSError:
            continue
    out: list[Problem] = []
    for same_size in by_size.values():
        if len(same_size) < 2:
            continue
        by_hash: dict[str, list[Path]] = defaultdict(list)
        for path in same_size:
            try:
                by_hash[hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()].append(path)
            except OSError:
                continue
        for group in by_hash.values():
            for copy in group[1:]:
                out.append(Problem("warning", "duplicate_image", str(copy), f"is identical to {group[0]}",
                                   "remove one copy; duplicates train that image twice as often"))
    return out


def scan_problems(scan: ScanResult) -> list[Problem]:
    out: list[Problem] = []
    if not scan.entries:
        out.append(Problem("error", "no_images", str(scan.folder), "the concept folder holds no images",
                           "add .jpg, .png, .webp or .bmp images, or remove the concept"))
    for folder, why in scan.unreadable_folders:
        out.append(Problem("error", "unreadable_folder", str(folder), f"cannot be read ({why}); its images are left out",
                           "give your user read access to the folder"))
    for folder in scan.empty_folders:
        out.append(Problem("error", "no_images", str(folder), "this repeat folder holds no images",
                           "add images or delete the folder"))
    for path in scan.other_images:
        out.append(Problem("warning", "unsupported_format", str(path), f"{path.suffix} images are not used for training",
                           "convert it to PNG, JPEG or WebP"))
    for path in scan.orphan_captions:
        out.append(_orphan_problem(path))
    for file, line, message in scan.metadata_errors:
        out.append(Problem("warning", "metadata_error", str(file), f"line {line} {message}",
                           'fix the line: {"file_name": "image.png", "text": "caption"}'))
    return out


def _orphan_problem(path: Path) -> Problem:
    """A caption file without an image; one named after the whole image name (photo.jpg.txt, as some
    downloaders write them) is the caption of that image under a name the studio does not read."""
    image = path.with_suffix("")
    wanted = image.with_suffix(path.suffix)
    if is_image_name(image.name) and image.is_file() and not wanted.exists():
        return Problem("warning", "orphan_caption", str(path),
                       f"is named after the whole name of {image.name}, so {image.name} trains without it "
                       f"(captions are read from {wanted.name})", f"rename it to {wanted.name}")
    return Problem("warning", "orphan_caption", str(path), "caption file without an image",
                   "add the image with the same name or delete the caption file")


def shared_name_problems(entries: Iterable[ImageEntry]) -> list[Problem]:
    """Images of one folder named alike but for the extension (a.jpg and a.png) read and save one caption
    file: editing either caption changes both, and the same picture in two formats trains twice."""
    by_name: dict[tuple[Path, str], list[ImageEntry]] = defaultdict(list)
    for entry in entries:
        if not entry.is_class and entry.caption_source != "metadata":  # metadata rows are the images' own
            by_name[(entry.path.parent, entry.path.stem.lower())].append(entry)
    out: list[Problem] = []
    for first, *others in by_name.values():
        caption = first.caption_path.name if first.caption_path is not None else f"{first.path.stem}.txt"
        out.extend(Problem("warning", "shared_caption", str(other.path),
                           f"is named as {first.path.name}, so the two share one caption file ({caption}): "
                           "editing either caption changes both",
                           "rename one of them (and give it its own caption), or remove it if it is the same "
                           "picture in another format")
                   for other in others)
    return out


def leftover_problems(scan: ScanResult) -> list[Problem]:
    """Hidden temporary files that interrupted caption saves left next to the images."""
    folders = {p.parent for e in scan.entries for p in (e.path, e.caption_path) if p is not None}
    return [Problem("warning", "leftover_temp_file", str(path), "a temporary file left by an interrupted save",
                    "delete it; the studio deletes these when it opens the dataset")
            for folder in sorted(folders) for path in leftover_temp_files(folder)]


def check_concepts(
    concepts: Sequence[ConceptSection],
    base_dir: Path | None,
    resolution: int,
    progress: Callable[[int, int], None] | None = None,
    mask_folder: Path | None = None,
    family_name: str = DEFAULT_FAMILY,
    controls: ControlSettings | None = None,
    use_t5: bool = False,
) -> CheckReport:
    """Scan and check every concept: the headless `check-dataset` and the studio's panel share this. With
    `mask_folder` (dataset.masks = "folder"), every training image's mask is checked too. Captions are
    measured against what `family_name`'s text encoders read (with T5 or not: `use_t5`). With `controls` (dataset.kind = "edit") the
    images are edit pairs' targets, and their control images are checked too."""
    report = CheckReport()
    entries: list[ImageEntry] = []
    scans: list[ScanResult] = []
    for concept in concepts:
        try:
            scan = scan_concept_report(concept, base_dir, controls)
        except DatasetError as exc:
            report.problems.append(Problem("error", "folder_missing", concept.path, str(exc),
                                           "fix the concept path in the dataset settings"))
            continue
        report.problems.extend(scan_problems(scan))
        report.problems.extend(leftover_problems(scan))
        entries.extend(scan.entries)
        scans.append(scan)
    problems, facts = _check_entries(entries, resolution, progress, family_name, use_t5)
    report.problems.extend(problems)
    if controls is not None:
        sizes = {path: found.size for path, found in facts.items()}
        # dataset.control_folders are the whole dataset's: a control of another concept's target is no orphan, and
        # one no target takes is named once.
        used = {control for scan in scans for entry in scan.entries for control in entry.controls}
        for scan in scans:
            scan.orphan_controls = [path for path in scan.orphan_controls if path not in used]
            used.update(scan.orphan_controls)
            report.problems.extend(control_problems(scan, sizes))
        report.control_layouts = sorted({scan.control_layout for scan in scans if scan.control_layout})
    if mask_folder is not None:
        report.problems.extend(mask_problems([(e.path, facts[e.path].size) for e in entries if not e.is_class],
                                             mask_folder))
    report.sizes = {path: found.size for path, found in facts.items() if found.size is not None}
    report.images = len(entries)
    return report


def _check_entries(
    entries: Sequence[ImageEntry], resolution: int, progress: Callable[[int, int], None] | None, family_name: str,
    use_t5: bool = False,
) -> tuple[list[Problem], dict[Path, ImageFacts]]:
    facts = inspect_images([e.path for e in entries], progress)
    out: list[Problem] = []
    for entry in entries:
        out.extend(image_problems(entry, facts[entry.path], resolution))
        out.extend(caption_problems(entry, family_name, use_t5))
    out.extend(duplicate_problems(e.path for e in entries))
    out.extend(shared_name_problems(entries))
    return out, facts


def panel_order(problem: Problem) -> tuple[bool, str, str]:
    """Errors first, then by rule and file: the order the studio lists problems in."""
    return problem.severity != "error", problem.code, problem.path


CHECK_CHUNK = 1000  # problems per message, so the window takes them in small bites


def check_worker(conn: Any, concepts: list[dict[str, Any]], base_dir: str | None, dataset: dict[str, Any],
                 nice: int = 10) -> None:
    """Helper-process entry: check the concepts and send the results over `conn` in small messages.

    Messages: ("progress", done, total), ("problems", [Problem fields as tuples]) in panel
    order, ("buckets", [((w, h), images)]), then ("done", image count); ("failed", text) on error.
    `dataset` holds resolution, bucket_step, min_bucket and max_bucket, the project's family and use_t5 (whose text
    encoders the captions are measured against), mask_folder (a path, with dataset.masks = "folder")
    when the masks are checked too, and controls (ControlSettings.to_json, with dataset.kind = "edit")
    when the images are edit pairs. The helper runs
    `nice` steps below the window's priority, so the window's painting comes first.
    """
    if nice and hasattr(os, "nice"):
        os.nice(nice)
    from studio.core.config.schema import ConceptSection
    from studio.core.dataset.buckets import bucket_counts

    try:
        report = check_concepts(
            [ConceptSection.model_validate(c) for c in concepts], Path(base_dir) if base_dir else None,
            dataset["resolution"], lambda done, total: conn.send(("progress", done, total)),
            Path(dataset["mask_folder"]) if dataset.get("mask_folder") else None,
            str(dataset.get("family", DEFAULT_FAMILY)),
            ControlSettings.from_json(dataset["controls"]) if dataset.get("controls") else None,
            bool(dataset.get("use_t5", False)))
        problems = sorted(report.problems, key=panel_order)
        for start in range(0, len(problems), CHECK_CHUNK):
            conn.send(("problems", [(p.severity, p.code, p.path, p.message, p.hint)
                                   for p in problems[start:start + CHECK_CHUNK]]))
        counts = bucket_counts(report.sizes.values(), dataset["resolution"], dataset["bucket_step"],
                               dataset["min_bucket"], dataset["max_bucket"])
        conn.send(("buckets", list(counts.items())))
        conn.send(("done", report.images))
    except (BrokenPipeError, EOFError):
        return  # the studio stopped listening (a new scan started or the window closed)
    except Exception as exc:  # reported in the Problems panel rather than lost in a helper process
        with contextlib.suppress(OSError):
            conn.send(("failed", f"{type(exc).__name__}: {exc}"))

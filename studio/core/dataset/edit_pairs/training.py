"""Whether a run can train its edit pairs: the family conditions on reference images, and every pair is whole.

The preflight (before the Train button starts anything) and the trainer (a bundle run skips the
preflight) ask the same questions and say the same words.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from studio.core.dataset.edit_pairs.pair_checks import control_problems
from studio.core.dataset.edit_pairs.pairs import control_settings
from studio.core.dataset.image_facts import Problem
from studio.core.dataset.scan import scan_concept_report
from studio.core.families.registry import FAMILIES, family

if TYPE_CHECKING:
    from studio.core.config.schema import DatasetSection, TrainConfig


def edit_families() -> str:
    """The models that train edit pairs, for messages: "FLUX.2 [klein] and Qwen-Image-Edit"."""
    return " and ".join(spec.edit_title or spec.title for spec in FAMILIES if spec.trains_edit_pairs)


def edit_training_refusal(config: TrainConfig) -> tuple[str, str] | None:
    """(why, what to do) when `config` cannot train its edit pairs on its family (or its base model); None when it can,
    or when the dataset is not edit pairs and the base model is no edit model (which trains edit pairs only)."""
    spec = family(config.model.family)
    base = config.model.base
    edit_base = spec.edit_model is not None and spec.edit_model(base)
    if config.dataset.kind != "edit":
        if not edit_base:
            return None
        return (f"model.base {base} is {spec.edit_title}, which edits a control image: it trains edit pairs only",
                f"set dataset.kind = \"edit\" with the control images beside the targets (Dataset page), or train "
                f"the images on a {spec.title} base model")
    if spec.trains_edit_pairs and spec.edit_model is not None and not edit_base:
        return (f"dataset.kind = \"edit\": model.base {base} is no {spec.edit_title} model ({spec.title}'s own "
                "pipeline takes no control image)",
                f"train the edit pairs on {spec.edit_title} (model.base: a folder whose model_index.json names its "
                "pipeline, or its hub id), or set dataset.kind = \"images\"")
    if spec.trains_edit_pairs:
        return None
    return (f"dataset.kind = \"edit\": {spec.title} does not train edit pairs (its pipeline does not condition "
            "on a control image)",
            f"train them on {edit_families()} (model.family on the Model & Preset page), or set dataset.kind = "
            "\"images\" to train on the target images and their captions alone")


def control_limit(config: TrainConfig) -> tuple[int, str] | None:
    """(the most control images a pair may have, the model that says so) when the base model is an edit model that
    takes that many (Qwen-Image-Edit: one); None when a pair may have any number."""
    spec = family(config.model.family)
    most = spec.edit_controls(config.model.base)
    if most and spec.edit_model is not None and spec.edit_model(config.model.base):
        return most, spec.edit_title
    return None


def pair_errors(dataset: DatasetSection, base_dir: Path | None = None,
                limit: tuple[int, str] | None = None) -> list[Problem]:
    """The errors of the dataset's edit pairs (a target without its control, a control that cannot be read, a
    control folder that is not there, more controls than the edit model takes: `limit`), each naming its file;
    then pairs whose control counts differ (a batch stacks its pairs' controls, so every pair needs as many)."""
    controls = control_settings(dataset, base_dir)
    if controls is None:
        return []
    errors: list[Problem] = []
    counts: dict[int, Path] = {}
    for concept in dataset.concepts:
        scan = scan_concept_report(concept, base_dir, controls)
        errors += [p for p in control_problems(scan, {}) if p.severity == "error"]
        for entry in scan.entries:
            if entry.controls:
                counts.setdefault(len(entry.controls), entry.path)
            if limit is not None and len(entry.controls) > limit[0]:
                errors.append(Problem("error", "control_count", str(entry.path),
                                      f"this target has {len(entry.controls)} control images, but {limit[1]} edits "
                                      f"{limit[0]}", f"keep {limit[0]} control image per target (one control "
                                      f"folder), or train the pairs on another model"))
    if len(counts) > 1 and not errors:
        (few, first), (many, other) = sorted(counts.items())[0], sorted(counts.items())[-1]
        errors.append(Problem("error", "control_count", str(other),
                              f"this target has {many} control images but {first.name} has {few}",
                              "give every target the same number of control images (a batch stacks them), "
                              "or split the pairs into runs of their own"))
    return errors


def describe(problem: Problem) -> str:
    """One problem as a sentence: the file, what is wrong, what to do."""
    return f"Edit pair {problem.path}: {problem.message}; {problem.hint}."

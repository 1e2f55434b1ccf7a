"""A resumed run goes on with its own settings (RUN_DIR/config.toml), not the project's as they are now."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from studio.core.config.errors import ConfigError
from studio.core.config.files.paths import ResolvedConfig, load_resolved, moved_with_its_run
from studio.core.config.schema import TrainConfig
from studio.core.runs.folders import CONFIG_FILE

# What training.fill_card chose for the run at its start: its config.toml says so, the project never did.
_FILLED = {f"training.{key}" for key in ("batch_size", "gradient_checkpointing", "learning_rate", "text_encoder_lr",
                                         "max_steps", "lr_warmup_steps")}


def _flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def settings_apart(run: TrainConfig, project: TrainConfig) -> list[str]:
    """Each setting the project holds otherwise than the run's config.toml, "key = run's value (the project:
    its value)": a person who changed the learning rate on the Train page and pressed Resume trained on at the
    old one, without a word. Both configs with their paths resolved; the launch's own settings (the
    processes, the port, the run folder's place and name) and what training.fill_card chose are left out."""
    mine, theirs = _flat(run.model_dump(mode="json")), _flat(project.model_dump(mode="json"))
    return [f"{key} = {json.dumps(value)} (the project: {json.dumps(theirs.get(key))})"
            for key, value in mine.items()
            if theirs.get(key) != value and not key.startswith("launch.") and key not in ("output.dir", "output.name")
            and not (run.training.fill_card and key in _FILLED)]


def resume_note(run_dir: Path, project: ResolvedConfig | None) -> str:
    """What a person who edited the project's settings since `run_dir` started should know before the run
    goes on with its own ("" when they agree, or either cannot be read)."""
    if project is None:
        return ""
    try:
        run, _ = moved_with_its_run(load_resolved(run_dir / CONFIG_FILE), run_dir)
    except (ConfigError, OSError):
        return ""
    apart = settings_apart(run, project)
    if not apart:
        return ""
    return (f"{run_dir.name} goes on with its own settings ({run_dir / CONFIG_FILE}), not the project's: "
            f"{'; '.join(apart[:3])}{f'; and {len(apart) - 3} more' if len(apart) > 3 else ''}. To train with "
            "the project's settings, press Train for a new run; to change this run's, edit that file and resume "
            "again.")

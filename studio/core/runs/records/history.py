"""The history of a project's runs, read from the run folders themselves (no database)."""

from __future__ import annotations

import datetime as _dt
import json
import logging
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError

from studio.core.app_words import cli_command
from studio.core.config.errors import ConfigError
from studio.core.config.files.presets import Preset, list_presets, matching_preset
from studio.core.config.files.toml_file import validate_data
from studio.core.runs.event_reading.files import head_events
from studio.core.runs.event_reading.glance import glance_run
from studio.core.runs.folders import (
    CLOUD_FILE,
    CONFIG_FILE,
    EVENTS_FILE,
    REMOTE_FILE,
    is_run_dir,
    list_run_dirs,
    ran_elsewhere,
)
from studio.core.runs.records.phase_times import phase_summary
from studio.core.runs.records.run_import import import_run
from studio.core.runs.records.run_model import Replay, RunModel, replay_run
from studio.core.runs.scheduling.lock import lock_holder, trainer_alive

log = logging.getLogger(__name__)

__all__ = ["RunSummary", "delete_run", "import_run", "list_runs", "newest_run", "replay_to_show", "summarize_run"]

INTERRUPTED = "the events end without run_finished: the trainer was killed or the machine stopped"
FIRST_EVENT_BYTES = 64 << 10  # a run_started with its config, many times over


@dataclass
class RunSummary:
    path: Path
    name: str
    preset: str = ""
    family: str = ""
    method: str = ""
    network: str = "lora"  # method.network: the LyCORIS networks write files for other programs
    dora: bool = False  # method.use_dora: fewer programs read its magnitudes
    status: str = "unknown"  # completed | stopped | failed | running | interrupted | not started | unreadable
    started: _dt.datetime | None = None
    duration_s: float = 0.0
    steps: int = 0
    total_steps: int = 0
    final_loss: float | None = None
    validation_loss: float | None = None  # the last validation event's
    images_per_s: float | None = None  # of step time, from run_finished (trainers since 2026-12)
    phases: str = ""  # where the run's time went, as one line (run_finished's phases)
    outputs: list[str] = field(default_factory=list)
    remote: bool = False
    machine: str = ""  # the machine a run started there runs on (remote.json)
    message: str = ""

    def output_readers(self, output: str) -> str:
        """The programs `output` is for (core/families/readers.py)."""
        from studio.core.families.readers import readers_of

        return readers_of(output, self.family, self.method, self.network, self.dora)

    @property
    def resumable(self) -> bool:
        """Ended before its end here, after a step: a run that failed at step 0 would only start over."""
        return self.status in ("stopped", "failed", "interrupted") and not self.remote and self.steps > 0


def _remote_state(run_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((run_dir / REMOTE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _cloud_cluster(run_dir: Path) -> str:
    """The cluster of a run launched on a cloud that has not been brought back yet (its trainer is there, none
    here); "" for any other run."""
    try:
        data = json.loads((run_dir / CLOUD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    if not isinstance(data, dict) or data.get("state") != "running":
        return ""
    return str(data.get("cluster") or "a cloud cluster")


def _read_config(run_dir: Path) -> dict[str, Any]:
    """The run's config.toml as plain data; {} (and a log line) when it is missing or unreadable."""
    path = run_dir / CONFIG_FILE
    try:
        return tomlkit.parse(path.read_text(encoding="utf-8")).unwrap()
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, TOMLKitError) as exc:
        log.warning("the config of run %s cannot be read (%s); its family and method are not shown", run_dir, exc)
        return {}


def _section(config: dict[str, Any], name: str) -> dict[str, Any]:
    value = config.get(name)
    return value if isinstance(value, dict) else {}


def _started_from_name(name: str) -> _dt.datetime | None:
    try:
        return _dt.datetime.strptime(name[:15], "%Y%m%d-%H%M%S")
    except ValueError:
        return None


def newest_run(runs_dir: str | Path) -> Path | None:
    """The run that began last, as the Runs table puts it first: by the time in its folder's name, or, for a
    folder imported under another name ("results": a zip of a run's files), by its first event."""
    def began(folder: Path) -> float:
        named = _started_from_name(folder.name)
        if named is not None:
            return named.timestamp()
        try:
            first = head_events(folder / EVENTS_FILE, FIRST_EVENT_BYTES)
        except OSError:
            return 0.0
        return first[0].time if first else 0.0

    runs = list_run_dirs(runs_dir)
    return max(runs, key=lambda folder: (began(folder), folder.name)) if runs else None


def summarize_run(run_dir: str | Path, alive: Callable[[Path], bool] = trainer_alive,
                  presets: list[Preset] | None = None) -> RunSummary:
    """One row of the Runs table for a run folder; with `presets`, the preset its config matches."""
    folder = Path(run_dir)
    seen = glance_run(folder)  # a long file is read at its two ends only
    config = seen.started.config if seen.started and seen.started.config else _read_config(folder)
    summary = RunSummary(path=folder, name=folder.name, remote=ran_elsewhere(folder))
    remote_state = _remote_state(folder) if (folder / REMOTE_FILE).exists() else {}
    summary.machine = str(remote_state.get("machine") or "")
    _describe_config(summary, config, presets)
    summary.started = (
        _dt.datetime.fromtimestamp(seen.first_time) if seen.first_time else _started_from_name(folder.name)
    )
    summary.duration_s = seen.duration_s
    summary.steps = seen.step
    summary.total_steps = seen.total_steps
    summary.final_loss = seen.last_loss
    summary.validation_loss = seen.validation_loss
    reader = RunModel(folder)
    reader.started = seen.started  # the trainer's run folder, where its paths begin (a cloud's has another name)
    summary.outputs = [str(reader.resolve(o)) for o in seen.outputs]
    if seen.read_error is not None:
        summary.status = "unreadable"
        summary.message = (f"{EVENTS_FILE} cannot be read ({seen.read_error.strerror or seen.read_error}); "
                           "give your user read access to the run folder")
    elif seen.finished is not None:
        summary.status = seen.finished.status
        summary.message = seen.finished.message
        summary.images_per_s = seen.finished.images_per_s
        summary.phases = phase_summary(seen.finished.phases)
    elif (cluster := _cloud_cluster(folder)) and not (folder / REMOTE_FILE).exists():
        # Its trainer is on the cluster: the events here are a mirror, and end without run_finished until it ends.
        summary.status = "running"
        summary.message = (f"on the cloud cluster {cluster}; its events arrive while the studio follows it, and it "
                           f"is brought back when it ends (else: {cli_command(['cloud', 'pull', cluster])})")
    elif seen.events == 0 and not (folder / EVENTS_FILE).exists():
        live = alive(folder) if not summary.remote else remote_state.get("state") == "running"
        summary.status = "running" if live else "not started"
    elif not summary.remote and alive(folder):
        summary.status = "running"
    elif remote_state.get("state") == "running":  # started there by the studio; its events arrive while followed
        summary.status = "running"
        summary.message = f"on {summary.machine}; open it to follow it live"
    else:
        summary.status = "interrupted"
        summary.message = INTERRUPTED
    if summary.status == "running":
        holder = lock_holder(folder)
        summary.message = f"trained by {holder.describe()}" if holder is not None else summary.message
    if seen.last_error is not None and not summary.message:
        summary.message = seen.last_error.message
    return summary


def replay_to_show(run_dir: str | Path, alive: Callable[[Path], bool] = trainer_alive) -> Replay:
    """A run folder read whole for the Train and Runs pages. A run whose events end without run_finished while
    no trainer works on it (killed, crashed, the machine stopped) ended there: it shows as failed, its clock
    stopped at its last event, with no ETA, and Resume is offered, as the Runs table's "interrupted" says;
    never as training still, its elapsed time growing with every day since."""
    folder = Path(run_dir)
    replay = replay_run(folder)
    model = replay.model
    if model.finished is None and model.event_count and replay.read_error is None:
        remote = (folder / REMOTE_FILE).exists()
        live = _remote_state(folder).get("state") == "running" if remote else alive(folder) or _cloud_cluster(folder)
        if not live:
            model.mark_ended("failed", INTERRUPTED)
    return replay


def _describe_config(summary: RunSummary, data: dict[str, Any], presets: list[Preset] | None) -> None:
    """Family, method and preset of a run. A run's events keep only the settings that differ from the
    defaults, so the defaults fill in what is missing (a LoRA run has no method.kind written); the
    preset is the one named in the config, else the one whose settings the config has."""
    named = data.get("preset")
    summary.preset = str(named.get("name", "")) if isinstance(named, dict) else str(named or "")
    summary.family = str(_section(data, "model").get("family", ""))
    summary.method = str(_section(data, "method").get("kind", ""))
    try:
        config = validate_data({k: v for k, v in data.items() if k != "preset"}, "the run's config")
    except ConfigError:  # a config of another studio version: show what it says
        return
    summary.family, summary.method, summary.network = config.model.family, config.method.kind, config.method.network
    summary.dora = config.method.use_dora
    if presets is not None and not summary.preset:
        summary.preset = matching_preset(config, presets)


def _presets() -> list[Preset]:
    try:
        return list_presets()
    except ConfigError as exc:  # a damaged install: the table goes without its Preset column
        log.warning("presets cannot be read: %s", exc)
        return []


def list_runs(runs_dir: str | Path, alive: Callable[[Path], bool] = trainer_alive) -> list[RunSummary]:
    """Every run under `runs_dir`, newest first. A folder that cannot be read is skipped with a log line."""
    out: list[RunSummary] = []
    folders = list_run_dirs(runs_dir)
    presets = _presets() if folders else []
    for folder in folders:
        try:
            out.append(summarize_run(folder, alive, presets))
        except OSError as exc:
            log.warning("skipping run folder %s: %s", folder, exc)
    out.sort(key=lambda s: (s.started or _dt.datetime.min, s.name), reverse=True)
    return out


def delete_run(run_dir: str | Path) -> str:
    """Move a run folder to the trash ("trash"), or delete it where there is none ("deleted")."""
    folder = Path(run_dir)
    if not is_run_dir(folder):
        raise ValueError(f"{folder} is not a run folder (no {CONFIG_FILE} nor {EVENTS_FILE}); nothing deleted")
    holder = lock_holder(folder)
    if holder is not None:
        raise RuntimeError(f"{folder.name} is being trained by {holder.describe()}; stop it before deleting it")
    if trainer_alive(folder):
        raise RuntimeError(f"{folder.name} is still training; stop it before deleting it")
    try:
        from send2trash import send2trash

        send2trash(str(folder))
        return "trash"
    except ImportError:
        pass
    except OSError as exc:  # no trash on this volume (network share, container): TrashPermissionError too
        if sys.platform == "win32":
            # Windows deletes what it cannot recycle itself: its refusal is a file in use, and deleting
            # anyway removed the rest of the run for good, the file in use left behind.
            raise OSError(f"it could not be moved to the Recycle Bin ({exc.strerror or exc}); a file in it may be "
                          "open in another program (a LoRA loaded in your UI, a sample in an image viewer): close "
                          "that program, then delete the run again") from None
        log.info("no trash for %s (%s); deleting it", folder, exc)
    shutil.rmtree(folder)
    return "deleted"


def delete_runs(runs: list[RunSummary]) -> tuple[list[str], str | None]:
    """Delete `runs` in turn, as delete_run does: what became of each ("NAME (moved to the trash)"; a folder deleted
    or moved outside the studio since the list was read counts as gone), and what stopped the deleting, if
    anything (the runs after it are left)."""
    done: list[str] = []
    for run in runs:
        if not run.path.exists():
            done.append(f"{run.name} (no longer existed)")
            continue
        try:
            how = delete_run(run.path)
        except (OSError, ValueError, RuntimeError) as exc:
            return done, f"Could not delete {run.name}: {exc}"
        done.append(f"{run.name} ({'moved to the trash' if how == 'trash' else 'deleted'})")
    return done, None

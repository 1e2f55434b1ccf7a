"""The history of a project's runs, read from the run folders themselves (no database)."""

from __future__ import annotations

import datetime as _dt
import json
import logging
import shutil
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import tomlkit

from studio.core.config.errors import ConfigError
from studio.core.config.presets import Preset, list_presets, matching_preset
from studio.core.config.toml_file import validate_data
from studio.core.files import atomic_write_text
from studio.core.runs.folders import CONFIG_FILE, EVENTS_FILE, is_run_dir, list_run_dirs
from studio.core.runs.run_model import replay_run

log = logging.getLogger(__name__)

# Written by the studio when it starts a trainer: {"pid": N, "create_time": T}.
PROCESS_FILE = "process.json"
# Present in a run folder that was copied back from another machine.
REMOTE_FILE = "remote.json"
# Without a process file, a run whose events changed this recently counts as running.
RECENT_S = 120.0


@dataclass
class RunSummary:
    path: Path
    name: str
    preset: str = ""
    family: str = ""
    method: str = ""
    status: str = "unknown"  # completed | stopped | failed | running | interrupted | not started
    started: _dt.datetime | None = None
    duration_s: float = 0.0
    steps: int = 0
    total_steps: int = 0
    final_loss: float | None = None
    outputs: list[str] = field(default_factory=list)
    remote: bool = False
    message: str = ""

    @property
    def resumable(self) -> bool:
        return self.status in ("stopped", "failed", "interrupted") and not self.remote


def process_alive(run_dir: Path) -> bool:
    """Is the trainer the studio started for this run still alive?"""
    info_path = run_dir / PROCESS_FILE
    if not info_path.is_file():
        events = run_dir / EVENTS_FILE
        try:
            return time.time() - events.stat().st_mtime < RECENT_S
        except OSError:
            return False
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
        import psutil

        proc = psutil.Process(int(info["pid"]))
        # A recycled pid belongs to another program: its start time differs.
        return abs(proc.create_time() - float(info.get("create_time", 0))) < 1.0 and proc.is_running()
    except Exception:
        return False


def write_process_file(run_dir: str | Path, pid: int) -> None:
    create_time = 0.0
    try:
        import psutil

        create_time = psutil.Process(pid).create_time()
    except Exception:
        pass
    atomic_write_text(Path(run_dir) / PROCESS_FILE, json.dumps({"pid": pid, "create_time": create_time}))


def _read_config(run_dir: Path) -> dict[str, Any]:
    try:
        return tomlkit.parse((run_dir / CONFIG_FILE).read_text(encoding="utf-8")).unwrap()
    except Exception:
        return {}


def _started_from_name(name: str) -> _dt.datetime | None:
    try:
        return _dt.datetime.strptime(name[:15], "%Y%m%d-%H%M%S")
    except ValueError:
        return None


def summarize_run(run_dir: str | Path, alive: Callable[[Path], bool] = process_alive,
                  presets: list[Preset] | None = None) -> RunSummary:
    """One row of the Runs table for a run folder; with `presets`, the preset its config matches."""
    folder = Path(run_dir)
    rep = replay_run(folder)
    model = rep.model
    config = model.started.config if model.started and model.started.config else _read_config(folder)
    summary = RunSummary(path=folder, name=folder.name, remote=(folder / REMOTE_FILE).exists())
    _describe_config(summary, config, presets)
    summary.started = (
        _dt.datetime.fromtimestamp(model.first_time) if model.first_time else _started_from_name(folder.name)
    )
    summary.duration_s = model.elapsed_s()
    summary.steps = model.step
    summary.total_steps = model.total_steps
    summary.final_loss = model.last_loss
    summary.outputs = [str(model.resolve(o)) for o in [*model.outputs, *model.epoch_outputs]]
    if model.finished is not None:
        summary.status = model.finished.status
        summary.message = model.finished.message
    elif model.event_count == 0 and not (folder / EVENTS_FILE).exists():
        summary.status = "running" if not summary.remote and alive(folder) else "not started"
    elif not summary.remote and alive(folder):
        summary.status = "running"
    else:
        summary.status = "interrupted"
        summary.message = "the events end without run_finished: the trainer was killed or the machine stopped"
    if model.errors and not summary.message:
        summary.message = model.errors[-1].message
    return summary


def _describe_config(summary: RunSummary, data: dict[str, Any], presets: list[Preset] | None) -> None:
    """Family, method and preset of a run. A run's events keep only the settings that differ from the
    defaults, so the defaults fill in what is missing (a LoRA run has no method.kind written); the
    preset is the one named in the config, else the one whose settings the config has."""
    named = data.get("preset")
    summary.preset = str(named.get("name", "")) if isinstance(named, dict) else str(named or "")
    summary.family = str(data.get("model", {}).get("family", ""))
    summary.method = str(data.get("method", {}).get("kind", ""))
    try:
        config = validate_data({k: v for k, v in data.items() if k != "preset"}, "the run's config")
    except ConfigError:  # a config of another studio version: show what it says
        return
    summary.family, summary.method = config.model.family, config.method.kind
    if presets is not None and not summary.preset:
        summary.preset = matching_preset(config, presets)


def _presets() -> list[Preset]:
    try:
        return list_presets()
    except ConfigError as exc:  # a damaged install: the table goes without its Preset column
        log.warning("presets cannot be read: %s", exc)
        return []


def list_runs(runs_dir: str | Path, alive: Callable[[Path], bool] = process_alive) -> list[RunSummary]:
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
    if (folder / PROCESS_FILE).exists() and process_alive(folder):
        raise RuntimeError(f"{folder.name} is still training; stop it before deleting it")
    try:
        from send2trash import send2trash

        send2trash(str(folder))
        return "trash"
    except ImportError:
        pass
    except Exception as exc:  # no trash on this volume (network share, container)
        log.info("no trash for %s (%s); deleting it", folder, exc)
    shutil.rmtree(folder)
    return "deleted"


def import_run(source: str | Path, runs_dir: str | Path) -> Path:
    """Bring a run copied back from another machine (a folder or a .zip) into `runs_dir`.

    The copy is marked remote; it is never resumed from here. Returns the new folder.
    """
    src = Path(source)
    target_root = Path(runs_dir)
    target_root.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        if not is_run_dir(src):
            raise ValueError(f"{src} is not a run folder: it has neither {CONFIG_FILE} nor {EVENTS_FILE}")
        dest = _free_name(target_root, src.name)
        if src.resolve() != dest.resolve():
            shutil.copytree(src, dest)
    elif zipfile.is_zipfile(src):
        dest = _extract_zip(src, target_root)
    else:
        raise ValueError(f"{src} is neither a run folder nor a .zip of one")
    atomic_write_text(
        dest / REMOTE_FILE, json.dumps({"source": str(src), "imported": time.time()}, indent=1)
    )
    return dest


def _free_name(root: Path, name: str) -> Path:
    candidate, counter = root / name, 2
    while candidate.exists():
        candidate = root / f"{name}-{counter}"
        counter += 1
    return candidate


def _extract_zip(src: Path, root: Path) -> Path:
    with zipfile.ZipFile(src) as archive:
        names = [n for n in archive.namelist() if not n.endswith("/")]
        marker = next((n for n in names if PurePosixPath(n).name == EVENTS_FILE), None)
        if marker is None:
            raise ValueError(f"{src} holds no {EVENTS_FILE}: it is not a zipped run folder")
        prefix = str(PurePosixPath(marker).parent)
        prefix = "" if prefix == "." else prefix + "/"
        dest = _free_name(root, PurePosixPath(prefix).name or src.stem)
        for name in names:
            if not name.startswith(prefix):
                continue
            rel = PurePosixPath(name[len(prefix):])
            if rel.is_absolute() or ".." in rel.parts:
                raise ValueError(f"{src} contains an unsafe path {name!r}; not imported")
            out = dest.joinpath(*rel.parts)
            out.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(name) as fin, open(out, "wb") as fout:
                shutil.copyfileobj(fin, fout)
    return dest

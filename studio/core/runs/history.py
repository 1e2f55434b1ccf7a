"""The history of a project's runs, read from the run folders themselves (no database)."""

from __future__ import annotations

import datetime as _dt
import json
import logging
import shutil
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError

from studio.core.files import atomic_write_text
from studio.core.runs.folders import CONFIG_FILE, EVENTS_FILE, REMOTE_FILE, is_run_dir, list_run_dirs
from studio.core.runs.lock import lock_holder, trainer_alive
from studio.core.runs.run_model import replay_run

log = logging.getLogger(__name__)


@dataclass
class RunSummary:
    path: Path
    name: str
    preset: str = ""
    family: str = ""
    method: str = ""
    status: str = "unknown"  # completed | stopped | failed | running | interrupted | not started | unreadable
    started: _dt.datetime | None = None
    duration_s: float = 0.0
    steps: int = 0
    total_steps: int = 0
    final_loss: float | None = None
    outputs: list[str] = field(default_factory=list)
    remote: bool = False
    machine: str = ""  # the machine a run started there runs on (remote.json)
    message: str = ""

    @property
    def resumable(self) -> bool:
        return self.status in ("stopped", "failed", "interrupted") and not self.remote


def _remote_state(run_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((run_dir / REMOTE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


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


def summarize_run(run_dir: str | Path, alive: Callable[[Path], bool] = trainer_alive) -> RunSummary:
    """One row of the Runs table for a run folder."""
    folder = Path(run_dir)
    rep = replay_run(folder)
    model = rep.model
    config = model.started.config if model.started and model.started.config else _read_config(folder)
    summary = RunSummary(path=folder, name=folder.name, remote=(folder / REMOTE_FILE).exists())
    remote_state = _remote_state(folder) if summary.remote else {}
    summary.machine = str(remote_state.get("machine") or "")
    preset = config.get("preset")
    summary.preset = str(preset.get("name", "")) if isinstance(preset, dict) else str(preset or "")
    summary.family = str(_section(config, "model").get("family", ""))
    summary.method = str(_section(config, "method").get("kind", ""))
    summary.started = (
        _dt.datetime.fromtimestamp(model.first_time) if model.first_time else _started_from_name(folder.name)
    )
    summary.duration_s = model.elapsed_s()
    summary.steps = model.step
    summary.total_steps = model.total_steps
    summary.final_loss = model.last_loss
    summary.outputs = [str(model.resolve(o)) for o in [*model.outputs, *model.epoch_outputs]]
    if rep.read_error is not None:
        summary.status = "unreadable"
        summary.message = (f"{EVENTS_FILE} cannot be read ({rep.read_error.strerror or rep.read_error}); "
                           "give your user read access to the run folder")
    elif model.finished is not None:
        summary.status = model.finished.status
        summary.message = model.finished.message
    elif model.event_count == 0 and not (folder / EVENTS_FILE).exists():
        live = alive(folder) if not summary.remote else remote_state.get("state") == "running"
        summary.status = "running" if live else "not started"
    elif not summary.remote and alive(folder):
        summary.status = "running"
    elif remote_state.get("state") == "running":  # started there by the studio; its events arrive while followed
        summary.status = "running"
        summary.message = f"on {summary.machine}; open it to follow it live"
    else:
        summary.status = "interrupted"
        summary.message = "the events end without run_finished: the trainer was killed or the machine stopped"
    if summary.status == "running":
        holder = lock_holder(folder)
        summary.message = f"trained by {holder.describe()}" if holder is not None else summary.message
    if model.errors and not summary.message:
        summary.message = model.errors[-1].message
    return summary


def list_runs(runs_dir: str | Path, alive: Callable[[Path], bool] = trainer_alive) -> list[RunSummary]:
    """Every run under `runs_dir`, newest first. A folder that cannot be read is skipped with a log line."""
    out: list[RunSummary] = []
    for folder in list_run_dirs(runs_dir):
        try:
            out.append(summarize_run(folder, alive))
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
        log.info("no trash for %s (%s); deleting it", folder, exc)
    shutil.rmtree(folder)
    return "deleted"


def import_run(source: str | Path, runs_dir: str | Path) -> Path:
    """Bring a run copied back from another machine (a folder or a .zip) into `runs_dir`.

    The copy is marked remote; it is never resumed from here. Returns the new folder. The
    copy is made in a hidden folder and renamed into place once complete and marked, so a
    refused or failed import leaves nothing in the list of runs.
    """
    src = Path(source)
    target_root = Path(runs_dir)
    target_root.mkdir(parents=True, exist_ok=True)
    members: list[tuple[str, PurePosixPath]] | None = None  # of a zip
    if src.is_dir():
        if not is_run_dir(src):
            raise ValueError(f"{src} is not a run folder: it has neither {CONFIG_FILE} nor {EVENTS_FILE}")
        name = src.name
    elif zipfile.is_zipfile(src):
        name, members = _zip_members(src)
    else:
        raise ValueError(f"{src} is neither a run folder nor a .zip of one")
    staging = Path(tempfile.mkdtemp(prefix=".import-", dir=target_root))
    try:
        if members is None:
            shutil.copytree(src, staging, dirs_exist_ok=True)
        else:
            _extract(src, members, staging)
        atomic_write_text(staging / REMOTE_FILE, json.dumps({"source": str(src), "imported": time.time()}, indent=1))
        dest = _free_name(target_root, name)
        staging.rename(dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return dest


def _free_name(root: Path, name: str) -> Path:
    candidate, counter = root / name, 2
    while candidate.exists():
        candidate = root / f"{name}-{counter}"
        counter += 1
    return candidate


def _zip_members(src: Path) -> tuple[str, list[tuple[str, PurePosixPath]]]:
    """(run name, [(member, path inside the run)]) of a zipped run; ValueError before anything is written."""
    with zipfile.ZipFile(src) as archive:
        names = [n for n in archive.namelist() if not n.endswith("/")]
    marker = next((n for n in names if PurePosixPath(n).name == EVENTS_FILE), None)
    if marker is None:
        raise ValueError(f"{src} holds no {EVENTS_FILE}: it is not a zipped run folder")
    prefix = str(PurePosixPath(marker).parent)
    prefix = "" if prefix == "." else prefix + "/"
    members = []
    for name in names:
        if not name.startswith(prefix):
            continue
        rel = PurePosixPath(name[len(prefix):])
        if rel.is_absolute() or ".." in rel.parts or "\\" in name or ":" in rel.parts[0]:
            raise ValueError(f"{src} contains an unsafe path {name!r}; nothing was imported")
        members.append((name, rel))
    return PurePosixPath(prefix).name or src.stem, members


def _extract(src: Path, members: list[tuple[str, PurePosixPath]], dest: Path) -> None:
    with zipfile.ZipFile(src) as archive:
        for name, rel in members:
            out = dest.joinpath(*rel.parts)
            out.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(name) as fin, open(out, "wb") as fout:
                shutil.copyfileobj(fin, fout)

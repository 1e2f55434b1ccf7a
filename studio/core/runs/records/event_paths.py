"""Where a file an event names is in a run folder: never outside it, whoever wrote the events."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from studio.core.containment import OutsideFolderError, contained_path


def path_in_run(run_dir: Path, path: str, trained_in: str = "") -> Path:
    """`path` of an event of the run in `run_dir`; `trained_in`: the run folder its trainer wrote (run_started's,
    on the machine it trained on)."""
    p = Path(path)
    if not p.is_absolute() and not path.startswith("/"):
        try:  # a name from the events file (a remote machine's, perhaps): never beside the run folder
            return contained_path(run_dir, path, "the run's events")
        except OutsideFolderError:
            return run_dir / PurePosixPath(path.replace("\\", "/")).name
    # An absolute name is looked at only under this run folder: one of another folder of this computer,
    # or of a share on the network (\\server\share: opening it sends the person's Windows login), is
    # never opened, shown or exported, whoever wrote the events (a run copied from elsewhere, its machine).
    for root in (run_dir, Path(os.path.realpath(run_dir))):
        try:
            inside_run = p.relative_to(root)
        except ValueError:
            continue
        try:
            return contained_path(run_dir, inside_run.as_posix(), "the run's events")
        except OutsideFolderError:
            break
    # A path of the machine the run trained on (a remote run, a cloud's, a folder copied back): the same file
    # here, under the trainer's own run folder (its run_started names it; a cloud run's folder here has
    # another name than there), or under a folder of this run folder's name.
    parts = PurePosixPath(path.replace("\\", "/")).parts
    trained_in = trained_in.replace("\\", "/")
    base = PurePosixPath(trained_in).parts if trained_in else ()
    if base and len(parts) > len(base) and parts[: len(base)] == base:
        try:
            return contained_path(run_dir, "/".join(parts[len(base):]), "the run's events")
        except OutsideFolderError:
            pass
    inside = [i for i, part in enumerate(parts[:-1]) if part == run_dir.name]
    if inside:
        try:
            return contained_path(run_dir, "/".join(parts[inside[-1] + 1:]), "the run's events")
        except OutsideFolderError:
            pass
    return run_dir / PurePosixPath(path.replace("\\", "/")).name

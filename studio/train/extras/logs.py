"""output.log_to: rank 0's reporter passes every event it writes to TensorBoard and/or W&B too."""

from __future__ import annotations

from pathlib import Path

from studio.core.config.schema import TrainConfig
from studio.core.runs.records.run_model import RunModel
from studio.core.tracking.base import LOGGING_EXTRA
from studio.core.tracking.records import EventMirror, Logger, MissingLogger, open_logger
from studio.core.tracking.tensorboard import TENSORBOARD_DIR, log_folder_problem
from studio.train.errors import TrainError
from studio.train.progress.reporting import Reporter


def attach_loggers(reporter: Reporter, config: TrainConfig, run_dir: Path) -> None:
    """Open the loggers of output.log_to on the rank that writes events; a missing package (or a TensorBoard
    folder that cannot be made) is a config error that says how to install it (or which folder, and what to
    do), before anything trains."""
    if not reporter.active or not config.output.log_to:
        return
    loggers: dict[str, Logger] = {}
    try:
        for name in dict.fromkeys(config.output.log_to):
            # Named as the studio names the run (its folder: the time it began and output.name), so runs of one
            # output.name ("run" unless set) are told apart in W&B's run list as in the studio's.
            loggers[name] = open_logger(name, run_dir, run_dir.name, reporter.warn)
    except MissingLogger as exc:
        _close(loggers)
        raise TrainError("config", f"output.log_to asks for {exc.name}: {exc}",
                         f"pip install '{LOGGING_EXTRA}' in the training environment, "
                         f"or remove {exc.name!r} from output.log_to") from None
    except OSError as exc:  # its folder cannot be made or written
        _close(loggers)
        raise _folder_error(run_dir, exc) from None
    reporter.mirrors.append(EventMirror(loggers, RunModel(run_dir).resolve, lambda message: reporter.warn(message)))


def _close(loggers: dict[str, Logger]) -> None:
    for logger in loggers.values():
        logger.close()


def _folder_error(run_dir: Path, exc: OSError) -> TrainError:
    """TensorBoard's log folder cannot be made: say which folder, why and what to do."""
    logdir = run_dir / TENSORBOARD_DIR
    why, hint = log_folder_problem(logdir) or (
        f"{exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else ""),
        f"check that {run_dir} is a folder you may write to, or remove \"tensorboard\" from output.log_to")
    return TrainError("config", f"output.log_to asks for TensorBoard, but its log folder {logdir} cannot be made: "
                      f"{why}", hint, path=str(logdir))

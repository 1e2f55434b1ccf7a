"""TensorBoard event files written with TensorBoard's own writer (no TensorFlow, no torch): scalars as
simple values, sample images as PNG summaries. TensorBoard's reader reads them back."""

from __future__ import annotations

import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from studio.core.tracking.base import MissingLogger, Record

if TYPE_CHECKING:
    from studio.core.config.schema import TrainConfig

TENSORBOARD_DIR = "tensorboard"
EVENT_FILE_PREFIX = "events.out.tfevents."  # the only files TensorBoard's writer makes


def _png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's header; (0, 0) for another format."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        return struct.unpack(">II", data[16:24])
    return 0, 0


def log_folder_problem(logdir: Path) -> tuple[str, str] | None:
    """(why, what to do) when TensorBoard's folder `logdir` cannot be made or written; None when it can."""
    existing = logdir
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        return (f"{existing} is a file, not a folder", f"move or rename the file {existing}, or remove "
                "\"tensorboard\" from output.log_to")
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".studio-write-test-"):
            pass
    except OSError as exc:
        return (f"{existing} cannot be written ({exc.strerror or exc})", f"make {existing} writable for you, or "
                "remove \"tensorboard\" from output.log_to")
    return None


def check_log_folder(config: TrainConfig, run_dir: Path) -> str | None:
    """Why the TensorBoard log folder of output.log_to cannot be made in `run_dir` (a run to resume), or None."""
    if "tensorboard" not in config.output.log_to:
        return None
    logdir = run_dir / TENSORBOARD_DIR
    problem = log_folder_problem(logdir)
    return f"the TensorBoard log folder {logdir} cannot be made: {problem[0]}; {problem[1]}" if problem else None


class TensorBoardLogger:
    def __init__(self, logdir: Path, flush_secs: int = 2) -> None:
        try:
            from tensorboard.compat.proto import event_pb2, summary_pb2
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ImportError:
            raise MissingLogger("tensorboard") from None
        logdir.mkdir(parents=True, exist_ok=True)
        self.logdir = logdir
        # Files of the legs before (a resumed run): they may hold no start mark (written before the studio wrote
        # them), and TensorBoard takes the first mark it reads as the run's beginning, not as a restart.
        self._continues = any(entry.name.startswith(EVENT_FILE_PREFIX) for entry in logdir.iterdir())
        self._event, self._summary = event_pb2, summary_pb2
        self.writer = EventFileWriter(str(logdir), flush_secs=flush_secs)

    def write(self, record: Record, when: float | None = None) -> None:
        summary = self._summary.Summary
        values = [summary.Value(tag=tag, simple_value=value) for tag, value in record.scalars.items()]
        for tag, path in record.images:
            try:
                data = path.read_bytes()
            except OSError:
                continue  # a sample not copied back: the scalars still count
            width, height = _png_size(data)
            values.append(summary.Value(tag=tag, image=summary.Image(
                height=height, width=width, colorspace=3, encoded_image_string=data)))
        if record.config is not None:
            import json

            text = self._summary.SummaryMetadata(plugin_data=self._summary.SummaryMetadata.PluginData(
                plugin_name="text"))
            from tensorboard.compat.proto import tensor_pb2, tensor_shape_pb2, types_pb2

            tensor = tensor_pb2.TensorProto(
                dtype=types_pb2.DT_STRING, string_val=[("```\n" + json.dumps(record.config, indent=2) + "\n```")
                                                       .encode()],
                tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=1)]))
            values.append(summary.Value(tag="config", metadata=text, tensor=tensor))
        if record.config is not None:
            # A leg starts (RunStarted): a resumed one trains again from its checkpoint's step, and what the leg
            # before logged after it was lost with it. TensorBoard's restart mark drops those points, so the loss
            # and learning-rate curves never turn back on themselves nor show a step twice (as the studio's own).
            start = self._event.SessionLog(status=self._event.SessionLog.START)
            for _mark in range(2 if self._continues else 1):
                self.writer.add_event(self._event.Event(wall_time=when or time.time(), step=record.step + 1,
                                                        session_log=start))
            self._continues = False
        if values:
            self.writer.add_event(self._event.Event(wall_time=when or time.time(), step=record.step,
                                                    summary=summary(value=values)))
        if record.finished:
            self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def export_run(run_dir: Path, into: Path | None = None,
               progress: Callable[[int, int], None] | None = None) -> tuple[Path, int]:
    """TensorBoard files of a finished (or running) run from its events.jsonl: (log folder, records written).

    The folder is `into/<run folder name>` (default RUN_DIR/tensorboard), written anew each time, so
    several runs exported into one folder appear side by side in TensorBoard (`tensorboard --logdir runs`
    shows the runs of a project: each keeps its files in RUN_DIR/tensorboard, as a live log does).
    The events are streamed a piece at a time (a gigabyte file is never held); `progress(bytes read,
    file size)` follows the reading.
    """
    import shutil

    from studio.core.runs.event_reading.files import stream_events
    from studio.core.runs.events import RunStarted
    from studio.core.runs.folders import EVENTS_FILE
    from studio.core.runs.records.run_model import RunModel
    from studio.core.runs.scheduling.lock import trainer_alive
    from studio.core.tracking.base import record_of

    events = run_dir / EVENTS_FILE
    if not events.is_file():
        raise FileNotFoundError(f"{run_dir} holds no {EVENTS_FILE}: it is not a run folder")
    logdir = (into / run_dir.name) if into is not None else run_dir / TENSORBOARD_DIR
    if into is None and logdir.exists() and trainer_alive(run_dir):
        # Its trainer logs there itself (output.log_to): written anew, the live file would go and its later
        # points with it.
        raise FileExistsError(f"{run_dir.name} is training and writes {logdir} itself: view it there "
                              f"(tensorboard --logdir {logdir}), or export into another folder with --into; "
                              "nothing was deleted")
    if logdir.exists() or logdir.is_symlink():
        # Written anew, but only over TensorBoard's own files: `--into runs` names the run folder itself, and
        # another folder there of the run's name may hold anything.
        ours = logdir.is_dir() and not logdir.is_symlink() and all(
            entry.is_file() and entry.name.startswith(EVENT_FILE_PREFIX) for entry in logdir.iterdir())
        if not ours:
            raise FileExistsError(f"{logdir} exists and holds more than TensorBoard's files (it is not a folder "
                                  "this export wrote): choose another --into folder, or move it away; nothing "
                                  "was deleted")
        shutil.rmtree(logdir)
    reader = RunModel(run_dir)  # sample paths of another machine found in this folder, never outside
    logger = TensorBoardLogger(logdir)
    count = 0
    try:
        for event in stream_events(events, progress):
            if isinstance(event, RunStarted):
                reader.started = event  # the trainer's run folder, where its paths begin
            record = record_of(event, reader.resolve)
            if record is not None:
                logger.write(record, when=event.time)
                count += 1
    finally:
        logger.close()
    return logdir, count

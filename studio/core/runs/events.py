"""The event protocol between the trainer and everything that watches a run.

Rank 0 appends one JSON object per line to `RUN_DIR/events.jsonl`. Every event has
`v` (protocol version), `type` and `time` (UNIX seconds). The file is the single
source of truth: the GUI reads a local run exactly as it reads one copied back
from a remote machine.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from studio.core.protocol.jsonlines import Message, Protocol, UnknownMessage, loads_line
from studio.core.runs.event_writer import EventWriter as EventWriter  # the writer lives beside the protocol

PROTOCOL_VERSION = 1

__all__ = ["PROTOCOL_VERSION", "loads_line"]


@dataclass
class Event(Message):
    type: ClassVar[str] = "event"
    time: float = field(default_factory=time.time, kw_only=True)

    def to_dict(self) -> dict[str, Any]:
        return {"v": PROTOCOL_VERSION, "type": self.type, **asdict(self)}


@dataclass
class RankMemory:
    """Memory of one rank in MB: CUDA allocated/reserved/peak, or RSS on the CPU."""

    rank: int
    device: str
    allocated_mb: float | None = None
    reserved_mb: float | None = None
    peak_mb: float | None = None
    rss_mb: float | None = None


@dataclass
class RunStarted(Event):
    type: ClassVar[str] = "run_started"
    config: dict[str, Any]
    world_size: int
    total_steps: int
    devices: list[str]
    effective_batch: int = 1
    num_images: int = 0
    resumed_from_step: int = 0
    run_dir: str = ""
    studio_version: str = ""
    # launch.strategy = "fsdp": processes, the trained parameters each rank holds, units per module.
    sharding: dict[str, Any] = field(default_factory=dict)


@dataclass
class Phase(Event):
    type: ClassVar[str] = "phase"
    name: Literal["loading", "caching", "compiling", "training", "sampling", "saving", "class_images"] | str
    done: int = 0
    total: int = 0
    message: str = ""
    # Seconds the phase took, on the event that ends it (done == total); None before or when not timed.
    elapsed_s: float | None = None


@dataclass
class Step(Event):
    type: ClassVar[str] = "step"
    step: int
    epoch: int  # counted from 0 (the data order's index); shown to people from 1
    loss: float
    lr: float
    # Images per second of the whole run (every rank), over the last ~20 steps.
    samples_per_s: float = 0.0
    eta_s: float | None = None
    memory: list[RankMemory] = field(default_factory=list)
    # Model TFLOP/s per GPU over the same window, and that as a fraction of the GPU's bf16/fp16 dense
    # peak (MFU); None where the model's FLOPs or the GPU's peak are not known (the CPU, tiny models).
    tflops: float | None = None
    mfu: float | None = None


@dataclass
class Sample(Event):
    type: ClassVar[str] = "sample"
    step: int
    images: list[str]
    prompts: list[str]
    controls: list[str] = field(default_factory=list)  # edit samples: the control images they edit


@dataclass
class Checkpoint(Event):
    type: ClassVar[str] = "checkpoint"
    step: int
    path: str


@dataclass
class RunWarning(Event):
    type: ClassVar[str] = "warning"
    message: str
    path: str | None = None
    hint: str = ""


@dataclass
class Error(Event):
    type: ClassVar[str] = "error"
    # "sample": one sample image failed; the run goes on (the only kind that does not end it).
    kind: Literal["oom", "config", "data", "crash", "nan", "model", "checkpoint", "disk_full", "sample"] | str
    message: str
    hint: str = ""
    path: str | None = None
    needed_bytes: int | None = None  # disk_full: about how much free space the write needed


@dataclass
class PhaseTime:
    """Seconds one part of a run took in all (loading, text encoding, caching latents, steps, sampling, ...)."""

    name: str
    seconds: float


@dataclass
class RunFinished(Event):
    type: ClassVar[str] = "run_finished"
    status: Literal["completed", "stopped", "failed"] | str
    outputs: list[str] = field(default_factory=list)
    step: int = 0
    message: str = ""
    # Sum of the trained weights on each rank: equal numbers mean the ranks stayed in step.
    weight_checksums: list[float] = field(default_factory=list)
    # Added 2026-12 (older trainers leave them out; older readers ignore them): where the run's time
    # went, in the order the parts first came, adding up to the trainer's wall time; and the images
    # trained per second of step time (every rank, compiling left out).
    phases: list[PhaseTime] = field(default_factory=list)
    images_per_s: float | None = None
    # Optimizer steps of this leg that fp16's gradient scaler skipped (inf or NaN gradients: the weights stayed
    # as they were).
    skipped_steps: int = 0


@dataclass
class EpochSaved(Event):
    """The trained weights as they were at the end of an epoch (output.save_every_n_epochs)."""

    type: ClassVar[str] = "epoch_saved"
    step: int
    epoch: int
    outputs: list[str] = field(default_factory=list)


@dataclass
class Validation(Event):
    """The loss of the held-out images at fixed timesteps and fixed noise (comparable run to run)."""

    type: ClassVar[str] = "validation"
    step: int
    loss: float
    images: int = 0  # held-out images measured
    timesteps: list[float] = field(default_factory=list)  # noise levels, as fractions of the schedule


EVENT_TYPES: dict[str, type[Event]] = {
    cls.type: cls
    for cls in (RunStarted, Phase, Step, Sample, Checkpoint, EpochSaved, RunWarning, Error, RunFinished,
                Validation)
}


# A line whose type this version does not know (a newer trainer wrote it).
UnknownEvent = UnknownMessage

# A diverged step may carry no number (older trainers wrote null); the plots show a gap.
EVENTS = Protocol("event", EVENT_TYPES.values(), nullable=[(Step, "loss"), (Step, "lr")])


def event_from_dict(data: Any) -> Event:
    """A decoded JSON object -> typed event (ValueError for garbage, UnknownEvent for new types).

    Every field is checked against its type, so a wrong-typed line is garbage here and never
    breaks a reader later. Keys this version does not know are ignored, so a newer trainer's
    extra fields do no harm.
    """
    event = EVENTS.from_dict(data)
    assert isinstance(event, Event)
    return event


def parse_event(line: str | bytes) -> Event:
    """One JSON line -> typed event. Raises ValueError for garbage, UnknownEvent for new types."""
    return event_from_dict(loads_line(line))


def read_events(path: str | Path) -> list[Event]:
    """Every event of a finished file; garbage and unknown lines are skipped."""
    out: list[Event] = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(parse_event(line))
            except (ValueError, UnknownEvent):
                continue
    return out

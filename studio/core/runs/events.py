"""The event protocol between the trainer and everything that watches a run.

Rank 0 appends one JSON object per line to `RUN_DIR/events.jsonl`. Every event has
`v` (protocol version), `type` and `time` (UNIX seconds). The file is the single
source of truth: the GUI reads a local run exactly as it reads one copied back
from a remote machine.
"""

from __future__ import annotations

import json
import time
import types
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Literal, Union, get_args, get_origin, get_type_hints

from studio.core.runs.event_writer import EventWriter as EventWriter  # the writer lives beside the protocol

PROTOCOL_VERSION = 1

_fast_loads: Callable[[bytes | str], Any] | None
try:  # several times faster on long replays; the standard library does the same job
    from orjson import loads as _fast_loads
except ImportError:  # pragma: no cover - depends on the environment
    _fast_loads = None


def loads_line(line: bytes | str) -> Any:
    """One JSON line decoded; ValueError for anything that is not JSON a reader can hold.

    orjson refuses the lone surrogates that undecodable file names became in older files;
    the standard library reads them. Absurdly deep nesting is garbage, not a crash.
    """
    if _fast_loads is not None:
        try:
            return _fast_loads(line)
        except ValueError:
            pass
    try:
        return json.loads(line)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _printable(value: Any) -> Any:
    """Strings with undecodable bytes (a file name that is not UTF-8) with those bytes written as
    \\xNN, so that every reader can decode the line; other values unchanged."""
    if isinstance(value, str):
        try:
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:  # a surrogate that no file name decoding makes
            return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {_printable(k): _printable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_printable(v) for v in value]
    return value


@dataclass
class Event:
    type: ClassVar[str] = "event"
    time: float = field(default_factory=time.time, kw_only=True)

    def to_json(self) -> str:
        data = {"v": PROTOCOL_VERSION, "type": self.type, **asdict(self)}
        text = json.dumps(data, separators=(",", ":"), allow_nan=False, default=str)
        if "\\ud" in text:  # a surrogate escape: maybe an undecodable file name (rare; checked cheaply)
            text = json.dumps(_printable(data), separators=(",", ":"), allow_nan=False, default=str)
        return text


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
class RunFinished(Event):
    type: ClassVar[str] = "run_finished"
    status: Literal["completed", "stopped", "failed"] | str
    outputs: list[str] = field(default_factory=list)
    step: int = 0
    message: str = ""
    # Sum of the trained weights on each rank: equal numbers mean the ranks stayed in step.
    weight_checksums: list[float] = field(default_factory=list)


@dataclass
class EpochSaved(Event):
    """The trained weights as they were at the end of an epoch (output.save_every_n_epochs)."""

    type: ClassVar[str] = "epoch_saved"
    step: int
    epoch: int
    outputs: list[str] = field(default_factory=list)


EVENT_TYPES: dict[str, type[Event]] = {
    cls.type: cls
    for cls in (RunStarted, Phase, Step, Sample, Checkpoint, EpochSaved, RunWarning, Error, RunFinished)
}


class UnknownEvent(Exception):
    """A line whose type this version does not know (a newer trainer wrote it)."""


Check = Callable[[Any], bool]


def _check_for(annotation: Any) -> Check:
    """Whether a decoded JSON value fits a field's type (ints count as floats; bools as neither)."""
    origin = get_origin(annotation)
    if annotation is Any:
        return lambda v: True
    if annotation is float:
        return lambda v: isinstance(v, int | float) and not isinstance(v, bool)
    if annotation is int:
        return lambda v: isinstance(v, int) and not isinstance(v, bool)
    if annotation is str:
        return lambda v: isinstance(v, str)
    if annotation is bool:
        return lambda v: isinstance(v, bool)
    if annotation is type(None):
        return lambda v: v is None
    if annotation is RankMemory:
        return lambda v: isinstance(v, dict)
    if origin is Literal:
        allowed = get_args(annotation)
        return lambda v: v in allowed
    if origin in (Union, types.UnionType):
        options = [_check_for(a) for a in get_args(annotation)]
        return lambda v: any(check(v) for check in options)
    if origin is list:
        (item,) = get_args(annotation)
        check_item = _check_for(item)
        return lambda v: isinstance(v, list) and all(check_item(x) for x in v)
    if origin is dict:
        return lambda v: isinstance(v, dict)
    raise TypeError(f"no check for {annotation!r}")  # a new field type: teach _check_for


def _field_checks(cls: type) -> dict[str, Check]:
    hints = get_type_hints(cls)
    return {f.name: _check_for(hints[f.name]) for f in fields(cls)}


_CHECKS: dict[type, dict[str, Check]] = {cls: _field_checks(cls) for cls in (*EVENT_TYPES.values(), RankMemory)}
# A diverged step may carry no number (older trainers wrote null); the plots show a gap.
_NULLABLE = {(Step, "loss"), (Step, "lr")}


def _checked(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """The fields of `cls` in `data`, each checked against its type (ValueError names the first bad one)."""
    checks = _CHECKS[cls]
    kwargs = {k: v for k, v in data.items() if k in checks}
    for key, value in kwargs.items():
        if not checks[key](value) and not (value is None and (cls, key) in _NULLABLE):
            raise ValueError(f"{getattr(cls, 'type', cls.__name__)} event: {key} = {str(value)[:40]!r} has the wrong type")
    return kwargs


def event_from_dict(data: Any) -> Event:
    """A decoded JSON object -> typed event (ValueError for garbage, UnknownEvent for new types).

    Every field is checked against its type, so a wrong-typed line is garbage here and never
    breaks a reader later. Keys this version does not know are ignored, so a newer trainer's
    extra fields do no harm.
    """
    if not isinstance(data, dict) or "type" not in data:
        raise ValueError("not an event object")
    kind = data["type"]
    cls = EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise UnknownEvent(str(kind))
    kwargs = _checked(cls, data)
    try:
        if cls is Step:
            kwargs["memory"] = [RankMemory(**_checked(RankMemory, m)) for m in kwargs.get("memory") or []]
        return cls(**kwargs)
    except TypeError as exc:
        raise ValueError(f"{kind} event is missing or has bad fields: {exc}") from None


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

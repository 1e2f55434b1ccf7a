"""Step events with images/s, TFLOP/s and MFU, and the compiling phase: new optional fields that old
event files do without, read the same by the bulk replay and one event at a time."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from studio.core.runs.events import Phase, Step, parse_event
from studio.core.runs.records.run_model import EventTail, RunModel, replay
from tests.core.runs.conftest import write_events

# A step line as trainers wrote it before these fields existed.
OLD_STEP = '{"v":1,"type":"step","time":1001.0,"step":1,"epoch":0,"loss":0.5,"lr":0.0001,"samples_per_s":2.5,' \
           '"eta_s":9.0,"memory":[{"rank":0,"device":"cpu","rss_mb":400.0}]}'


def _steps() -> list[Step]:
    return [Step(step=i, epoch=0, loss=1.0 / i, lr=1e-4, samples_per_s=4.0 + i, eta_s=1.0, tflops=100.0 + i,
                 mfu=round(0.1 + i / 100, 2), time=1000.0 + i) for i in range(2, 6)]


def test_old_step_lines_still_replay(tmp_path: Path) -> None:
    event = parse_event(OLD_STEP)
    assert isinstance(event, Step) and event.tflops is None and event.mfu is None
    second = OLD_STEP.replace('"time":1001.0,"step":1', '"time":1002.0,"step":2')
    (tmp_path / "events.jsonl").write_text(OLD_STEP + "\n" + second + "\n", encoding="utf-8")
    model = replay(tmp_path)
    # The first step is timed with the warm-up: its speed is left unknown.
    assert model.step == 2 and np.array_equal(model.samples_per_s.view(), [np.nan, 2.5], equal_nan=True)
    assert np.isnan(model.mfu.view()).all() and model.speed() == (2.5, None, None)


def test_new_fields_round_trip_and_older_readers_can_ignore_them() -> None:
    step = _steps()[0]
    data = json.loads(step.to_json())
    assert data["tflops"] == 102.0 and data["mfu"] == 0.12
    assert parse_event(step.to_json()) == step
    phase = Phase(name="compiling", done=1, total=1, message="compiled", elapsed_s=41.5, time=1.0)
    assert parse_event(phase.to_json()) == phase


def test_bulk_and_single_replay_agree_on_speed(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    write_events(path, [Phase(name="compiling", done=0, total=1, time=1000.0),
                        Phase(name="compiling", done=1, total=1, elapsed_s=41.5, time=1001.5), *_steps()])
    path.write_text(OLD_STEP + "\n" + path.read_text(encoding="utf-8"), encoding="utf-8")
    bulk = replay(tmp_path)
    single = RunModel()
    single.apply_all(EventTail(path).finish())
    for model in (bulk, single):
        assert model.compile_s == 41.5
        assert model.speed() == (9.0, 105.0, 0.15)
        assert np.isnan(model.tflops.view()[0]) and model.tflops.view()[1:].tolist() == [102.0, 103.0, 104.0, 105.0]
    assert np.array_equal(bulk.mfu.view(), single.mfu.view(), equal_nan=True)


def test_the_compiling_phase_is_a_status_until_the_next_step() -> None:
    model = RunModel()
    model.apply(Phase(name="compiling", done=0, total=1, message="compiling 2 blocks", time=1.0))
    assert model.status == "compiling" and model.compile_s is None
    model.apply(Phase(name="compiling", done=1, total=1, elapsed_s=12.0, time=13.0))
    model.apply(_steps()[0])
    assert model.status == "training" and model.compile_s == 12.0

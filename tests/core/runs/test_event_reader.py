"""EventTail reads what a trainer appends; RunModel shows it."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pytest

from studio.core.runs.events import (
    Error,
    Phase,
    RunFinished,
    RunStarted,
    RunWarning,
    Sample,
    Step,
    Validation,
)
from studio.core.runs.records.run_model import EventTail, RunModel, replay, replay_run
from tests.core.runs.conftest import step_event, write_events


def test_poll_reads_only_new_complete_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    tail = EventTail(path)
    assert tail.poll() == []  # no file yet: nothing, no error
    write_events(path, [step_event(1), step_event(2)])
    assert [e.step for e in tail.poll()] == [1, 2]  # type: ignore[attr-defined]
    assert tail.poll() == []
    write_events(path, [step_event(3)])
    assert [e.step for e in tail.poll()] == [3]  # type: ignore[attr-defined]


def test_partial_last_line_waits_for_its_end(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    line = step_event(7).to_json()
    write_events(path, [step_event(6)], tail=line[:20])
    tail = EventTail(path)
    assert [e.step for e in tail.poll()] == [6]  # type: ignore[attr-defined]
    assert tail.pending_bytes == 20
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line[20:] + "\n")
    events = tail.poll()
    assert len(events) == 1 and isinstance(events[0], Step) and events[0].step == 7
    assert tail.garbage_lines == 0


def test_garbage_lines_are_counted_and_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "events.jsonl"
    write_events(path, [step_event(1)], tail='not json\n{"no_type": 1}\n[1,2]\n\xff\xfe garbage\n')
    write_events(path, [step_event(2)])
    tail = EventTail(path)
    with caplog.at_level(logging.WARNING):
        events = tail.poll()
    assert [e.step for e in events] == [1, 2]  # type: ignore[attr-defined]
    assert tail.garbage_lines == 4
    assert "line 2 is not an event" in caplog.text


def test_unknown_types_warn_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "events.jsonl"
    newer = '{"v":2,"type":"hologram","time":1}\n'
    write_events(path, [step_event(1)], tail=newer * 3)
    with caplog.at_level(logging.WARNING):
        events = EventTail(path).poll()
    assert len(events) == 1
    assert caplog.text.count("unknown event type 'hologram'") == 1


def test_truncation_restarts_and_flags(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    write_events(path, [step_event(i) for i in range(1, 6)])
    tail = EventTail(path)
    assert len(tail.poll()) == 5
    path.write_text(step_event(1).to_json() + "\n")  # a new run wrote over the file
    events = tail.poll()
    assert tail.restarted and tail.restarts == 1
    assert [e.step for e in events] == [1]  # type: ignore[attr-defined]
    assert not (tail.poll() or tail.restarted)


def test_replaced_file_is_detected_by_inode(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    write_events(path, [step_event(1)])
    tail = EventTail(path)
    tail.poll()
    other = tmp_path / "other.jsonl"
    write_events(other, [step_event(i) for i in range(10, 14)])  # longer than the old file
    os.replace(other, path)
    events = tail.poll()
    assert tail.restarted
    assert [e.step for e in events] == [10, 11, 12, 13]  # type: ignore[attr-defined]


def test_max_bytes_bounds_one_poll(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    write_events(path, [step_event(i) for i in range(1, 101)])
    tail = EventTail(path, max_bytes=2000)
    first = tail.poll()
    assert 0 < len(first) < 100 and tail.has_more()
    rest = tail.finish()
    assert len(first) + len(rest) == 100


def test_run_model_follows_status_and_numbers() -> None:
    model = RunModel()
    assert model.status == "preparing"
    model.apply(Phase(name="caching", done=1, total=4, time=1.0))
    assert model.status == "caching"
    model.apply(step_event(1, loss=0.9))
    model.apply(step_event(2, loss=0.7))
    assert (model.status, model.step, model.last_loss) == ("training", 2, 0.7)
    assert model.loss.view().tolist() == [0.9, 0.7]
    assert model.memory[0].allocated.view().tolist() == [101.0, 102.0]
    model.apply(Phase(name="sampling", time=1004.0))
    assert model.status == "sampling"
    model.apply(Sample(step=2, images=["samples/a.png"], prompts=["a cat"], time=1005.0))
    assert model.samples[0].prompt == "a cat"
    model.apply(Error(kind="oom", message="CUDA out of memory", hint="lower the batch", time=1006.0))
    model.apply(RunFinished(status="failed", step=2, time=1007.0))
    assert model.status == "failed" and model.errors[0].hint == "lower the batch"
    model.mark_ended("stopped", "killed")  # the finish event already said what happened
    assert model.status == "failed"


def test_cpu_memory_uses_rss() -> None:
    from studio.core.runs.events import RankMemory

    model = RunModel()
    model.apply(Step(step=1, epoch=1, loss=0.1, lr=0.1, memory=[RankMemory(rank=1, device="cpu", rss_mb=321.0)]))
    assert model.memory[1].allocated.view().tolist() == [321.0]


def test_crash_without_finish_is_marked() -> None:
    model = RunModel()
    model.apply(step_event(1))
    model.mark_ended("failed", "the trainer exited with code -9")
    assert model.status == "failed" and "code -9" in model.message


def test_replay_of_finished_run(finished_run: Path) -> None:
    model = replay(finished_run)
    assert model.status == "finished"
    assert model.step == 3 and model.total_steps == 3
    assert model.elapsed_s() == pytest.approx(10.0)
    assert model.resolve(model.outputs[0]) == finished_run / "output" / "pytorch_lora_weights.safetensors"


def test_replay_keeps_a_complete_last_line_without_newline(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    write_events(path, [step_event(1)], tail=step_event(2).to_json())
    rep = replay_run(tmp_path)
    assert rep.events == 2 and rep.garbage_lines == 0


def test_replay_counts_a_torn_last_line_as_garbage(tmp_path: Path) -> None:
    write_events(tmp_path / "events.jsonl", [step_event(1)], tail=step_event(2).to_json()[:15])
    rep = replay_run(tmp_path)
    assert rep.events == 1 and rep.garbage_lines == 1 and rep.model.step == 1


def test_replay_of_missing_folder_is_empty(tmp_path: Path) -> None:
    model = replay(tmp_path / "gone")
    assert model.event_count == 0 and model.status == "preparing"


def test_bulk_step_path_builds_the_same_model_as_one_event_at_a_time(tmp_path: Path) -> None:
    from studio.core.runs.events import RankMemory

    steps = [
        Step(step=i, epoch=1, loss=None if i == 3 else 1.0 / i, lr=1e-4, samples_per_s=2.0, eta_s=float(9 - i),  # type: ignore[arg-type]
             memory=[RankMemory(rank=0, device="cuda:0", allocated_mb=100.0 + i, peak_mb=150.0),
                     RankMemory(rank=1, device="cpu", rss_mb=300.0 + i)],
             time=1000.0 + i)
        for i in range(1, 9)
    ]
    write_events(tmp_path / "events.jsonl", [*steps[:4], Phase(name="sampling", time=1004.5), *steps[4:]])
    bulk = replay(tmp_path)
    single = RunModel()
    single.apply_all(EventTail(tmp_path / "events.jsonl").finish())  # typed events, one by one
    for model in (bulk, single):
        assert model.event_count == 9 and model.step == 8 and model.eta_s == 1.0
        assert model.status == "training" and model.last_loss == 0.125
        assert model.memory[1].device == "cpu"
    for name in ("steps", "step_times", "lr", "samples_per_s"):
        assert np.array_equal(getattr(bulk, name).view(), getattr(single, name).view(), equal_nan=True)
    assert np.isnan(bulk.samples_per_s.view()[0])  # the warm-up step: no speed
    assert np.isnan(bulk.loss.view()[2]) and np.isnan(single.loss.view()[2])
    for rank in (0, 1):
        for name in ("time", "allocated", "peak"):
            a, b = getattr(bulk.memory[rank], name).view(), getattr(single.memory[rank], name).view()
            assert np.array_equal(a, b, equal_nan=True)
    assert bulk.memory[1].allocated.view().tolist() == [301.0 + i for i in range(8)]  # RSS on the CPU


def test_a_bad_step_among_good_ones_is_skipped_alone(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "events.jsonl"
    bad = '{"v":1,"type":"step","time":1,"step":2,"epoch":1,"loss":"not a number","lr":0.1}\n'
    no_device = '{"v":1,"type":"step","time":1,"step":3,"epoch":1,"loss":0.1,"lr":0.1,"memory":[{"rank":0}]}\n'
    write_events(path, [step_event(1)], tail=bad + no_device)
    write_events(path, [step_event(4)])
    tail = EventTail(path)
    with caplog.at_level(logging.WARNING):
        model = RunModel()
        model.apply_all(tail.poll_items())
    assert model.steps.view().tolist() == [1.0, 4.0]
    assert tail.garbage_lines == 2
    assert "line 2 is not an event" in caplog.text and "line 3 is not an event" in caplog.text


def test_a_resumed_leg_makes_a_stopped_run_live_again(tmp_path: Path) -> None:
    events = [RunStarted(config={}, world_size=1, total_steps=4, devices=["cpu"], time=1000.0),
              step_event(1), step_event(2), RunFinished(status="stopped", step=2, time=1003.0),
              RunStarted(config={}, world_size=1, total_steps=4, devices=["cpu"], resumed_from_step=2, time=1100.0),
              step_event(3, t=1100.0)]
    write_events(tmp_path / "events.jsonl", events)
    model = replay(tmp_path)
    assert model.status == "training" and model.finished is None and model.step == 3
    write_events(tmp_path / "events.jsonl", [RunFinished(status="completed", step=4, time=1110.0)])
    assert replay(tmp_path).status == "finished"


def test_the_time_a_run_stood_stopped_is_not_training_time(tmp_path: Path) -> None:
    # 3 s of training, stopped for 97 s, resumed for 10 s: Elapsed is 13 s and memory has a gap.
    events = [RunStarted(config={}, world_size=1, total_steps=4, devices=["cuda:0"], time=1000.0),
              step_event(1), step_event(2), RunFinished(status="stopped", step=2, time=1003.0),
              RunStarted(config={}, world_size=1, total_steps=4, devices=["cuda:0"], resumed_from_step=2,
                         time=1100.0),
              step_event(3, t=1100.0), RunFinished(status="completed", step=4, time=1110.0)]
    write_events(tmp_path / "events.jsonl", events)
    for model in (replay(tmp_path), _one_at_a_time(events)):
        assert model.elapsed_s() == pytest.approx(13.0)
        allocated = model.memory[0].allocated.view()
        assert len(allocated) == 4 and np.isnan(allocated[2])  # steps 1, 2, the gap, step 3
        assert not np.isnan(allocated[[0, 1, 3]]).any()


def _one_at_a_time(events: list) -> RunModel:  # type: ignore[type-arg]
    model = RunModel()
    for event in events:
        model.apply(event)
    return model


def test_a_run_resumed_from_an_older_checkpoint_draws_each_step_once(tmp_path: Path) -> None:
    # Killed at step 7 with its checkpoint at 5: the resumed leg trains 6 and 7 again. The lost leg's
    # 6 and 7 (loss, lr, speed, validation, samples) are dropped, not drawn back from 7 to 6.
    run = [RunStarted(config={}, world_size=1, total_steps=10, devices=["cpu"], time=1000.0)]
    run += [step_event(s, loss=1.0, t=1000.0) for s in range(1, 8)]
    run += [Validation(step=4, loss=0.9, images=1, timesteps=[0.5]),
            Validation(step=6, loss=0.8, images=1, timesteps=[0.5]),
            Sample(step=4, images=["samples/4.png"], prompts=["a"]),
            Sample(step=6, images=["samples/6.png"], prompts=["a"])]
    run += [RunStarted(config={}, world_size=1, total_steps=10, devices=["cpu"], resumed_from_step=5, time=1100.0)]
    write_events(tmp_path / "events.jsonl", run)
    for model in (replay(tmp_path), _one_at_a_time(run)):
        assert model.steps.view().tolist() == [1, 2, 3, 4, 5] and model.step == 5
        assert len(model.loss) == len(model.lr) == len(model.samples_per_s) == len(model.step_times) == 5
        assert model.validation_steps.view().tolist() == [4] and [s.step for s in model.samples] == [4]
    resumed = [step_event(s, loss=0.1, t=1100.0) for s in range(6, 11)]
    write_events(tmp_path / "events.jsonl", resumed)
    for model in (replay(tmp_path), _one_at_a_time(run + resumed)):
        assert model.steps.view().tolist() == list(range(1, 11))
        assert model.loss.view().tolist() == [1.0] * 5 + [0.1] * 5


def test_a_killed_run_resumed_with_a_warning_before_its_loading_leaves_out_the_time_it_stood_dead(
        tmp_path: Path) -> None:
    # 5 s of training, killed at 1005 without a word; resumed at 5000 by a trainer that first warns (a pickled
    # base model, samples without prompts) and then loads for 10 s, then trains 10 s: 25 s, not 4020 s.
    events = [RunStarted(config={}, world_size=1, total_steps=10, devices=["cuda:0"], time=1000.0)]
    events += [step_event(s, t=1000.0) for s in range(1, 6)]
    events += [RunWarning(message="base.ckpt is a pickle file", time=5000.0),
               Phase(name="loading", done=0, total=1, message="loading the model", time=5000.0),
               RunStarted(config={}, world_size=1, total_steps=10, devices=["cuda:0"], resumed_from_step=5,
                          time=5010.0)]
    events += [step_event(s, t=5010.0) for s in range(6, 11)]
    events.append(RunFinished(status="completed", step=10, time=5020.0))
    write_events(tmp_path / "events.jsonl", events)
    for model in (replay(tmp_path), _one_at_a_time(events)):
        assert model.elapsed_s() == pytest.approx(25.0)


def test_the_time_a_killed_run_stood_dead_before_its_resume_is_not_training_time(tmp_path: Path) -> None:
    # 5 s of training, killed at 1005 without a word; resumed at 5000: the new leg loads its model (10 s)
    # before its run_started, then trains 10 s. Elapsed is 25 s, not 4020 s, and memory has a gap.
    events = [RunStarted(config={}, world_size=1, total_steps=10, devices=["cuda:0"], time=1000.0)]
    events += [step_event(s, t=1000.0) for s in range(1, 6)]
    events += [Phase(name="loading", done=0, total=1, message="loading the model", time=5000.0),
               Phase(name="loading", done=0, total=1, message="resuming from checkpoints/step-5", time=5005.0),
               RunStarted(config={}, world_size=1, total_steps=10, devices=["cuda:0"], resumed_from_step=5,
                          time=5010.0)]
    events += [step_event(s, t=5010.0) for s in range(6, 11)]
    events.append(RunFinished(status="completed", step=10, time=5020.0))
    write_events(tmp_path / "events.jsonl", events)
    for model in (replay(tmp_path), _one_at_a_time(events)):
        assert model.elapsed_s() == pytest.approx(25.0)
        allocated = model.memory[0].allocated.view()
        assert len(allocated) == 11 and np.isnan(allocated[5]) and not np.isnan(allocated[[4, 6]]).any()

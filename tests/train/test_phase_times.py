"""Where a run's time went: every part of a tiny run timed on its `run_finished` event, adding up to the
trainer's wall time, and shown on the console's last lines and in the studio's outcome line."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio.core.runs.events import Phase, RunFinished
from studio.core.runs.records.outcome import outcome_line
from studio.core.runs.records.phase_times import phase_summary

torch = pytest.importorskip("torch")


def test_a_run_s_phases_are_each_timed_and_add_up_to_its_wall_time(make_config, run_training, events_of,
                                                                   tmp_path: Path, capsys) -> None:
    config = make_config("sd15")
    config.training.cache_latents = config.training.cache_text_embeddings = True
    config.training.max_steps = 4
    config.sampling.every_n_steps = 2
    config.sampling.prompts = ["a red circle"]
    config.sampling.steps = 2
    config.output.save_every_n_steps = 2
    code, run_dir = run_training(config, tmp_path)
    assert code == 0
    events = events_of(run_dir)
    finished = events[-1]
    assert isinstance(finished, RunFinished) and finished.status == "completed"
    seconds = {p.name: p.seconds for p in finished.phases}
    assert list(seconds)[:3] == ["loading", "class images", "caching latents"]
    for name in ("text encoding", "moving models", "steps", "sampling", "saving", "other"):
        assert name in seconds, seconds
    assert all(value >= 0 for value in seconds.values())
    assert seconds["loading"] > 0 and seconds["steps"] > 0 and seconds["sampling"] > 0 and seconds["saving"] > 0
    # The trainer's clock starts just before the first event and stops just before the last one.
    wall = finished.time - events[0].time
    assert sum(seconds.values()) == pytest.approx(wall, abs=0.5 + 0.05 * wall)
    assert finished.images_per_s == pytest.approx(4 * 2 / seconds["steps"], rel=0.01)
    loaded = next(e for e in events if isinstance(e, Phase) and e.name == "loading" and e.done == 1)
    assert loaded.elapsed_s == pytest.approx(seconds["loading"], abs=0.01)
    console = capsys.readouterr().out  # what the trainer printed (console.log of a launched run)
    assert f"time: {phase_summary(finished.phases, finished.images_per_s)}" in console
    assert "time: loading " in console and " images/s)" in console
    assert "; time: loading " in outcome_line(run_dir, 0)


def test_the_summary_reads_as_a_person_says_it() -> None:
    from studio.core.runs.events import PhaseTime

    phases = [PhaseTime("loading", 12.34), PhaseTime("text encoding (CPU)", 4.06), PhaseTime("steps", 150.0),
              PhaseTime("sampling", 0.01), PhaseTime("saving", 0.4)]
    assert phase_summary(phases, 9.54) == ("loading 12.3 s, text encoding (CPU) 4.1 s, steps 2.5 min "
                                           "(9.54 images/s), saving 0.40 s")
    assert phase_summary([]) == ""


def test_the_phase_clock_counts_every_second_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from studio.train.progress import phase_clock

    now = [100.0]
    monkeypatch.setattr(phase_clock.time, "monotonic", lambda: now[0])
    clock = phase_clock.PhaseClock()
    now[0] += 1  # other
    with clock.timed("steps"):
        now[0] += 3
        with clock.timed("sampling"):  # pauses the steps
            now[0] += 2
        now[0] += 4
        clock.move(1.5, "steps", "compiling")  # the first step compiled
    now[0] += 0.5
    assert {p.name: p.seconds for p in clock.totals()} == {"steps": 5.5, "sampling": 2.0, "compiling": 1.5,
                                                           "other": 1.5}


def test_on_a_gpu_the_work_a_part_queued_is_counted_in_that_part(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host runs ahead of the GPU: the steps queued before a sample are the steps' time, not the
    sample's, and the sample's own queued work is the sample's, not the steps' after it."""
    from studio.train.progress import phase_clock

    now, queued = [100.0], [0.0]
    monkeypatch.setattr(phase_clock.time, "monotonic", lambda: now[0])

    def synchronize() -> None:  # the host waits for what the GPU still has to do
        now[0] += queued[0]
        queued[0] = 0.0

    clock = phase_clock.PhaseClock(synchronize)
    with clock.timed("steps"):
        now[0] += 1  # the host queues the steps in 1 s ...
        queued[0] = 3.0  # ... that the GPU needs 3 s more for
        with clock.timed("sampling"):
            now[0] += 2
            queued[0] = 0.5  # the last decode, still on the GPU when the sample returns
        now[0] += 1
    seconds = {p.name: p.seconds for p in clock.totals()}
    assert seconds["steps"] == 5.0 and seconds["sampling"] == 2.5
    assert phase_clock.device_sync(torch.device("cpu")) is None
    assert callable(phase_clock.device_sync(torch.device("cuda")))  # the trainer's clock on a GPU waits there


def test_the_fp8_conversion_of_a_low_vram_run_is_its_own_phase(make_config, run_training, events_of,
                                                                tmp_path: Path) -> None:
    config = make_config("sd15")
    config.model.fp8_base = True
    config.training.max_steps = 2
    code, run_dir = run_training(config, tmp_path)
    assert code == 0
    finished = events_of(run_dir)[-1]
    assert isinstance(finished, RunFinished)
    names = [p.name for p in finished.phases]
    assert names.index("loading") < names.index("fp8 conversion") < names.index("steps")

"""Helpers to write events files by hand for the reader, history and queue tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio.core.runs.events import Event, RankMemory, RunFinished, RunStarted, Step


def step_event(step: int, loss: float = 0.5, t: float = 1000.0) -> Step:
    return Step(step=step, epoch=1, loss=loss, lr=1e-4, samples_per_s=4.0, eta_s=10.0,
                memory=[RankMemory(rank=0, device="cuda:0", allocated_mb=100.0 + step, peak_mb=200.0)],
                time=t + step)


def write_events(path: Path, events: list[Event], tail: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        for event in events:
            handle.write(event.to_json() + "\n")
        handle.write(tail)


@pytest.fixture
def finished_run(tmp_path: Path) -> Path:
    run = tmp_path / "runs" / "20240102-030405-cat"
    (run / "config.toml").parent.mkdir(parents=True)
    (run / "config.toml").write_text('[model]\nfamily = "sdxl"\nbase = "x"\n[method]\nkind = "lora"\n')
    events: list[Event] = [RunStarted(config={"model": {"family": "sdxl"}, "method": {"kind": "lora"},
                                              "preset": {"name": "sdxl-lora-12gb"}},
                                      world_size=1, total_steps=3, devices=["cuda:0"], time=1000.0)]
    events += [step_event(i, loss=1.0 / i) for i in range(1, 4)]
    events.append(RunFinished(status="completed", step=3, outputs=["output/pytorch_lora_weights.safetensors"],
                              time=1010.0))
    write_events(run / "events.jsonl", events)
    return run

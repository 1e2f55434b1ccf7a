"""A sample that raises is reported and the run goes on to its outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from studio.core.config.schema import SamplingSection, TrainingSection
from studio.core.runs.events import Error, RunFinished, Sample
from studio.core.runs.records.run_model import replay

torch = pytest.importorskip("torch")


def test_a_failing_sample_does_not_end_the_run(make_config, run_training, events_of, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capfd: pytest.CaptureFixture[str]) -> None:
    from studio.train.families.sd15 import SD15Adapter

    decode = SD15Adapter.decode
    calls = []

    def fails_first(self: Any, vae: Any, latents: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("Input type (float) and bias type (c10::BFloat16) should be the same")
        return decode(self, vae, latents)

    monkeypatch.setattr(SD15Adapter, "decode", fails_first)
    config = make_config(training=TrainingSection(batch_size=2, max_steps=4, seed=1, cache_latents=True),
                         sampling=SamplingSection(every_n_steps=2, prompts=["a red circle"], steps=2, size=64))
    code, run_dir = run_training(config, tmp_path)
    events = events_of(run_dir)
    assert code == 0
    errors = [e for e in events if isinstance(e, Error)]
    assert len(errors) == 1 and errors[0].kind == "sample"
    assert errors[0].message.startswith('sample at step 2 failed while decoding the prompt "a red circle": '
                                        "RuntimeError: Input type (float)")
    assert "training goes on" in errors[0].hint
    assert "Traceback (most recent call last)" in capfd.readouterr().err
    assert [e.step for e in events if isinstance(e, Sample)] == [4]  # the next round worked
    finished = events[-1]
    assert isinstance(finished, RunFinished) and finished.status == "completed" and finished.step == 4
    assert (run_dir / "output" / "pytorch_lora_weights.safetensors").is_file()
    model = replay(run_dir)  # what the Train and Runs pages show
    assert model.status == "finished" and model.errors[0].kind == "sample"

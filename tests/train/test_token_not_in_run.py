"""A run started with the hub token in its environment writes it nowhere: events, console, config, outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio.core.config.schema import TrainingSection

SECRET = "hf_NotInTheRun0123456789abcdef"


def test_a_run_writes_the_token_nowhere(make_config, run_training, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", SECRET)
    code, run_dir = run_training(make_config(training=TrainingSection(batch_size=2, max_steps=2, seed=1)), tmp_path)
    assert code == 0
    written = [p for p in run_dir.rglob("*") if p.is_file()]
    assert any(p.name == "events.jsonl" for p in written) and any(p.suffix == ".safetensors" for p in written)
    assert [p for p in written if SECRET.encode() in p.read_bytes()] == []
    printed = capfd.readouterr()
    assert SECRET not in printed.out + printed.err

"""training.compile = "graphs": the whole denoiser compiled for CUDA graph replay, one graph per image size, each
training step marked as a new one so the graphs may reuse the last step's memory. What torch does with it on a
GPU is the GPU benchmark's to show (benchmarks/gpu_train_speed.py, path "studio compiled graphs"); here, what the
studio asks of torch."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")


def test_graphs_compile_the_whole_denoiser_for_replay_with_static_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    from studio.train import compilation

    monkeypatch.setattr(compilation, "use_compile_cache", lambda: None)
    denoiser = torch.nn.Sequential(torch.nn.Linear(4, 4))
    asked: list[dict[str, Any]] = []
    monkeypatch.setattr(denoiser, "compile", lambda **options: asked.append(options))
    compiled = compilation.compile_denoiser(denoiser, "graphs")
    assert asked == [{"dynamic": False, "mode": "reduce-overhead"}]
    assert compiled is not None and compiled.what == "the whole Sequential, replayed as CUDA graphs"


@pytest.mark.parametrize("mode, marks", [("graphs", 1), ("full", 0), ("blocks", 0), (None, 0)])
def test_each_step_is_marked_for_the_graphs_only(mode: str | None, marks: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from studio.train import compilation

    calls: list[int] = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: calls.append(1))
    compilation.begin_step(None if mode is None else compilation.CompiledDenoiser(mode, "x"))
    assert len(calls) == marks


def test_the_setting_is_accepted_and_explained() -> None:
    from studio.core.config.schema import TrainingSection

    assert TrainingSection(compile="graphs").compile == "graphs"
    assert "CUDA graph" in (TrainingSection.model_fields["compile"].description or "")

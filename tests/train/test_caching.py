"""Latent and text-embedding caches train the same model as encoding every step."""

from __future__ import annotations

import pytest

from studio.core.config.schema import TrainingSection
from studio.core.runs.events import Phase, Step

pytest.importorskip("torch")


def test_cached_run_matches_the_uncached_one(make_config, run_training, events_of, tmp_path) -> None:
    # The VAE's mean: the same latents whether encoded once or every step.
    plain = TrainingSection(batch_size=2, max_steps=3, seed=4, gradient_accumulation=2)
    cached = plain.model_copy(update={"cache_latents": True, "cache_latents_to_disk": True,
                                      "cache_text_embeddings": True})
    config_a, config_b = make_config(training=plain), make_config(training=cached)
    config_a.dataset.latents = config_b.dataset.latents = "mean"
    code_a, run_a = run_training(config_a, tmp_path / "a")
    code_b, run_b = run_training(config_b, tmp_path / "b")
    assert code_a == code_b == 0
    events_b = events_of(run_b)
    assert any(isinstance(e, Phase) and e.name == "caching" and e.done == e.total == 8 for e in events_b)
    assert len(list((run_b / "cache" / "latents").glob("*.safetensors"))) == 8
    losses_a = [e.loss for e in events_of(run_a) if isinstance(e, Step)]
    losses_b = [e.loss for e in events_b if isinstance(e, Step)]
    assert len(losses_a) == 3
    assert losses_b == pytest.approx(losses_a, rel=1e-3)

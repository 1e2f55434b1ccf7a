"""dataset.latents: a sample of the VAE's distribution (every step, or once per cached image) or its mean."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio.core.config.schema import TrainingSection
from studio.core.runs.events import RunStarted, Step

torch = pytest.importorskip("torch")


def _encoder(config):
    from studio.train.data.items import collect_items
    from studio.train.families import adapter_for

    adapter = adapter_for(config)
    components = adapter.load(torch.device("cpu"), torch.float32)
    return adapter, components, collect_items(config, lambda *a: None)


def _cached(adapter, components, items, batch_size: int, disk: Path | None = None) -> dict[int, torch.Tensor]:
    from studio.train.data.cache import LatentCache

    cache = LatentCache()
    cache.fill(adapter, components, items, adapter.config.dataset, batch_size, disk, True, lambda *a: None)
    return cache.latents


def _means(adapter, components, items) -> dict[int, torch.Tensor]:
    from studio.train.data.items import load_image

    pixels = torch.stack([torch.from_numpy(load_image(i, "center", False, None).pixels) for i in items])
    with torch.no_grad():
        latents = adapter.encode_images(components, pixels).float()
    return {item.index: latent for item, latent in zip(items, latents, strict=True)}


def test_the_default_is_a_sample() -> None:
    from studio.core.config.schema import DatasetSection

    assert DatasetSection().latents == "sample"


def test_cached_latents_are_one_sample_per_image_from_the_seed(make_config, tmp_path: Path) -> None:
    config = make_config()
    adapter, components, items = _encoder(config)
    means = _means(adapter, components, items)
    sampled = _cached(adapter, components, items, batch_size=4)
    # A sample, not the mean: each latent moved by about the VAE's spread.
    for index, latent in sampled.items():
        assert (latent - means[index]).abs().mean() > 0.05, index
    # The same seed draws the same sample, whatever the batch size of the caching.
    again = _cached(adapter, components, items, batch_size=1)
    assert all(torch.allclose(sampled[i], again[i], atol=1e-5) for i in sampled)
    reseeded = make_config(training=TrainingSection(batch_size=2, max_steps=6, learning_rate=1e-3, seed=2))
    adapter.config = reseeded
    other = _cached(adapter, components, items, batch_size=4)
    assert all(not torch.allclose(sampled[i], other[i]) for i in sampled)
    # "mean" caches the mode.
    adapter.config = config.model_copy(deep=True)
    adapter.config.dataset.latents = "mean"
    mean = _cached(adapter, components, items, batch_size=4)
    assert all(torch.allclose(mean[i], means[i], atol=1e-6) for i in mean)


def test_the_disk_cache_is_keyed_by_what_was_drawn(make_config, tmp_path: Path) -> None:
    config = make_config()
    adapter, components, items = _encoder(config)
    disk = tmp_path / "latents"
    sampled = _cached(adapter, components, items, 4, disk)
    adapter.config = config.model_copy(deep=True)
    adapter.config.dataset.latents = "mean"
    mean = _cached(adapter, components, items, 4, disk)
    assert len(list(disk.glob("*.safetensors"))) == 2 * len(items)  # the sample's files were not reused
    assert all(not torch.allclose(sampled[i], mean[i]) for i in sampled)
    adapter.config = config
    assert all(torch.equal(sampled[i], v) for i, v in _cached(adapter, components, items, 4, disk).items())


def test_each_step_draws_its_own_sample_from_the_seed(make_config) -> None:
    from studio.train.data.batches import latent_draws

    config = make_config()
    adapter, components, items = _encoder(config)
    means = _means(adapter, components, items[:2])
    from studio.train.data.items import load_image

    pixels = torch.stack([torch.from_numpy(load_image(i, "center", False, None).pixels) for i in items[:2]])

    def step(index: int, seed: int = 1) -> torch.Tensor:
        draws = latent_draws(config.dataset, seed, [(1, index, 0, p) for p in range(2)])
        with torch.no_grad():
            return adapter.encode_images(components, pixels, draws)

    first, second = step(0), step(1)
    assert torch.equal(first, step(0))
    assert not torch.allclose(first, second) and not torch.allclose(first, step(0, seed=2))
    assert (first[0] - means[items[0].index]).abs().mean() > 0.05


def test_an_uncached_run_trains_on_samples_and_records_it(make_config, run_training, events_of,
                                                          tmp_path: Path) -> None:
    training = TrainingSection(batch_size=2, max_steps=2, learning_rate=1e-3, seed=5)
    losses: dict[str, list[float]] = {}
    for latents in ("sample", "mean"):
        config = make_config(training=training)
        config.dataset.latents = latents  # type: ignore[assignment]
        code, run_dir = run_training(config, tmp_path / latents)
        events = events_of(run_dir)
        assert code == 0
        started = next(e for e in events if isinstance(e, RunStarted))
        assert started.config["dataset"]["latents"] == latents
        losses[latents] = [e.loss for e in events if isinstance(e, Step)]
        info = (run_dir / "output" / "training_info.json").read_text()
        assert f'"latents": "{latents}"' in info
    # Same noise, same timesteps, same images: only the latents differ.
    assert losses["sample"] != pytest.approx(losses["mean"], rel=1e-4)


def test_a_vae_with_per_channel_statistics_encodes_as_its_pipeline_decodes() -> None:
    """An SDXL-style VAE declaring latents_mean/std: training's latents are normalised by them (as the SDXL
    training scripts do), so the samples' decode, which the pipeline does with them, is their inverse."""
    from studio.core.config.schema import ModelSection, TrainConfig
    from studio.train.components import Components
    from studio.train.families import adapter_for
    from studio.train.pipelines.tiny import tiny_vae

    mean, std = [0.5, -0.25, 0.1, 0.3], [2.0, 0.5, 1.5, 0.8]
    vae = tiny_vae(4, latents_mean=mean, latents_std=std, scaling_factor=0.5).eval()
    adapter = adapter_for(TrainConfig(model=ModelSection(family="sdxl", base="x")))
    components = Components(torch.nn.Identity(), vae, [], [], None)
    pixels = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(0)) * 2 - 1
    with torch.no_grad():
        raw = vae.encode(pixels).latent_dist.mode()
        latents = adapter.encode_images(components, pixels)
        decoded = adapter.decode(vae, latents)
        direct = vae.decode(raw).sample
    shape = (1, 4, 1, 1)
    torch.testing.assert_close(latents, (raw - torch.tensor(mean).view(shape)) * 0.5 / torch.tensor(std).view(shape))
    torch.testing.assert_close(decoded, direct, atol=1e-4, rtol=1e-3)  # the pipeline's decode of the same latents


def test_the_disk_cache_is_keyed_by_the_vae(make_config, tmp_path: Path) -> None:
    # A run's config.toml edited before a resume to a separate VAE (model.vae: an fp16-safe SDXL VAE, say):
    # the old VAE's latents on disk were read back and trained on.
    config = make_config()
    adapter, components, items = _encoder(config)
    disk = tmp_path / "latents"
    _cached(adapter, components, items, 4, disk)
    adapter.config = config.model_copy(deep=True)
    adapter.config.model.vae = str(tmp_path / "other-vae")
    _cached(adapter, components, items, 4, disk)
    assert len(list(disk.glob("*.safetensors"))) == 2 * len(items)
    adapter.config = config  # no separate VAE: the first files again, none made anew
    _cached(adapter, components, items, 4, disk)
    assert len(list(disk.glob("*.safetensors"))) == 2 * len(items)


def test_a_cache_file_cut_off_by_a_killed_run_is_encoded_again(make_config, tmp_path: Path) -> None:
    # A run killed (or a machine cut off) while it wrote its latents left a file cut short: every resume
    # then failed on it with a safetensors error until the person found and deleted the cache folder.
    config = make_config()
    adapter, components, items = _encoder(config)
    disk = tmp_path / "latents"
    first = _cached(adapter, components, items, 4, disk)
    files = sorted(disk.glob("*.safetensors"))
    cut = files[0].read_bytes()
    files[0].write_bytes(cut[: len(cut) // 2])
    files[1].write_bytes(b"")
    again = _cached(adapter, components, items, 4, disk)
    assert all(torch.allclose(first[i], again[i], atol=1e-5) for i in first)
    assert files[0].read_bytes() == cut  # written whole again
    assert sorted(p.name for p in disk.iterdir()) == [p.name for p in files]  # no temporary file is left

"""v-prediction models (SD2.x-768 style and v-pred fine-tunes): the target, the min-SNR weights, and runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio.core.config.schema import ModelSection, TrainingSection
from studio.core.runs.events import Error, RunFinished

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tiny_vpred(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from studio.train.pipelines.tiny import build_tiny_pipeline

    return build_tiny_pipeline("sd15", tmp_path_factory.mktemp("models") / "tiny-vpred", prediction_type="v_prediction")


def _scheme(base: Path, prediction_type: str = "auto", min_snr_gamma: float | None = None):  # type: ignore[no-untyped-def]
    from studio.core.config.schema import TrainConfig
    from studio.train.families import adapter_for

    config = TrainConfig(model=ModelSection(family="sd15", base=str(base), prediction_type=prediction_type),
                         training=TrainingSection(min_snr_gamma=min_snr_gamma))
    adapter = adapter_for(config)
    components = adapter.load(torch.device("cpu"), torch.float32)
    return adapter.noise_scheme(components), components


def test_the_target_is_the_velocity_and_min_snr_divides_by_snr_plus_one(tiny_vpred: Path) -> None:
    scheme, components = _scheme(tiny_vpred, min_snr_gamma=5.0)
    assert scheme.prediction_type == "v_prediction"
    latents = torch.randn(4, 4, 8, 8, generator=torch.Generator().manual_seed(0))
    noised = scheme.noise(latents, torch.Generator().manual_seed(1))
    alpha_bar = components.scheduler.alphas_cumprod[noised.timesteps].view(-1, 1, 1, 1)
    # x_t = sqrt(a) x0 + sqrt(1 - a) eps, so eps = (x_t - sqrt(a) x0) / sqrt(1 - a) and v = sqrt(a) eps - sqrt(1 - a) x0.
    noise = (noised.noisy - alpha_bar.sqrt() * latents) / (1 - alpha_bar).sqrt()
    velocity = alpha_bar.sqrt() * noise - (1 - alpha_bar).sqrt() * latents
    assert torch.allclose(noised.target, velocity, atol=1e-4)
    snr = (alpha_bar / (1 - alpha_bar)).flatten()
    assert torch.allclose(noised.weights, torch.clamp(snr, max=5.0) / (snr + 1), rtol=1e-4)


def test_model_prediction_type_overrides_the_schedulers(tiny_sd15: Path) -> None:
    scheme, components = _scheme(tiny_sd15, prediction_type="v_prediction")
    assert scheme.prediction_type == "v_prediction"
    assert components.sample_scheduler.config.prediction_type == "v_prediction"  # samples decode v too
    assert _scheme(tiny_sd15)[0].prediction_type == "epsilon"


def test_a_v_prediction_model_trains_and_samples(tiny_vpred: Path, make_config, run_training, events_of,
                                                 tmp_path: Path) -> None:
    from studio.core.config.schema import SamplingSection

    config = make_config(model=ModelSection(family="sd15", base=str(tiny_vpred)),
                         training=TrainingSection(batch_size=2, max_steps=2, learning_rate=1e-3, seed=1,
                                                  min_snr_gamma=5.0),
                         sampling=SamplingSection(every_n_steps=2, prompts=["a red circle"], steps=2))
    code, run_dir = run_training(config, tmp_path)
    events = events_of(run_dir)
    assert code == 0, [e for e in events if isinstance(e, Error)]
    finished = next(e for e in events if isinstance(e, RunFinished))
    assert finished.status == "completed" and finished.outputs
    assert list((run_dir / "samples").glob("*.png"))
    # model.prediction_type is "auto": the file says what the base's scheduler trained, so a UI samples it as v.
    from safetensors import safe_open

    (kohya,) = [Path(p) for p in finished.outputs if Path(p).suffix == ".safetensors" and "pytorch_lora" not in p]
    with safe_open(str(kohya), "pt") as handle:
        assert handle.metadata()["modelspec.prediction_type"] == "v"


def test_min_snr_on_a_zero_terminal_snr_schedule_weighs_its_last_timestep_one() -> None:
    """An epsilon run (model.prediction_type) on a zero-terminal-SNR base with min-SNR: the last timestep's SNR
    is 0, and its weight was 0/0, a NaN loss that ended the run at the first batch drawing it."""
    from diffusers import DDPMScheduler

    from studio.core.config.schema import TrainingSection
    from studio.train.families.schemes import DiffusionScheme

    scheduler = DDPMScheduler(rescale_betas_zero_snr=True, prediction_type="epsilon")
    scheme = DiffusionScheme(scheduler, TrainingSection(min_snr_gamma=5.0))
    weights = scheme._snr_weights(torch.tensor([999, 998, 0]))
    assert weights[:2].tolist() == [1.0, 1.0]  # min(snr, 5) / snr, for an SNR under 5
    assert 0 < weights[2].item() < 1e-3  # a clean timestep: 5 / snr

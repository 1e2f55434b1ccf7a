"""The frozen weights' precision: "auto" follows the mixed precision, in the trainer and the estimator alike."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from studio.core.config.schema import TrainConfig
from studio.core.config.weight_dtype import resolved_weight_dtype
from studio.core.estimate.estimate import estimate_vram
from studio.core.hardware.machine.probe import load_hardware

torch = pytest.importorskip("torch")


def _config(precision: str, dtype: str | None = None) -> TrainConfig:
    model = {"family": "sdxl", "base": "models/base", **({"dtype": dtype} if dtype else {})}
    return TrainConfig.model_validate({"model": model, "training": {"mixed_precision": precision}})


def _on(device: str) -> SimpleNamespace:
    return SimpleNamespace(device=torch.device(device))


@pytest.mark.parametrize(("precision", "expected"), [("fp16", "fp16"), ("bf16", "bf16"), ("no", "fp32")])
def test_auto_is_the_default_and_follows_mixed_precision(precision: str, expected: str) -> None:
    from studio.train.runtime import weight_dtype

    config = _config(precision)
    assert config.model.dtype == "auto"
    assert resolved_weight_dtype(config) == expected
    torch_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[expected]
    assert weight_dtype(config, _on("cuda")) == torch_dtype
    assert weight_dtype(config, _on("cpu")) == torch.float32  # the CPU always trains in fp32


def test_an_explicit_dtype_is_kept() -> None:
    from studio.train.runtime import weight_dtype

    config = _config("bf16", "fp16")
    assert resolved_weight_dtype(config) == "fp16"
    assert weight_dtype(config, _on("cuda")) == torch.float16


def test_the_estimator_reads_the_resolved_dtype() -> None:
    gpu = load_hardware("rtx4090-24gb").gpus[0]
    for precision, dtype in (("bf16", "bf16"), ("fp16", "fp16"), ("no", "fp32")):
        auto, explicit = estimate_vram(_config(precision), gpu), estimate_vram(_config(precision, dtype), gpu)
        assert auto.weights_mb == explicit.weights_mb
        assert auto.total_mb == explicit.total_mb
    # fp32 frozen weights under "no" are twice the size of the fp16 ones under fp16.
    assert estimate_vram(_config("no"), gpu).weights_mb == pytest.approx(
        2 * estimate_vram(_config("fp16"), gpu).weights_mb)


def test_a_bad_dtype_names_the_allowed_values() -> None:
    from studio.core.config.errors import ConfigError
    from studio.core.config.files.toml_file import validate_data

    with pytest.raises(ConfigError) as caught:
        validate_data({"model": {"family": "sd15", "base": "m", "dtype": "fp8"}})
    text = caught.value.describe()
    assert "model.dtype" in text and "auto" in text


def test_a_dtype_that_fights_mixed_precision_is_named() -> None:
    from studio.train.runtime import dtype_mismatch

    assert dtype_mismatch(_config("bf16")) is None and dtype_mismatch(_config("no")) is None
    assert dtype_mismatch(_config("no", "fp32")) is None and dtype_mismatch(_config("fp16", "fp32")) is None
    warning = dtype_mismatch(_config("bf16", "fp16"))
    assert warning is not None and "model.dtype = fp16 under bf16" in warning and '"auto"' in warning
    warning = dtype_mismatch(_config("no", "fp16"))
    assert warning is not None and "fp32 activations" in warning


@pytest.mark.parametrize(("weights", "vae"), [("float16", "float32"), ("bfloat16", "bfloat16")])
def test_a_model_folder_loads_in_the_training_precision(weights: str, vae: str, make_config) -> None:
    from studio.train.families import adapter_for

    components = adapter_for(make_config()).load(torch.device("cpu"), getattr(torch, weights))
    assert components.denoiser.dtype == getattr(torch, weights)
    assert components.text_encoders[0].dtype == getattr(torch, weights)
    assert components.vae.dtype == getattr(torch, vae)  # the SD VAE overflows in fp16, not in bf16


def test_a_full_fine_tune_starts_from_the_exact_fp32_weights(make_config, tiny_sd15) -> None:
    from diffusers import UNet2DConditionModel

    from studio.core.config.schema import MethodSection
    from studio.train.families import adapter_for

    stored = UNet2DConditionModel.from_pretrained(tiny_sd15, subfolder="unet").conv_in.weight
    config = make_config(method=MethodSection(kind="dreambooth", train_text_encoder=True))
    components = adapter_for(config).load(torch.device("cpu"), torch.float16)
    assert components.denoiser.dtype == torch.float32 and components.text_encoders[0].dtype == torch.float32
    assert torch.equal(components.denoiser.conv_in.weight, stored)  # not rounded through fp16 on the way
    assert not torch.equal(stored.half().float(), stored)  # (which would have changed them)
    frozen = adapter_for(make_config()).load(torch.device("cpu"), torch.float16)
    assert frozen.denoiser.dtype == torch.float16  # a LoRA's frozen base stays in the training precision

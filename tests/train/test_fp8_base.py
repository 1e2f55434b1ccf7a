"""model.fp8_base: the frozen denoiser stored in 8-bit floats, the LoRA trained on top of it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from studio.core.config.schema import (
    MethodSection,
    ModelSection,
    SamplingSection,
    TrainConfig,
    TrainingSection,
)

torch = pytest.importorskip("torch")


def _lora_denoiser(family: str, base: Path) -> tuple[Any, Any]:
    """(adapter, components) of a tiny family with a rank-4 LoRA on the fp32 denoiser, as the trainer adds it."""
    from diffusers.training_utils import cast_training_params

    from studio.train.families import adapter_for

    adapter = adapter_for(TrainConfig(model=ModelSection(family=family, base=str(base)),  # type: ignore[arg-type]
                                      method=MethodSection(rank=4)))
    components = adapter.load(torch.device("cpu"), torch.float32)
    adapter.add_lora(components)
    cast_training_params([components.denoiser], dtype=torch.float32)
    torch.manual_seed(0)
    for name, parameter in components.denoiser.named_parameters():
        if "lora_B" in name:  # gaussian A, zero B at first: give B values so the LoRA path counts
            parameter.data.normal_(0, 0.02)
    return adapter, components


def _step(adapter: Any, denoiser: Any, family: str) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One prediction at fixed inputs and the LoRA weights' gradients of its mean square."""
    generator = torch.Generator().manual_seed(1)
    noisy = torch.randn(2, 4 if family == "sd15" else 16, 8, 8, generator=generator)
    timesteps = torch.tensor([10, 500])
    if family == "sd15":
        cond = {"encoder_hidden_states": torch.randn(2, 8, 32, generator=generator)}
    else:
        clip = torch.randn(2, 8, adapter.joint_attention_dim // 2, generator=generator)
        pooled = int(getattr(denoiser, "module", denoiser).config.pooled_projection_dim)
        cond = {"clip_embeds": clip, "pooled_projections": torch.randn(2, pooled, generator=generator)}
    denoiser.zero_grad(set_to_none=True)
    out = adapter.predict(denoiser, noisy, timesteps, cond)
    out.pow(2).mean().backward()
    grads = {n: p.grad.clone() for n, p in denoiser.named_parameters() if p.requires_grad}
    return out.detach(), grads


@pytest.mark.parametrize("family", ["sd15", "sd3"])
def test_the_base_is_stored_in_fp8_and_the_lora_learns_through_it(family: str, tiny_models: dict[str, Path]) -> None:
    from studio.train.memory.fp8 import Float8Conv2d, Float8Linear, store_in_float8
    from studio.train.memory.grad_checkpointing import enable_gradient_checkpointing

    adapter, components = _lora_denoiser(family, tiny_models[family])
    if family == "sd3":
        adapter.joint_attention_dim = int(components.denoiser.config.joint_attention_dim)
    wide = components.denoiser
    eight = copy.deepcopy(wide)
    converted = store_in_float8(eight, torch.float32)
    layers = [m for m in eight.modules() if isinstance(m, (Float8Linear, Float8Conv2d))]
    assert converted and len(layers) == len(converted)
    frozen = [p for p in eight.parameters() if not p.requires_grad]
    in_fp8 = sum(p.numel() for p in frozen if p.dtype == torch.float8_e4m3fn)
    # The bulk of the base is 8-bit in memory (the tiny models' kept embeddings and norms weigh far more
    # than a real model's).
    assert in_fp8 > 0.6 * sum(p.numel() for p in frozen)
    assert all(p.dtype == torch.float32 for p in eight.parameters() if p.requires_grad)  # the LoRA is not
    # Data parallelism leaves them alone: every rank loads the same base, and gloo cannot send float8.
    assert set(eight._ddp_params_and_buffers_to_ignore) == {f"{name}.weight" for name in converted}
    # The same network as the wide one whose weights are rounded the way fp8 stores them.
    rounded = copy.deepcopy(wide)
    for (name, module), layer in zip(
            ((n, m) for n, m in rounded.named_modules() if n in set(converted)), layers, strict=True):
        assert name in converted
        module.weight.data = layer.weight.float() * layer.fp8_scale
    out8, grads8 = _step(adapter, eight, family)
    out_rounded, grads_rounded = _step(adapter, rounded, family)
    assert torch.allclose(out8, out_rounded, atol=1e-5)
    assert grads8.keys() == grads_rounded.keys()
    for name, grad in grads8.items():  # the backward widens the 8-bit weights again, exactly
        assert torch.allclose(grad, grads_rounded[name], atol=1e-6, rtol=1e-4), name
    out_wide, _ = _step(adapter, wide, family)
    assert (out8 - out_wide).abs().mean() < 0.1 * out_wide.abs().mean()  # close to the unrounded base
    # Gradient checkpointing recomputes the widened layers: the same gradients, no complaint.
    enable_gradient_checkpointing(eight, 1)
    eight.train()
    _, checkpointed = _step(adapter, eight, family)
    for name, grad in grads8.items():
        assert torch.allclose(grad, checkpointed[name], atol=1e-6, rtol=1e-4), name


def test_an_fp8_run_trains_samples_and_writes_a_lora_that_loads(make_config, run_training, events_of,
                                                                tiny_sd15: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np
    from diffusers import StableDiffusionPipeline

    import studio.train.loop as loop

    seen: dict[str, Any] = {}
    setup = loop.Trainer.setup

    def watched(self: Any) -> None:
        setup(self)
        seen["dtypes"] = {p.dtype for p in self.components.denoiser.parameters() if not p.requires_grad}
        seen["lora"] = {n: p.detach().clone() for n, p in self.components.denoiser.named_parameters()
                        if p.requires_grad}
        seen["trainer"] = self

    prepare = loop.Trainer._prepare_models

    def narrowing(self: Any) -> None:  # where the denoiser waits while it is stored in fp8 (no caches here)
        seen["home"] = self.adapter.denoiser_home
        seen["frozen_device"] = {p.device for p in self.components.denoiser.parameters()}
        prepare(self)

    monkeypatch.setattr(loop.Trainer, "setup", watched)
    monkeypatch.setattr(loop.Trainer, "_prepare_models", narrowing)
    config = make_config(model=ModelSection(family="sd15", base=str(tiny_sd15), fp8_base=True),
                         training=TrainingSection(batch_size=2, max_steps=3, learning_rate=1e-2, seed=1,
                                                  gradient_checkpointing=True, checkpointing_interval=2),
                         sampling=SamplingSection(every_n_steps=3, prompts=["a red circle"], steps=2))
    code, run_dir = run_training(config, tmp_path)
    assert code == 0, [e for e in events_of(run_dir) if e.type == "error"]
    assert torch.float8_e4m3fn in seen["dtypes"]
    # Without caches too, the denoiser waits in system memory until it is stored in fp8: the GPU never holds
    # the base at full width (which the estimate does not count).
    assert seen["home"] == loop.HOLD_DEVICE and seen["frozen_device"] == {loop.HOLD_DEVICE}
    after = dict(seen["trainer"].components.denoiser.named_parameters())
    assert any(not torch.equal(before, after[n]) for n, before in seen["lora"].items())  # the LoRA moved
    assert (run_dir / "samples" / "step-000003-0.png").is_file()

    pipe = StableDiffusionPipeline.from_pretrained(tiny_sd15, safety_checker=None, requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)

    def image() -> Any:
        return np.asarray(pipe("a red circle", num_inference_steps=2, height=64, width=64, output_type="np",
                               generator=torch.Generator().manual_seed(0)).images[0])

    plain = image()
    pipe.load_lora_weights(str(run_dir / "output"))
    assert not np.allclose(plain, image())  # the LoRA trained on the fp8 base loads on the full base


def test_fp8_with_dora_is_refused_with_the_reason() -> None:
    from studio.core.config.errors import ConfigError
    from studio.core.config.files.toml_file import validate_data

    with pytest.raises(ConfigError) as caught:
        validate_data({"model": {"family": "sdxl", "base": "m", "fp8_base": True}, "method": {"use_dora": True}})
    text = caught.value.describe()
    assert "model.fp8_base" in text and "method.use_dora" in text


def _most_wide_copies(run: Any, shape: torch.Size) -> int:
    """The most 16-bit tensors of a layer's weight shape alive at once while `run()` computes."""
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Watch(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.alive: dict[int, weakref.ref[torch.Tensor]] = {}
            self.most = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor) and t.dtype == torch.bfloat16 and t.shape == shape:
                    self.alive[t.untyped_storage().data_ptr()] = weakref.ref(t)
            self.alive = {k: ref for k, ref in self.alive.items() if ref() is not None}
            self.most = max(self.most, len(self.alive))
            return out

    with Watch() as watch:
        run()
    return watch.most


@pytest.mark.parametrize("kind", ["fp8 linear", "fp8 conv", "int8 linear"])
def test_a_narrow_layer_is_widened_into_one_copy_at_a_time(kind: str) -> None:
    """The widened weight of an 8-bit layer is scaled in place: one 16-bit copy of the layer at a time in the
    forward and in the backward, which is what the estimate counts (the largest layer, once), not the
    widened weight and its scaled product side by side. The numbers are those of the scaled product."""
    import torch.nn.functional as F

    from studio.train.memory.fp8 import store_in_float8
    from studio.train.memory.quantized import SCALE, quantize_base

    torch.manual_seed(0)
    if kind == "fp8 conv":
        layer: Any = torch.nn.Conv2d(16, 32, 3, padding=1)
        x = torch.randn(1, 16, 4, 4, dtype=torch.bfloat16, requires_grad=True)
    else:
        layer = torch.nn.Linear(64, 96)
        x = torch.randn(2, 64, dtype=torch.bfloat16, requires_grad=True)
    model = torch.nn.Sequential(layer).requires_grad_(False)
    if kind == "int8 linear":
        quantize_base(model, "int8", torch.bfloat16, torch.device("cpu"))
        wide = layer.weight.to(torch.bfloat16) * getattr(layer, SCALE).to(torch.bfloat16)
    else:
        store_in_float8(model, torch.bfloat16)
        wide = layer.weight.to(torch.bfloat16) * layer.fp8_scale
    compute = F.conv2d if kind == "fp8 conv" else F.linear
    padding = {"padding": 1} if kind == "fp8 conv" else {}
    expected = compute(x.detach(), wide, layer.bias.to(torch.bfloat16), **padding)

    def forward_and_backward() -> None:
        out = model(x)
        torch.testing.assert_close(out.detach(), expected, atol=0, rtol=0)
        out.float().pow(2).sum().backward()

    assert _most_wide_copies(forward_and_backward, layer.weight.shape) == 1
    assert x.grad is not None and x.grad.abs().sum() > 0

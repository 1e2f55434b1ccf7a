"""model.quantized_base: a LoRA trained over a frozen denoiser kept in int8 (weight-only) or nf4 (bitsandbytes).

On the tiny model of every LoRA family: the quantized runs train with a loss near the full base's, a run
stopped and resumed ends with the very weights and losses of one that was not, and the LoRA file is the
full-precision run's format and loads on the full-precision base.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file

from studio.core.config.schema import (
    MethodSection,
    ModelSection,
    OutputSection,
    SamplingSection,
    TrainConfig,
    TrainingSection,
)
from studio.core.families import FAMILIES
from studio.core.runs.events import RunFinished, Step

torch = pytest.importorskip("torch")
pytest.importorskip("bitsandbytes")

STEPS = 3
# The largest relative difference of any step's loss from the full base's, over the same batches and noise.
# The base's weights are rounded (int8: one scale per row, about 0.5% per layer output on the tiny models;
# nf4: 16 levels per 64 weights, about 10%), and the loss of a few steps is dominated by the drawn noise,
# which both runs share; measured on the tiny models: int8 within 0.06%, nf4 within 2.1% (Z-Image).
TOLERANCE = {"int8": 0.01, "nf4": 0.04}
# Each family proves the resume with one of the two, and each of the two is proven on a UNet and on
# transformers.
RESUMED = {"sd15": "int8", "sd3": "int8", "zimage": "int8", "sdxl": "nf4", "flux2-klein": "nf4", "qwen-image": "nf4"}
# How closely the learned weights follow those learned over the full base (cosine of the lora_B weights);
# measured after 3 steps: int8 above 0.995, nf4 0.85 to 0.96.
MIN_COSINE = {"int8": 0.98, "nf4": 0.75}
LAYERS = {"int8": "Int8Linear", "nf4": "Linear4bit"}  # the studio's int8, bitsandbytes' nf4


def _config(make_config: Callable[..., TrainConfig], family: str, base: Path, kind: str, runs: Path) -> TrainConfig:
    return make_config(family, model=ModelSection(family=family, base=str(base), quantized_base=kind),  # type: ignore[arg-type]
                       method=MethodSection(rank=4),
                       training=TrainingSection(batch_size=2, max_steps=STEPS, learning_rate=1e-3, seed=1),
                       output=OutputSection(dir=str(runs), formats=["diffusers"], save_precision="fp32"))


def _losses(events: list[Any]) -> list[float]:
    return [e.loss for e in events if isinstance(e, Step)]


def _lora(run_dir: Path) -> dict[str, Any]:
    return load_file(str(run_dir / "output" / "pytorch_lora_weights.safetensors"))


def _cosine(a: dict[str, Any], b: dict[str, Any]) -> float:
    """The cosine of two LoRAs' trained weights (lora_B: zero at the start, so all of it was learned)."""
    keys = sorted(k for k in a if "lora_B" in k or "lora_up" in k)
    x, y = torch.cat([a[k].flatten() for k in keys]), torch.cat([b[k].flatten() for k in keys])
    return float(torch.nn.functional.cosine_similarity(x, y, dim=0))


def _stop_at(monkeypatch: pytest.MonkeyPatch, step: int) -> None:
    from studio.train.loop import Trainer

    original = Trainer._after_step

    def stop(self: Trainer, epoch: int) -> None:
        original(self, epoch)
        if self.step == step:
            (self.run_dir / "STOP").write_text("stop", encoding="utf-8")

    monkeypatch.setattr(Trainer, "_after_step", stop)


@pytest.mark.parametrize("family", sorted(RESUMED))
def test_a_lora_trains_over_a_quantized_base_resumes_exactly_and_loads_on_the_full_base(
        family: str, make_config, run_training, events_of, tiny_model, held_out_loss, demo_data, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import studio.train.loop as loop

    assert "lora" in next(f for f in FAMILIES if f.name == family).methods
    base = tiny_model(family)
    layers: dict[str, set[str]] = {}
    setup = loop.Trainer.setup

    def watched(self: Any) -> None:
        setup(self)
        layers[self.config.model.quantized_base] = {type(m).__name__ for m in self.components.denoiser.modules()}

    monkeypatch.setattr(loop.Trainer, "setup", watched)
    runs: dict[str, Path] = {}
    for kind in ("none", "int8", "nf4"):
        code, runs[kind] = run_training(_config(make_config, family, base, kind, tmp_path / "runs"), tmp_path / kind)
        assert code == 0, [e for e in events_of(runs[kind]) if e.type == "error"]
    full = _losses(events_of(runs["none"]))
    assert len(full) == STEPS
    for kind in ("int8", "nf4"):
        assert LAYERS[kind] in layers[kind] and LAYERS[kind] not in layers["none"]
        quantized = _losses(events_of(runs[kind]))
        assert quantized != full  # the base really was another
        worst = max(abs(q - f) / f for q, f in zip(quantized, full, strict=True))
        assert worst <= TOLERANCE[kind], (kind, quantized, full)
        # The same file as over the full base: the same keys, shapes and precision.
        trained, plain = _lora(runs[kind]), _lora(runs["none"])
        assert {k: (v.shape, v.dtype) for k, v in trained.items()} == {k: (v.shape, v.dtype) for k, v in plain.items()}

        # It learned what the LoRA over the full base learned: the trained weights point the same way.
        assert _cosine(trained, plain) > MIN_COSINE[kind], (kind, _cosine(trained, plain))

    # Loaded on the full-precision base by diffusers (load_lora_weights), the nf4-trained LoRA changes its
    # predictions.
    unquantized = _config(make_config, family, base, "none", tmp_path / "runs")
    assert held_out_loss(unquantized, demo_data, runs["nf4"] / "output") != held_out_loss(unquantized, demo_data, None)

    kind = RESUMED[family]
    _stop_at(monkeypatch, 2)
    code, stopped = run_training(_config(make_config, family, base, kind, tmp_path / "runs"), tmp_path / "stopped")
    finished = events_of(stopped)[-1]
    assert code == 0 and isinstance(finished, RunFinished) and finished.status == "stopped" and finished.step == 2
    monkeypatch.undo()
    code, _ = run_training(None, tmp_path / "stopped", resume_dir=stopped)
    assert code == 0
    assert _losses(events_of(stopped)) == _losses(events_of(runs[kind]))
    resumed, straight = _lora(stopped), _lora(runs[kind])
    assert resumed.keys() == straight.keys()
    assert all(torch.equal(resumed[k], straight[k]) for k in straight)


def test_a_training_environment_without_bitsandbytes_is_refused_with_the_install_words(
        make_config, run_training, events_of, tiny_sd15: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # `import bitsandbytes` fails as where it is missing
    code, run_dir = run_training(_config(make_config, "sd15", tiny_sd15, "nf4", tmp_path / "runs"), tmp_path)
    events = events_of(run_dir)
    errors = [e for e in events if e.type == "error"]
    assert code != 0 and len(errors) == 1 and errors[0].kind == "config"
    assert 'model.quantized_base = "nf4" needs the bitsandbytes library' in errors[0].message
    assert 'pip install "sd-training-studio[cuda]"' in errors[0].hint
    assert not any(e.type == "phase" and getattr(e, "name", "") == "loading" for e in events)  # before loading


def test_gradient_checkpointing_and_samples_over_an_nf4_base_train_the_same_lora(
        make_config, run_training, events_of, tiny_sd3: Path, tmp_path: Path) -> None:
    """Checkpointing recomputes the quantized layers (the same gradients); a sample between steps runs them
    without gradients, which must leave the weights' layout as training reads it."""
    plain = _config(make_config, "sd3", tiny_sd3, "nf4", tmp_path / "runs")
    code, straight = run_training(plain, tmp_path / "a")
    assert code == 0
    both = plain.model_copy(deep=True)
    both.training.gradient_checkpointing = True
    both.sampling = SamplingSection(every_n_steps=1, prompts=["a red circle"], steps=2)
    code, run_dir = run_training(both, tmp_path / "b")
    assert code == 0, [e for e in events_of(run_dir) if e.type == "error"]
    assert len(list((run_dir / "samples").glob("step-*.png"))) == STEPS
    assert _losses(events_of(run_dir)) == pytest.approx(_losses(events_of(straight)), rel=1e-5)
    trained, expected = _lora(run_dir), _lora(straight)
    assert all(torch.allclose(trained[k], expected[k], rtol=1e-4, atol=1e-7) for k in expected)


def test_an_old_bitsandbytes_is_refused_with_the_upgrade_words(monkeypatch: pytest.MonkeyPatch) -> None:
    import bitsandbytes

    from studio.train.errors import TrainError
    from studio.train.memory.quantized import bitsandbytes as library

    assert library() is bitsandbytes
    monkeypatch.setattr(bitsandbytes, "__version__", "0.45.5")
    with pytest.raises(TrainError) as caught:
        library()
    assert "needs bitsandbytes 0.49 or newer" in caught.value.message and "has 0.45.5" in caught.value.message
    assert '"int8" (no library)' in caught.value.hint
    assert "pip install -U bitsandbytes" in caught.value.hint


def test_an_int8_base_carries_a_loha_written_as_the_full_base_one(make_config, run_training, events_of,
                                                                 tiny_sd15: Path, tmp_path: Path) -> None:
    """LyCORIS over int8 (nf4 is refused by the schema): the same LyCORIS file as over the full base."""
    files = {}
    for kind in ("none", "int8"):
        config = _config(make_config, "sd15", tiny_sd15, kind, tmp_path / "runs")
        config.method.network, config.training.max_steps = "loha", 2
        config.output.formats = ["kohya"]
        code, run_dir = run_training(config, tmp_path / kind)
        assert code == 0, [e for e in events_of(run_dir) if e.type == "error"]
        (path,) = [p for p in (run_dir / "output").glob("*.safetensors")]
        files[kind] = load_file(str(path))
    assert any("hada_w1_a" in k for k in files["int8"])
    assert {k: v.shape for k, v in files["int8"].items()} == {k: v.shape for k, v in files["none"].items()}
    assert any(not torch.equal(files["int8"][k], files["none"][k]) for k in files["none"])  # trained over int8


def test_the_lora_trains_in_bf16_mixed_precision_over_an_nf4_base(make_config, run_training, events_of,
                                                                   tiny_sd3: Path, tmp_path: Path) -> None:
    losses = {}
    for precision in ("no", "bf16"):
        config = _config(make_config, "sd3", tiny_sd3, "nf4", tmp_path / "runs")
        config.training.mixed_precision, config.training.max_steps = precision, 2
        code, run_dir = run_training(config, tmp_path / precision)
        assert code == 0, [e for e in events_of(run_dir) if e.type == "error"]
        losses[precision] = _losses(events_of(run_dir))
        assert {v.dtype for v in _lora(run_dir).values()} == {torch.float32}  # output.save_precision
    assert losses["bf16"] != losses["no"]  # autocast ran the layers in bf16
    assert losses["bf16"] == pytest.approx(losses["no"], rel=0.01)


def test_the_base_is_quantized_once_the_caches_are_filled(make_config, run_training, events_of, tiny_sd3: Path,
                                                         tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While the encoders fill the caches the denoiser waits in system memory as loaded; its layers are
    quantized after, onto the training device (on a GPU: never beside the text encoders)."""
    import studio.train.loop as loop

    seen: dict[str, Any] = {}
    fill = loop.fill_caches

    def watched(trainer: Any) -> Any:
        denoiser = trainer.components.denoiser
        seen["while_caching"] = {type(m).__name__ for m in denoiser.modules()}
        return fill(trainer)

    setup = loop.Trainer.setup

    def after_setup(self: Any) -> None:
        setup(self)
        seen["training"] = {type(m).__name__ for m in self.components.denoiser.modules()}

    monkeypatch.setattr(loop, "fill_caches", watched)
    monkeypatch.setattr(loop.Trainer, "setup", after_setup)
    config = _config(make_config, "sd3", tiny_sd3, "int8", tmp_path / "runs")
    config.training.max_steps, config.training.cache_latents = 1, True
    code, run_dir = run_training(config, tmp_path)
    assert code == 0, [e for e in events_of(run_dir) if e.type == "error"]
    assert "Int8Linear" not in seen["while_caching"]
    assert "Int8Linear" in seen["training"]


def test_an_int8_layer_computes_near_the_wide_one_and_moves_like_any_weight() -> None:
    """The studio's int8 layer: a row scale each, close to the full layer, and plain tensors that move
    between devices with the module (which frozen blocks moved between host and GPU need; bitsandbytes'
    int8 layer refuses)."""
    import copy

    from studio.train.memory.quantized import Int8Linear, quantize_base

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 8)).requires_grad_(False)
    x = torch.randn(4, 64, requires_grad=True)
    wide = net(x)
    assert quantize_base(net, "int8", torch.float32, torch.device("cpu")) == ["0", "2"]
    assert isinstance(net[0], Int8Linear) and net[0].weight.dtype == torch.int8
    assert net[0].int8_scale.shape == (128, 1)
    out = net(x)
    assert (out - wide).norm() < 0.02 * wide.norm()
    out.sum().backward()  # the input's gradient flows through the widened weights
    assert x.grad is not None and x.grad.abs().sum() > 0
    moved = copy.deepcopy(net).to("meta")
    assert {t.device.type for t in (*moved.parameters(), *moved.buffers())} == {"meta"}
    assert moved[0].weight.dtype == torch.int8 and moved[0].int8_scale.dtype == torch.float32


@pytest.mark.parametrize("kind", ["int8", "nf4"])
def test_a_swapped_blocks_quantized_layers_keep_no_device_copy_after_the_forward(kind: str) -> None:
    """model.blocks_to_swap over a quantized base: once a swapped block has run forward, autograd holds no
    device copy of its quantized weights (the backward reads the copy brought back), so the GPU holds at most
    two swapped blocks, not all of them until the backward; the results are those of the unswapped base."""
    import copy

    from torch.multiprocessing.reductions import StorageWeakRef

    from studio.train.memory.block_swap import BlockSwap
    from studio.train.memory.quantized import quantize_base

    torch.manual_seed(0)
    blocks = torch.nn.ModuleList([torch.nn.Sequential(torch.nn.Linear(64, 64)) for _ in range(3)]).requires_grad_(False)
    resident = copy.deepcopy(blocks)
    quantize_base(resident, kind, torch.float32, torch.device("cpu"))
    quantize_base(blocks, kind, torch.float32, torch.device("cpu"), swapped=list(blocks)[1:])
    x = torch.randn(4, 64, requires_grad=True)

    def run(net: Any) -> Any:
        y = x
        for block in net:
            y = torch.tanh(block(y))
        return y

    expected = run(resident)
    expected.pow(2).sum().backward()
    expected_grad, x.grad = x.grad, None
    swap = BlockSwap(list(blocks), 2, torch.device("cpu"))
    brought: list[Any] = []
    for block in list(blocks)[1:]:  # after the swap's own hook, which brings the block's weights
        block.register_forward_pre_hook(
            lambda module, args: brought.append(StorageWeakRef(module[0].weight.untyped_storage())))
    y = run(blocks)
    assert len(brought) == 2
    assert all(ref.expired() for ref in brought), "autograd kept a swapped block's device copy after the forward"
    y.pow(2).sum().backward()
    assert swap.copies == 4
    torch.testing.assert_close(y, expected, atol=0, rtol=0)
    torch.testing.assert_close(x.grad, expected_grad, atol=0, rtol=0)


def test_a_swapped_blocks_layers_are_quantized_on_the_device_and_wait_on_the_host() -> None:
    """The layers of the blocks model.blocks_to_swap keeps in system memory go back there once quantized: the
    GPU never holds every quantized layer at once (Qwen-Image in int8: 20 GB). Here the host is the meta
    device, to tell it from the training device (an nf4 layer moves from a GPU to the host as any module
    does, but not to the meta device)."""
    from studio.train.memory.quantized import quantize_base

    net = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(64, 64)),
                              torch.nn.Sequential(torch.nn.Linear(64, 64))).requires_grad_(False)
    assert quantize_base(net, "int8", torch.float32, torch.device("cpu"), swapped=[net[1]],
                         host=torch.device("meta")) == ["0.0", "1.0"]
    assert {t.device.type for t in (*net[0].parameters(), *net[0].buffers())} == {"cpu"}
    assert {t.device.type for t in (*net[1].parameters(), *net[1].buffers())} == {"meta"}
    assert net[1][0].weight.dtype == torch.int8  # quantized before it left


def test_the_quantized_layers_come_to_the_device_after_the_encoders_leave_it(
        make_config, run_training, events_of, tiny_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU the quantized layers never meet the text encoders and the VAE there (Z-Image's 8 GB Qwen3
    beside its quantized transformer would pass the caching phase's peak), and the blocks model.blocks_to_swap
    keeps in system memory are the ones quantized back to it."""
    import studio.train.data.caching_phase as caching_phase
    import studio.train.loop as loop
    import studio.train.memory.quantized as quantized

    trainers: list[Any] = []
    seen: dict[str, Any] = {}
    setup, int8, quantize = loop.Trainer.setup, quantized._int8_in_place, caching_phase.quantize_base

    def watched_setup(self: Any) -> None:
        trainers.append(self)
        setup(self)

    def quantizing(layer: Any, device: Any) -> None:
        seen.setdefault("parked", set(trainers[0].offload.parked))
        int8(layer, device)

    def quantize_base(*args: Any, **kwargs: Any) -> Any:
        seen["swapped"] = args[4]
        return quantize(*args, **kwargs)

    monkeypatch.setattr(loop.Trainer, "setup", watched_setup)
    monkeypatch.setattr(quantized, "_int8_in_place", quantizing)
    monkeypatch.setattr(caching_phase, "quantize_base", quantize_base)
    config = _config(make_config, "flux2-klein", tiny_model("flux2-klein"), "int8", tmp_path / "runs")
    config.training.max_steps, config.training.cache_latents, config.training.cache_text_embeddings = 1, True, True
    config.model.blocks_to_swap = 2
    code, run_dir = run_training(config, tmp_path)
    assert code == 0, [e for e in events_of(run_dir) if e.type == "error"]
    assert seen["parked"] == {"vae", "text_encoder_1"}
    swap = trainers[0].block_swap
    assert [id(b) for b in seen["swapped"]] == [id(b) for b in swap.blocks[swap.first:]] and len(seen["swapped"]) == 2

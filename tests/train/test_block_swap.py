"""model.blocks_to_swap: a LoRA run with its last blocks' frozen weights kept off the compute device trains,
samples and resumes as the run that keeps them all there, and the blocks really do leave.

On the CPU the compute device is the CPU itself: a swapped-out weight holds an empty tensor, so a block that
ran without being brought back would fail, and each bring is a real copy from the host copy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file

from studio.core.config.schema import ModelSection, SamplingSection, TrainingSection
from studio.core.runs.events import Checkpoint, RunFinished, RunStarted, Step

torch = pytest.importorskip("torch")

# The transformer families it serves, each with how many of its tiny model's blocks to swap (all but one)
# and whether gradient checkpointing recomputes them (its recomputation runs inside the backward pass).
SERVED = [("flux2-klein", 2, True), ("zimage", 3, False), ("sd3", 1, True), ("qwen-image", 1, False)]


def _config(make_config: Any, family: str, swapped: int, checkpointing: bool, **sampling: Any) -> Any:
    config = make_config(family, training=TrainingSection(batch_size=2, max_steps=3, learning_rate=1e-2, seed=3,
                                                          gradient_checkpointing=checkpointing),
                         sampling=SamplingSection(**sampling))
    config.model.blocks_to_swap = swapped
    return config


def _losses(events: list[Any]) -> list[float]:
    return [e.loss for e in events if isinstance(e, Step)]


def _lora(run_dir: Path) -> dict[str, Any]:
    return load_file(str(run_dir / "output" / "pytorch_lora_weights.safetensors"))


@pytest.fixture
def watched_swap(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The run's BlockSwap, and how many swapped blocks held their weights whenever any block ran forward."""
    import studio.train.loop as loop

    seen: dict[str, Any] = {"resident": []}
    setup = loop.Trainer.setup

    def watched(self: Any) -> None:
        setup(self)
        seen["trained"] = {n: p for n, p in self.components.denoiser.named_parameters() if p.requires_grad}
        swap = seen["swap"] = self.block_swap
        if swap is None:
            return
        for block in swap.blocks:
            block.register_forward_pre_hook(
                lambda module, args: seen["resident"].append(
                    sum(all(p.numel() > 0 for p, _ in swap.host[i]) for i in swap.host)))

    monkeypatch.setattr(loop.Trainer, "setup", watched)
    return seen


@pytest.mark.parametrize(("family", "swapped", "checkpointing"), SERVED)
def test_a_swapped_run_trains_and_samples_as_the_unswapped_one(family: str, swapped: int, checkpointing: bool,
                                                                 make_config, run_training, events_of,
                                                                 watched_swap: dict[str, Any], tmp_path: Path) -> None:
    code, plain = run_training(_config(make_config, family, 0, checkpointing), tmp_path / "plain")
    assert code == 0, [e for e in events_of(plain) if e.type == "error"]
    assert watched_swap["swap"] is None
    sampled = {"every_n_steps": 3, "prompts": ["a red circle"], "steps": 2}
    code, swapped_run = run_training(_config(make_config, family, swapped, checkpointing, **sampled),
                                     tmp_path / "swapped")
    assert code == 0, [e for e in events_of(swapped_run) if e.type == "error"]
    swap = watched_swap["swap"]
    assert swap.swapped == swapped and swap.swapped_bytes() > 0
    # Every step's forward, backward and the sample's denoising brought the swapped blocks back one at a
    # time: at most the running one and the next one held their weights, and each came more than once.
    assert max(watched_swap["resident"]) <= 2 and swap.most_resident <= 2
    assert swap.copies >= 3 * 2 * swapped
    assert all(p.numel() == 0 for i in swap.host for p, _ in swap.host[i])  # all away again after the run
    assert (swapped_run / "samples" / "step-000003-0.png").is_file()

    plain_losses, swapped_losses = _losses(events_of(plain)), _losses(events_of(swapped_run))
    assert len(swapped_losses) == 3
    assert swapped_losses == pytest.approx(plain_losses, abs=1e-6, rel=0)
    expected, got = _lora(plain), _lora(swapped_run)
    assert got.keys() == expected.keys()
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], atol=1e-6, rtol=0)
    assert any(t.abs().max() > 0 for t in expected.values())  # the LoRA moved: equality says something


@pytest.mark.parametrize(("family", "swapped", "checkpointing"), [SERVED[0], SERVED[1]])
def test_each_step_copies_each_swapped_block_once_each_way_in_order(family: str, swapped: int, checkpointing: bool,
                                                                   make_config, run_training, events_of,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    """Forward: the next block is sent for as each one starts; backward: in reverse, each block once more
    (gradient checkpointing's recomputation finds it there). No block is copied twice for one pass."""
    from studio.train.memory.block_swap import BlockSwap

    sent: list[int] = []
    send = BlockSwap._send_for

    def recorded(self: BlockSwap, index: int) -> None:
        before = self.copies
        send(self, index)
        if self.copies > before:
            sent.append(index)

    monkeypatch.setattr(BlockSwap, "_send_for", recorded)
    config = _config(make_config, family, swapped, checkpointing)
    config.training.max_steps = 2
    code, run_dir = run_training(config, tmp_path)
    assert code == 0, [e for e in events_of(run_dir) if e.type == "error"]
    first = 4 - swapped if family == "zimage" else 3 - swapped
    forward = list(range(first, first + swapped))
    one_step = forward + forward[::-1]
    if family == "zimage":
        # Its caption refiner (block 1) reads no tensor that carries a gradient, so nothing marks the end of
        # its backward: it stays until the next forward, which finds it there and copies it no more.
        assert sent == one_step + one_step[1:-1] + [1] == [1, 2, 3, 3, 2, 1, 2, 3, 3, 2, 1]
    else:
        assert sent == one_step * 2


@pytest.mark.parametrize(("family", "changes"), [("flux2-klein", {"method.use_dora": True}),
                                               ("sd3", {"method.network": "lokr", "method.lokr_factor": 4}),
                                               ("zimage", {"method.network": "loha"}),
                                               ("qwen-image", {"model.fp8_base": True}),
                                               ("zimage", {"model.quantized_base": "int8"}),
                                               ("flux2-klein", {"model.quantized_base": "nf4"})])
def test_dora_lycoris_fp8_and_quantized_bases_train_on_swapped_blocks_as_on_resident_ones(family: str, changes: dict[str, Any],
                                                                         make_config, run_training, events_of,
                                                                         watched_swap: dict[str, Any],
                                                                         tmp_path: Path) -> None:
    """The adapter's own parameters (DoRA's magnitudes, LoKr's and LoHa's factors) stay put, and 8-bit or
    quantized (int8, nf4) base weights are swapped as they are stored."""
    swapped = {name: count for name, count, _ in SERVED}[family]
    losses, trained, files = [], [], []
    for count in (0, swapped):
        config = _config(make_config, family, count, False)
        data = config.model_dump()
        data["method"]["rank"] = 4
        for key, value in changes.items():
            section, name = key.split(".")
            data[section][name] = value
        config = type(config).model_validate(data)
        code, run_dir = run_training(config, tmp_path / str(count))
        assert code == 0, [e for e in events_of(run_dir) if e.type == "error"]
        losses.append(_losses(events_of(run_dir)))
        trained.append(watched_swap["trained"])
        files.append({p.name: load_file(str(p)) for p in sorted((run_dir / "output").rglob("*.safetensors"))})
    assert watched_swap["swap"].copies > 0
    assert losses[1] == pytest.approx(losses[0], abs=1e-6, rel=0)
    assert trained[1].keys() == trained[0].keys()
    for name, weight in trained[0].items():
        torch.testing.assert_close(trained[1][name], weight, atol=1e-6, rtol=0)
    # Every file written holds the same tensors: a DoRA file's ComfyUI scales read the swapped base weights too.
    assert files[1].keys() == files[0].keys() and files[0]
    for name, tensors in files[0].items():
        assert files[1][name].keys() == tensors.keys(), name
        for key, tensor in tensors.items():
            torch.testing.assert_close(files[1][name][key], tensor, atol=1e-6, rtol=0)
    assert any(key.endswith("dora_scale") for t in files[0].values() for key in t) == ("method.use_dora" in changes)
    stored = {"model.fp8_base": torch.float8_e4m3fn, "model.quantized_base": {"int8": torch.int8, "nf4": torch.uint8}}
    for key, value in changes.items():  # the weights travel as they are stored
        if key in stored:
            dtype = stored[key] if isinstance(stored[key], torch.dtype) else stored[key][value]  # type: ignore[index]
            hosts = [host for p in watched_swap["swap"].host.values() for _, host in p]
            assert any(host.dtype == dtype for host in hosts), {h.dtype for h in hosts}


@pytest.mark.parametrize(("family", "swapped", "checkpointing"), SERVED)
def test_a_swapped_run_stopped_and_resumed_ends_at_the_uninterrupted_weights(family: str, swapped: int,
                                                                             checkpointing: bool, make_config,
                                                                             run_training, events_of, stop_after,
                                                                             tmp_path: Path) -> None:
    def config() -> Any:
        return _config(make_config, family, swapped, checkpointing)

    code, straight = run_training(config(), tmp_path / "a")
    assert code == 0
    stop_after(2)
    code, run_dir = run_training(config(), tmp_path / "b")
    assert code == 0
    events = events_of(run_dir)
    assert isinstance(events[-1], RunFinished) and events[-1].status == "stopped"
    assert any(isinstance(e, Checkpoint) and e.step == 2 for e in events)
    stop_after(None)
    code, _ = run_training(None, tmp_path / "b", resume_dir=run_dir)
    assert code == 0
    events = events_of(run_dir)
    assert [e.resumed_from_step for e in events if isinstance(e, RunStarted)] == [0, 2]
    assert _losses(events) == pytest.approx(_losses(events_of(straight)), abs=1e-6, rel=0)
    resumed, expected = _lora(run_dir), _lora(straight)
    assert resumed.keys() == expected.keys()
    for key in expected:
        torch.testing.assert_close(resumed[key], expected[key], atol=1e-6, rtol=0)


def test_a_block_run_without_being_brought_back_fails_loudly(tiny_model) -> None:
    """The placeholder is what makes the CPU tests prove the schedule: no stale or missing weight computes."""
    from studio.core.families import family
    from studio.train.families import adapter_for
    from studio.train.memory.block_swap import swap_blocks

    config = _bare_config(tiny_model("sd3"))
    adapter = adapter_for(config)
    components = adapter.load(torch.device("cpu"), torch.float32)
    adapter.add_lora(components)
    swap = swap_blocks(components.denoiser, family("sd3").checkpointed_blocks, 1, torch.device("cpu"))
    block = swap.blocks[-1]
    lora = [p for p in block.parameters() if p.requires_grad]
    assert lora and all(p.numel() > 0 for p in lora)  # the LoRA stays where it trains
    for hook in swap.hooks:
        hook.remove()
    width = int(components.denoiser.config.num_attention_heads * components.denoiser.config.attention_head_dim)
    with pytest.raises(RuntimeError):
        block(hidden_states=torch.randn(1, 4, width), encoder_hidden_states=torch.randn(1, 3, width),
              temb=torch.randn(1, width))


def test_too_many_blocks_for_the_model_is_a_config_error(make_config, run_training, events_of, tmp_path) -> None:
    code, run_dir = run_training(_config(make_config, "sd3", 2, False), tmp_path)
    errors = [e for e in events_of(run_dir) if e.type == "error"]
    assert code != 0 and errors and errors[0].kind == "config"
    assert "model.blocks_to_swap = 2" in errors[0].message and "2 repeated blocks" in errors[0].message
    assert "at most 1" in errors[0].message


def _bare_config(base: Path) -> Any:
    from studio.core.config.schema import MethodSection, TrainConfig

    return TrainConfig(model=ModelSection(family="sd3", base=str(base)), method=MethodSection(rank=4))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_swapped_weights_wait_pinned_and_come_on_the_side_stream(make_config, run_training, events_of,
                                                                               watched_swap: dict[str, Any],
                                                                               tmp_path: Path) -> None:
    losses = []
    for count in (0, 2):
        code, run_dir = run_training(_config(make_config, "flux2-klein", count, True), tmp_path / str(count))
        assert code == 0, [e for e in events_of(run_dir) if e.type == "error"]
        losses.append(_losses(events_of(run_dir)))
    swap = watched_swap["swap"]
    assert swap.stream is not None and swap.most_resident <= 2
    assert all(host.is_pinned() for pairs in swap.host.values() for _, host in pairs)
    assert all(p.device.type == "cuda" and p.numel() == 0 for pairs in swap.host.values() for p, _ in pairs)
    assert losses[1] == pytest.approx(losses[0], abs=1e-5, rel=0)


def test_blocks_brought_under_inference_mode_train_afterwards(tiny_model) -> None:
    """A block that stays brought after an inference-mode forward holds ordinary tensors, which autograd
    may save for the backward pass."""
    from studio.core.families import family
    from studio.train.families import adapter_for
    from studio.train.memory.block_swap import swap_blocks

    config = _bare_config(tiny_model("sd3"))
    adapter = adapter_for(config)
    components = adapter.load(torch.device("cpu"), torch.float32)
    adapter.add_lora(components)
    swap = swap_blocks(components.denoiser, family("sd3").checkpointed_blocks, 1, torch.device("cpu"))
    with torch.inference_mode():
        swap._bring(1)
    assert not any(p.is_inference() for p, _ in swap.host[1])
    block = swap.blocks[1]
    width = int(components.denoiser.config.num_attention_heads * components.denoiser.config.attention_head_dim)
    hidden = torch.randn(1, 4, width, requires_grad=True)
    out = block(hidden_states=hidden, encoder_hidden_states=torch.randn(1, 3, width), temb=torch.randn(1, width))
    torch.cat([o.flatten() for o in out if o is not None]).sum().backward()
    assert hidden.grad is not None and hidden.grad.abs().sum() > 0


def test_a_weight_sliced_from_a_larger_buffer_swaps_and_computes_exactly() -> None:
    """A frozen weight a loader left as a slice of a larger buffer (offset into it) is swapped and brought back
    as its own tensor: the forward and the backward through it are the unswapped ones, bit for bit."""
    from studio.train.memory.block_swap import BlockSwap

    torch.manual_seed(0)
    buffer = torch.randn(2 * 8 * 8)
    blocks = [torch.nn.Linear(8, 8, bias=False) for _ in range(3)]
    for block in blocks:
        block.requires_grad_(False)
    blocks[2].weight.data = buffer[64:].view(8, 8)  # offset 64 into the buffer
    x = torch.randn(4, 8, requires_grad=True)

    def run(stack: list[torch.nn.Module]) -> tuple[torch.Tensor, torch.Tensor]:
        x.grad = None
        y = x
        for block in stack:
            y = torch.tanh(block(y))
        y.pow(2).sum().backward()
        assert x.grad is not None
        return y.detach(), x.grad.clone()

    expected = run(blocks)
    swap = BlockSwap(blocks, 2, torch.device("cpu"))
    got = run(blocks)
    assert swap.copies == 4 and swap.most_resident <= 2
    torch.testing.assert_close(got[0], expected[0], atol=0, rtol=0)
    torch.testing.assert_close(got[1], expected[1], atol=0, rtol=0)


@pytest.mark.parametrize("device", [torch.device("cpu"), torch.device("cpu", 0)], ids=["plain", "indexed"])
def test_without_checkpointing_autograd_keeps_no_device_copy_of_a_swapped_weight(device: torch.device) -> None:
    """The forward leaves no swapped weight's device copy in autograd's keeping, whether the run's device names
    its index or not: on one GPU the run's device is plain "cuda" while its tensors say "cuda:0" (here the
    same mismatch the other way round, "cpu:0" against "cpu"); the backward reads the copies brought back."""
    from torch.multiprocessing.reductions import StorageWeakRef

    from studio.train.memory.block_swap import BlockSwap

    torch.manual_seed(0)
    blocks = [torch.nn.Linear(8, 8, bias=False) for _ in range(3)]
    for block in blocks:
        block.requires_grad_(False)
    x = torch.randn(4, 8, requires_grad=True)
    expected_y = torch.tanh(blocks[2](torch.tanh(blocks[1](torch.tanh(blocks[0](x))))))
    expected_y.pow(2).sum().backward()
    expected_grad, x.grad = x.grad, None

    swap = BlockSwap(blocks, 2, device)
    brought: list[StorageWeakRef] = []
    for block in blocks[1:]:  # after the swap's own hook, which brings the block's weights
        block.register_forward_pre_hook(lambda module, args: brought.append(StorageWeakRef(module.weight.untyped_storage())))
    y = torch.tanh(blocks[2](torch.tanh(blocks[1](torch.tanh(blocks[0](x))))))
    assert len(brought) == 2
    assert all(ref.expired() for ref in brought), "autograd kept a swapped block's device copy after the forward"
    y.pow(2).sum().backward()
    assert swap.copies == 4
    torch.testing.assert_close(x.grad, expected_grad, atol=0, rtol=0)


def test_host_copies_are_exact_and_packed_into_few_buffers_of_a_power_of_two(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's pinned-memory allocator rounds each allocation up to a power of two: one pinned tensor per weight
    took up to 78% more system memory than these weights. The arena's buffers are powers of two already, and the
    weights fill them: what it reserves stays near the weights' own size, and every copy is exact."""
    from studio.train.memory import block_swap
    from studio.train.memory.block_swap import host_copies

    monkeypatch.setattr(block_swap, "PINNED_CHUNK_BYTES", 2**20)  # 256 MB on a GPU, here in proportion
    torch.manual_seed(0)
    weights: list[torch.Tensor] = []
    for _ in range(12):  # a 3072-wide block's weights at 1/32 of their width: attention in fp8, the MLP in bf16
        weights += [torch.randn(96, 96).to(torch.float8_e4m3fn) for _ in range(4)]
        weights += [torch.randn(384, 96, dtype=torch.bfloat16), torch.randn(96, 384, dtype=torch.bfloat16).t()]
        weights += [torch.randn(96), torch.tensor(1.5)]  # a bias, a scalar
    weights.append(torch.randint(-127, 127, (2048, 600), dtype=torch.int8))  # larger than a buffer: its own
    arena = host_copies(weights, pinned=False)
    copies = arena.tensors

    for weight, copy in zip(weights, copies, strict=True):
        assert copy.dtype == weight.dtype and copy.shape == weight.shape
        assert torch.equal(copy.float(), weight.float())
    assert all(b.numel() & (b.numel() - 1) == 0 for b in arena.buffers), [b.numel() for b in arena.buffers]
    assert len({c.untyped_storage().data_ptr() for c in copies[:-1]}) == len(arena.buffers) <= 4
    size = sum(w.numel() * w.element_size() for w in weights)
    one_each = sum(1 << (w.numel() * w.element_size() - 1).bit_length() for w in weights)
    assert arena.reserved <= 1.15 * size < 0.7 * one_each, (arena.reserved, size, one_each)


def test_the_weights_waiting_in_system_memory_go_as_their_pinned_copies_come(monkeypatch: pytest.MonkeyPatch) -> None:
    """The swapped weights wait in system memory until block swap takes their copies: each goes as soon as its
    copy is made, buffer by buffer, so the machine never holds them twice (the RAM estimate counts them once)."""
    from torch.multiprocessing.reductions import StorageWeakRef

    from studio.train.memory import block_swap

    chunk = 2**16
    monkeypatch.setattr(block_swap, "PINNED_CHUNK_BYTES", chunk)
    torch.manual_seed(0)
    parameters = [torch.nn.Parameter(torch.randn(64, 64).to(torch.bfloat16), requires_grad=False) for _ in range(12)]
    parameters.append(torch.nn.Parameter(torch.randn(256, 256), requires_grad=False))  # larger than a buffer
    values = [p.detach().clone() for p in parameters]
    waiting = [(StorageWeakRef(p.data.untyped_storage()), p.numel() * p.element_size()) for p in parameters]
    total = sum(size for _, size in waiting)
    held: list[int] = []  # system memory at each new buffer: the weights still waiting, and the buffers made
    made: list[int] = []
    make = block_swap._buffer

    def counted(size: int, pinned: bool) -> torch.Tensor:
        made.append(size)
        held.append(sum(n for ref, n in waiting if not ref.expired()) + sum(made))
        return make(size, pinned)

    monkeypatch.setattr(block_swap, "_buffer", counted)
    copies = block_swap.host_copies(parameters, pinned=False).tensors
    assert len(made) == 2 and max(held) <= total + chunk, (held, total)  # never every weight twice
    assert all(ref.expired() for ref, _ in waiting[:-1])  # gone; the large one is its own copy (unpinned here)
    for parameter, copy, value in zip(parameters, copies, values, strict=True):
        assert parameter.data.data_ptr() == copy.data_ptr() and torch.equal(copy, value)


class _Gpu:
    """A GPU that lags behind the host (as a small card does behind the host queueing a 1024 px step), and how its
    caching allocator hands out the swapped blocks' copies: memory freed is reused at once by the next copy on the
    same stream, unless record_stream tied it to the compute stream, whose work here never completes in time."""

    def __init__(self) -> None:
        self.tick = 0
        self.compute = _Stream(self, "compute")
        self.sending: int | None = None  # the block a copy is being made for
        self.bringing: int | None = None  # the block whose copy is being put in place
        self.recorded: set[int] = set()  # blocks whose current copy record_stream tied to the compute stream
        self.side_waited = -1  # where in the compute stream's work the side stream last waited
        self.free: list[int] = []  # freed copies the next one may reuse: when each was freed
        self.held = 0  # copies' memory the allocator holds
        self.most_held = 0

    def now(self) -> int:
        self.tick += 1
        return self.tick

    def copy_made(self) -> None:
        assert self.sending is not None
        self.recorded.discard(self.sending)
        if self.free:
            freed = self.free.pop()
            assert self.side_waited > freed, "a copy overwrote memory the compute stream may still read"
        else:
            self.held += 1
            self.most_held = max(self.most_held, self.held)
        self.now()

    def copy_freed(self, index: int) -> None:
        if index not in self.recorded:
            self.free.append(self.now())


class _Stream:
    def __init__(self, gpu: _Gpu, name: str) -> None:
        self.gpu, self.name = gpu, name

    def wait_stream(self, other: _Stream) -> None:
        if self.name == "side" and other.name == "compute":
            self.gpu.side_waited = self.gpu.now()

    def wait_event(self, event: _Event) -> None:
        if self.name == "side" and event.stream is not None and event.stream.name == "compute":
            self.gpu.side_waited = event.at


class _Event:
    def __init__(self, gpu: _Gpu) -> None:
        self.gpu, self.stream, self.at = gpu, None, -1

    def record(self, stream: _Stream | None = None) -> None:
        self.stream, self.at = stream or self.gpu.compute, self.gpu.now()


def test_a_host_far_ahead_of_the_gpu_holds_two_swapped_blocks_not_every_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host queues a step's blocks far ahead of the GPU running them. A dropped block's copy freed with
    record_stream stayed the allocator's until the GPU caught up, so each block queued ahead took memory of its
    own: all the swapped blocks at once (3.2 GB of them on a 6 GB card), where the estimate counts two. The
    swap's copies reuse the memory of the blocks dropped before, safely: the side stream waits for the compute
    stream's work first."""
    import contextlib

    from studio.train.memory import block_swap
    from studio.train.memory.block_swap import BlockSwap

    torch.manual_seed(0)
    blocks = [torch.nn.Linear(8, 8, bias=False) for _ in range(6)]
    for block in blocks:
        block.requires_grad_(False)
    x = torch.randn(4, 8, requires_grad=True)

    def step() -> torch.Tensor:
        x.grad = None
        y = x
        for block in blocks:
            y = torch.tanh(block(y))
        y.pow(2).sum().backward()
        assert x.grad is not None
        return x.grad.clone()

    expected = step()
    gpu = _Gpu()
    swap = BlockSwap(blocks, 5, torch.device("cpu"))
    swap.stream = _Stream(gpu, "side")  # the GPU path, its copies being the host copies themselves

    @contextlib.contextmanager
    def on_stream(stream: _Stream) -> Any:
        if stream.name == "side":
            gpu.copy_made()
        yield

    def record_stream(tensor: torch.Tensor, stream: _Stream) -> None:
        if stream.name == "compute" and gpu.bringing is not None:
            gpu.recorded.add(gpu.bringing)

    send_for, bring, drop = BlockSwap._send_for, BlockSwap._bring, BlockSwap._drop

    def sending(self: BlockSwap, index: int) -> None:
        gpu.sending = index
        send_for(self, index)

    def bringing(self: BlockSwap, index: int) -> None:
        gpu.bringing = index
        bring(self, index)
        gpu.bringing = None

    def dropping(self: BlockSwap, index: int) -> None:
        had_copy = index in self.resident
        drop(self, index)
        if had_copy:
            gpu.copy_freed(index)

    monkeypatch.setattr(block_swap.torch.cuda, "current_stream", lambda device=None: gpu.compute)
    monkeypatch.setattr(block_swap.torch.cuda, "stream", on_stream)
    monkeypatch.setattr(block_swap.torch.cuda, "Event", lambda *args, **kwargs: _Event(gpu))
    monkeypatch.setattr(torch.Tensor, "record_stream", record_stream)
    monkeypatch.setattr(BlockSwap, "_send_for", sending)
    monkeypatch.setattr(BlockSwap, "_bring", bringing)
    monkeypatch.setattr(BlockSwap, "_drop", dropping)
    for _ in range(2):
        torch.testing.assert_close(step(), expected, atol=0, rtol=0)
    assert swap.copies == 20
    assert gpu.most_held <= 2, f"{gpu.most_held} swapped blocks' copies held at once"


def test_a_swapped_blocks_weights_come_in_one_allocation_and_leave_with_the_forward() -> None:
    """Each swapped block's frozen weights are brought as views of one allocation, so the caching allocator fits
    a block's copy into the memory of one dropped before it whatever their layers' sizes (one allocation per
    weight left FLUX.2 [klein]'s single-stream blocks unable to fit the holes of its double-stream ones: about
    190 MB over the estimate's two blocks for the 4B, 290 MB for the 9B). Autograd still keeps none of it after
    the forward (each saved weight is found in the shared allocation), and the numbers are the unswapped ones."""
    from torch.multiprocessing.reductions import StorageWeakRef

    from studio.train.memory.block_swap import BlockSwap
    from studio.train.memory.fp8 import store_in_float8

    torch.manual_seed(0)
    blocks = [torch.nn.Sequential(torch.nn.Linear(8, width), torch.nn.LayerNorm(width),
                                  torch.nn.Linear(width, 8, bias=False)) for width in (16, 32, 12, 24)]
    for block in blocks:
        block.requires_grad_(False)
        store_in_float8(torch.nn.Sequential(block[2]), torch.float32)  # an 8-bit layer beside 32-bit ones
    x = torch.randn(4, 8, requires_grad=True)

    def forward() -> torch.Tensor:
        y = x
        for block in blocks:
            y = torch.tanh(block(y))
        return y.pow(2).sum()

    forward().backward()
    expected, x.grad = x.grad, None
    swap = BlockSwap(blocks, 3, torch.device("cpu"))
    brought: list[StorageWeakRef] = []

    def look(module: torch.nn.Module, args: Any) -> None:
        storages = {p.untyped_storage().data_ptr() for p in module.parameters()}
        assert len(storages) == 1, f"{len(storages)} allocations for one block's weights"
        brought.append(StorageWeakRef(next(module.parameters()).untyped_storage()))

    for block in blocks[1:]:  # after the swap's own hook, which brings the block's weights
        block.register_forward_pre_hook(look)
    loss = forward()
    assert len(brought) == 3
    assert all(ref.expired() for ref in brought), "autograd kept a swapped block's device copy after the forward"
    loss.backward()
    assert swap.copies == 6
    torch.testing.assert_close(x.grad, expected, atol=0, rtol=0)

"""Between its read-backs the training loop never waits for the device: no read of a device tensor and no
copy to the device from pageable host memory (torch waits for the stream after such a copy).

On a GPU every read of a number back to the host (`.item()`, `float(tensor)`, `bool(tensor)`, a
`nonzero` whose size the host must know) stops the CPU until every queued kernel has run, so the
next step cannot be prepared meanwhile: a batch-1 step then takes as long as a batch-4 one. The
trainer reads back only in the step meter's report (every few steps, before samples, checkpoints and
the end) and in the work between steps that it pauses the clock for (samples, checkpoints). This
test counts every host read the whole loop dispatches outside those two, over a run, with the EMA,
gradient clipping, LyCORIS adapters and the uncached text path the presets use.

The test runs on the CPU, where every tensor is on the host; on a GPU a tensor made without a device
(peft's LoHa and LoKr draw `torch.rand(1)` per layer for their module dropout) stays on the host and
reading it waits for nothing. Such host-born tensors, and what is computed from them alone, are told
apart with a function mode that sees the calls as written.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")

HOST_READS = ("_local_scalar_dense", "item", "equal", "is_nonzero", "nonzero", "masked_select", "_unique2",
              "unique_dim", "unique_consecutive")


FACTORIES = ("rand", "randn", "randint", "randperm", "zeros", "ones", "empty", "full", "tensor", "as_tensor",
             "arange", "linspace", "scalar_tensor", "from_numpy")


class HostBorn:
    """Tensors that a GPU run would hold on the host: made by a factory called without a device, or computed
    from such tensors only."""

    def __init__(self, on_copy: Any = None) -> None:
        self.refs: dict[int, weakref.ref[Any]] = {}
        # Called with the call's name for each copy of host data to the device from pageable memory (a blocking
        # `.to(device)` of a host-born tensor, `torch.tensor(data, device=...)`): on a GPU each waits for the
        # steps queued before it.
        self.on_copy = on_copy or (lambda name: None)

    def __contains__(self, tensor: Any) -> bool:
        ref = self.refs.get(id(tensor))
        return ref is not None and ref() is tensor

    def add(self, value: Any) -> None:
        for tensor in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(tensor, torch.Tensor):
                self.refs[id(tensor)] = weakref.ref(tensor)

    def mode(self) -> Any:
        from torch.overrides import TorchFunctionMode

        born = self

        class Tag(TorchFunctionMode):
            def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                kwargs = kwargs or {}
                result = func(*args, **kwargs)
                name = getattr(func, "__name__", "")
                tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
                if name in FACTORIES and not tensors:
                    host = kwargs.get("device") is None
                    if not host and name in ("tensor", "as_tensor"):
                        born.on_copy(name)
                elif name in ("to", "cuda"):  # moved to a device: on a GPU it leaves the host
                    moved = name == "cuda" or any(isinstance(a, (torch.device, str))
                                                  for a in (*args[1:], *kwargs.values()))
                    host = args[0] in born and not moved
                    if args[0] in born and moved and not kwargs.get("non_blocking"):
                        born.on_copy(name)
                    if moved:  # on a GPU a new tensor on the device (on the CPU, often the same object)
                        born.refs.pop(id(result), None)
                elif name == "copy_":
                    host = args[0] in born
                else:
                    host = bool(tensors) and all(t in born for t in tensors)
                if host:
                    born.add(result)
                return result

        return Tag()


def host_reads_of_a_run(make_config: Any, run_training: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                        config: Any) -> tuple[Counter[tuple[str, int]], int]:
    """(host reads of device tensors outside the read-backs, the paused work and the run's end, by (op, step);
    read-backs) of a run."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from studio.train.loop import Trainer
    from studio.train.progress import step_meter

    outside: Counter[tuple[str, int]] = Counter()
    allowed = [1]  # until the steps begin (the run's setup reads its schedules once)
    flushes = [0]
    trainer_of: list[Any] = []

    pinned = [0]  # inside the trainer's to_device, which copies through pinned memory on a GPU

    def copied(name: str) -> None:
        if not allowed[0] and not pinned[0]:
            outside[(f"pageable copy ({name})", trainer_of[0].step)] += 1

    from studio.train.memory import transfer

    original_to_device = transfer.to_device

    def through_pinned(*args: Any, **kwargs: Any) -> Any:
        pinned[0] += 1
        try:
            return original_to_device(*args, **kwargs)
        finally:
            pinned[0] -= 1

    import studio.train.loop  # noqa: F401  (the trainer's modules, loaded: each that copies is patched)
    from studio.train.families import adapter_for

    adapter_for(config)  # the family's module
    for name, module in list(sys.modules.items()):
        if name.startswith("studio.train") and module is not transfer and \
                getattr(module, "to_device", None) is original_to_device:
            monkeypatch.setattr(module, "to_device", through_pinned)

    host = HostBorn(copied)

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            name = func.overloadpacket.__name__
            if name in HOST_READS and not allowed[0] and not all(a in host for a in args
                                                                 if isinstance(a, torch.Tensor)):
                outside[(name, trainer_of[0].step)] += 1
            return func(*args, **(kwargs or {}))

    original_train, original_flush, original_finish = Trainer._train, step_meter.StepMeter.flush, Trainer._finish
    original_paused, original_start = step_meter.StepMeter.paused, step_meter.StepMeter.start

    def start(self: Any) -> None:
        allowed[0] -= 1
        original_start(self)

    def counted_train(self: Trainer, batches: Any) -> Any:
        trainer_of.append(self)
        with host.mode(), Count():
            return original_train(self, batches)

    def flush(self: Any, stop_wanted: bool) -> Any:
        flushes[0] += 1
        allowed[0] += 1
        try:
            return original_flush(self, stop_wanted)
        finally:
            allowed[0] -= 1

    @contextlib.contextmanager
    def paused(self: Any) -> Iterator[None]:
        allowed[0] += 1
        try:
            with original_paused(self):
                yield
        finally:
            allowed[0] -= 1

    def finish(self: Trainer, *args: Any) -> Any:  # the run's end (its outputs) is no step
        allowed[0] += 1
        try:
            return original_finish(self, *args)
        finally:
            allowed[0] -= 1

    monkeypatch.setattr(Trainer, "_train", counted_train)
    monkeypatch.setattr(Trainer, "_finish", finish)
    monkeypatch.setattr(step_meter.StepMeter, "flush", flush)
    monkeypatch.setattr(step_meter.StepMeter, "start", start)
    monkeypatch.setattr(step_meter.StepMeter, "paused", paused)
    code, _ = run_training(config, tmp_path / "run")
    assert code == 0
    return outside, flushes[0]


CASES = {
    # family, method settings, training settings
    "sd15 lora, ema, clipping, no caches": ("sd15", {}, {"ema": True, "max_grad_norm": 1.0}),
    "sdxl loha, cached": ("sdxl", {"network": "loha"}, {"cache_latents": True, "cache_text_embeddings": True}),
    "sd3 lokr, cached latents": ("sd3", {"network": "lokr"}, {"cache_latents": True}),
    "zimage lora, cached, ema every 2": ("zimage", {}, {"cache_latents": True, "cache_text_embeddings": True,
                                                        "ema": True, "ema_every": 2}),
    "flux2-klein lora, cached": ("flux2-klein", {}, {"cache_latents": True, "cache_text_embeddings": True}),
    "qwen-image lora, cached": ("qwen-image", {}, {"cache_latents": True, "cache_text_embeddings": True}),
}


# Waits inside the libraries that the trainer cannot remove from outside, one per step: diffusers' Qwen-Image
# transformer makes the caption length a device tensor from a Python int (compute_text_seq_len_from_mask,
# `torch.as_tensor(text_seq_len, device=...)`) when given the caption mask, which the studio must give.
KNOWN = {"qwen-image": ("pageable copy (as_tensor)",)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_loop_reads_nothing_back_between_its_reports(case: str, make_config, run_training, tmp_path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    family, method, training = CASES[case]
    config = make_config(family)
    for key, value in method.items():
        setattr(config.method, key, value)
    for key, value in training.items():
        setattr(config.training, key, value)
    config.training.max_steps = 5
    outside, flushes = host_reads_of_a_run(make_config, run_training, tmp_path, monkeypatch, config)
    assert flushes >= 1  # the counter saw the read-backs it lets through
    known = {(what, step): 1 for what in KNOWN.get(family, ()) for step in range(5)}
    assert dict(outside) == known, f"{case}: host reads outside the reports (op, step): {dict(outside)}"


def test_a_read_back_inside_a_step_is_caught(make_config, run_training, tmp_path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The counter is not blind: a loss logged with `.item()` in every step shows as one read per step."""
    from studio.train.loop import Trainer

    original = Trainer._loss

    def logged(self: Trainer, *args: Any) -> Any:
        loss = original(self, *args)
        print(f"loss {loss.item():.4f}")
        return loss

    monkeypatch.setattr(Trainer, "_loss", logged)
    config = make_config("sd15")
    config.training.max_steps = 3
    outside, _flushes = host_reads_of_a_run(make_config, run_training, tmp_path, monkeypatch, config)
    assert sorted(outside) == [("_local_scalar_dense", 0), ("_local_scalar_dense", 1), ("_local_scalar_dense", 2)]


def test_a_host_tensor_moved_to_the_device_counts_as_the_device_s() -> None:
    """On a GPU `torch.tensor(...).to(device)` is a device tensor: reading it waits, and the test says so."""
    born = HostBorn()
    with born.mode():
        made = torch.rand(1)
        compared = made > 0.5
        moved = made.to(torch.device("cpu"), copy=True)  # a new tensor, as the copy to a GPU makes
        placed = torch.zeros(1, device="cpu")
        from_moved = moved * 2
    assert made in born and compared in born
    assert moved not in born and placed not in born and from_moved not in born

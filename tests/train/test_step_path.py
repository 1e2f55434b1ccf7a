"""What keeps the GPU busy: the optimizer, data read ahead, latents on the device, the launcher's
single process, and the speed figures in the step events."""

from __future__ import annotations

import threading
import time

import pytest

from studio.core.config.schema import TrainingSection
from studio.core.runs.events import Step

torch = pytest.importorskip("torch")


def _adamw_run(cuda: bool) -> tuple[torch.optim.Optimizer, list[torch.Tensor]]:
    from studio.train.optim import build_optimizer

    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(8, 8)), torch.nn.Parameter(torch.randn(8))]
    optimizer = build_optimizer([{"params": params, "lr": 1e-2}], TrainingSection(learning_rate=1e-2), cuda)
    for step in range(5):
        for p in params:
            p.grad = torch.sin(p.detach() * (step + 1))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return optimizer, [p.detach().clone() for p in params]


def test_adamw_is_fused_on_cuda_and_on_the_cpu_with_the_plain_loops_result() -> None:
    """One fused kernel per step everywhere: the multi-tensor path reads each parameter's step count
    back to the host inside the step (tests/train/test_step_op_count.py)."""
    fused, fused_params = _adamw_run(cuda=True)  # the CUDA choice; torch runs fused AdamW on the CPU too
    cpu, cpu_params = _adamw_run(cuda=False)
    assert fused.defaults["fused"] and cpu.defaults["fused"] and not cpu.defaults["foreach"]
    torch.manual_seed(0)
    plain_params = [torch.nn.Parameter(torch.randn(8, 8)), torch.nn.Parameter(torch.randn(8))]
    plain = torch.optim.AdamW(plain_params, lr=1e-2, weight_decay=1e-2, foreach=False)
    for step in range(5):
        for p in plain_params:
            p.grad = torch.sin(p.detach() * (step + 1))
        plain.step()
    for a, b, c in zip(fused_params, cpu_params, plain_params, strict=True):
        torch.testing.assert_close(a, c.detach())
        torch.testing.assert_close(b, c.detach())


def test_adamw8bit_steps_without_waiting_for_the_gpu_after_each_parameter(monkeypatch: pytest.MonkeyPatch) -> None:
    """bitsandbytes waits for the whole GPU after each parameter it updates (for its paged state, which the
    studio does not use): hundreds of waits a step for a LoRA. The studio's 8-bit AdamW makes the same updates
    without them, and leaves the library's waits in place for everything else."""
    pytest.importorskip("bitsandbytes")
    from bitsandbytes.optim import AdamW8bit
    from bitsandbytes.optim import optimizer as library

    from studio.train.optim import build_optimizer, build_scheduler

    waits: list[torch.Tensor] = []
    monkeypatch.setattr(library, "sync_gpu", waits.append)  # on a GPU each call is a torch.cuda.synchronize()
    runs = []
    for make in (lambda groups: build_optimizer(groups, TrainingSection(optimizer="adamw8bit", learning_rate=1e-2),
                                                True),
                 lambda groups: AdamW8bit(groups, lr=1e-2, weight_decay=1e-2)):
        torch.manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(64, 80)), torch.nn.Parameter(torch.randn(8))]
        optimizer = make([{"params": params, "lr": 1e-2}])
        scheduler = build_scheduler(optimizer, TrainingSection(), 3)
        for step in range(3):
            for p in params:
                p.grad = torch.sin(p.detach() * (step + 1))
            optimizer.step()
            scheduler.step()
        runs.append((len(waits), [p.detach().clone() for p in params]))
    (studio_waits, studio_params), (library_waits, library_params) = runs
    assert studio_waits == 0
    assert library_waits == 3 * 2  # the library's own optimizer still waits after each parameter
    assert library.sync_gpu == waits.append
    for a, b in zip(studio_params, library_params, strict=True):
        torch.testing.assert_close(a, b)


def test_prefetcher_keeps_the_order_and_raises_where_the_consumer_reads() -> None:
    from studio.train.data.prefetch import Prefetcher

    assert list(Prefetcher(iter(range(10)), depth=2)) == list(range(10))

    def broken():
        yield 1
        raise ValueError("image 2 is damaged")

    feed = Prefetcher(broken())
    assert next(feed) == 1
    with pytest.raises(ValueError, match="image 2 is damaged"):
        next(feed)


def test_closing_the_prefetcher_ends_its_thread_even_when_it_waits() -> None:
    from studio.train.data.prefetch import Prefetcher

    feed = Prefetcher(iter(range(1000)), depth=1)
    assert next(feed) == 0
    time.sleep(0.05)  # the producer now waits on the full queue
    feed.close()
    assert not any(t.name == "studio-prefetch" and t.is_alive() for t in threading.enumerate())


def test_cached_latents_move_to_the_device_when_they_fit_the_budget() -> None:
    from studio.train.data.cache import LatentCache, gpu_cache_budget

    cache = LatentCache()
    cache.latents = {i: torch.full((4, 8, 8), float(i)) for i in range(3)}
    size = 3 * 4 * 8 * 8 * 4
    assert gpu_cache_budget(torch.device("cpu")) == 0
    assert not cache.keep_on(torch.device("cpu"), 10**9)
    meta = torch.device("meta")  # a stand-in device: the CPU CI has no GPU
    assert not cache.keep_on(meta, size - 1) and cache.latents[0].device.type == "cpu"
    assert cache.keep_on(meta, size) and all(t.device == meta for t in cache.latents.values())
    assert cache.batch([2, 0], meta, torch.float32).shape == (2, 4, 8, 8)


class _OnGpu:
    """An embedding as the encoder leaves it on the GPU (a stand-in: the CPU CI has none)."""

    device = torch.device("cuda")

    def __init__(self, value: torch.Tensor) -> None:
        self.value = value

    def __getitem__(self, index: int) -> _OnGpu:
        return _OnGpu(self.value[index])

    def detach(self) -> _OnGpu:
        return self

    def clone(self) -> _OnGpu:
        return _OnGpu(self.value.clone())

    def cpu(self) -> torch.Tensor:
        return self.value


def test_cached_caption_embeddings_wait_in_system_memory_and_move_to_the_device_when_they_fit() -> None:
    """FLUX.2 [klein] 9B's embeddings are 12 MB a caption: a thousand left on the GPU where the encoder made them
    took 12 GB of it beside the transformer."""
    from types import SimpleNamespace

    from studio.train.data.cache import TextCache

    class Encoder:
        def encode_prompts(self, components: object, captions: list[str]) -> dict[str, _OnGpu]:
            rows = torch.stack([torch.full((4, 8), float(len(c))) for c in captions])
            return {"prompt_embeds": _OnGpu(rows), "prompt_mask": _OnGpu(torch.ones(len(captions), 4))}

    cache = TextCache()
    cache.fill(Encoder(), SimpleNamespace(), ["a", "bb", "ccc"], 2, lambda *args: None)  # type: ignore[arg-type]
    assert all(t.device.type == "cpu" for entry in cache.embeddings.values() for t in entry.values())
    assert float(cache.embeddings["ccc"]["prompt_embeds"][0, 0]) == 3.0
    size = 3 * (4 * 8 + 4) * 4
    assert cache.nbytes() == size
    meta = torch.device("meta")
    assert not cache.keep_on(meta, size - 1) and cache.embeddings["a"]["prompt_embeds"].device.type == "cpu"
    assert cache.keep_on(meta, size) and all(t.device == meta for e in cache.embeddings.values() for t in e.values())


def test_the_latents_kept_on_a_capped_gpu_are_a_share_of_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """A preset proven under STUDIO_GPU_CAP_MB on a larger card keeps the latents its own card would."""
    from types import SimpleNamespace

    from studio.train.data import cache

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(total_memory=141 * 2**30))
    monkeypatch.delenv("STUDIO_GPU_CAP_MB", raising=False)
    assert cache.gpu_cache_budget(torch.device("cuda")) == int(141 * 2**30 * cache.GPU_CACHE_FRACTION)
    monkeypatch.setenv("STUDIO_GPU_CAP_MB", "5600")
    assert cache.gpu_cache_budget(torch.device("cuda")) == int(5600 * 2**20 * cache.GPU_CACHE_FRACTION)


def _launch_args(*extra: str):
    from accelerate.commands.launch import launch_command_parser

    return launch_command_parser().parse_args([*extra, "-m", "studio.train", "run/config.toml"])


def test_a_single_process_run_trains_in_the_launchers_process() -> None:
    from studio.train.launcher import runs_here

    assert runs_here(_launch_args("--num_processes", "1", "--num_machines", "1"))
    assert not runs_here(_launch_args("--num_processes", "2", "--num_machines", "1"))
    assert not runs_here(_launch_args("--num_processes", "1", "--num_machines", "1", "--gpu_ids", "1"))
    other = _launch_args("--num_processes", "1", "--num_machines", "1")
    other.training_script = "train.py"
    assert not runs_here(other)


@pytest.mark.parametrize("argv, given, threads", [
    (["--num_processes", "1", "--gpu_ids", "1"], None, 8),  # a chosen GPU: accelerate starts the trainer
    (["--num_processes", "2", "--multi_gpu"], None, 4),  # two ranks share the cores
    (["--num_processes", "1", "--gpu_ids", "1"], "3", 3),  # the person's own OMP_NUM_THREADS stays
    (["--num_processes", "1", "--gpu_ids", "1", "--num_cpu_threads_per_process", "5"], None, 5),
])
def test_a_trainer_that_accelerate_starts_gets_the_machines_cores(monkeypatch: pytest.MonkeyPatch, argv: list[str],
                                                                   given: str | None, threads: int) -> None:
    """A text encoder kept in system memory encodes every caption on the CPU: a trainer started by accelerate
    (a chosen GPU, several GPUs) got one thread for it (OMP_NUM_THREADS=1), however many cores the machine has."""
    import psutil
    from accelerate.commands import launch
    from accelerate.utils.launch import prepare_simple_launcher_cmd_env

    from studio.train import launcher

    started: list[str] = []

    def start(args) -> None:  # what the trainer's process would be given
        started.append(prepare_simple_launcher_cmd_env(args)[1]["OMP_NUM_THREADS"])

    monkeypatch.setattr(launch, "simple_launcher", start)
    monkeypatch.setattr(launch, "multi_gpu_launcher", start)
    monkeypatch.setattr(launch, "_validate_launch_command", launch._validate_launch_command)  # main() wraps it
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 8 if not logical else 16)
    if given is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", given)
    assert launcher.main([*argv, "--num_machines", "1", "-m", "studio.train", "run/config.toml"]) == 0
    assert started == [str(threads)]


def test_step_events_carry_tflops_for_a_counted_model(make_config, run_training, events_of, tmp_path,
                                                      monkeypatch, capsys) -> None:
    from studio.core.estimate.throughput import forward_tflop
    from studio.train.progress import step_meter

    # The tiny model stands in for the real SD1.5 architecture (whose FLOPs are counted).
    monkeypatch.setattr(step_meter, "is_counted_architecture", lambda family, params: True)
    config = make_config(training=TrainingSection(batch_size=2, max_steps=4, learning_rate=1e-3, seed=1))
    code, run_dir = run_training(config, tmp_path)
    assert code == 0
    steps = [e for e in events_of(run_dir) if isinstance(e, Step)]
    per_image = forward_tflop("sd15", 64, 64) * 2  # LoRA: forward + activation gradients
    for event in steps:
        assert event.tflops == pytest.approx(event.samples_per_s * per_image, rel=0.02, abs=0.01)
        assert event.mfu is None  # no GPU peak on the CPU
    assert "TFLOP/s" in next(line for line in capsys.readouterr().out.splitlines() if line.startswith("step 4:"))

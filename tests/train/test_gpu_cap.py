"""STUDIO_GPU_CAP_MB: the hard cap that proves a preset's promise on a larger card."""

from __future__ import annotations

import pytest

from studio.core.runs.events import RunWarning

torch = pytest.importorskip("torch")


def test_a_cap_on_a_cpu_run_says_nothing_is_capped(make_config, run_training, events_of, tmp_path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STUDIO_GPU_CAP_MB", "7600")
    code, run_dir = run_training(make_config(), tmp_path / "run")
    assert code == 0
    warnings = [e.message for e in events_of(run_dir) if isinstance(e, RunWarning)]
    assert "STUDIO_GPU_CAP_MB is set, but this run trains on the CPU: nothing is capped" in warnings


def test_a_cap_that_is_no_number_is_named() -> None:
    from studio.train.errors import TrainError
    from studio.train.memory.cap import cap_mb

    assert cap_mb({"STUDIO_GPU_CAP_MB": "7600"}) == 7600 and cap_mb({}) is None
    with pytest.raises(TrainError, match="STUDIO_GPU_CAP_MB='8GB' is not a positive number of megabytes"):
        cap_mb({"STUDIO_GPU_CAP_MB": "8GB"})


def test_the_cap_finds_the_gpu_of_a_device_without_a_number() -> None:
    """accelerate's device on one GPU is plain "cuda": the cap must still know which card (found on an H200)."""
    from studio.train.memory.cap import cuda_index

    assert cuda_index(torch.device("cuda"), lambda: 3) == 3
    assert cuda_index(torch.device("cuda", 1), lambda: 3) == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_capped_gpu_refuses_what_a_smaller_card_could_not_hold() -> None:
    import os

    from studio.train.memory.cap import apply_gpu_cap

    device = torch.device("cuda", 0)

    os.environ["STUDIO_GPU_CAP_MB"] = "1024"
    try:
        apply_gpu_cap(device, lambda *_a, **_k: None)
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(2 * 2**30, dtype=torch.uint8, device=device)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, device)
        del os.environ["STUDIO_GPU_CAP_MB"]

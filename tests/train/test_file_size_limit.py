"""A file over the disk's file-size limit (EFBIG: a FAT32 disk's 4 GB, or `ulimit -f`) while a run writes
its checkpoint: reported like a full disk, naming the folder and what to do, never as a crash."""

from __future__ import annotations

import errno
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from studio.core.config.schema import OutputSection, TrainingSection
from studio.core.runs.events import Error, RunFinished
from studio.train.errors import is_file_too_large, write_failure

# What safetensors' Rust writer raises when the file-size limit stops it (read from a real run under ulimit -f).
RUST_EFBIG = "Error while serializing: I/O error: File too large (os error 27)"


@pytest.mark.parametrize("writer", ["safetensors", "python"])
def test_a_file_size_limit_while_checkpointing_is_a_disk_error_that_says_what_to_do(
        make_config, run_training, events_of, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str) -> None:
    pytest.importorskip("torch")
    import safetensors.torch
    from safetensors import SafetensorError

    from studio.train.saving import checkpoints

    real_save, real_write = safetensors.torch.save_file, checkpoints.atomic_write_text

    def save_file(tensors: object, filename: str, *args: object, **kwargs: object) -> None:
        if writer == "safetensors" and "step-2" in filename:
            raise SafetensorError(RUST_EFBIG)
        return real_save(tensors, filename, *args, **kwargs)  # type: ignore[arg-type]

    def atomic_write_text(path: Path, text: str) -> None:
        if writer == "python" and "step-2" in str(path):
            raise OSError(errno.EFBIG, "File too large", str(path))
        real_write(path, text)

    monkeypatch.setattr(safetensors.torch, "save_file", save_file)
    monkeypatch.setattr(checkpoints, "atomic_write_text", atomic_write_text)
    config = make_config(training=TrainingSection(batch_size=2, max_steps=3, seed=1),
                         output=OutputSection(dir=str(tmp_path / "runs"), save_every_n_steps=1))
    code, run_dir = run_training(config, tmp_path)
    events = events_of(run_dir)
    assert code == 1
    (error,) = [e for e in events if isinstance(e, Error)]
    checkpoints_dir = run_dir / "checkpoints"
    assert error.kind == "disk_full", error.message
    assert error.message.startswith(f"the checkpoint of step 2 cannot be written into {checkpoints_dir}: ")
    assert "(File too large)" in error.message and error.path == str(checkpoints_dir)
    assert "not FAT32" in error.hint and "ulimit -f unlimited" in error.hint and "studio-train resume" in error.hint
    assert sorted(p.name for p in checkpoints_dir.iterdir()) == ["step-1"]  # no half checkpoint
    assert isinstance(events[-1], RunFinished) and events[-1].status == "failed"


def test_a_real_file_size_limit_is_recognised(tmp_path: Path) -> None:
    """Under `ulimit -f` Python ignores SIGXFSZ, so a write past the limit raises OSError EFBIG."""
    pytest.importorskip("resource")
    script = textwrap.dedent(f"""
        import resource, signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
        from pathlib import Path
        from studio.train.errors import is_file_too_large, write_failure
        try:
            Path({str(tmp_path / "big")!r}).write_bytes(bytes(10000))
        except OSError as exc:
            failure = write_failure(exc, Path({str(tmp_path)!r}), 10000, "the outputs")
            print(is_file_too_large(exc), failure.kind, failure.message)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("True disk_full the outputs cannot be written into ")
    assert "(the limit here is 4 KB) (File too large)" in done.stdout


def test_torchs_wordless_write_error_under_a_small_file_size_limit_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's writer says "unexpected pos" for EFBIG as for a full disk: with free space left, a file-size
    limit below what the write needed is the cause."""
    resource = pytest.importorskip("resource")
    monkeypatch.setattr(resource, "getrlimit", lambda which: (2**20, resource.RLIM_INFINITY))
    opaque = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    assert not is_file_too_large(opaque)
    failure = write_failure(opaque, tmp_path, 50 * 2**20, "the checkpoint of step 4")
    assert failure is not None and failure.kind == "disk_full"
    assert "the limit here is 1 MB" in failure.message
    assert write_failure(opaque, tmp_path, 1000, "the checkpoint of step 4") is None  # under the limit: a crash


def test_on_windows_a_path_longer_than_it_opens_is_named_with_what_to_do(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows opens no path over 259 characters unless its long paths are turned on, and then says "The system
    cannot find the path specified" of a folder that is there: a run in a deep folder with a long name failed at
    its first checkpoint or epoch LoRA with that, after hours of training."""
    from typing import Any

    from studio.train import errors

    class Windows:
        platform = "win32"

        def __getattr__(self, attribute: str) -> Any:
            return getattr(sys, attribute)

    run_dir = tmp_path / ("d" * max(1, 200 - len(str(tmp_path)))) / "20260101-120000-a-long-name-for-my-character-lora"
    lora = run_dir / "output" / "epoch-0001" / "a-long-name-for-my-character-lora-e0001.safetensors"
    optimizer = run_dir / "checkpoints" / "step-500" / "optimizer.bin"
    not_found = FileNotFoundError(2, "The system cannot find the path specified", str(lora))
    torch_words = RuntimeError(f"File {optimizer} cannot be opened.")
    short = FileNotFoundError(2, "The system cannot find the path specified", str(tmp_path / "x.bin"))
    assert write_failure(not_found, lora.parent, None, "the LoRA of epoch 1") is None  # elsewhere: as before
    monkeypatch.setattr(errors, "sys", Windows())
    for exc, path, what in ((not_found, lora, "the LoRA of epoch 1"), (torch_words, optimizer, "the checkpoint")):
        failure = write_failure(exc, path.parent, None, what)
        assert failure is not None and failure.kind == "config" and failure.path == str(path)
        assert failure.message == (f"{what} cannot be written: the path {path} is {len(str(path))} characters long, "
                                   "more than Windows allows unless its long paths are turned on (259 for a file, "
                                   "247 for a folder)")
        assert "turn on Windows' long paths" in failure.hint and "set output.dir to a short folder" in failure.hint
    assert write_failure(short, tmp_path, None, "the checkpoint") is None  # a short path missing: not this

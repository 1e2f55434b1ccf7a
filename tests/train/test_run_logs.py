"""output.log_to in a real run: TensorBoard's reader reads the step losses back; W&B offline writes its run."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from studio.core.config.schema import TrainConfig
from studio.core.runs.events import Error, Event, Step

torch = pytest.importorskip("torch")


def test_tensorboard_reads_back_the_step_losses(make_config: Callable[..., TrainConfig],
                                                run_training: Callable[..., tuple[int, Path]],
                                                events_of: Callable[[Path], list[Event]], tmp_path: Path) -> None:
    ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    config = make_config()
    config.output.log_to = ["tensorboard"]
    config.training.max_steps = 3
    code, run_dir = run_training(config, tmp_path)
    assert code == 0
    acc = ea.EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    logged = [(e.step, e.value) for e in acc.Scalars("train/loss")]
    steps = [e for e in events_of(run_dir) if isinstance(e, Step)]
    assert [s for s, _ in logged] == [1, 2, 3]
    assert [round(v, 5) for _, v in logged] == [round(e.loss, 5) for e in steps]


@pytest.mark.slow  # W&B starts its own service process: about 7 s
def test_wandb_offline_writes_its_run_folder(make_config: Callable[..., TrainConfig],
                                             run_training: Callable[..., tuple[int, Path]],
                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    config = make_config()
    config.output.log_to = ["wandb"]
    config.training.max_steps = 2
    code, run_dir = run_training(config, tmp_path)
    assert code == 0
    runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))


@pytest.mark.slow  # W&B starts its own service process, then waits its (shortened) timeout: about 6 s
def test_an_unreachable_wandb_server_does_not_hold_the_run_it_logs_offline_with_a_warning(
        make_config: Callable[..., TrainConfig], run_training: Callable[..., tuple[int, Path]],
        events_of: Callable[[Path], list[Event]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    import socket

    from studio.core.runs.events import RunWarning
    from studio.core.tracking import wandb_logger

    with socket.socket() as probe:  # a local port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setattr(wandb_logger, "INIT_TIMEOUT_S", 1.0)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("WANDB_API_KEY", "0" * 40)
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    config = make_config()
    config.output.log_to = ["wandb"]
    config.training.max_steps = 2
    code, run_dir = run_training(config, tmp_path)
    assert code == 0
    (folder,) = (run_dir / "wandb").glob("offline-run-*")
    (warning,) = [e for e in events_of(run_dir) if isinstance(e, RunWarning)]
    assert warning.message.startswith("W&B could not start this run online within 1 s (")
    assert warning.message.endswith(f"it logs to W&B offline instead, into {folder}")
    assert warning.hint == f"once W&B's server can be reached, send it with `wandb sync {folder}`"
    assert list(folder.glob("*.wandb"))


def test_a_missing_logger_says_how_to_install_it(make_config: Callable[..., TrainConfig],
                                                 run_training: Callable[..., tuple[int, Path]],
                                                 events_of: Callable[[Path], list[Event]], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("tensorboard", "tensorboard.compat.proto", "tensorboard.summary.writer.event_file_writer"):
        monkeypatch.setitem(sys.modules, name, None)  # as if it were not installed
    config = make_config()
    config.output.log_to = ["tensorboard"]
    code, run_dir = run_training(config, tmp_path)
    assert code == 1
    error = next(e for e in events_of(run_dir) if isinstance(e, Error))
    assert error.kind == "config" and "pip install 'sd-training-studio[logging]'" in error.message


def test_a_tensorboard_folder_that_cannot_be_made_is_a_config_error_naming_it(
        make_config: Callable[..., TrainConfig], events_of: Callable[[Path], list[Event]], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from accelerate.state import AcceleratorState

    from studio.core.config.files.paths import resolve_paths
    from studio.core.config.files.toml_file import load_config
    from studio.core.runs.launch import prepare_run
    from studio.core.tracking.tensorboard import check_log_folder
    from studio.train.entry import train

    config = make_config()
    config.output.log_to = ["tensorboard"]
    plan = prepare_run(resolve_paths(config, tmp_path))
    blocker = plan.run_dir / "tensorboard"
    blocker.write_text("a file where the log folder goes\n", encoding="utf-8")
    # Seen before the run starts (`studio-train resume` asks this first)...
    problem = check_log_folder(config, plan.run_dir)
    assert problem is not None and f"the TensorBoard log folder {blocker} cannot be made: {blocker} is a file" in problem
    # ...and at the start of the run itself: a config error, no traceback.
    AcceleratorState._reset_state(reset_partial_state=True)
    code = train(load_config(plan.run_dir / "config.toml"), plan.run_dir)
    assert code == 1
    error = next(e for e in events_of(plan.run_dir) if isinstance(e, Error))
    assert error.kind == "config" and error.path == str(blocker)
    assert error.message == (f"output.log_to asks for TensorBoard, but its log folder {blocker} cannot be made: "
                             f"{blocker} is a file, not a folder")
    assert error.hint == f'move or rename the file {blocker}, or remove "tensorboard" from output.log_to'
    assert not [e for e in events_of(plan.run_dir) if isinstance(e, Step)]
    assert "Traceback" not in capsys.readouterr().err
    blocker.unlink()
    assert check_log_folder(config, plan.run_dir) is None

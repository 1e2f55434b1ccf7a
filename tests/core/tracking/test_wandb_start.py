"""W&B online with a server that does not answer: the start is bounded and the run logs offline instead,
with a warning that says where and how to send it later; the training never waits W&B's 90 s."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from fixtures.waits import scaled_s

from studio.core.tracking.base import Record


def closed_port() -> int:
    """A local port nobody listens on: connecting to it is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.slow  # W&B starts its own service process, then waits its (shortened) timeout: about 5 s
def test_an_unreachable_wandb_server_falls_back_to_offline_with_a_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    from studio.core.tracking.wandb_logger import INIT_TIMEOUT_S, WandbLogger

    assert INIT_TIMEOUT_S <= 10
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("WANDB_API_KEY", "0" * 40)  # any key: the server is never reached
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    run_dir = tmp_path / "20261204-120000-run"
    run_dir.mkdir()
    warnings: list[tuple[str, str | None, str]] = []
    logger = WandbLogger(run_dir, "run", lambda message, path, hint: warnings.append((message, path, hint)),
                         init_timeout=2)
    started = time.monotonic()
    try:
        logger.write(Record(0, config={"rank": 4}))
        logger.write(Record(1, scalars={"train/loss": 0.5}))
        waited = time.monotonic() - started
    finally:
        logger.close()
    # 2 s of timeout plus W&B's service start, about 8 s on a quiet machine: more on a loaded one (a run of the
    # suite beside 8 busy processes waited 10.4 s). W&B's own default would wait 90 s.
    assert waited < 2 + scaled_s(8), f"the training waited {waited:.0f} s for W&B"
    assert logger.offline
    ((message, path, hint),) = warnings
    (folder,) = (run_dir / "wandb").glob("offline-run-*")
    assert message.startswith("W&B could not start this run online within 2 s (")
    assert message.endswith(f"): it logs to W&B offline instead, into {folder}") and path == str(folder)
    assert hint == f"once W&B's server can be reached, send it with `wandb sync {folder}`"
    assert list(folder.glob("*.wandb"))


class _FakeRun:
    def __init__(self) -> None:
        self.logged: list[tuple[dict[str, object], int]] = []
        self.exit_code: int | None = -1  # -1: never finished

    def log(self, data: dict[str, object], step: int) -> None:
        self.logged.append((data, step))

    def finish(self, exit_code: int | None = None) -> None:
        self.exit_code = exit_code


class _FakeWandb:
    """Stands in for the wandb package: keeps what the studio tells it, never starts a service."""

    def __init__(self) -> None:
        self.runs: list[_FakeRun] = []
        self.inits: list[dict[str, object]] = []

    def init(self, **options: object) -> _FakeRun:
        self.inits.append(options)
        self.runs.append(_FakeRun())
        return self.runs[-1]

    def Settings(self, **options: object) -> dict[str, object]:
        return options

    def teardown(self) -> None:
        pass


@pytest.mark.parametrize(("status", "exit_code"), [("failed", 1), ("completed", 0), ("stopped", 0)])
def test_wandb_shows_a_failed_run_as_failed_not_finished(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, status: str, exit_code: int) -> None:
    """A run that ran out of memory or crashed ends its W&B run with a failing exit code, so W&B's run list
    says "failed" as the studio does (not a green "finished")."""
    import sys

    from studio.core.runs.events import RunFinished, RunStarted, Step
    from studio.core.tracking.records import EventMirror, open_logger

    fake = _FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    mirror = EventMirror({"wandb": open_logger("wandb", tmp_path, "run")}, Path, print)
    for event in (RunStarted(config={}, world_size=1, total_steps=2, devices=["cpu"]),
                  Step(step=1, epoch=0, loss=0.5, lr=1e-4), RunFinished(status=status, step=1)):
        mirror.write(event)
    mirror.close()
    (run,) = fake.runs
    assert run.logged == [({"train/loss": 0.5, "train/lr": 1e-4}, 1)]
    assert (run.exit_code or 0) == exit_code  # W&B reads no exit code as 0


def test_wandb_names_the_run_as_the_studio_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs of one output.name (the default "run") are two lines of W&B's run list with the names of their
    folders, as in the studio's Runs table: not two runs both called "run"."""
    import sys

    from studio.core.config.schema import TrainConfig
    from studio.core.runs.events import RunStarted
    from studio.train.extras.logs import attach_loggers
    from studio.train.progress.reporting import Reporter

    fake = _FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    config = TrainConfig.model_validate({"model": {"family": "sd15", "base": "x"}, "output": {"log_to": ["wandb"]}})
    for folder in ("20260101-090000-run", "20260101-100000-run"):
        run_dir = tmp_path / folder
        run_dir.mkdir()
        reporter = Reporter(run_dir, active=True)
        attach_loggers(reporter, config, run_dir)
        reporter.emit(RunStarted(config={}, world_size=1, total_steps=1, devices=["cpu"]))
        reporter.close()
    assert [(init["name"], init["id"]) for init in fake.inits] == [
        ("20260101-090000-run", "20260101-090000-run"), ("20260101-100000-run", "20260101-100000-run")]

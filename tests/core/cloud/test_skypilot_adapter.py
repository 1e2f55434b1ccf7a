"""SkyPilot's answers as the studio's adapter reads them, with a stand-in `sky` module answering as the
SkyPilot releases the studio allows (skypilot>=0.9) do."""

from __future__ import annotations

import enum
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from studio.core.cloud import skypilot
from studio.core.cloud.skypilot import SkyPilotApi


class ClusterStatus(enum.Enum):
    UP = "UP"


class JobStatus(enum.Enum):
    RUNNING = "RUNNING"


def _sky(record: Any) -> SimpleNamespace:
    return SimpleNamespace(status=lambda cluster_names: [record], job_status=lambda cluster: {3: JobStatus.RUNNING},
                           get=lambda request: request)


@pytest.mark.parametrize("record", [
    {"name": "studio-demo", "status": ClusterStatus.UP},  # SkyPilot 0.9-0.10: a dict per cluster
    SimpleNamespace(name="studio-demo", status=ClusterStatus.UP),  # later: a response object
], ids=["mapping", "object"])
def test_a_cluster_that_is_up_with_its_job_running_is_running(monkeypatch: pytest.MonkeyPatch, record: Any) -> None:
    monkeypatch.setattr(skypilot, "_sky", lambda: _sky(record))
    state = SkyPilotApi().state("studio-demo")
    assert (state.status, state.job, state.running) == ("UP", "RUNNING", True)


def test_the_hub_token_reaches_skypilots_launch_through_the_bridge_and_no_command_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The desktop app's way: the cloud environment's Python answers the request (here this Python with a stand-in
    SkyPilot); the token goes in the request on stdin, never on the bridge's command line or in its environment,
    and reaches the launch as SkyPilot's secret HF_TOKEN, with sky.yaml left as it was."""
    import hashlib
    import json
    import subprocess
    import sys

    from fixtures.fake_sky import FAKE_SKY

    from studio.core.cloud import bridge
    from studio.core.cloud.bridge import BridgeApi
    from studio.core.resources import app_root

    secret = "hf_ThroughTheBridge0123456789"
    (tmp_path / "sky").mkdir()
    (tmp_path / "sky" / "__init__.py").write_text(FAKE_SKY)
    (tmp_path / "state").mkdir()
    monkeypatch.setenv("FAKE_SKY_STATE", str(tmp_path / "state"))
    task = tmp_path / "bundle" / "sky.yaml"
    task.parent.mkdir()
    task.write_text("name: studio-demo\n")
    started: list[tuple[list[str], dict[str, str]]] = []
    real_run = subprocess.run

    def run(command: list[str], **kwargs: Any) -> Any:
        started.append((command, kwargs["env"]))
        return real_run(command, **kwargs)

    monkeypatch.setattr(bridge.subprocess, "run", run)
    api = BridgeApi(Path(sys.executable), app_root(), [tmp_path])
    assert api.launch(task, "studio-demo", {"HF_TOKEN": secret}) == 7
    assert json.loads((tmp_path / "state" / "secrets.json").read_text()) == {
        "HF_TOKEN": hashlib.sha256(secret.encode()).hexdigest()}
    ((command, env),) = started
    assert secret not in " ".join(command) and secret not in " ".join(env.values())
    assert task.read_text() == "name: studio-demo\n"

"""SkyPilot's answers as the studio's adapter reads them, with a stand-in `sky` module answering as the
SkyPilot releases the studio allows (skypilot>=0.9) do."""

from __future__ import annotations

import enum
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

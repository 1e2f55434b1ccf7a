"""A hub id already downloaded trains with no question to the hub: a network that takes the connection and never
answers (a stalled proxy, a captive portal) held the pipeline's load for good before training began."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
COMMIT = "c0ffee" + "0" * 34
LOAD = """
import torch
from studio.core.config.schema import ConceptSection, DatasetSection, ModelSection, TrainConfig
from studio.train.families import adapter_for
config = TrainConfig(model=ModelSection(family="sd15", base="someone/tiny-sd15"),
                     dataset=DatasetSection(concepts=[ConceptSection(path=".")], resolution=64, buckets=False))
components = adapter_for(config).load(torch.device("cpu"), torch.float32)
print("loaded", type(components.denoiser).__name__)
"""


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """A server that takes every connection and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)  # connections wait in the backlog: connected, never answered
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()


@pytest.mark.slow
def test_a_downloaded_hub_model_loads_while_the_network_never_answers(
        tiny_sd15: Path, tmp_path: Path, silent_endpoint: str) -> None:
    repo = tmp_path / "hub" / "models--someone--tiny-sd15"
    shutil.copytree(tiny_sd15, repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_ENDPOINT": silent_endpoint,
           "PYTHONPATH": str(ROOT), "HF_HUB_DISABLE_TELEMETRY": "1"}
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):  # a person's machine: online as far as it knows
        env.pop(name, None)
    try:
        out = subprocess.run([sys.executable, "-c", LOAD], env=env, cwd=tmp_path, capture_output=True, text=True,
                             timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("loading the downloaded model waited on the network for two minutes")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[-1] == "loaded UNet2DConditionModel"

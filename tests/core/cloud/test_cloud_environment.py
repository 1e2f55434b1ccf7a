"""The cloud environment as the desktop app makes it: a virtual environment with SkyPilot installed
(here a stand-in SkyPilot wheel from a folder of wheels, pinned by constraints/cloud.txt), and every cloud
request answered there through the bridge, in its own process, with SkyPilot's words on failure."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fixtures.fake_sky import FAKE_SKY
from fixtures.wheelhouse import build_wheel

from studio.core.cloud import launcher
from studio.core.cloud.api import CloudError, ClusterState, Offer
from studio.core.cloud.bridge import BridgeApi
from studio.core.cloud.environment import CLOUD_ENV_VAR, cloud_python, install_cloud_env
from studio.core.resources import app_root
from studio.core.trainenv.packages import pinned_versions


@pytest.fixture(scope="module")
def cloud_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cloud environment with the stand-in SkyPilot, installed as `studio-train cloud setup` installs it."""
    root = tmp_path_factory.mktemp("cloud")
    version = pinned_versions(app_root() / "constraints" / "cloud.txt")["skypilot"]
    build_wheel(root / "wheels", "skypilot", version, {"sky/__init__.py": FAKE_SKY})
    lines: list[str] = []
    python = install_cloud_env(root / "cloud-env", wheelhouse=root / "wheels", on_line=lines.append)
    assert python == cloud_python(root / "cloud-env") and lines
    return root / "cloud-env"


@pytest.fixture
def api(cloud_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> BridgeApi:
    monkeypatch.setenv("FAKE_SKY_STATE", str(tmp_path))
    python = cloud_python(cloud_env)
    assert python is not None
    return BridgeApi(python, app_root())


def test_every_cloud_request_is_answered_by_the_cloud_environments_skypilot(api: BridgeApi, tmp_path: Path) -> None:
    task = tmp_path / "sky.yaml"
    task.write_text("resources: {accelerators: H100:1}\n")
    assert api.offers(task) == [Offer("RunPod", "EU-RO-1", "{'H100': 1}", 2.69, False)]
    assert api.state("box") == ClusterState("box", "gone")
    assert api.launch(task, "box") == 7 and (tmp_path / "launched").read_text() == "box"
    assert api.state("box") == ClusterState("box", "UP", "RUNNING") and api.state("box").running
    assert list(api.logs("box")) == ["step 1 loss 0.25", "step 2 loss 0.24"]
    assert api.shell("box", "cat x")[:4] == ["ssh", "-o", "BatchMode=yes", "-o"]
    api.down("box")
    assert (tmp_path / "down").read_text() == "box" and api.state("box").status == "gone"


def test_skypilots_failures_come_back_in_its_own_words(api: BridgeApi, tmp_path: Path) -> None:
    with pytest.raises(CloudError, match=r"SkyPilot cannot read .*broken.yaml: Invalid task YAML"):
        api.offers(tmp_path / "broken.yaml")
    with pytest.raises(CloudError, match="quota exceeded for H100 in EU-RO-1"):
        api.down("quota")


def test_the_studio_uses_the_cloud_environment_when_skypilot_is_not_beside_it(
        cloud_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setenv(CLOUD_ENV_VAR, str(tmp_path / "none-yet"))
    hint = launcher.cloud_available()
    assert hint is not None and "studio-train cloud setup" in hint and str(tmp_path / "none-yet") in hint
    with pytest.raises(CloudError, match="studio-train cloud setup"):
        launcher.cloud_api()
    monkeypatch.setattr(sys, "frozen", True, raising=False)  # the desktop app names its button instead
    assert "press Install SkyPilot…" in (launcher.cloud_available() or "")
    monkeypatch.setenv(CLOUD_ENV_VAR, str(cloud_env))
    assert launcher.cloud_available() is None and isinstance(launcher.cloud_api(), BridgeApi)


def test_a_failed_install_names_its_log_and_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()  # no SkyPilot among the wheels
    with pytest.raises(CloudError, match=r"installing SkyPilot failed .*every line is in .*cloud-env-install.log"):
        install_cloud_env(tmp_path / "cloud-env", wheelhouse=tmp_path / "wheels")
    assert cloud_python(tmp_path / "cloud-env") is None

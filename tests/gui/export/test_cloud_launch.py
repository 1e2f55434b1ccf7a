"""Launch on a cloud from the Export page: SkyPilot's offer beside the studio's cost table, the run live on the
Train page, Stop that brings the run back and ends the cluster, the run on the Runs page; without SkyPilot,
the button says how to enable it. The cloud is a fake of the launcher's API (tests/fixtures/fake_cloud.py)
whose job is the fake trainer writing real events on this machine."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.fake_cloud import FakeCloud
from fixtures.holds import hold_at
from pytestqt.qtbot import QtBot

from studio.core.cloud import launcher as cloud
from studio.core.cloud.api import CloudError
from studio.core.cloud.run import CLOUD_FILE, read_cloud_record
from studio.core.project.folder import Project
from studio.core.runs.events import RunFinished, Step, read_events
from studio.core.runs.folders import EVENTS_FILE
from studio.gui.context import StudioContext
from studio.gui.export.page import ExportPage
from studio.gui.runner.cloud_run import CloudRun
from studio.gui.runs.page import RunsPage
from studio.gui.shell.application import make_settings
from studio.gui.training.page import TrainPage
from tests.gui.conftest import close_plots, shut_down


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeCloud]:
    instance = FakeCloud(tmp_path / "clusters", rate=40.0)
    cloud.set_cloud_api(lambda: instance)
    yield instance
    cloud.set_cloud_api(None)
    instance.end_all()


def _no_skypilot_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """SkyPilot is not importable in the studio's own environment (as in the desktop app). Only the question
    for "sky" is answered so: every other module is found as before (Qt's own lazy loading asks too)."""
    real = cloud.importlib.util.find_spec
    monkeypatch.setattr(cloud.importlib.util, "find_spec",
                        lambda name, *args, **kwargs: None if name == "sky" else real(name, *args, **kwargs))


@pytest.fixture
def pages(qtbot: QtBot, tmp_path: Path, demo: Project) -> Iterator[tuple[StudioContext, ExportPage, TrainPage,
                                                                          RunsPage]]:
    context = StudioContext(make_settings(tmp_path / "settings.ini"))
    context.set_project(demo)
    export = ExportPage(context)
    train, runs = TrainPage(context, context.run_controller), RunsPage(context, context.run_controller)
    qtbot.addWidget(export, before_close_func=shut_down)
    qtbot.addWidget(train, before_close_func=close_plots)
    qtbot.addWidget(runs, before_close_func=close_plots)
    yield context, export, train, runs
    context.run_controller.shutdown()


@pytest.mark.slow
def test_launch_follow_stop_and_bring_back_a_cloud_run(qtbot: QtBot, fake: FakeCloud, pages: tuple[
        StudioContext, ExportPage, TrainPage, RunsPage], monkeypatch: pytest.MonkeyPatch) -> None:
    hold_at(monkeypatch, 5)  # the cluster's trainer waits at step 5 until Stop lands there
    context, export, train, runs = pages
    panel = export.cloud
    questions: list[str] = []
    panel.confirm = lambda question: questions.append(question) or True
    panel.state_ms = 100
    export.gpus_spin.setValue(2)
    panel.launch_button.click()
    qtbot.waitUntil(lambda: panel.run is not None, timeout=30_000)

    # SkyPilot's answer under the studio's own cost table, and the person was asked before anything started.
    offers = export.cloud.offer_label
    assert offers.isVisible() or not export.isVisible()
    assert "SkyPilot's offer: {'H100': 2} on runpod (EU-RO-1), 5.98 USD/h on demand" in offers.text()
    assert "The studio's catalogue: H200 141GB x 2 about" in offers.text()
    assert len(questions) == 1 and "5.98 USD/h" in questions[0]
    (cluster,) = fake.launched
    assert (fake.workdir(cluster) / "sky.yaml").is_file()

    # Live on the Train page: loss from the events that arrive from the cluster.
    controller = context.run_controller
    assert isinstance(controller.source, CloudRun) and controller.running
    local = controller.run_dir
    assert local is not None and local.parent == context.project.runs_dir  # type: ignore[union-attr]
    qtbot.waitUntil(lambda: controller.model.step >= 5, timeout=30_000)
    live_loss = controller.model.last_loss
    assert live_loss is not None

    train.stop_button.click()
    qtbot.waitUntil(lambda: not controller.running, timeout=30_000)
    assert fake.downed == [cluster]  # the cluster went down after the run came back
    assert controller.model.status == "stopped"

    # The run is in the project's runs: its whole events (nothing twice) and its files, with the cloud's record.
    events = read_events(local / EVENTS_FILE)
    steps = [e.step for e in events if isinstance(e, Step)]
    assert steps == list(range(1, 6))
    assert live_loss in [e.loss for e in events if isinstance(e, Step)]
    assert [e.status for e in events if isinstance(e, RunFinished)] == ["stopped"]
    record = read_cloud_record(local)
    assert record.state == "down" and record.cluster == cluster and record.remote_run.endswith("-demo")
    assert "steps:" in (local / "console.log").read_text()
    bundle_record = json.loads((Path(record.bundle) / "cluster.json").read_text())
    assert bundle_record["cluster"] == cluster and "token" not in (local / CLOUD_FILE).read_text().lower()
    runs.refresh()
    (summary,) = [s for s in runs.table.summaries if s.path == local]
    assert summary.status == "stopped" and summary.steps == steps[-1]


def _launch_until_it_ends(qtbot: QtBot, instance: FakeCloud, context: StudioContext, export: ExportPage) -> None:
    """Launch on the fake cloud from the Export page and wait until the run has ended and been dealt with."""
    cloud.set_cloud_api(lambda: instance)
    try:
        export.cloud.confirm = lambda _question: True
        export.cloud.state_ms = 100
        export.cloud.launch_button.click()
        qtbot.waitUntil(lambda: export.cloud.run is not None and not context.run_controller.running, timeout=30_000)
    finally:
        cloud.set_cloud_api(None)
        instance.end_all()


def test_a_finished_cloud_run_is_brought_back_and_its_cluster_ended(qtbot: QtBot, tmp_path: Path,
                                                                    pages: tuple[StudioContext, ExportPage,
                                                                                 TrainPage, RunsPage]) -> None:
    instance = FakeCloud(tmp_path / "clusters", steps=12, rate=200.0)
    context, export, _train, _runs = pages
    _launch_until_it_ends(qtbot, instance, context, export)
    controller = context.run_controller
    assert controller.model.status == "finished" and controller.model.step == 12
    assert len(instance.downed) == 1
    local = controller.run_dir
    assert local is not None and (local / "output" / "pytorch_lora_weights.safetensors").read_bytes() == b"fake"


def test_a_cloud_run_whose_files_fail_to_come_back_keeps_its_cluster(qtbot: QtBot, tmp_path: Path, pages: tuple[
        StudioContext, ExportPage, TrainPage, RunsPage], monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy back fails (the network drops): the cluster holding the trained files is not ended."""
    instance = FakeCloud(tmp_path / "clusters", steps=12, rate=200.0)

    def cut_off(cluster: str, remote_path: str, local_dir: Path) -> None:
        raise CloudError(f"rsync from {cluster} failed: connection reset by peer")

    monkeypatch.setattr(instance, "pull", cut_off)
    context, export, _train, _runs = pages
    messages: list[str] = []
    context.run_controller.sig_message.connect(messages.append)
    _launch_until_it_ends(qtbot, instance, context, export)
    (cluster,) = instance.launched
    assert instance.downed == []  # its files are still there to bring back
    (said,) = [m for m in messages if "did not come back" in m]
    assert "connection reset by peer" in said and "The cluster is left up so they are not lost" in said
    assert f"cloud pull {cluster}" in said and f"cloud down {cluster}" in said
    local = context.run_controller.run_dir
    assert local is not None and read_cloud_record(local).state != "down"


def test_closing_the_studio_asks_and_then_ends_the_cluster(qtbot: QtBot, fake: FakeCloud, pages: tuple[
        StudioContext, ExportPage, TrainPage, RunsPage]) -> None:
    context, export, train, _runs = pages
    export.cloud.confirm = lambda _question: True
    export.cloud.state_ms = 100
    export.cloud.launch_button.click()
    controller = context.run_controller
    qtbot.waitUntil(lambda: controller.running and controller.model.step >= 2, timeout=30_000)
    asked: list[str] = []
    assert controller.source is not None
    train.ask_close = lambda: asked.append(controller.source.close_question()) or "stop"  # type: ignore[union-attr]
    assert train.can_close()
    assert "cloud cluster" in asked[0] and "the cluster is ended" in asked[0]
    assert not controller.running and list(fake.launched) == fake.downed


def test_without_skypilot_the_button_says_how_to_enable_it(qtbot: QtBot, monkeypatch: pytest.MonkeyPatch,
                                                          pages: tuple[StudioContext, ExportPage, TrainPage,
                                                                       RunsPage]) -> None:
    _no_skypilot_here(monkeypatch)
    _context, export, _train, _runs = pages
    export.refresh()
    button = export.cloud.launch_button
    assert button.isEnabled() and "SkyPilot is not installed" in button.toolTip()
    button.click()
    text = export.cloud.status.text()
    assert text.startswith("Cannot launch on a cloud yet.")
    assert 'pip install "sd-training-studio[cloud]"' in text and "sky check" in text
    assert export.cloud.run is None and not export.cloud.worker.busy


def test_install_skypilot_makes_the_cloud_environment_and_launch_is_ready(
        qtbot: QtBot, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        pages: tuple[StudioContext, ExportPage, TrainPage, RunsPage]) -> None:
    """The desktop app's way (no SkyPilot beside it): Install SkyPilot… makes the cloud environment (here from a
    folder of wheels holding a stand-in SkyPilot), and the panel is then ready to launch through it."""
    import sys

    from fixtures.wheelhouse import build_wheel

    from studio.core.cloud.environment import CLOUD_ENV_VAR
    from studio.core.resources import app_root
    from studio.core.trainenv.packages import pinned_versions

    version = pinned_versions(app_root() / "constraints" / "cloud.txt")["skypilot"]
    build_wheel(tmp_path / "wheels", "skypilot", version, {"sky/__init__.py": "def get(request):\n    return request\n"})
    monkeypatch.setenv("STUDIO_WHEELHOUSE", str(tmp_path / "wheels"))
    monkeypatch.setenv(CLOUD_ENV_VAR, str(tmp_path / "cloud-env"))
    _no_skypilot_here(monkeypatch)
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    _context, export, _train, _runs = pages
    export.refresh()
    panel = export.cloud
    assert panel.install_button.isVisibleTo(panel) and "press Install SkyPilot…" in panel.launch_button.toolTip()
    panel.install_button.click()
    qtbot.waitUntil(lambda: "SkyPilot is ready" in panel.status.text() or "not installed" in panel.status.text(),
                    timeout=120_000)
    assert "SkyPilot is ready" in panel.status.text(), panel.status.text()
    assert "sky check" in panel.status.text() and (tmp_path / "cloud-env").is_dir()
    assert not panel.install_button.isVisibleTo(panel)
    assert cloud.cloud_available() is None and "SkyPilot is not installed" not in panel.launch_button.toolTip()


def test_the_desktop_apps_cloud_launch_goes_through_the_cloud_environment_it_installs(
        qtbot: QtBot, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        pages: tuple[StudioContext, ExportPage, TrainPage, RunsPage]) -> None:
    """As the installed app does it (the package job runs the same steps, studio/gui/shell/cloud_launch_drive.py):
    Install SkyPilot… from a folder of wheels holding a stand-in SkyPilot, Launch on a cloud… priced and started
    through the bridge in that environment, the run followed on the Train page, then left running."""
    import sys

    from fixtures.fake_sky import FAKE_SKY
    from fixtures.wheelhouse import build_wheel

    from studio.core.cloud.environment import CLOUD_ENV_VAR
    from studio.core.resources import app_root
    from studio.core.trainenv.packages import pinned_versions
    from studio.gui.shell.cloud_launch_drive import drive_cloud_launch

    version = pinned_versions(app_root() / "constraints" / "cloud.txt")["skypilot"]
    build_wheel(tmp_path / "wheels", "skypilot", version, {"sky/__init__.py": FAKE_SKY})
    (tmp_path / "sky-state").mkdir()
    monkeypatch.setenv("FAKE_SKY_STATE", str(tmp_path / "sky-state"))
    monkeypatch.setenv("STUDIO_WHEELHOUSE", str(tmp_path / "wheels"))
    monkeypatch.setenv(CLOUD_ENV_VAR, str(tmp_path / "cloud-env"))
    _no_skypilot_here(monkeypatch)
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    context, export, _train, _runs = pages
    export.cloud.state_ms = 200
    facts = drive_cloud_launch(export, timeout_s=300)
    assert "SkyPilot is ready" in facts["install"], facts
    assert facts["launched"], facts
    assert "RunPod" in facts["offers"][0] and f"{facts['cluster']} started (job 7)" in facts["status"]
    assert (tmp_path / "sky-state" / "launched").read_text() == facts["cluster"]  # SkyPilot's launch was called
    qtbot.waitUntil(lambda: not context.run_controller.running, timeout=30_000)
    assert not (tmp_path / "sky-state" / "down").exists()  # left running: it ends itself after the run

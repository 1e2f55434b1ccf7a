"""The Training Environment window: opened by the desktop app's first Train and from the Tools
menu; it shows what is there and what is wrong, repairs with progress, cancels, continues."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fixtures.trainenv import Installed
from pytestqt.qtbot import QtBot

from studio.core.config.schema import TrainConfig
from studio.core.trainenv.plan import InstallPlan
from studio.core.trainenv.state import check_env
from studio.gui.context import StudioContext
from studio.gui.trainenv.window import TrainingEnvDialog
from studio.gui.training.page import TrainPage
from tests.gui.conftest import make_project


@pytest.fixture
def env_vars(monkeypatch: pytest.MonkeyPatch, trainenv_installed: Installed) -> pytest.MonkeyPatch:
    monkeypatch.setenv("STUDIO_HARDWARE", "no-gpu")
    monkeypatch.setenv("STUDIO_WHEELHOUSE", str(trainenv_installed.wheels))
    return monkeypatch


def open_dialog(qtbot: QtBot, folder: Path) -> TrainingEnvDialog:
    dialog = TrainingEnvDialog(folder=folder)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitUntil(lambda: dialog.overview is not None and dialog.install_button.isEnabled(), timeout=20000)
    return dialog


def test_first_train_in_the_desktop_app_opens_the_window_and_starts_nothing(
        qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path, env_vars: pytest.MonkeyPatch) -> None:
    env_vars.setattr(sys, "frozen", True, raising=False)
    env_vars.setenv("STUDIO_TRAINING_ENV", str(tmp_path / "no-env-yet"))
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = TrainPage(context, context.run_controller)
    qtbot.addWidget(page)
    assert not page.start_training()
    dialog = page.findChild(TrainingEnvDialog, "training_env_dialog") or page.window().findChild(TrainingEnvDialog)
    assert dialog is not None and dialog.isVisible()
    qtbot.addWidget(dialog)
    assert "Set up the training environment first" in page.message.text()
    assert not any((tmp_path / "runs").glob("*"))  # no run folder was written
    qtbot.waitUntil(lambda: dialog.overview is not None, timeout=20000)
    assert "Not set up yet" in dialog.status.text() and "no NVIDIA GPU found" in dialog.status.text()
    assert dialog.install_button.text() == "Install" and dialog.install_button.isEnabled()
    dialog.close()


def test_from_a_source_checkout_the_window_says_training_uses_its_environment(
        qtbot: QtBot, tmp_path: Path, env_vars: pytest.MonkeyPatch) -> None:
    """Run from a checkout, no studio environment: training works from the checkout's Python, so the
    window neither says "Not set up yet" nor sends the person to a command line."""
    env_vars.delattr(sys, "frozen", raising=False)
    dialog = open_dialog(qtbot, tmp_path / "no-env-yet")
    status = dialog.status.text()
    assert "Training uses this checkout's environment" in status and sys.prefix in status
    assert "Not set up yet" not in status
    shown = [dialog.findings.item(i).text() for i in range(dialog.findings.count())]
    assert not any("env install" in line for line in shown)
    assert dialog.install_button.text() == "Install" and dialog.install_button.isEnabled()
    dialog.close()


def test_repair_with_progress_cancelled_then_continued(qtbot: QtBot, trainenv_copy: InstallPlan,
                                                       env_vars: pytest.MonkeyPatch) -> None:
    folder = trainenv_copy.folder
    dialog = open_dialog(qtbot, folder)
    assert dialog.status.text().startswith("<b>Ready.</b> PyTorch 2.13.0+cpu")
    assert dialog.install_button.text() == "Repair"
    assert "no NVIDIA GPU answered" in dialog.findings.item(0).text()

    purelib = Path(check_env(folder, []).purelib or "")
    next(purelib.glob("peft-*.dist-info")).rename(purelib / "peft-hidden")
    dialog.refresh()
    qtbot.waitUntil(lambda: dialog.install_button.isEnabled(), timeout=20000)
    qtbot.waitUntil(lambda: "Needs repair" in dialog.status.text(), timeout=20000)
    assert any("peft is not installed" in dialog.findings.item(i).text() for i in range(dialog.findings.count()))

    assert dialog.install_button.text() == "Repair"
    dialog.install_button.click()
    assert dialog.cancel_button.isEnabled() and not dialog.buttons.isEnabled()
    qtbot.waitUntil(lambda: "step 2 of 5" in dialog.progress_label.text(), timeout=20000)
    # Repair installs again: uv and pip would otherwise only see that torch's version is there.
    qtbot.waitUntil(lambda: any(flag in (folder / "install.log").read_text(encoding="utf-8")
                                for flag in (" --reinstall ", " --force-reinstall ")), timeout=30000)
    dialog.cancel_button.click()
    qtbot.waitUntil(lambda: dialog.progress_label.text().startswith("Cancelled"), timeout=20000)
    qtbot.waitUntil(lambda: "stopped halfway" in dialog.status.text(), timeout=20000)
    assert dialog.install_button.text() == "Continue Install"

    ready: list[str] = []
    dialog.sig_ready.connect(ready.append)
    dialog.install_button.click()
    qtbot.waitUntil(lambda: bool(ready), timeout=60000)
    qtbot.waitUntil(lambda: dialog.install_button.isEnabled(), timeout=20000)
    qtbot.waitUntil(lambda: "Ready." in dialog.status.text(), timeout=20000)
    assert dialog.progress.value() == dialog.progress.maximum()
    assert check_env(folder, ["peft"]).versions == {"peft": "0.21.2"}
    assert ready == [str(trainenv_copy.folder / "bin" / "python")] or sys.platform == "win32"
    dialog.close()


def test_an_environment_linked_to_another_copy_of_the_app_is_brought_up_to_date_by_install(
        qtbot: QtBot, tmp_path: Path, trainenv_copy: InstallPlan, env_vars: pytest.MonkeyPatch) -> None:
    """The app updated into another folder: the environment still runs the old copy's trainer. The window
    says so and offers Install, which links this copy again without installing the packages again."""
    from studio.core.trainenv.state import PTH_FILE

    folder = trainenv_copy.folder
    old_copy = tmp_path / "studio-1.0" / "_internal"
    (old_copy / "studio").mkdir(parents=True)
    (old_copy / "studio" / "__init__.py").write_text("")
    (Path(check_env(folder, []).purelib or "") / PTH_FILE).write_text(f"{old_copy}\n")
    dialog = open_dialog(qtbot, folder)
    assert dialog.status.text().startswith("<b>Made by another copy of the studio.</b>")
    assert dialog.install_button.text() == "Install"
    ready: list[str] = []
    dialog.sig_ready.connect(ready.append)
    dialog.install_button.click()
    qtbot.waitUntil(lambda: bool(ready), timeout=60000)
    qtbot.waitUntil(lambda: "Ready." in dialog.status.text(), timeout=20000)
    log = (folder / "install.log").read_text(encoding="utf-8")
    assert " --reinstall " not in log and " --force-reinstall " not in log  # not every package again
    assert Path(check_env(folder, []).studio or "").resolve() == trainenv_copy.studio_source / "studio"
    dialog.close()


def test_tools_menu_opens_the_window(qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from PySide6.QtGui import QAction

    from studio.gui.shell.application import make_settings
    from studio.gui.shell.main_window import MainWindow

    monkeypatch.setenv("STUDIO_HARDWARE", "no-gpu")
    monkeypatch.setenv("STUDIO_TRAINING_ENV", str(tmp_path / "env"))
    window = MainWindow(StudioContext(make_settings(tmp_path / "settings.ini")))
    qtbot.addWidget(window)
    action = window.findChild(QAction, "action_training_env")
    assert action is not None and action.text() == "&Training Environment…"
    action.trigger()
    dialog = window.findChild(TrainingEnvDialog, "training_env_dialog")
    assert dialog is not None and dialog.isVisible()
    qtbot.waitUntil(lambda: dialog.overview is not None, timeout=20000)
    # Run from the checkout: the status says where the studio's own environment would go.
    assert str(tmp_path / "env") in dialog.status.text()
    dialog.close()


def test_the_demos_first_train_goes_environment_then_model_then_run(
        qtbot: QtBot, tmp_path: Path, trainenv_copy: InstallPlan, env_vars: pytest.MonkeyPatch) -> None:
    """The desktop app's first Train on the demo: the set-up window, then the tiny model is built, then the
    run starts by itself; nothing offers a download on the way."""
    import studio.core.project.demo as demo
    from studio.core.project.demo import create_demo_project
    from studio.gui.shell.application import make_settings
    from studio.gui.shell.main_window import MainWindow
    from tests.gui.conftest import fake_command

    env_vars.setattr(sys, "frozen", True, raising=False)
    env_vars.setenv("STUDIO_TRAINING_ENV", str(tmp_path / "no-env-yet"))
    project = create_demo_project(tmp_path / "demo")
    model = project.root / "models" / "tiny-sd15"
    build = ("import pathlib, sys; p = pathlib.Path(sys.argv[1]); p.mkdir(parents=True); "
             "(p / 'model_index.json').write_text('{\"_class_name\": \"StableDiffusionPipeline\"}')")
    env_vars.setattr(demo, "model_command", lambda _project: [sys.executable, "-c", build, str(model)])
    window = MainWindow(StudioContext(make_settings(tmp_path / "settings.ini")))
    qtbot.addWidget(window)
    window.context.run_controller.command_factory = fake_command()
    window.set_project(project)
    page = window.show_page("page_train")
    asked: list[str] = []
    page.confirm = lambda title, text: bool(asked.append(f"{title}: {text}"))

    page.train_button.click()
    dialog = window.findChild(TrainingEnvDialog, "training_env_dialog")
    assert dialog is not None and dialog.isVisible()
    assert page.message.text() == "Set up the training environment first: training starts when it is ready."
    assert not model.exists() and not any((project.root / "runs").glob("*"))

    env_vars.setenv("STUDIO_TRAINING_ENV", str(trainenv_copy.folder))  # the install finished
    dialog.sig_ready.emit(str(trainenv_copy.folder / "bin" / "python"))
    assert page.message.text().startswith("Building the demo's tiny model first")
    qtbot.waitUntil(lambda: page.controller.running, timeout=30000)
    assert (model / "model_index.json").is_file()
    qtbot.waitUntil(lambda: not page.controller.running, timeout=30000)
    assert page.controller.model.status == "finished" and page.controller.model.loss
    assert asked == []  # no download offered, no other question
    dialog.close()
    window.close()


def test_install_from_a_folder_of_wheels_chosen_in_the_window(
        qtbot: QtBot, tmp_path: Path, trainenv_installed: Installed, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STUDIO_HARDWARE", "no-gpu")
    monkeypatch.delenv("STUDIO_WHEELHOUSE", raising=False)
    empty = tmp_path / "not-wheels"
    empty.mkdir()
    dialog = open_dialog(qtbot, tmp_path / "env")
    answers = [str(empty), str(trainenv_installed.wheels)]
    dialog.ask_folder = lambda: answers.pop(0)
    dialog.wheels_button.click()
    assert "has no torch wheel" in dialog.progress_label.text() and dialog.wheelhouse is None
    dialog.wheels_button.click()
    assert dialog.wheelhouse == trainenv_installed.wheels
    qtbot.waitUntil(lambda: dialog.install_button.isEnabled(), timeout=20000)
    assert dialog.overview is not None and dialog.overview.plan is not None
    assert dialog.overview.plan.wheelhouse == trainenv_installed.wheels
    ready: list[str] = []
    dialog.sig_ready.connect(ready.append)
    dialog.install_button.click()
    qtbot.waitUntil(lambda: bool(ready), timeout=120000)
    qtbot.waitUntil(lambda: "Ready." in dialog.status.text(), timeout=20000)
    assert "PyTorch 2.13.0+cpu" in dialog.status.text()
    log = (tmp_path / "env" / "install.log").read_text(encoding="utf-8")
    assert f"--find-links {trainenv_installed.wheels}" in log and "--no-index" in log
    dialog.close()

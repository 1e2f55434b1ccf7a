"""`studio --first-train-test`: a newcomer's first Train, pressed in the real window, and what it showed.

The app starts as it does for a person (first start: the demo project), the Train page's
Train button is pressed, the Training Environment window that opens installs (from
$STUDIO_WHEELHOUSE when set, as "Install from a Folder of Wheels…" does), the demo's tiny
model is built and the run trains to its end. Any question the app asks on the way (a
download offered, "may not fit", …) is answered No and reported: a newcomer's first Train
asks none. With STUDIO_CLOUD_LAUNCH_TEST=1 the Export page's cloud launch follows (cloud_launch_drive.py).
CI runs this on the installed frozen app (tests/packaging/test_first_train.py).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QApplication

from studio.gui.base.event_loop import wait_for
from studio.gui.shell.cloud_launch_drive import CLOUD_TEST_VAR, drive_cloud_launch
from studio.gui.shell.main_window import MainWindow
from studio.gui.trainenv.window import TrainingEnvDialog

REPORT_VAR = "STUDIO_SELF_TEST_REPORT"
STEP_TIMEOUT_S = float(os.environ.get("STUDIO_FIRST_TRAIN_TIMEOUT_S", "1200"))


def run_first_train(window: MainWindow, app: QApplication) -> None:
    """Press Train as a person would, follow it to the end, write the report, quit (exit 1 on failure)."""
    facts: dict[str, Any] = {"questions": [], "messages": [], "qt_platform": app.platformName()}
    started = time.monotonic()
    try:
        _drive(window, facts)
    except Exception as exc:  # the report says what stopped it
        facts["error"] = repr(exc)
    facts["seconds"] = round(time.monotonic() - started, 1)
    facts["ok"] = bool(facts.get("status") == "finished" and facts.get("lora_files") and facts.get("loss_drawn")
                       and not facts["questions"] and not facts.get("error")
                       and (os.environ.get(CLOUD_TEST_VAR) != "1" or facts.get("cloud", {}).get("launched")))
    line = json.dumps(facts)
    report = os.environ.get(REPORT_VAR)
    if report:
        Path(report).write_text(line + "\n", encoding="utf-8")
    if sys.stdout is not None:
        print(line, flush=True)
    window.close()
    app.exit(0 if facts["ok"] else 1)


def _drive(window: MainWindow, facts: dict[str, Any]) -> None:
    context = window.context
    context.sig_status.connect(facts["messages"].append)
    page: Any = window.show_page("page_train")

    def answer_no(title: str, text: str) -> bool:
        facts["questions"].append(f"{title}: {text}")
        return False

    page.confirm = answer_no
    wait_for(lambda: context.project is not None, 30.0)
    facts["project"] = str(context.project.root) if context.project else None
    page.train_button.click()
    facts["messages"].append(page.message.text())
    dialog = window.findChild(TrainingEnvDialog, "training_env_dialog")
    facts["environment_window"] = dialog is not None
    if dialog is not None:
        if not wait_for(lambda: dialog.install_button.isEnabled(), 120.0):
            raise RuntimeError(f"the Training Environment window did not become ready: {dialog.status.text()}")
        facts["environment_status"] = dialog.status.text()
        dialog.install_button.click()
        done = wait_for(lambda: not dialog.installing, STEP_TIMEOUT_S)
        facts["environment_result"] = dialog.progress_label.text()
        if not done or not dialog.progress_label.text().startswith(("Ready", "Up to date")):
            raise RuntimeError(f"the environment install did not finish: {dialog.progress_label.text()}")
    controller = page.controller
    # Training starts by itself once the environment is ready and the demo's model is built.
    if not wait_for(lambda: controller.running or facts["questions"], STEP_TIMEOUT_S):
        raise RuntimeError(f"the training did not start: {page.message.text()}")
    facts["messages"].append(page.message.text())
    wait_for(lambda: not controller.running, STEP_TIMEOUT_S)
    model = controller.model
    outputs = [Path(model.resolve(o)) for o in model.outputs]
    _x, drawn = page.plots.loss.raw.getData()  # what the loss plot draws, not only what the run wrote
    facts.update(status=model.status, loss_points=len(model.loss), loss_drawn=0 if drawn is None else len(drawn),
                 outputs=[str(o) for o in outputs],
                 lora_files=[str(o) for o in outputs if o.name == "pytorch_lora_weights.safetensors" and o.is_file()])
    if dialog is not None:
        dialog.close()
    if os.environ.get(CLOUD_TEST_VAR) == "1":  # then the cloud launch, as the Export page offers it
        facts["cloud"] = drive_cloud_launch(window.show_page("page_export"), STEP_TIMEOUT_S)

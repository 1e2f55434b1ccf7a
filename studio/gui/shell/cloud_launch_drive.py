"""The desktop app's cloud launch, pressed as a person would on the Export page: Install SkyPilot… makes the
cloud environment (from $STUDIO_WHEELHOUSE when set), Launch on a cloud… asks SkyPilot for a price there
through the bridge, the offer is accepted, the run starts and is followed, then left running (detached).

`studio --first-train-test` runs it after the first Train when STUDIO_CLOUD_LAUNCH_TEST=1 (the package job,
with a stand-in SkyPilot among the wheels); tests/gui/export/test_cloud_launch.py runs it in the suite.
"""

from __future__ import annotations

from typing import Any

from studio.gui.base.event_loop import wait_for

CLOUD_TEST_VAR = "STUDIO_CLOUD_LAUNCH_TEST"


def drive_cloud_launch(export: Any, timeout_s: float) -> dict[str, Any]:
    """What the Export page's cloud panel showed at each step; `launched` is True once the run was followed."""
    panel = export.cloud
    facts: dict[str, Any] = {"offers": []}

    def accept(question: str) -> bool:
        facts["offers"].append(question)
        return True

    panel.confirm = accept
    export.refresh()
    if panel.install_button.isVisibleTo(panel):
        panel.install_button.click()
        if not wait_for(lambda: not panel.worker.busy, timeout_s):
            raise RuntimeError(f"SkyPilot's install did not finish: {panel.status.text()}")
    facts["install"] = panel.status.text()
    panel.launch_button.click()
    # The price and the launch run one after the other on the panel's worker; it rests only when done.
    wait_for(lambda: panel.run is not None or not panel.worker.busy, timeout_s)
    facts["status"] = panel.status.text()
    facts["launched"] = panel.run is not None
    if panel.run is not None:
        facts["cluster"] = panel.run.record.cluster
        panel.run.detach()
    return facts

"""The plan for a machine with several GPUs: the peak per GPU as DDP and as FSDP, side by side.

Shown when the chosen hardware has more than one GPU (or the config asks for several
processes); when DDP does not fit and FSDP does, it proposes FSDP with an Apply button.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from studio.core.config.files.paths import ResolvedConfig
from studio.core.estimate.sharded.sharded_estimate import GpuPlan, plan_gpus
from studio.core.hardware.report import GPUInfo
from studio.gui.base.names import named

FIT_MARKS = {"fits": "✓ fits", "tight": "⚠ tight", "does_not_fit": "✗ does not fit", None: ""}


class GpuPlanPanel(QFrame):
    """`sig_apply(changes)` asks the page to switch the run to FSDP on the machine's GPUs."""

    sig_apply = Signal(dict)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("gpu_plan_panel")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.plan: GpuPlan | None = None
        layout = QVBoxLayout(self)
        self.title = named(QLabel(), "gpu_plan_title")
        self.table = named(QLabel(), "gpu_plan_table")
        self.advice = named(QLabel(), "gpu_plan_advice")
        for label in (self.title, self.table, self.advice):
            label.setWordWrap(True)
            layout.addWidget(label)
        row = QHBoxLayout()
        self.apply_button = named(QPushButton(), "gpu_plan_apply")
        self.apply_button.clicked.connect(self.apply)
        row.addWidget(self.apply_button)
        row.addStretch(1)
        layout.addLayout(row)
        self.setVisible(False)

    def update_for(self, config: ResolvedConfig, gpu: GPUInfo | None, gpus: int) -> None:
        """Show the plan for `gpus` GPUs like `gpu` (at least the config's own process count); hide below two."""
        count = max(gpus, config.launch.num_processes)
        self.setVisible(count > 1)
        if count < 2:
            self.plan = None
            return
        plan = self.plan = plan_gpus(config, gpu, count)
        where = f" {gpu.name}" if gpu else ""
        self.title.setText(f"<b>Plan for {count}{where} GPUs</b>: the peak on each GPU")
        self.table.setText(_table(plan))
        current = config.launch.strategy
        if plan.fsdp is None:
            self.advice.setText(f"<small>FSDP does not apply: {plan.fsdp_refused}</small>")
        elif plan.proposes_fsdp and current != "fsdp":
            self.advice.setText(f"DDP keeps a whole copy of the trained weights, gradients and optimizer state on "
                                f"every GPU and does not fit; FSDP splits them {count} ways and fits.")
        else:
            self.advice.setText(f"<small>This run uses {current.upper()}.</small>")
        proposes = plan.proposes_fsdp and (current != "fsdp" or config.launch.num_processes != count)
        self.apply_button.setText(f"Use FSDP on {count} GPUs")
        self.apply_button.setVisible(proposes)

    def apply(self) -> None:
        if self.plan is not None:
            self.sig_apply.emit(self.plan.changes)


def _table(plan: GpuPlan) -> str:
    cells = [("DDP", plan.ddp.total_gb, plan.ddp_fit)]
    if plan.fsdp is not None:
        cells.append(("FSDP", plan.fsdp.total_gb, plan.fsdp_fit))
    rows = "".join(f"<tr><td><b>{name}</b></td><td align=right>{gb:.1f} GB</td><td>{FIT_MARKS[verdict]}</td></tr>"
                   for name, gb, verdict in cells)
    return f"<table>{rows}</table>"

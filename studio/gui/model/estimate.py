"""The estimate panel: the breakdown, the verdict, and suggestions with an Apply button."""

from __future__ import annotations

import html

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from studio.core.config.errors import ConfigError
from studio.core.config.files.paths import ResolvedConfig
from studio.core.estimate.estimate import VramEstimate, estimate_vram, fit, other_processes_warning
from studio.core.estimate.plans.batch_plan import plan_batch
from studio.core.estimate.plans.fixes import Suggestion, suggest_fixes
from studio.core.estimate.ram.ram_estimate import RamEstimate, describe_ram, estimate_ram, ram_problem
from studio.core.hardware.report import GPUInfo
from studio.core.text import memory_text
from studio.gui.base.layout_state import remove_widgets
from studio.gui.base.names import named

VERDICTS = {"fits": "✓ Fits", "tight": "⚠ Fits, but tight (within 10%)", "does_not_fit": "✗ Does not fit"}


class EstimatePanel(QFrame):
    """`sig_apply(changes)` asks the page to apply a suggestion's config changes."""

    sig_apply = Signal(dict)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("estimate_panel")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.estimate: VramEstimate | None = None
        self.ram_estimate: RamEstimate | None = None
        self.suggestions: list[Suggestion] = []
        layout = QVBoxLayout(self)
        self.verdict = named(QLabel(), "estimate_verdict")
        self.batch_plan = named(QLabel(), "estimate_batch_plan")
        self.total = named(QLabel(), "estimate_total")
        self.breakdown = named(QLabel(), "estimate_breakdown")
        self.warning = named(QLabel(), "estimate_warning")
        for label in (self.verdict, self.batch_plan, self.total, self.breakdown, self.warning):
            label.setWordWrap(True)
            layout.addWidget(label)
        self.suggestion_box = QVBoxLayout()
        self._suggestion_widgets: list[QWidget] = []
        layout.addLayout(self.suggestion_box)

    def update_for(self, config: ResolvedConfig, gpu: GPUInfo | None, gpus: int = 1, ram_mb: int = 0) -> None:
        """The estimate on one GPU like `gpu`, and the system RAM beside it against the machine's `ram_mb`;
        suggestions may shard across the machine's `gpus`."""
        est = estimate_vram(config, gpu)
        self.estimate = est
        where = f"on {gpu.name} ({gpu.free_mb / 1024:.1f} GB free)" if gpu else "in RAM (no GPU: a CPU run, fp32)"
        self.total.setText(f"<b>Estimated peak: {memory_text(est.total_mb).replace(' ', '&nbsp;')}</b> {where}<br>{self._ram(config, gpu, ram_mb)}")
        # A size is one unbreakable word: "3.20 GB" never wraps into "3.20" and "GB".
        rows = "".join(f"<tr><td>{p.label}</td><td align=right style='white-space:nowrap'>"
                       f"{memory_text(p.mb).replace(' ', '&nbsp;')}</td><td>{p.detail}</td></tr>"
                       for p in est.parts if p.mb > 0)
        notes = "".join(f"<br><small>{n}</small>" for n in est.notes)
        self.breakdown.setText(f"<table>{rows}</table>{notes}")
        warning = other_processes_warning(gpu) if gpu else None
        self.warning.setText(f"⚠ {warning}" if warning else "")
        self.warning.setVisible(bool(warning))
        if gpu is None:
            self.verdict.setText("No GPU selected: choose a hardware profile to check the fit.")
            self.batch_plan.setText("")
            self._show_suggestions([])
            return
        self.verdict.setText(VERDICTS[fit(est, gpu)])
        plan = plan_batch(config, gpu)
        self.batch_plan.setText(f"<b>{plan.badge}</b>: {plan.describe()}" if plan else "")
        self._show_suggestions(suggest_fixes(config, gpu, gpus))

    def _ram(self, config: ResolvedConfig, gpu: GPUInfo | None, ram_mb: int) -> str:
        """"RAM: 19.7 GB of 32 GB (peak while the model loads)", marked and explained when it is near or over
        the machine's memory; its parts in the tooltip."""
        ram = self.ram_estimate = estimate_ram(config, gpu)
        self.total.setToolTip("\n".join(f"{p.label}: {p.mb / 1024:.2f} GB ({p.detail})" for p in ram.parts))
        text = html.escape(describe_ram(ram, ram_mb)).replace(" GB", "&nbsp;GB")
        problem = ram_problem(config, gpu, ram_mb, ram)
        if problem is None:
            return text
        mark = "⚠" if problem[0] == "tight" else "✗"
        return f"<b>{mark} {text}</b><br><small>{html.escape(problem[1])}</small>"

    def show_unresolved(self, error: ConfigError) -> None:
        """No estimate: a path of the config cannot be made absolute; say which, why and what to do."""
        self.estimate = None
        problems = "<br>".join(html.escape(str(issue), quote=False) for issue in error.issues) \
            or html.escape(str(error), quote=False)
        self.verdict.setText(f"⚠ No estimate: a path of the settings cannot be used.<br>{problems}")
        for label in (self.batch_plan, self.total, self.breakdown, self.warning):
            label.setText("")
        self.warning.setVisible(False)
        self._show_suggestions([])

    def _show_suggestions(self, suggestions: list[Suggestion]) -> None:
        self.suggestions = suggestions
        remove_widgets(self.suggestion_box, self._suggestion_widgets)
        if not suggestions:
            return
        head = QLabel("<b>To make it fit</b> (cheapest first; each step adds to the ones above):")
        self._add_suggestion_widget(head)
        for i, s in enumerate(suggestions):
            row = named(QWidget(), f"suggestion_{i}")
            line = QHBoxLayout(row)
            line.setContentsMargins(0, 0, 0, 0)
            text = QLabel(f"{i + 1}. <b>{s.title}</b> → {memory_text(s.estimate.total_mb)} "
                          f"({VERDICTS[s.fit]})<br><small>{s.description}</small>")
            text.setWordWrap(True)
            line.addWidget(text, 1)
            apply = named(QPushButton("Apply"), f"apply_suggestion_{i}")
            apply.setToolTip("Set " + ", ".join(f"{k} = {v}" for k, v in s.changes.items()))
            apply.clicked.connect(lambda _c=False, index=i: self.apply(index))
            line.addWidget(apply)
            self._add_suggestion_widget(row)
        if suggestions[-1].fit == "does_not_fit":
            self._add_suggestion_widget(QLabel("Even with every change it does not fit: choose a larger GPU."))

    def _add_suggestion_widget(self, widget: QWidget) -> None:
        self.suggestion_box.addWidget(widget)
        self._suggestion_widgets.append(widget)

    def apply(self, index: int) -> None:
        """Apply suggestion `index` together with the ones before it."""
        changes: dict[str, object] = {}
        for s in self.suggestions[: index + 1]:
            changes.update(s.changes)
        self.sig_apply.emit(changes)

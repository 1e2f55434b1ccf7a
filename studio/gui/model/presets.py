"""Preset cards with their fit badge and estimate, filtered by family and method."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from studio.core.config.errors import ConfigError
from studio.core.config.files.paths import ResolvedConfig
from studio.core.config.files.presets import Preset, user_preset_path
from studio.core.estimate.estimate import Fit, fit
from studio.core.estimate.plans.batch_plan import plan_batch
from studio.core.estimate.plans.preset_estimate import (
    SAMPLE_EVERY_N_STEPS,
    PresetEstimate,
    applied_at_its_size,
    estimate_preset,
)
from studio.core.families import FAMILY_NAMES
from studio.core.families import title as family_title
from studio.core.hardware.report import GPUInfo
from studio.gui.base.names import named

METHOD_TITLES = {"lora": "LoRA", "dreambooth": "DreamBooth"}
BADGES: dict[str, tuple[str, str]] = {
    "fits": ("Fits", "#2e7d32"),
    "tight": ("Tight", "#ef6c00"),
    "does_not_fit": ("Does not fit", "#c62828"),
    "cpu": ("CPU only", "#616161"),
    "too_few_gpus": ("Needs more GPUs", "#c62828"),
}


def preset_fit(config: ResolvedConfig, preset: Preset, gpu: GPUInfo | None,
               gpus: int = 1) -> tuple[str, PresetEstimate]:
    """(badge key, the estimate with samples) of `preset` applied to `config` on `gpus` GPUs like `gpu`
    (on a card of the promised size when no GPU is chosen)."""
    result = estimate_preset(preset, gpu, config)
    if gpu is None:
        return "cpu", result
    return ("too_few_gpus" if preset.gpus > gpus else fit(result.estimate, gpu)), result


class PresetCard(QFrame):
    sig_chosen = Signal(object)  # Preset

    def __init__(self, preset: Preset, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.preset = preset
        self.verdict: str = "cpu"
        self.setObjectName(f"preset_card_{preset.id}")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        layout = QVBoxLayout(self)
        top = QHBoxLayout()
        mine = " (yours)" if preset.user else ""
        top.addWidget(QLabel(f"<b>{preset.title}</b>{mine}"))
        top.addStretch(1)
        self.batch_badge = named(QLabel(), "batch_badge")
        top.addWidget(self.batch_badge)
        self.badge = named(QLabel(), "fit_badge")
        top.addWidget(self.badge)
        layout.addLayout(top)
        text = QLabel(preset.description + (f"<br><i>Trade-offs: {preset.tradeoffs}</i>" if preset.tradeoffs else ""))
        text.setWordWrap(True)
        text.setTextFormat(Qt.TextFormat.RichText)
        layout.addWidget(text)
        bottom = QHBoxLayout()
        self.estimate = named(QLabel(), "preset_estimate")
        bottom.addWidget(self.estimate)
        bottom.addStretch(1)
        use = named(QPushButton("Use this preset"), f"use_{preset.id}")
        use.clicked.connect(lambda: self.sig_chosen.emit(self.preset))
        bottom.addWidget(use)
        layout.addLayout(bottom)

    def update_fit(self, config: ResolvedConfig | None, gpu: GPUInfo | None, gpus: int = 1) -> None:
        if config is None:
            return
        try:
            self.verdict, result = preset_fit(config, self.preset, gpu, gpus)
        except ConfigError as exc:
            self.verdict = "does_not_fit"
            self.badge.setText("Invalid")
            self.estimate.setText(exc.issues[0].message if exc.issues else str(exc))
            return
        word, colour = BADGES[self.verdict]
        if self.verdict == "too_few_gpus":
            word = f"Needs {self.preset.gpus} GPUs"
        self.badge.setText(word)
        self.badge.setStyleSheet(f"color: white; background: {colour}; padding: 2px 6px; border-radius: 4px;")
        over = "" if result.keeps_promise else " — over its promise"
        self.estimate.setText(result.summary() + over)
        where = gpu.name if gpu is not None else f"{result.gpu.name} (no GPU chosen)"
        parts = "<br>".join(f"{p.label}: {p.mb / 1024:.2f} GB" for p in result.estimate.parts if p.mb > 0)
        self.estimate.setToolTip(f"Estimated on {where}, with sample images every "
                                 f"{config.sampling.every_n_steps or SAMPLE_EVERY_N_STEPS} steps:<br>{parts}")
        plan = plan_batch(applied_at_its_size(self.preset, config), gpu)
        self.batch_badge.setText(plan.badge if plan else "")
        self.batch_badge.setToolTip(plan.describe().replace("; ", "\n") if plan else "")


class PresetList(QWidget):
    sig_chosen = Signal(object)  # Preset

    def __init__(self, presets: list[Preset], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("preset_list")
        layout = QVBoxLayout(self)
        filters = QHBoxLayout()
        self.family = named(QComboBox(), "preset_family")
        self.method = named(QComboBox(), "preset_method")
        # The families' and methods' names shown, their ids stored.
        for combo, values in ((self.family, {name: family_title(name) for name in FAMILY_NAMES}),
                              (self.method, METHOD_TITLES)):
            combo.addItem("all", None)
            for value, shown in values.items():
                combo.addItem(shown, value)
            combo.currentIndexChanged.connect(lambda _i: self._filter())
            filters.addWidget(combo)
        filters.addStretch(1)
        layout.addLayout(filters)
        self.cards: list[PresetCard] = []
        self._box = QVBoxLayout()
        layout.addLayout(self._box)
        self.set_presets(presets)

    def set_presets(self, presets: list[Preset]) -> None:
        for card in self.cards:
            card.deleteLater()
        self.cards = []
        for preset in presets:
            card = PresetCard(preset)
            card.sig_chosen.connect(self.sig_chosen)
            self._box.addWidget(card)
            self.cards.append(card)
        self._filter()

    def set_family(self, family: str | None) -> None:
        self.family.setCurrentIndex(max(0, self.family.findData(family)))

    def _filter(self) -> None:
        family, method = self.family.currentData(), self.method.currentData()
        for card in self.cards:
            card.setVisible((family is None or card.preset.family == family)
                            and (method is None or card.preset.method == method))

    def update_fits(self, config: ResolvedConfig | None, gpu: GPUInfo | None, gpus: int = 1) -> dict[Fit, int]:
        counts: dict[Fit, int] = {"fits": 0, "tight": 0, "does_not_fit": 0}
        for card in self.cards:
            card.update_fit(config, gpu, gpus)
            if card.verdict in counts:
                counts[card.verdict] += 1
            else:
                counts["does_not_fit"] += 1  # no GPU: nothing fits one
        return counts


def ask_preset_title(parent: QWidget) -> str:
    """The title a person gives their preset ("" for none, or when they keep the preset of that title they have:
    it was replaced without a word)."""
    title, ok = QInputDialog.getText(parent, "Save as my preset", "Preset title:")
    title = title.strip()
    if not ok or not title:
        return ""
    existing = user_preset_path(title)
    if existing.exists() and QMessageBox.question(
            parent, "Save as my preset", f"You have a preset titled '{title}' ({existing}).\n\n"
            "Replace its settings with these? (No: nothing is saved; choose another title to keep both.)"
    ) != QMessageBox.StandardButton.Yes:
        return ""
    return title

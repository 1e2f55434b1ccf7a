"""Sample images of a run: a gallery grouped by step and prompt, a step slider, click to enlarge."""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, QSize, Qt, QTimer
from PySide6.QtGui import QColor, QIcon, QPixmap
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QSlider,
    QVBoxLayout,
    QWidget,
)

from studio.core.project.demo import is_demo_model
from studio.core.runs.records.run_model import RunModel, SampleImage
from studio.gui.base.names import named
from studio.gui.widgets.image_view import ImageView

THUMB = 128
THUMB_LOADED = Qt.ItemDataRole.UserRole + 1  # a grid item whose picture has been read
DIALOG_MIN_SIDE = 512
NO_PROMPTS = "No samples yet: add prompts in the Sample settings tab."


def waiting_text(sampling: dict[str, object], step: int = 0, total: int = 0, ended: bool = False) -> str:
    """What the empty gallery says for a run's `sampling` settings, at `step` of `total` (`ended`: it will make
    none any more)."""
    prompts = sampling.get("prompts") or []
    every = sampling.get("every_n_steps") or 0
    if ended:  # a finished run opened later: nothing more is coming, whatever the settings are now
        if not prompts:
            return "This run made no samples: it had no sample prompts."
        if not isinstance(every, int) or every <= 0:
            if not sampling.get("at_start"):
                return "This run made no samples: sampling was off (every 0 steps)."
            every = 0  # its only samples, before the first step
        if step >= every:  # samples were due: each round failed (a sample's failure does not end a run)
            return "This run made no samples: each round failed; its errors and console.log say why."
        return f"This run made no samples: it ended at step {step}, before its first samples (step {every})."
    if not prompts:
        return NO_PROMPTS
    if sampling.get("at_start") and step == 0:
        return "No samples yet: the first samples are made before the first step."
    if not isinstance(every, int) or every <= 0:
        return "No samples: sampling is off (every 0 steps); set how often in the Sample settings tab."
    due = (step // every + 1) * every
    if total and due > total:
        due = total  # the last samples are made at the end
    return f"No samples yet: the first samples are made at step {due}."


class ImageDialog(QDialog):
    """One sample at full size."""

    def __init__(self, sample: SampleImage, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("sample_dialog")
        self.setWindowTitle(f"Step {sample.step}: {sample.prompt}")
        pixmap = QPixmap(str(sample.path))
        self.image = named(ImageView(f"Cannot read {sample.path}", upscale=True), "sample_dialog_image")
        if not pixmap.isNull():
            self.image.set_pixmap(pixmap)
        layout = QVBoxLayout(self)
        # The prompt as written: a trigger word such as "<sks>" or "<lora:x:1>" is text here, not markup.
        layout.addWidget(QLabel(f"<b>step {sample.step}</b> · {html.escape(sample.prompt, quote=False)}"
                                f"<br><small>{html.escape(str(sample.path), quote=False)}</small>"))
        layout.addWidget(self.image, 1)
        # Big enough to see a small sample (a tiny model's 64 px) without a magnifier; a large one fits the screen.
        side = max(DIALOG_MIN_SIDE, min(max(pixmap.width(), pixmap.height()), 1000))
        self.resize(side + 40, side + 80)


class SamplesGallery(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("samples_gallery")
        self.prompt = QComboBox()
        self.prompt.setObjectName("samples_prompt")
        # A prompt of hundreds of characters ("masterpiece, best quality, ...") is elided, never a combo box (and a
        # window) thousands of pixels wide; its whole text is in the list and the grid's tooltips.
        self.prompt.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.prompt.setMinimumContentsLength(24)
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setObjectName("samples_step_slider")
        self.step_label = QLabel("–")
        self.preview = ImageView(NO_PROMPTS, upscale=True)
        self.preview.setObjectName("samples_preview")
        self.preview.setMinimumSize(160, 160)
        self.preview.sig_clicked.connect(self._enlarge_current)
        # An edit run's samples edit a control image: shown beside them, the before next to the after.
        self.control = named(ImageView("", upscale=True), "samples_control")
        self.control.setMinimumSize(160, 160)
        self.control.setToolTip("The control image the samples edit (the before)")
        self.control.setVisible(False)
        self.grid = QListWidget()
        self.grid.setObjectName("samples_grid")
        self.grid.setViewMode(QListWidget.ViewMode.IconMode)
        self.grid.setIconSize(QSize(THUMB, THUMB))
        self.grid.setResizeMode(QListWidget.ResizeMode.Adjust)
        self.grid.setUniformItemSizes(True)
        self.grid.itemActivated.connect(self._enlarge_item)
        self.grid.itemClicked.connect(self._enlarge_item)
        # Thumbnails are read for the items in view only, when they come into view: a long run's thousands of
        # samples were each read whole on opening it (seconds to minutes of a frozen window, 64 KB of icon each).
        blank = QPixmap(THUMB, THUMB)
        blank.fill(QColor(0, 0, 0, 0))
        self._placeholder = QIcon(blank)
        self._thumbs = QTimer(self)
        self._thumbs.setSingleShot(True)
        self._thumbs.setInterval(0)
        self._thumbs.timeout.connect(self.load_visible_thumbnails)
        self.grid.verticalScrollBar().valueChanged.connect(lambda _value: self._thumbs.start())
        self.grid.viewport().installEventFilter(self)
        self.prompt.currentIndexChanged.connect(self._update_slider)
        # The prompt a person chose stays chosen in the next run shown that has it: runs compared prompt by prompt.
        self._chosen_prompt = ""
        self.prompt.textActivated.connect(self._choose_prompt)
        self.slider.valueChanged.connect(self._show_step)
        controls = QHBoxLayout()
        controls.addWidget(QLabel("Prompt"))
        controls.addWidget(self.prompt, 2)
        controls.addWidget(QLabel("Step"))
        controls.addWidget(self.slider, 3)
        controls.addWidget(self.step_label)
        self.random_model_note = QLabel(
            "These samples come from the demo's tiny model, whose weights are random: they are noise by "
            "design. The demo shows the studio at work; a real base model makes real pictures.")
        self.random_model_note.setObjectName("samples_random_model_note")
        self.random_model_note.setWordWrap(True)
        self.random_model_note.setVisible(False)
        layout = QVBoxLayout(self)
        layout.addWidget(self.random_model_note)
        layout.addLayout(controls)
        pictures = QHBoxLayout()
        pictures.addWidget(self.control, 1)
        pictures.addWidget(self.preview, 2)
        layout.addLayout(pictures, 2)
        layout.addWidget(self.grid, 3)
        self._samples: list[SampleImage] = []
        self._model: RunModel | None = None
        self._rewinds = 0  # the model's rewinds when the gallery was filled (a resume drops later samples)
        self.last_dialog: ImageDialog | None = None

    def refresh(self, model: RunModel) -> None:
        """Add what is new (samples only ever grow within one run)."""
        if model is not self._model or model.rewinds != self._rewinds or len(model.samples) < len(self._samples):
            self._model, self._rewinds = model, model.rewinds
            self._samples = []
            self.grid.clear()
            self.prompt.clear()
            # Another run shown (or none): the run before's picture does not stay up as if it were this one's.
            self.preview.set_pixmap(None)
            self.step_label.setText("–")
        base = model.started.config.get("model", {}).get("base", "") if model.started else ""
        self.random_model_note.setVisible(isinstance(base, str) and is_demo_model(base))
        self._show_control(model.sample_controls)
        new = model.samples[len(self._samples):]
        if not self._samples and not new and model.started is not None:
            sampling = model.started.config.get("sampling", {})
            self.show_waiting(sampling if isinstance(sampling, dict) else {}, model.step, model.total_steps,
                              model.ended)
        if not new:
            return
        for sample in new:
            self._samples.append(sample)
            item = QListWidgetItem(self._placeholder, f"step {sample.step}\n{sample.prompt[:40]}")
            item.setData(Qt.ItemDataRole.UserRole, len(self._samples) - 1)
            item.setToolTip(f"step {sample.step}: {sample.prompt}\n{sample.path}")
            self.grid.addItem(item)
            if self.prompt.findText(sample.prompt) < 0:
                self.prompt.addItem(sample.prompt)
        chosen = self.prompt.findText(self._chosen_prompt) if self._chosen_prompt else -1
        if chosen >= 0 and chosen != self.prompt.currentIndex():
            self.prompt.setCurrentIndex(chosen)
        at_end = self.slider.value() == self.slider.maximum()
        self._update_slider(keep_end=at_end)
        self._thumbs.start()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.grid.viewport() and event.type() in (QEvent.Type.Show, QEvent.Type.Resize):
            self._thumbs.start()  # the Samples tab shown, the window resized: other items are in view
        return super().eventFilter(watched, event)

    def load_visible_thumbnails(self) -> int:
        """Read the pictures of the grid items in view that have none yet; how many were read."""
        grid = self.grid
        if not grid.isVisible() or not grid.count():
            return 0
        height = grid.viewport().height()
        # The items are laid out row by row: the first in view is found by bisection, not by asking them all.
        low, high = 0, grid.count()
        while low < high:
            middle = (low + high) // 2
            if grid.visualItemRect(grid.item(middle)).bottom() < 0:
                low = middle + 1
            else:
                high = middle
        read = 0
        for row in range(low, grid.count()):
            item = grid.item(row)
            if grid.visualItemRect(item).top() > height:
                break
            index = item.data(Qt.ItemDataRole.UserRole)
            if item.data(THUMB_LOADED) or not isinstance(index, int) or not 0 <= index < len(self._samples):
                continue
            sample = self._samples[index]
            pixmap = QPixmap(str(sample.path))
            if pixmap.isNull():  # a run brought back without its samples folder, a picture deleted: said, not blank
                item.setText(f"step {sample.step}\n(picture missing)")
                item.setToolTip(f"step {sample.step}: {sample.prompt}\n{sample.path} cannot be read: it is not "
                                "there (deleted, or the run was copied back without its samples) or not a picture")
            else:
                item.setIcon(QIcon(pixmap.scaled(THUMB, THUMB, Qt.AspectRatioMode.KeepAspectRatio,
                                                 Qt.TransformationMode.SmoothTransformation)))
            item.setData(THUMB_LOADED, True)
            read += 1
        return read

    def _show_control(self, controls: list[Path]) -> None:
        pixmap = QPixmap(str(controls[0])) if controls else QPixmap()
        self.control.setVisible(not pixmap.isNull())
        if not pixmap.isNull():
            self.control.set_pixmap(pixmap)

    def show_waiting(self, sampling: dict[str, object], step: int = 0, total: int = 0, ended: bool = False) -> None:
        """Before the first sample: when it comes, or what to set for samples at all."""
        if not self._samples:
            self.preview.set_text(waiting_text(sampling, step, total, ended))

    def _choose_prompt(self, prompt: str) -> None:
        self._chosen_prompt = prompt

    def steps_for(self, prompt: str) -> list[SampleImage]:
        return sorted((s for s in self._samples if s.prompt == prompt), key=lambda s: s.step)

    def _update_slider(self, *_args: object, keep_end: bool = True) -> None:
        series = self.steps_for(self.prompt.currentText())
        self.slider.setRange(0, max(len(series) - 1, 0))
        if keep_end:
            self.slider.setValue(self.slider.maximum())
        self._show_step(self.slider.value())

    def current(self) -> SampleImage | None:
        series = self.steps_for(self.prompt.currentText())
        index = self.slider.value()
        return series[index] if 0 <= index < len(series) else None

    def _show_step(self, _value: int) -> None:
        sample = self.current()
        if sample is None:
            return
        self.step_label.setText(f"step {sample.step}")
        pixmap = QPixmap(str(sample.path))
        if pixmap.isNull():
            self.preview.set_text(f"Cannot read {Path(sample.path).name}")
            return
        self.preview.set_pixmap(pixmap)  # drawn whole at any size of the page, never stretched

    def _enlarge_item(self, item: QListWidgetItem) -> None:
        index = item.data(Qt.ItemDataRole.UserRole)
        if isinstance(index, int) and 0 <= index < len(self._samples):
            self.enlarge(self._samples[index])

    def _enlarge_current(self) -> None:
        sample = self.current()
        if sample is not None:
            self.enlarge(sample)

    def enlarge(self, sample: SampleImage) -> None:
        self.last_dialog = ImageDialog(sample, self)
        self.last_dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.last_dialog.show()

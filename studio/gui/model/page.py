"""The Model & Preset page: hardware, base model, presets that fit, settings, VRAM estimate."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from studio.core.config.errors import ConfigError, issues_from_validation
from studio.core.config.files.presets import Preset, apply_preset, list_presets, save_user_preset
from studio.core.config.rules.acting import resets_for
from studio.core.config.rules.data_rules import fields_needed, turned_off
from studio.core.config.schema import TrainConfig
from studio.core.estimate.plans.fixes import apply_changes
from studio.core.families import FAMILY_NAMES
from studio.core.families import title as family_title
from studio.core.hardware.report import GPUInfo, HardwareReport
from studio.core.models.files import ModelInfo
from studio.core.models.known import default_base
from studio.core.project.folder import concept_path, default_config
from studio.gui.base.layout_state import remember_splitter
from studio.gui.base.names import named
from studio.gui.base.selftest_options import SelfTestOptions
from studio.gui.context import StudioContext
from studio.gui.model.base_check import BaseModelCheck
from studio.gui.model.estimate import EstimatePanel
from studio.gui.model.family_switch import ask_family_base, base_family, offered_base
from studio.gui.model.form import FOLDER_FIELDS, ConfigForm, issues_at_changed_fields
from studio.gui.model.gpu_plan import GpuPlanPanel
from studio.gui.model.hardware import HardwarePanel
from studio.gui.model.preset_question import ask_replace_settings, replaced_lines
from studio.gui.model.presets import PresetList, ask_preset_title
from studio.gui.model.toml_dialog import TomlDialog
from studio.gui.page import Page
from studio.gui.widgets.model_library import ModelLibraryPanel
from studio.gui.widgets.preset_size import ask_size_switch, followed_base, size_switch, switch_status

ESTIMATE_DELAY_MS = 30  # coalesce a burst of edits into one estimate


def _scrolled(widget: QWidget) -> QScrollArea:
    area = QScrollArea()
    area.setWidgetResizable(True)
    area.setWidget(widget)
    return area


class ModelPage(Page):
    title = "Model & Preset"
    page_id = "page_model"

    def __init__(self, context: StudioContext, parent: QWidget | None = None) -> None:
        super().__init__(context, parent)
        self.config: TrainConfig = context.config or default_config()
        self.gpu: GPUInfo | None = None
        self.report: HardwareReport | None = None
        self.gpu_count, self.ram_mb = 0, 0  # the machine's (or the profile's) GPUs and system memory
        self.current_preset: Preset | None = None
        # The config the last preset gave (None: none chosen in this project yet): what differs from it, or from
        # the defaults, the person set, and a preset replacing it asks first.
        self._preset_config: TrainConfig | None = None
        # Asked before a preset replaces settings the person set (their lines, "key: now → preset's"); tests
        # replace it.
        self.confirm_preset: Callable[[Preset, list[str]], bool] = lambda p, lines: ask_replace_settings(self, p, lines)
        self.base_check = BaseModelCheck(context.project_path)
        self._estimate_timer = QTimer(self, singleShot=True, interval=ESTIMATE_DELAY_MS)
        self._estimate_timer.timeout.connect(self.update_estimates)

        left = QWidget()
        left_layout = QVBoxLayout(left)
        self.hardware = HardwarePanel(context.hardware_file, self._disk_path())
        self.hardware.sig_report.connect(self._on_hardware)
        self.hardware.picker.currentIndexChanged.connect(
            lambda _i: self.context.plan_for(self.hardware.picker.currentData()))
        left_layout.addWidget(self.hardware)
        left_layout.addWidget(self._model_picker())
        self.library = ModelLibraryPanel(self.config.model.family)
        self.library.sig_chosen.connect(self.choose_library_model)
        left_layout.addWidget(QLabel("<b>Models on this machine</b> (and to download)"))
        left_layout.addWidget(self.library)
        self.presets = PresetList(self._load_presets())
        self.presets.sig_chosen.connect(self.choose_preset)
        left_layout.addWidget(QLabel("<b>Presets</b>"))
        left_layout.addWidget(self.presets)
        left_layout.addStretch(1)

        right = QWidget()
        right_layout = QVBoxLayout(right)
        self.estimate = EstimatePanel()
        self.estimate.sig_apply.connect(self.apply_config_changes)
        right_layout.addWidget(self.estimate)
        self.gpu_plan = GpuPlanPanel()
        self.gpu_plan.sig_apply.connect(self.apply_config_changes)
        right_layout.addWidget(self.gpu_plan)
        buttons = QHBoxLayout()
        show_toml = named(QPushButton("Show the TOML"), "show_toml")
        show_toml.clicked.connect(self.show_toml)
        save = named(QPushButton("Save as my preset…"), "save_preset")
        save.clicked.connect(self.ask_save_preset)
        buttons.addWidget(show_toml)
        buttons.addWidget(save)
        buttons.addStretch(1)
        right_layout.addLayout(buttons)
        self.error = named(QLabel(), "config_error")
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #c62828;")
        right_layout.addWidget(self.error)
        self.form = ConfigForm()
        self.form.sig_changed.connect(self.on_field_changed)
        self.form.sig_browse.connect(self.browse_folder_field)
        right_layout.addWidget(self.form)

        splitter = QSplitter()
        splitter.addWidget(_scrolled(left))
        splitter.addWidget(_scrolled(right))
        remember_splitter(splitter, context.settings, "model_split")
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel(f"<h2>{self.title}</h2>"))
        layout.addWidget(splitter, 1)

        context.sig_config_changed.connect(self._on_context_config)
        context.sig_project_changed.connect(lambda _p: setattr(self, "_preset_config", None))
        # The demo's tiny model is built after the page may have read its empty folder (the first start);
        # "Look again" is the person saying a model was copied in: both read the base model again.
        context.sig_demo_model_built.connect(self._on_demo_model_built)
        self.library.rescan_button.clicked.connect(self.read_base_again)
        context.unsaved_edits.append(
            lambda: "values refused in the settings form" if self.form.has_invalid() else "")
        context.unsaved_edits.append(
            lambda: "a choice in the settings form waiting for the setting it needs" if self.form.held else "")
        self._show_config()
        self.hardware.refresh()
        self.library.refresh()

    # ------------------------------------------------------------ pieces

    def _disk_path(self) -> str | None:
        return str(self.context.project.root) if self.context.project else None

    def _load_presets(self) -> list[Preset]:
        try:
            return list_presets()
        except ConfigError as exc:
            self.context.status(f"Presets could not be read: {exc.describe()}")
            return []

    def _model_picker(self) -> QWidget:
        box = named(QWidget(), "model_picker")
        layout = QVBoxLayout(box)
        row = QHBoxLayout()
        row.addWidget(QLabel("<b>Base model</b>"))
        self.family = named(QComboBox(), "model_family")
        for family in FAMILY_NAMES:  # the declaration's name shown, its id stored (studio.toml's model.family)
            self.family.addItem(family_title(family), family)
        self.family.activated.connect(lambda _i: self.choose_family(str(self.family.currentData())))
        row.addWidget(self.family)
        self.base = named(QLineEdit(), "model_base")
        self.base.setPlaceholderText("diffusers folder, .safetensors file, or hub id (org/name)")
        self.base.editingFinished.connect(lambda: self.apply_config_changes({"model.base": self.base.text().strip()}))
        row.addWidget(self.base, 1)
        folder = QPushButton("Folder…")
        folder.clicked.connect(lambda: self._browse(True))
        single = QPushButton("File…")
        single.clicked.connect(lambda: self._browse(False))
        row.addWidget(folder)
        row.addWidget(single)
        layout.addLayout(row)
        self.base_status = named(QLabel(), "model_base_status")
        self.base_status.setWordWrap(True)
        layout.addWidget(self.base_status)
        return box

    def _browse(self, folder: bool) -> None:
        if folder:
            path = QFileDialog.getExistingDirectory(self, "Choose a diffusers model folder", self.context.dialog_folder())
        else:
            path, _ = QFileDialog.getOpenFileName(self, "Choose a model file", self.context.dialog_folder(),
                                                  "Models (*.safetensors *.ckpt)")
        if path:
            self.choose_base(path)

    def choose_family(self, family: str) -> bool:
        """Switch the family. A base model left at the old family's default follows to the new one's; a base
        of another family follows once the person says so; options of the old family go back to their
        defaults."""
        old = self.config.model
        if family == old.family:
            return True
        changes: dict[str, Any] = {"model.family": family}
        where = f"the default for {family_title(family)}"
        if old.base == default_base(old.family):
            changes["model.base"] = default_base(family)
        elif (found := base_family(self.base_check, self.context.project_path(old.base), old.base,
                                   self.library.models)) not in (None, family):
            offer = offered_base(family, self.library.models)
            follow = ask_family_base(self, old.base, str(found), family, offer)
            if follow is None:
                self.family.setCurrentIndex(self.family.findData(old.family))
                return False
            if follow:
                changes["model.base"], where = offer[0], f"{offer[1]}, for {family_title(family)}"
        if not self.apply_config_changes(changes):
            return False
        if "model.base" in changes:
            self.context.status(f"Base model: {changes['model.base']}, {where}")
        elif self.base_status.text().startswith("✗"):
            self.context.status(self.base_status.text())
        return True

    def choose_base(self, base: str) -> None:
        """Take a picked model; when it shows another family than the config's, follow the model."""
        changes: dict[str, Any] = {"model.base": base}
        info = self.base_check.info(self.context.project_path(base))
        if isinstance(info, ModelInfo) and info.family and info.family != self.config.model.family:
            changes["model.family"] = info.family
        if self.apply_config_changes(changes) and "model.family" in changes:
            self.context.status(f"Family set to {family_title(changes['model.family'])} to match the chosen model")

    def choose_library_model(self, base: str, family: str) -> None:
        """Take a model from the library (or one just downloaded), with the family it was found to be."""
        changes: dict[str, Any] = {"model.base": base}
        if family and family != self.config.model.family:
            changes["model.family"] = family
        if self.apply_config_changes(changes):
            self.context.status(f"Base model: {base}")

    def read_base_again(self) -> None:
        """Forget what was read from the model folders and read the base model again: its status line
        and the estimate follow a model built or copied in since."""
        self.base_check.forget()
        self.base_status.setText(self.base_check.status(self.config.model))
        self._estimate_timer.start()

    def _on_demo_model_built(self, built: bool) -> None:
        if built:
            self.read_base_again()

    # ------------------------------------------------------------ config flow

    def _show_config(self, keep_refused: bool = True) -> None:
        before = self.form.shown
        self.form.set_config(self.config, keep_refused)
        status = self.base_check.status(self.config.model)
        if not keep_refused and self.base.isModified():  # studio.toml read again while a base is typed: it stays
            if before is not None and before.model.base != self.config.model.base:
                status += (f"\nstudio.toml was changed on disk and says {self.config.model.base} here; what you "
                           "typed is taken when you press Enter or leave the field")
        else:
            self.base.setText(self.config.model.base)
        self.family.setCurrentIndex(self.family.findData(self.config.model.family))
        self.base_status.setText(status)
        self.presets.set_family(self.config.model.family)
        self.library.set_family(self.config.model.family)
        self._estimate_timer.start()

    def _on_context_config(self, config: TrainConfig) -> None:
        if config is not self.config:  # another project, or studio.toml changed on disk
            self.config = config
            self.form.release_held()
            self.error.setText("")
            self._show_config(keep_refused=False)

    def adopt(self, config: TrainConfig) -> None:
        """Take a validated config: show it, hand it to the context (which saves the project)."""
        self.config = config
        self.error.setText("")
        self.context.set_config(config)
        self._show_config()

    def apply_config_changes(self, changes: dict[str, Any]) -> bool:
        """Take `changes`; settings they make inert (another family's, a LoRA's in DreamBooth) go back to
        their defaults, which validation would otherwise refuse."""
        self.form.clear_notes()
        resets = {**resets_for(self.config, changes), **turned_off(self.config, changes)}
        changes = {**changes, **resets}
        try:
            config = apply_changes(self.config, changes)
        except ValidationError as exc:
            issues = issues_from_validation(exc, TrainConfig)
            self.error.setText("⚠ " + "; ".join(str(i) for i in issues))
            self.form.show_issues(issues_at_changed_fields(issues, changes))
            self._show_config()  # choices show the value still in force; typed values stay as typed
            return False
        for key in changes:
            self.form.clear_issue(key)
        self.adopt(config)
        if resets:
            self.context.status(self.form.in_form_words("Back to their defaults (they do not act now): "
                                                        + ", ".join(resets)))
        self._retry_refused()
        return True

    def _retry_refused(self) -> None:
        """A value refused for a contradiction (min bucket over max bucket) is taken once another
        change resolves it: it is what the person typed."""
        for key in list(self.form.invalid):
            try:
                apply_changes(self.config, {key: self.form.typed_value(key)})
            except ValidationError:
                continue
            self.apply_config_changes({key: self.form.typed_value(key)})
            return  # that call retries the rest

    def on_field_changed(self, key: str, value: Any) -> None:
        """Take a field's new value. A choice that needs another setting still empty (masks = folder before
        the mask folder) is held, the setting shown under it, and taken with it once it is filled in."""
        changes = {**self.form.held_changes(), key: value}
        needed = fields_needed(self.config, changes)
        if needed is not None:
            self.form.release_held()
            self.form.hold(needed.key, changes.pop(needed.key), needed.fields, needed.what)
            self.context.status(needed.what)
            if key != needed.key:
                self.apply_config_changes(changes)
            return
        self.form.release_held()
        if self.apply_config_changes(changes):
            self._say_missing_folders(changes)

    def _say_missing_folders(self, changes: dict[str, Any]) -> None:
        """A folder setting taken that names no folder (yet): said under it, before a run finds out."""
        for key in FOLDER_FIELDS:
            value = changes.get(key)
            if value and not self.context.project_path(str(value)).is_dir():
                self.form.note(key, f"{value} does not exist: create it, or choose another folder with Folder…")

    def browse_folder_field(self, key: str) -> None:
        """A Folder… button of the form: the folder chosen, relative to the project when inside it."""
        title = FOLDER_FIELDS[key]
        folder = QFileDialog.getExistingDirectory(self, title, self.context.dialog_folder())
        if not folder:
            return
        root = self.context.project.root if self.context.project else None
        value = concept_path(Path(folder), root) if root and Path(folder).is_relative_to(root) else folder
        editor = self.form.editors[key]
        if isinstance(editor, QLineEdit):
            editor.setText(value)
        self.on_field_changed(key, value)

    def choose_preset(self, preset: Preset) -> None:
        """Use `preset`; one made for another size of the project's family (the [klein] 9B on a 4B project)
        asks first whether the base model follows it; one of another family brings its base in place of
        the old family's default."""
        try:
            config = apply_preset(self.config, preset)
        except ConfigError as exc:
            self.error.setText(f"⚠ {exc.describe()}")
            return
        replaced = replaced_lines(self.config, config, self._preset_config, [c.preset for c in self.presets.cards],
                                  self.form.in_form_words)
        if replaced and not self.confirm_preset(preset, replaced):
            self.context.status(f"Preset {preset.title} not used; your settings are kept")
            return
        try:
            resolved: TrainConfig = self.context.resolved_config(self.config)
        except ConfigError:  # the estimate panel names the path; the base is then read by its name
            resolved = self.config
        switch = size_switch(preset, self.config, resolved)
        switched = switch is not None and ask_size_switch(self, preset, switch)
        if switched is None:
            return
        status = switch_status(preset, switch, switched) if switch else f"Preset: {preset.title}"
        follow = followed_base(preset, self.config, resolved)
        if switch is not None and switched:
            config = apply_changes(config, {"model.base": switch.new_base})
        elif follow is not None:
            config = apply_changes(config, {"model.base": follow})
            status += f". Base model: {follow}, the {family_title(preset.family)} base for this preset."
        self.current_preset = preset
        self.adopt(config)
        self._preset_config = self.config
        self.context.status(status)

    # ------------------------------------------------------------ hardware and estimate

    def _on_hardware(self, report: HardwareReport) -> None:
        self.report, self.ram_mb = report, report.ram_mb
        self.update_estimates()

    def update_estimates(self) -> dict[str, int]:
        try:
            config = self.context.resolved_config(self.config)
        except ConfigError as exc:  # the estimate panel says which path and what to do
            self.estimate.show_unresolved(exc)
            self.gpu_plan.setVisible(False)
            self.context.status(f"No VRAM estimate: {'; '.join(str(i) for i in exc.issues) or exc}")
            return {}
        # The card the run trains on: launch.gpu_ids may choose another than the machine's first.
        self.gpu, self.gpu_count = self.report.run_gpus(config.launch) if self.report else (None, 0)
        self.estimate.update_for(config, self.gpu, self.gpu_count, self.ram_mb)
        self.gpu_plan.update_for(config, self.gpu, self.gpu_count)
        return {str(k): v for k, v in self.presets.update_fits(config, self.gpu, self.gpu_count).items()}

    # ------------------------------------------------------------ TOML and user presets

    def show_toml(self) -> QDialog:
        """studio.toml as text, editable; Apply checks it and saves it only when valid."""
        dialog = TomlDialog(self.context, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.show()
        return dialog

    def ask_save_preset(self) -> None:
        title = ask_preset_title(self)
        if title:
            self.save_preset(title)

    def save_preset(self, title: str) -> Preset:
        preset = save_user_preset(title, self.config, base_preset=self.current_preset)
        self.presets.set_presets(self._load_presets())
        self._estimate_timer.start()
        self.context.status(f"Saved your preset '{preset.title}' to {Path(preset.path).parent}")
        return preset

    # ------------------------------------------------------------ page interface

    def self_test(self, options: SelfTestOptions) -> dict[str, Any]:
        profile = str(options.hardware) if options.hardware else self.context.hardware_file
        self.hardware.wait()
        self.hardware.load_now(profile)
        report = self.hardware.report
        counts = self.update_estimates()
        self.library.wait()
        return {"gpus": len(report.gpus) if report else 0, "presets_fit": counts,
                "library_models": len(self.library.models)}

    def shutdown(self) -> None:
        self._estimate_timer.stop()
        self.hardware.wait()
        self.library.wait()
        if self.library.dialog is not None:
            self.library.dialog.process.cancel()

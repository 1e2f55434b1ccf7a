"""The caption editor warns where the project's family stops reading a caption: 75 CLIP tokens for
SD1.x, 512 Qwen3 tokens for Z-Image; a family chosen on the Model page moves the warning at once."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings

from studio.core.config.schema import ModelSection
from studio.core.project.folder import Project
from studio.gui.context import StudioContext
from studio.gui.dataset.page import DatasetPage
from tests.gui.conftest import shut_down

# 125 tokens (each digit is one): past CLIP's 75, well within the 512 a Qwen3 text encoder reads.
LONG_CAPTION = ", ".join(f"tag {n}" for n in range(34))


def _page(qtbot, project: Project, tmp_path: Path, family_name: str) -> DatasetPage:  # type: ignore[no-untyped-def]
    config = project.load_config()
    project.save_config(config.model_copy(update={"model": ModelSection(family=family_name, base="org/model")}))
    context = StudioContext(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    page = DatasetPage(context)
    qtbot.addWidget(page, before_close_func=shut_down)
    context.set_project(project)
    page.show()
    assert page.wait_loaded(30)
    return page


def _type(page: DatasetPage, text: str) -> str:
    page.editor.text.setPlainText(text)
    return page.editor.tokens.text()


def test_an_sd15_project_warns_past_clips_75_tokens(qtbot, project: Project, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    page = _page(qtbot, project, tmp_path, "sd15")
    shown = _type(page, LONG_CAPTION)
    assert shown == "≈ 125 tokens (over 75: CLIP reads 75, the rest is ignored)"
    assert _type(page, "red, square") == "≈ 3 tokens"


def test_the_problems_list_a_long_caption_by_the_familys_limit(qtbot, project: Project, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (project.root / "images" / "a.txt").write_text(LONG_CAPTION, encoding="utf-8")
    page = _page(qtbot, project, tmp_path, "zimage")
    assert not [p for p in page.problems if p.code == "long_caption"]
    assert page.context.change_config({"model.family": "sd15"}) == []  # the dataset is checked again
    assert page.wait_loaded(30)
    (long,) = [p for p in page.problems if p.code == "long_caption"]
    assert Path(long.path).name == "a.png" and "CLIP reads only the first 75" in long.message


def test_a_zimage_project_warns_only_past_its_512_tokens(qtbot, project: Project, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    page = _page(qtbot, project, tmp_path, "zimage")
    shown = _type(page, LONG_CAPTION)
    assert shown == "≈ 125 tokens"  # no warning: Qwen3 reads it all
    assert _type(page, LONG_CAPTION * 6).endswith("(over 512: Qwen3 reads 512, the rest is ignored)")
    # The person switches the project to SD1.5 on the Model page: the same caption is now too long.
    assert page.context.change_config({"model.family": "sd15"}) == []
    assert _type(page, LONG_CAPTION).endswith("(over 75: CLIP reads 75, the rest is ignored)")


def test_an_sd3_project_warns_past_clips_75_tokens_without_t5_and_past_256_with_it(qtbot, project: Project,  # type: ignore[no-untyped-def]
                                                                                  tmp_path: Path) -> None:
    page = _page(qtbot, project, tmp_path, "sd3")  # model.use_t5 is off by default: CLIP reads the captions
    assert _type(page, LONG_CAPTION).endswith("(over 75: CLIP reads 75, the rest is ignored)")
    assert page.context.change_config({"model.use_t5": True}) == []
    assert _type(page, LONG_CAPTION) == "≈ 125 tokens"  # T5 reads 256

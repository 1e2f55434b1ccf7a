"""Edit pairs (a target, its control images, the instruction as its caption) in the three folder layouts
people use: each is detected, its control images are never counted or trained as images, each target gets
its controls in order, and every broken pair is named with its file and what to do."""

from __future__ import annotations

from pathlib import Path

import pytest
from dataset_files import make_image
from pydantic import ValidationError

from studio.core.config.errors import issues_from_validation
from studio.core.config.schema import ConceptSection, DatasetSection, TrainConfig, field_descriptions
from studio.core.dataset.checks import check_concepts
from studio.core.dataset.edit_pairs.controls import ControlSettings, detect_control_layout
from studio.core.dataset.edit_pairs.pairs import EditPair, control_settings, read_edit_pairs
from studio.core.dataset.layouts import DatasetError, detect_layout
from studio.core.dataset.scan import scan_concept


def _targets(root: Path, names: tuple[str, ...] = ("cat", "dog"), size: tuple[int, int] = (64, 48)) -> Path:
    for i, name in enumerate(names):
        make_image(root / f"{name}.png", size=size, color=(40 * i, 90, 200 - 40 * i))  # no two alike
        (root / f"{name}.txt").write_text(f"make the {name} blue", encoding="utf-8")
    return root


def _edit(path: Path, **fields: object) -> DatasetSection:
    return DatasetSection(concepts=[ConceptSection(path=str(path))], kind="edit", **fields)  # type: ignore[arg-type]


def test_a_control_folder_with_the_targets_names_is_read_as_controls(tmp_path: Path) -> None:
    root = _targets(tmp_path / "pairs")
    for name in ("cat", "dog"):
        make_image(root / "control" / f"{name}.jpg")
    make_image(root / "control_1" / "cat.png")  # a second reference for the cat
    assert detect_control_layout(root) == "folder"
    layout = detect_layout(root)
    assert (layout.kind, layout.images, layout.control_layout) == ("edit", 2, "folder")
    assert "edit pairs with control/ folders" in layout.describe()
    assert read_edit_pairs(_edit(root)) == [
        EditPair(root / "cat.png", (root / "control" / "cat.jpg", root / "control_1" / "cat.png"), "make the cat blue",
                 root / "cat.txt"),
        EditPair(root / "dog.png", (root / "control" / "dog.jpg",), "make the dog blue", root / "dog.txt"),
    ]


def test_name_control_images_beside_the_targets_are_read_as_controls(tmp_path: Path) -> None:
    root = _targets(tmp_path / "pairs")
    make_image(root / "cat_control.png")
    make_image(root / "dog_control_0.png")
    make_image(root / "dog_control_1.png")
    assert detect_control_layout(root) == "suffix"
    assert detect_layout(root).images == 2
    pairs = read_edit_pairs(_edit(root))
    assert [(p.target.name, [c.name for c in p.controls]) for p in pairs] == [
        ("cat.png", ["cat_control.png"]), ("dog.png", ["dog_control_0.png", "dog_control_1.png"])]


def test_separate_control_folders_read_as_ai_toolkit_and_musubi_tuner_do(tmp_path: Path) -> None:
    root = _targets(tmp_path / "images")
    # ai-toolkit: control_path_1 and control_path_2, each with the target's file name.
    make_image(tmp_path / "control1" / "cat.png")
    make_image(tmp_path / "control2" / "cat.webp")
    # musubi-tuner: one control_directory, several references numbered name_0, name_1.
    make_image(tmp_path / "musubi" / "dog_0.png")
    make_image(tmp_path / "musubi" / "dog_1.png")
    dataset = _edit(root, control_folders=[str(tmp_path / "control1"), str(tmp_path / "control2"),
                                           str(tmp_path / "musubi")])
    pairs = {p.target.name: [c.relative_to(tmp_path).as_posix() for c in p.controls] for p in read_edit_pairs(dataset)}
    assert pairs == {"cat.png": ["control1/cat.png", "control2/cat.webp"], "dog.png": ["musubi/dog_0.png",
                                                                                        "musubi/dog_1.png"]}


def test_control_folders_beside_the_target_folder_are_found_as_ai_toolkit_keeps_them(tmp_path: Path) -> None:
    root = _targets(tmp_path / "dataset" / "target")
    make_image(tmp_path / "dataset" / "control" / "cat.png")
    make_image(tmp_path / "dataset" / "control_1" / "cat.png")
    make_image(tmp_path / "dataset" / "other" / "cat.png")  # not named as a control folder: not read
    layout = detect_layout(root)
    assert (layout.kind, layout.images, layout.control_layout) == ("edit", 2, "separate")
    pairs = read_edit_pairs(_edit(root))
    assert [p.relative_to(tmp_path).as_posix() for p in pairs[0].controls] == ["dataset/control/cat.png",
                                                                              "dataset/control_1/cat.png"]
    assert detect_layout(_targets(tmp_path / "plain" / "images")).kind == "flat"
    # Opened one level up, the control folders are not concepts of their own (a folder of another name is).
    above = detect_layout(tmp_path / "dataset")
    assert (above.kind, [c.folder.name for c in above.concepts], above.images) == ("edit", ["other", "target"], 3)
    assert detect_layout(tmp_path / "plain").kind == "nested"


def test_control_images_are_not_training_images_of_an_edit_dataset_only(tmp_path: Path) -> None:
    root = _targets(tmp_path / "pairs")
    make_image(root / "control" / "cat.png")
    make_image(root / "dog_control.png")
    concept = ConceptSection(path=str(root))
    edit = scan_concept_report_names(concept, ControlSettings("folder"))
    assert edit == ["cat.png", "dog.png", "dog_control.png"]  # the folder layout reads name_control as a target
    assert scan_concept_report_names(concept, ControlSettings("suffix")) == ["cat.png", "control/cat.png", "dog.png"]
    # A plain image dataset trains every image it holds, a control/ folder's too.
    assert len(scan_concept(concept)) == 4


def scan_concept_report_names(concept: ConceptSection, controls: ControlSettings) -> list[str]:
    from studio.core.dataset.scan import scan_concept_report

    scan = scan_concept_report(concept, None, controls)
    return [e.path.relative_to(Path(concept.path)).as_posix() for e in scan.entries]


def _problems(dataset: DatasetSection) -> dict[tuple[str, str], str]:
    report = check_concepts(dataset.concepts, None, 32, controls=control_settings(dataset, None))
    return {(p.code, p.path): f"{p.severity}: {p.message} ({p.hint})" for p in report.problems}


def test_each_broken_pair_is_named_with_its_file_and_what_to_do(tmp_path: Path) -> None:
    root = _targets(tmp_path / "pairs", ("cat", "dog", "owl", "fox"), size=(96, 54))
    make_image(root / "control" / "cat.png", size=(96, 54))  # fine
    make_image(root / "control" / "dog.png", size=(48, 48))  # square for a 16:9 target
    (root / "control" / "owl.png").write_bytes(b"not a picture")
    make_image(root / "control" / "bat.png")  # no bat.png target
    problems = _problems(_edit(root))
    assert problems.pop(("missing_control", str(root / "fox.png"))) == (
        f"error: this target has no control image (in the control/ folder beside it) (add "
        f"{root / 'control' / 'fox.png'} (the image the instruction edits), or remove the target)")
    assert problems.pop(("control_aspect", str(root / "control" / "dog.png"))).startswith(
        "warning: the control is 48x48 but its target dog.png is 96x54: resized to the target's shape it would be "
        "stretched (crop the control to the target's shape (96:54)")
    assert problems.pop(("unreadable_control", str(root / "control" / "owl.png"))).startswith(
        "error: the control image of owl.png cannot be read: ")
    assert problems.pop(("orphan_control", str(root / "control" / "bat.png"))).startswith(
        "warning: control image without a target image (add the target with the same name")
    assert problems == {}  # the fine pair has nothing to fix


def test_a_dataset_without_any_control_says_where_they_go(tmp_path: Path) -> None:
    root = _targets(tmp_path / "pairs")
    assert _problems(_edit(root)) == {("no_controls", str(root)): (
        "error: dataset.kind is \"edit\" but no target has a control image (in the control/ folder beside it) "
        f"(put each target's control image at {root / 'control' / 'cat.png'} (and so on), set "
        "dataset.control_folders, or set dataset.kind = \"images\")")}
    missing = tmp_path / "nowhere"
    assert _problems(_edit(root, control_folders=[str(missing)])) == {("control_folder_missing", str(missing)): (
        "error: the control folder (dataset.control_folders) does not exist (create it with a control image named "
        "as each target, or fix dataset.control_folders)")}


def test_the_edit_settings_are_validated_with_what_to_do() -> None:
    base = {"model": {"family": "sd15", "base": "x"}}
    assert TrainConfig.model_validate({**base, "dataset": {"kind": "edit"}}).dataset.control_layout == "auto"
    for dataset, message in (
        ({"control_layout": "suffix"}, 'dataset.control_layout = "suffix": acts only with dataset.kind = "edit"'),
        ({"control_folders": ["c"]}, "dataset.control_folders = ['c']: acts only with dataset.kind = \"edit\""),
        ({"kind": "edit", "control_layout": "separate"}, "needs dataset.control_folders"),
        ({"kind": "edit", "control_layout": "folder", "control_folders": ["c"]},
         'are not read with dataset.control_layout = "folder"'),
        ({"kind": "pairs"}, "dataset.kind"),
    ):
        with pytest.raises(ValidationError) as caught:
            TrainConfig.model_validate({**base, "dataset": dataset})
        shown = str(issues_from_validation(caught.value, TrainConfig)[0])
        assert message in shown, shown
    assert "instruction" in field_descriptions()["dataset.kind"]
    assert "musubi-tuner" in field_descriptions()["dataset.control_layout"]


def test_control_folders_resolve_against_the_config_folder(tmp_path: Path) -> None:
    from studio.core.config.files.paths import resolve_paths

    config = TrainConfig.model_validate({"model": {"family": "sd15", "base": "x"},
                                         "dataset": {"kind": "edit", "control_folders": ["refs"]}})
    assert resolve_paths(config, tmp_path).dataset.control_folders == [str(tmp_path / "refs")]


def test_a_plain_dataset_has_no_edit_pairs_to_read(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"set dataset\.kind = \"edit\""):
        read_edit_pairs(DatasetSection(concepts=[ConceptSection(path=str(_targets(tmp_path)))]))


def test_a_new_project_on_an_edit_pair_folder_reads_it_as_edit_pairs(tmp_path: Path) -> None:
    from studio.core.project.folder import config_for_images

    root = _targets(tmp_path / "pairs")
    make_image(root / "control" / "cat.png")
    assert config_for_images(tmp_path, [root]).dataset.kind == "edit"
    assert config_for_images(tmp_path, [_targets(tmp_path / "plain")]).dataset.kind == "images"


def test_a_run_on_edit_pairs_is_refused_before_it_starts_on_a_family_that_does_not_train_them(tmp_path: Path) -> None:
    from studio.core.project.preflight import check_dataset

    root = _targets(tmp_path / "pairs")
    make_image(root / "control" / "cat.png")
    make_image(root / "control" / "dog.png")
    config = TrainConfig.model_validate({"model": {"family": "sd15", "base": "x"},
                                         "dataset": {"kind": "edit", "concepts": [{"path": str(root)}]}})
    problem = check_dataset(config)
    assert problem is not None and "SD 1.x/2.x does not train edit pairs" in problem.message
    assert "train them on FLUX.2 [klein]" in problem.message and 'set dataset.kind = "images"' in problem.message
    config.model.family = "flux2-klein"  # declared as training edit pairs: the same folder passes
    assert check_dataset(config) is None
    config.dataset.kind = "images"
    config.model.family = "sd15"
    assert check_dataset(config) is None


def test_pairs_with_different_numbers_of_controls_are_refused_naming_one_of_each(tmp_path: Path) -> None:
    from studio.core.project.preflight import check_dataset

    root = _targets(tmp_path / "pairs")
    make_image(root / "control" / "cat.png")
    make_image(root / "control" / "dog.png")
    make_image(root / "control_1" / "dog.png")
    config = TrainConfig.model_validate({"model": {"family": "flux2-klein", "base": "x"},
                                         "dataset": {"kind": "edit", "concepts": [{"path": str(root)}]}})
    problem = check_dataset(config)
    assert problem is not None
    assert f"Edit pair {root / 'dog.png'}: this target has 2 control images but cat.png has 1" in problem.message


MODEL = {"model": {"family": "flux2-klein", "base": "x"}}


def test_a_sample_control_image_or_a_random_crop_is_refused_where_it_cannot_act(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as caught:
        TrainConfig.model_validate({**MODEL, "sampling": {"control_image": "before.png"}})
    assert [i.key for i in issues_from_validation(caught.value, TrainConfig)] == ["sampling.control_image"]
    with pytest.raises(ValidationError) as caught:
        TrainConfig.model_validate({**MODEL, "dataset": {"kind": "edit", "crop": "random"}})
    issue = issues_from_validation(caught.value, TrainConfig)[0]
    assert issue.key == "dataset.crop" and "set dataset.crop = \"center\"" in issue.message


def test_class_images_beside_edit_pairs_are_refused_naming_the_concept(tmp_path: Path) -> None:
    """A class image has no control image: batched with a pair, the denoiser got one reference for two images and
    the run failed at that step with a traceback, minutes after the model loaded."""
    concept = {"path": "pairs", "class_prompt": "a photo", "class_path": "class"}
    with pytest.raises(ValidationError) as caught:
        TrainConfig.model_validate({**MODEL, "dataset": {"kind": "edit", "concepts": [{"path": "more"}, concept]}})
    issue = issues_from_validation(caught.value, TrainConfig)[0]
    assert issue.key == "dataset.concepts[1].class_prompt"
    assert "class images (prior preservation) have no control image" in issue.message
    assert "remove the concept's class_prompt (and class_path)" in issue.message
    TrainConfig.model_validate({**MODEL, "dataset": {"concepts": [concept]}})  # images with class images train


def test_the_held_out_share_counts_targets_not_their_controls(tmp_path: Path) -> None:
    from studio.core.dataset.split import split_issue

    root = _targets(tmp_path / "pairs", ("cat",))
    make_image(root / "control" / "cat.png")
    config = TrainConfig.model_validate({"model": {"family": "sd15", "base": "x"}, "training": {"validation_every": 10},
                                         "dataset": {"kind": "edit", "validation_fraction": 0.5,
                                                     "concepts": [{"path": str(root)}]}})
    issue = split_issue(config)
    assert issue is not None and "holds out 1 of the 1 training image" in issue.message


def test_two_controls_of_one_name_in_one_folder_are_refused_naming_both(tmp_path: Path) -> None:
    """cat.jpg beside cat.png in control/ (a copy saved as another format): both would be the cat's references,
    so every pair trained with its picture twice; the run is refused before it starts, naming the two files."""
    from studio.core.project.preflight import check_dataset

    root = _targets(tmp_path / "pairs")
    for name in ("cat.jpg", "cat.png", "dog.jpg", "dog.png"):
        make_image(root / "control" / name)
    config = TrainConfig.model_validate({"model": {"family": "flux2-klein", "base": "x"},
                                         "dataset": {"kind": "edit", "concepts": [{"path": str(root)}]}})
    problem = check_dataset(config)
    assert problem is not None
    assert problem.message.startswith(f"Edit pair {root / 'control' / 'cat.png'}: cat.jpg and cat.png in "
                                      f"{root / 'control'} are both the control image of cat.png; keep one of them")
    assert "1 more" in problem.message  # the dog's
    (root / "control" / "cat.jpg").unlink()
    (root / "control" / "dog.jpg").unlink()
    assert check_dataset(config) is None


def test_a_sample_control_image_that_is_no_picture_is_named_before_the_run(tmp_path: Path) -> None:
    """A file that is there but no image (a text file, a cut-off download) failed every round of samples of the run
    with "report the traceback"; it is named before the run starts, as a missing one is."""
    from studio.core.project.preflight import check_sample_control

    root = _targets(tmp_path / "pairs")
    before = tmp_path / "before.png"
    before.write_text("not a picture", encoding="utf-8")
    config = TrainConfig.model_validate({"model": {"family": "flux2-klein", "base": "x"},
                                         "dataset": {"kind": "edit", "concepts": [{"path": str(root)}]},
                                         "sampling": {"control_image": str(before)}})
    problem = check_sample_control(config)
    assert problem is not None
    assert problem.message.startswith(f"The control image {before} (sampling.control_image) cannot be read: not a "
                                      "readable image (")
    make_image(before)
    assert check_sample_control(config) is None


def test_a_control_larger_than_pillow_opens_is_named_before_the_run(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A control past Pillow's decompression-bomb limit passed the checks (its header reads) and the run failed with
    a traceback at the pair's first step; it is named as a target that large is."""
    from PIL import Image

    from studio.core.project.preflight import check_dataset

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # 2000 pixels opened at most, as 179 megapixels are
    root = _targets(tmp_path / "pairs", ("cat",), size=(40, 40))
    make_image(root / "control" / "cat.png", size=(100, 100))
    config = TrainConfig.model_validate({"model": {"family": "flux2-klein", "base": "x"},
                                         "dataset": {"kind": "edit", "concepts": [{"path": str(root)}]}})
    problem = check_dataset(config)
    assert problem is not None
    assert problem.message.startswith(f"Edit pair {root / 'control' / 'cat.png'}: the control image of cat.png is "
                                      "100x100 (0 megapixels), more than the 0 megapixels Pillow opens")
    assert "replace it with a copy of a few megapixels" in problem.message


def test_concepts_sharing_the_control_folders_call_none_of_their_controls_an_orphan(tmp_path: Path) -> None:
    """dataset.control_folders serve every concept: each concept's controls were "without a target image" for the
    other one, with "delete it" as what to do. Only a control no concept's target takes is an orphan."""
    _targets(tmp_path / "indoor", ("cat", "dog"))
    _targets(tmp_path / "outdoor", ("owl",))
    for name in ("cat", "dog", "owl", "bat"):
        make_image(tmp_path / "controls" / f"{name}.png")
    dataset = DatasetSection(concepts=[ConceptSection(path=str(tmp_path / "indoor")),
                                       ConceptSection(path=str(tmp_path / "outdoor"))],
                             kind="edit", control_folders=[str(tmp_path / "controls")])
    report = check_concepts(dataset.concepts, None, 32, controls=control_settings(dataset, None))
    orphans = [p.path for p in report.problems if p.code == "orphan_control"]
    assert orphans == [str(tmp_path / "controls" / "bat.png")]  # once, though both concepts read the folder

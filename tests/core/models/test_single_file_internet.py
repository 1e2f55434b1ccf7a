"""Whether a single checkpoint file trains with no network is said the same way before Train as at Train.

The trainer has offline pipeline configs only for the kinds its families declare `offline`
(studio/train/pipelines/pipeline_configs.py); any other checkpoint file (one of a kind not recognised,
or SD3 medium with its T5 on) takes its configs from the Hugging Face hub. The Model page and
`studio-train model` must not promise "loads offline" for those.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.checkpoints import ODD_SD15, SD3_MEDIUM, SD15, write_checkpoint

from studio.core.config.schema import ModelSection
from studio.core.models.files import HUB_CONFIGS_NOTE, detect_model, hub_need


def test_a_file_of_no_known_kind_does_not_load_offline(tmp_path: Path) -> None:
    info = detect_model(write_checkpoint(tmp_path / "tiny-merge.safetensors", ODD_SD15))
    assert (info.family, info.kind, info.refused) == ("sd15", None, None)
    assert not info.offline
    assert hub_need(info) == HUB_CONFIGS_NOTE
    assert "model_index.json" in HUB_CONFIGS_NOTE and "internet once" in HUB_CONFIGS_NOTE
    assert hub_need(detect_model(write_checkpoint(tmp_path / "v1.safetensors", SD15))) is None


def test_studio_train_model_says_a_file_of_no_known_kind_needs_the_internet_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from studio.cli import main

    odd = write_checkpoint(tmp_path / "tiny-merge.safetensors", ODD_SD15)
    assert main(["model", str(odd)]) == 0
    out = capsys.readouterr().out
    assert "loads offline" not in out
    assert HUB_CONFIGS_NOTE in out
    assert main(["model", str(odd), "--json"]) == 0
    assert '"offline": false' in capsys.readouterr().out


def test_folders_and_known_kinds_still_load_offline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from studio.cli import main

    assert main(["model", str(write_checkpoint(tmp_path / "v1.safetensors", SD15))]) == 0
    assert "  loads offline" in capsys.readouterr().out


def test_sd3_medium_loads_offline_until_its_t5_is_on(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path / "sd3_medium_incl_clips.safetensors", SD3_MEDIUM)
    info = detect_model(path)
    assert (info.kind, info.refused, info.offline) == ("sd3", None, True)
    assert hub_need(info, ModelSection(family="sd3", base=str(path))) is None
    with_t5 = hub_need(info, ModelSection(family="sd3", base=str(path), use_t5=True))
    assert with_t5 is not None and "T5" in with_t5 and "internet once" in with_t5 and "use_t5" in with_t5


def test_a_file_of_no_family_names_the_families_that_train_from_files(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from studio.cli import main
    from studio.core.families import FAMILIES

    transformer_only = write_checkpoint(tmp_path / "z_image_turbo_bf16.safetensors", {"layers.0.attention.qkv.weight":
                                                                                       [2, 2]})
    assert main(["model", str(transformer_only)]) == 1
    out = capsys.readouterr().out
    files = [spec.title for spec in FAMILIES if spec.kinds]
    folders = [spec.title for spec in FAMILIES if not spec.kinds]
    assert "SD1.5, SDXL and SD3" not in out
    assert all(title in out for title in [*files, *folders]), out
    assert "from a diffusers folder" in out


@pytest.mark.parametrize(("family", "title"), [("zimage", "Z-Image"), ("flux2-klein", "FLUX.2 [klein]"),
                                               ("qwen-image", "Qwen-Image")])
def test_a_single_file_for_a_family_that_trains_from_folders_is_refused_before_train(
        tmp_path: Path, family: str, title: str) -> None:
    """The diffusion model alone, as ComfyUI's layout keeps it (its text encoder and VAE in files of their own):
    the pre-flight refuses it with the file, why and what to do, instead of starting a run the trainer refuses."""
    from studio.core.config.schema import TrainConfig
    from studio.core.families import family as family_spec
    from studio.core.project.preflight import check_model

    transformer_only = write_checkpoint(tmp_path / "diffusion_models" / "model_bf16.safetensors",
                                        {"layers.0.attention.qkv.weight": [2, 2]})
    problem = check_model(TrainConfig(model=ModelSection(family=family, base=str(transformer_only))))
    assert problem is not None and problem.check == "model"
    assert family_spec(family).title == title
    assert problem.message.startswith(
        f"Base model model_bf16.safetensors is a single checkpoint file: {title} trains from a diffusers folder "
        "or hub id (its transformer, VAE and text encoder together); choose the model's folder, or download ")


def test_a_gguf_file_is_refused_before_train_with_what_to_choose_instead(tmp_path: Path) -> None:
    """A GGUF file (weights quantized for generating) is no base model: the pre-flight says so and what to choose,
    instead of letting the run start and the trainer call the file that is there one that "does not exist"."""
    from studio.core.config.schema import TrainConfig
    from studio.core.project.preflight import check_model

    gguf = tmp_path / "illustrious-xl-Q8_0.gguf"
    gguf.write_bytes(b"GGUF" + bytes(60))
    problem = check_model(TrainConfig(model=ModelSection(family="sdxl", base=str(gguf))))
    assert problem is not None and "GGUF" in problem.message
    assert "choose the model's .safetensors file or its diffusers folder" in problem.message
    pytest.importorskip("torch")  # the trainer's own check (the whole suite, not the core tests without torch)
    from studio.train.errors import TrainError
    from studio.train.families.loading import model_source

    with pytest.raises(TrainError) as raised:
        model_source(str(gguf), "sdxl")
    assert "does not exist" not in str(raised.value) and "GGUF" in str(raised.value)

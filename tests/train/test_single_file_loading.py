"""Training from one checkpoint file (.safetensors from a model site) with no network.

The studio writes the pipeline configs and CLIP tokenizers such a file needs
(studio/train/pipelines/pipeline_configs.py); these tests check the tokenizer against CLIP's
own token ids, the configs against the published architectures, the header-only kind
detection, and a real training run from a full-size SD1.5 checkpoint file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures.checkpoints import CONV_IN, TO_K, VAE, write_checkpoint

from studio.core.config.schema import OutputSection, TrainingSection
from studio.core.estimate.estimate import load_architecture
from studio.core.runs.events import Error, RunFinished

torch = pytest.importorskip("torch")

from studio.core.models.files import checkpoint_kind, detect_model  # noqa: E402
from studio.train.errors import TrainError  # noqa: E402
from studio.train.pipelines.pipeline_configs import (  # noqa: E402
    single_file_config,
    write_clip_tokenizer,
    write_config_folder,
)

# Token ids from CLIP's own tokenizer (open_clip's SimpleTokenizer on the same BPE file).
CLIP_IDS = {
    "a photo of a cat": [49406, 320, 1125, 539, 320, 2368, 49407],
    "a diagram": [49406, 320, 22697, 49407],
    "ohwx man wearing a red jacket, (bokeh:1.2), 85mm":
        [49406, 47993, 786, 3309, 320, 736, 6164, 267, 263, 647, 36983, 281],
}


def test_the_clip_tokenizer_gives_clips_own_token_ids(tmp_path: Path) -> None:
    from transformers import CLIPTokenizer

    tokenizer = CLIPTokenizer.from_pretrained(write_clip_tokenizer(tmp_path / "tokenizer"))
    assert len(tokenizer) == 49_408
    for text, ids in CLIP_IDS.items():
        assert tokenizer(text).input_ids[:len(ids)] == ids
    padded = CLIPTokenizer.from_pretrained(write_clip_tokenizer(tmp_path / "tokenizer_2", pad_token="!"))
    row = padded("a cat", padding="max_length", max_length=77).input_ids
    assert len(row) == 77 and row[:4] == [49406, 320, 2368, 49407] and set(row[4:]) == {0}  # "!" is id 0


@pytest.mark.parametrize("family", ["sd15", "sdxl", "sd3"])
def test_the_config_folders_describe_the_published_architectures(family: str, tmp_path: Path) -> None:
    import diffusers
    import transformers

    folder = write_config_folder(family, tmp_path / family)
    index = json.loads((folder / "model_index.json").read_text())
    counted = load_architecture(family)["components"]
    for name, entry in counted.items():
        if name == "text_encoder_3":
            assert index[name] == [None, None]  # T5 comes from the hub
            continue
        library, class_name = index[name]
        with torch.device("meta"):
            if library == "diffusers":
                cls = getattr(diffusers, class_name)
                module = cls.from_config(cls.load_config(folder / name))
            else:
                config = transformers.AutoConfig.from_pretrained(folder / name)
                module = getattr(transformers, class_name)(config)
        assert sum(p.numel() for p in module.parameters()) == entry["params"], name
    pipeline = getattr(diffusers, index["_class_name"])
    assert set(pipeline.load_config(folder)) >= {"scheduler", "tokenizer", "vae"}


def test_a_full_size_sdxl_checkpoint_converts_onto_the_offline_config(tmp_path: Path) -> None:
    """Every tensor of an SDXL checkpoint in the original layout lands on a same-shaped tensor of the
    UNet, VAE and both text encoders built from the studio's configs (counted on the meta device)."""
    import diffusers
    import transformers
    from diffusers.loaders import single_file_utils as convert

    from studio.train.components import Components
    from studio.train.pipelines.full_size import components
    from studio.train.pipelines.single_file import original_state_dict

    parts = components("sdxl", "meta")
    checkpoint = original_state_dict("sdxl", Components(
        parts["unet"], parts["vae"], [parts["text_encoder"], parts["text_encoder_2"]], [], None))
    assert checkpoint_kind(set(checkpoint), lambda k: list(checkpoint[k].shape) if k in checkpoint else None) == "xl_base"
    folder = write_config_folder("sdxl", tmp_path / "sdxl")
    with torch.device("meta"):
        unet_config = diffusers.UNet2DConditionModel.load_config(folder / "unet")
        vae_config = diffusers.AutoencoderKL.load_config(folder / "vae")
        built = {
            "unet": (diffusers.UNet2DConditionModel.from_config(unet_config),
                     convert.convert_ldm_unet_checkpoint(dict(checkpoint), unet_config)),
            "vae": (diffusers.AutoencoderKL.from_config(vae_config),
                    convert.convert_ldm_vae_checkpoint(dict(checkpoint), vae_config)),
        }
        clip = transformers.CLIPTextModel(transformers.AutoConfig.from_pretrained(folder / "text_encoder"))
        built["text_encoder"] = (clip, convert.convert_ldm_clip_checkpoint(
            dict(checkpoint), remove_prefix="conditioner.embedders.0.transformer."))
        big_g = transformers.CLIPTextModelWithProjection(transformers.AutoConfig.from_pretrained(folder / "text_encoder_2"))
        built["text_encoder_2"] = (big_g, convert.convert_open_clip_checkpoint(
            big_g, dict(checkpoint), prefix="conditioner.embedders.1.model."))
    def shapes(state: dict[str, torch.Tensor]) -> dict[str, torch.Size]:
        # transformers names a CLIP text model's tensors with or without "text_model." and loads either.
        return {k.removeprefix("text_model."): v.shape for k, v in state.items() if not k.endswith("position_ids")}

    for name, (module, converted) in built.items():
        assert shapes(converted) == shapes(module.state_dict()), name


def test_kinds_the_studio_cannot_train_are_refused_with_the_reason(tmp_path: Path) -> None:
    inpaint = write_checkpoint(tmp_path / "inpaint.safetensors", {CONV_IN: [320, 9, 3, 3], TO_K: [320, 768]})
    with pytest.raises(TrainError) as raised:
        single_file_config(inpaint, detect_model(inpaint), "sd15")
    assert "Stable Diffusion 1.x inpainting checkpoint" in raised.value.message
    assert "non-inpainting" in raised.value.hint


def test_a_checkpoint_without_offline_configs_names_its_kind_and_what_to_do(
        make_config, run_training, events_of, tmp_path: Path) -> None:
    from studio.core.config.schema import ModelSection

    v2 = write_checkpoint(tmp_path / "sd21.safetensors", {CONV_IN: [320, 4, 3, 3], TO_K: [320, 1024],
                                                          "cond_stage_model.model.ln_final.weight": [1024], **VAE})
    config = make_config(model=ModelSection(family="sd15", base=str(v2)))
    code, run_dir = run_training(config, tmp_path)
    assert code != 0
    error = next(e for e in events_of(run_dir) if isinstance(e, Error))
    assert error.kind == "model"
    assert str(v2) in error.message
    assert "Stable Diffusion 2.x checkpoint" in error.hint and "internet once" in error.hint


@pytest.fixture(scope="module")
def sd15_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A full-size SD1.5 checkpoint with random weights, in the original single-file layout (2 GB in fp16),
    written once for both test workers."""
    from fixtures.built_once import built_once

    from studio.train.pipelines.full_size import write_random_checkpoint

    return built_once(tmp_path_factory, "sd15-checkpoint",
                      lambda folder: write_random_checkpoint(folder / "my-sd15-model.safetensors", "sd15"))


@pytest.mark.slow
def test_a_lora_trains_from_a_full_size_sd15_checkpoint_file_offline(
        sd15_checkpoint: Path, make_config, run_training, events_of, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from studio.core.config.schema import ModelSection

    # Nothing cached from the hub and no network: the configs must come from the studio.
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    config = make_config(model=ModelSection(family="sd15", base=str(sd15_checkpoint)),
                         training=TrainingSection(batch_size=1, max_steps=1, learning_rate=1e-4, seed=1),
                         output=OutputSection(dir=str(tmp_path / "runs"), formats=["diffusers"]))
    code, run_dir = run_training(config, tmp_path)
    events = events_of(run_dir)
    assert code == 0, [e for e in events if e.type == "error"]
    finished = next(e for e in events if isinstance(e, RunFinished))
    lora = Path(finished.outputs[0])
    assert lora.is_file() and lora.stat().st_size > 1_000_000  # rank 16 on the full-size UNet: ~6 MB


@pytest.mark.slow
def test_a_16_bit_checkpoint_loads_straight_into_16_bit_weights_unchanged(sd15_checkpoint: Path, make_config) -> None:
    from safetensors import safe_open

    from studio.core.config.schema import ModelSection
    from studio.train.families import adapter_for

    config = make_config(model=ModelSection(family="sd15", base=str(sd15_checkpoint)))
    components = adapter_for(config).load(torch.device("cpu"), torch.float16)
    assert components.denoiser.dtype == torch.float16 and components.text_encoders[0].dtype == torch.float16
    assert components.vae.dtype == torch.float32  # the SD VAE overflows in fp16
    with safe_open(str(sd15_checkpoint), framework="pt") as stored:
        assert torch.equal(components.denoiser.conv_out.weight, stored.get_tensor("model.diffusion_model.out.2.weight"))
        assert torch.equal(components.vae.encoder.conv_in.weight,
                           stored.get_tensor("first_stage_model.encoder.conv_in.weight").float())
        # Weights of one shape differ (the random fill reads on from weight to weight), so a mix-up of two
        # layers in loading would show in the comparisons above.
        attention = "model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1."
        query, key = (stored.get_tensor(attention + f"{name}.weight") for name in ("to_q", "to_k"))
        assert query.shape == key.shape and not torch.equal(query, key)


def test_a_ckpt_file_is_identified_from_its_tensors_without_running_its_pickle(tmp_path: Path) -> None:
    from fixtures.checkpoints import SD15

    from studio.train.families.loading import _model_info, detect_family

    path = tmp_path / "old-model.ckpt"
    torch.save({"state_dict": {k: torch.zeros(shape, dtype=torch.float16) for k, shape in SD15.items()},
                "global_step": 470000}, path)
    info = _model_info(path)
    assert (info.family, info.kind, info.offline) == ("sd15", "v1", True)
    assert detect_family(path)[0] == "sd15"
    rogue = tmp_path / "rogue.ckpt"
    torch.save({"state_dict": {}, "payload": Path("x")}, rogue)  # an object weights-only loading refuses
    with pytest.raises(TrainError) as raised:
        _model_info(rogue)
    assert f"{rogue} cannot be read as a checkpoint" in raised.value.message


@pytest.mark.slow
def test_a_full_size_ckpt_loads_offline_with_the_studios_configs(sd15_checkpoint: Path, make_config,
                                                               memory_tmp: Path) -> None:
    from safetensors.torch import load_file

    from studio.core.config.schema import ModelSection
    from studio.train.families import adapter_for

    ckpt = memory_tmp / "my-sd15-model.ckpt"  # 2 GB: in memory where the machine has room
    state = load_file(str(sd15_checkpoint))
    torch.save({"state_dict": state}, ckpt)
    config = make_config(model=ModelSection(family="sd15", base=str(ckpt), allow_pickle=True))
    components = adapter_for(config).load(torch.device("cpu"), torch.float16)  # as stored: no 4 GB fp32 copy
    assert torch.equal(components.denoiser.conv_out.weight, state["model.diffusion_model.out.2.weight"])
    assert torch.equal(components.text_encoders[0].get_input_embeddings().weight,
                       state["cond_stage_model.transformer.text_model.embeddings.token_embedding.weight"])


@pytest.mark.slow
def test_a_checkpoint_marked_v_prediction_gets_a_v_prediction_schedule(sd15_checkpoint: Path, make_config,
                                                                      memory_tmp: Path) -> None:
    from studio.core.config.schema import ModelSection
    from studio.train.families import adapter_for

    marked = _with_empty_tensors(sd15_checkpoint, memory_tmp / "vpred-ztsnr.safetensors", ["v_pred", "ztsnr"])
    adapter = adapter_for(make_config(model=ModelSection(family="sd15", base=str(marked))))
    components = adapter.load(torch.device("cpu"), torch.float16)
    assert adapter.noise_scheme(components).prediction_type == "v_prediction"
    assert float(components.scheduler.alphas_cumprod[-1]) < 1e-6  # the schedule reaches zero SNR
    assert components.sample_scheduler.config.prediction_type == "v_prediction"
    assert components.sample_scheduler.config.timestep_spacing == "trailing"
    # An explicit model.prediction_type still wins over the file's marker: the family sets it on the schedulers
    # after loading (test_v_prediction.py, on the tiny model, without loading 2 GB again here).


def _with_empty_tensors(source: Path, into: Path, names: list[str]) -> Path:
    """`source` with empty tensors `names` added, as trainers mark a v-prediction checkpoint (the data copied as
    it is: the header is all that changes)."""
    import json
    import shutil
    import struct

    with source.open("rb") as read:
        length = struct.unpack("<Q", read.read(8))[0]
        header = json.loads(read.read(length))
        end = max(entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__")
        header.update({name: {"dtype": "F32", "shape": [0], "data_offsets": [end, end]} for name in names})
        raw = json.dumps(header).encode()
        with into.open("wb") as write:
            write.write(struct.pack("<Q", len(raw)) + raw)
            shutil.copyfileobj(read, write, 16 << 20)
    return into


def test_the_model_check_and_the_trainer_agree_on_what_loads_offline(tmp_path: Path) -> None:
    from fixtures.checkpoints import ODD_SD15, SD3_MEDIUM, SD15

    from studio.core.config.schema import ModelSection
    from studio.core.models.files import hub_need

    for name, shapes in (("v1", SD15), ("odd", ODD_SD15), ("sd3", SD3_MEDIUM)):
        path = write_checkpoint(tmp_path / f"{name}.safetensors", shapes)
        info = detect_model(path)
        assert info.family is not None
        for use_t5 in (False, True):
            said_offline = hub_need(info, ModelSection(family=info.family, base=str(path), use_t5=use_t5)) is None
            assert (single_file_config(path, info, info.family, use_t5) is not None) == said_offline, (name, use_t5)


def test_on_windows_the_config_folder_waits_for_the_antivirus(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first run from a single-file checkpoint writes the family's configs and tokenizers and renames their folder
    into place; Windows refuses that while its antivirus scans the files just written, and the run failed to start."""
    import os
    import sys
    from typing import Any

    from studio.core import files
    from studio.train.pipelines import pipeline_configs

    class Windows:
        platform = "win32"

        def __getattr__(self, attribute: str) -> Any:
            return getattr(sys, attribute)

    monkeypatch.setattr(files, "sys", Windows())
    monkeypatch.setattr(pipeline_configs, "write_config_folder", lambda family, folder: (
        folder.mkdir(parents=True), (folder / "model_index.json").write_text("{}"), folder)[-1])
    refused: list[str] = []
    real = os.replace

    def replace(source: Any, target: Any) -> None:
        if len(refused) < 2:
            refused.append(str(source))
            raise PermissionError(13, "Access is denied", str(source))
        real(source, target)

    monkeypatch.setattr(os, "replace", replace)
    folder = pipeline_configs.config_folder("sdxl")
    assert (folder / "model_index.json").is_file() and len(refused) == 2
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no hidden half folder left

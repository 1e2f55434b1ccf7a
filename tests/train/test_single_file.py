"""output.formats "single_file": a DreamBooth checkpoint in the original layout, or a warning saying why not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from studio.core.config.schema import MethodSection, OutputSection, TrainingSection
from studio.core.runs.events import RunFinished, RunWarning

torch = pytest.importorskip("torch")

SHORT = TrainingSection(batch_size=2, max_steps=1, learning_rate=1e-4, seed=1)


def _image(pipe) -> np.ndarray:  # type: ignore[no-untyped-def]
    pipe.set_progress_bar_config(disable=True)
    out = pipe("a red circle", num_inference_steps=2, height=64, width=64,
               generator=torch.Generator("cpu").manual_seed(3), output_type="np")
    return np.asarray(out.images[0])


def _state_equal(a: torch.nn.Module | dict[str, torch.Tensor], b: torch.nn.Module) -> None:
    left = a if isinstance(a, dict) else a.state_dict()
    right = b.state_dict()
    assert set(left) == set(right)
    for key, value in right.items():
        assert torch.equal(left[key].float(), value.float()), key


def test_sd15_dreambooth_single_file_loads_as_the_same_model(make_config, run_training, events_of,
                                                             tmp_path: Path) -> None:
    from diffusers import StableDiffusionPipeline
    from safetensors import safe_open

    config = make_config(method=MethodSection(kind="dreambooth"), training=SHORT,
                         output=OutputSection(dir=str(tmp_path / "runs"), name="shapes",
                                              formats=["diffusers", "single_file"], save_precision="fp32"))
    code, run_dir = run_training(config, tmp_path)
    events = events_of(run_dir)
    assert code == 0 and not any(isinstance(e, RunWarning) for e in events)
    folder, single = run_dir / "output", run_dir / "output" / "shapes.safetensors"
    finished = events[-1]
    assert isinstance(finished, RunFinished) and str(single) in finished.outputs
    with safe_open(str(single), framework="pt") as handle:
        assert handle.metadata()["modelspec.architecture"] == "stable-diffusion-v1"
        names = list(handle.keys())
    assert "model.diffusion_model.input_blocks.0.0.weight" in names
    options = {"safety_checker": None, "requires_safety_checker": False}
    saved = StableDiffusionPipeline.from_pretrained(folder, **options)
    loaded = StableDiffusionPipeline.from_single_file(str(single), config=str(folder), local_files_only=True,
                                                      **options)
    for name in ("unet", "vae", "text_encoder"):
        _state_equal(getattr(saved, name), getattr(loaded, name))
    assert np.array_equal(_image(saved), _image(loaded))


def test_sdxl_single_file_holds_both_encoders_in_the_original_layout(tiny_sdxl: Path, tmp_path: Path) -> None:
    from diffusers import StableDiffusionXLPipeline
    from diffusers.loaders.single_file_utils import convert_open_clip_checkpoint
    from safetensors.torch import load_file

    from studio.train.components import Components
    from studio.train.pipelines.single_file import save_single_file

    pipe = StableDiffusionXLPipeline.from_pretrained(tiny_sdxl, add_watermarker=False)
    components = Components(pipe.unet, pipe.vae, [pipe.text_encoder, pipe.text_encoder_2], [], None)
    path = save_single_file(tmp_path / "xl.safetensors", "sdxl", components, torch.float32, {})
    loaded = StableDiffusionXLPipeline.from_single_file(str(path), config=str(tiny_sdxl), local_files_only=True,
                                                        add_watermarker=False)
    for name in ("unet", "vae", "text_encoder"):
        _state_equal(getattr(pipe, name), getattr(loaded, name))
    # The tiny encoders are equally wide, which the single-file loader takes for two CLIP-Ls; the real
    # bigG is wider. So read the second encoder back with the converter that loader uses for SDXL.
    checkpoint = load_file(str(path))
    assert "conditioner.embedders.1.model.transformer.resblocks.0.attn.in_proj_weight" in checkpoint
    _state_equal(convert_open_clip_checkpoint(pipe.text_encoder_2, checkpoint, "conditioner.embedders.1.model."),
                 pipe.text_encoder_2)


def test_sd3_dreambooth_warns_that_single_file_is_not_available(make_config, run_training, events_of,
                                                                tmp_path: Path) -> None:
    config = make_config("sd3", method=MethodSection(kind="dreambooth"), training=SHORT,
                         output=OutputSection(dir=str(tmp_path / "runs"), formats=["diffusers", "single_file"]))
    code, run_dir = run_training(config, tmp_path)
    events = events_of(run_dir)
    assert code == 0
    warnings = [e for e in events if isinstance(e, RunWarning)]
    assert len(warnings) == 1 and "not available for sd3" in warnings[0].message
    assert str(run_dir / "output") in warnings[0].message
    assert (run_dir / "output" / "model_index.json").is_file()
    assert not list((run_dir / "output").glob("*.safetensors"))


def test_lora_with_single_file_warns_once(make_config, run_training, events_of, tmp_path: Path) -> None:
    config = make_config(training=SHORT, output=OutputSection(dir=str(tmp_path / "runs"),
                                                              formats=["diffusers", "kohya", "single_file"]))
    code, run_dir = run_training(config, tmp_path)
    events = events_of(run_dir)
    warnings = [e for e in events if isinstance(e, RunWarning)]
    assert code == 0 and len(warnings) == 1
    assert "applies to DreamBooth" in warnings[0].message and "pytorch_lora_weights.safetensors" in warnings[0].message
    finished = events[-1]
    assert isinstance(finished, RunFinished) and len(finished.outputs) == 2


def _tiny_sd2(tiny_sd15: Path, folder: Path) -> Path:
    """The tiny SD1.5 made SD 2.x-shaped: an OpenCLIP-like text encoder (gelu) and linear projections in the UNet."""
    from diffusers import StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    pipe = StableDiffusionPipeline.from_pretrained(tiny_sd15, safety_checker=None, requires_safety_checker=False)
    torch.manual_seed(2)
    pipe.text_encoder = CLIPTextModel(CLIPTextConfig(**{**pipe.text_encoder.config.to_dict(), "hidden_act": "gelu"}))
    pipe.unet = UNet2DConditionModel.from_config({**pipe.unet.config, "use_linear_projection": True})
    pipe.save_pretrained(folder, safe_serialization=True)
    return folder


def _comfy_sd2_text_encoder(checkpoint: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """ComfyUI's SD 2.x text encoder weights from a checkpoint (comfy/supported_models.py SD20.process_clip_state_dict
    with comfy/utils.py clip_text_transformers_convert): only the OpenCLIP-layout keys under
    `cond_stage_model.model.` are read, then named as transformers' CLIP."""
    sd = {"clip_h." + k[len("cond_stage_model.model."):]: v for k, v in checkpoint.items()
          if k.startswith("cond_stage_model.model.")}
    out = {}
    renames = {"positional_embedding": "embeddings.position_embedding.weight",
               "token_embedding.weight": "embeddings.token_embedding.weight",
               "ln_final.weight": "final_layer_norm.weight", "ln_final.bias": "final_layer_norm.bias"}
    parts = {"ln_1": "layer_norm1", "ln_2": "layer_norm2", "mlp.c_fc": "mlp.fc1", "mlp.c_proj": "mlp.fc2",
             "attn.out_proj": "self_attn.out_proj"}
    for key, value in sd.items():
        rest = key.removeprefix("clip_h.")
        if rest in renames:
            out[renames[rest]] = value
        elif rest.startswith("transformer.resblocks."):
            block, _, leaf = rest.removeprefix("transformer.resblocks.").partition(".")
            if leaf.startswith("attn.in_proj_"):
                kind = leaf.removeprefix("attn.in_proj_")
                third = value.shape[0] // 3
                for i, proj in enumerate(("q_proj", "k_proj", "v_proj")):
                    out[f"encoder.layers.{block}.self_attn.{proj}.{kind}"] = value[third * i:third * (i + 1)]
            else:
                name, _, kind = leaf.rpartition(".")
                out[f"encoder.layers.{block}.{parts[name]}.{kind}"] = value
    return {f"text_model.{k}": v for k, v in out.items()}


def test_an_sd2_dreambooth_single_file_has_the_text_encoder_where_a1111_and_comfyui_read_it(
        make_config, run_training, events_of, tiny_sd15: Path, tmp_path: Path) -> None:
    """SD 2.x trains as the sd15 family; its checkpoint holds the OpenCLIP text encoder in OpenCLIP's layout, by
    which A1111/Forge tell a 2.x checkpoint and from which ComfyUI reads its text encoder."""
    from diffusers import StableDiffusionPipeline
    from safetensors import safe_open
    from safetensors.torch import load_file

    from studio.core.config.schema import ModelSection
    from studio.train.pipelines.hub_layout import text_encoder_key

    base = _tiny_sd2(tiny_sd15, tmp_path / "tiny-sd2")
    config = make_config(model=ModelSection(family="sd15", base=str(base)),
                         method=MethodSection(kind="dreambooth", train_text_encoder=True), training=SHORT,
                         output=OutputSection(dir=str(tmp_path / "runs"), name="sd2",
                                              formats=["diffusers", "single_file"], save_precision="fp32"))
    code, run_dir = run_training(config, tmp_path)
    assert code == 0, [e for e in events_of(run_dir) if e.type == "error"]
    folder = run_dir / "output"
    checkpoint = load_file(str(folder / "sd2.safetensors"))
    with safe_open(str(folder / "sd2.safetensors"), framework="pt") as handle:
        assert handle.metadata()["modelspec.architecture"] == "stable-diffusion-v2-512"
    trained = StableDiffusionPipeline.from_pretrained(folder, safety_checker=None, requires_safety_checker=False)
    # The original CLIP names (transformers 5 names the weights without their `text_model.` level).
    encoder = {text_encoder_key(k): v for k, v in trained.text_encoder.state_dict().items()}
    # A1111 (modules/sd_models_config.py) takes a checkpoint for SD 2.x by this key, its width the encoder's.
    assert checkpoint["cond_stage_model.model.transformer.resblocks.0.attn.in_proj_weight"].shape[1] == \
        trained.text_encoder.config.hidden_size
    assert not [k for k in checkpoint if k.startswith("cond_stage_model.transformer.")]
    read = _comfy_sd2_text_encoder(checkpoint)
    assert set(read) == {k for k in encoder if not k.endswith("position_ids")}
    assert all(torch.equal(read[k], encoder[k]) for k in read)
    # diffusers reads it back as the trained model.
    loaded = StableDiffusionPipeline.from_single_file(str(folder / "sd2.safetensors"), config=str(folder),
                                                      local_files_only=True, safety_checker=None,
                                                      requires_safety_checker=False)
    for name in ("unet", "vae", "text_encoder"):
        _state_equal(getattr(trained, name), getattr(loaded, name))


def _a1111_version(metadata: dict[str, str]) -> str:
    """The model version A1111/Forge list a LoRA under (extensions-builtin/Lora/network.py, detect_version)."""
    if metadata.get("ss_base_model_version", "").startswith("sdxl_"):
        return "SDXL"
    if metadata.get("ss_v2", "") == "True":
        return "SD2"
    return "SD1"


@pytest.mark.parametrize(("prediction", "architecture"), [("epsilon", "stable-diffusion-v2-512"),
                                                          ("v_prediction", "stable-diffusion-v2-768-v")])
def test_an_sd2_lora_says_it_is_for_sd2(prediction: str, architecture: str, make_config, run_training, events_of,
                                        tiny_sd15: Path, tmp_path: Path) -> None:
    """A1111/Forge show a LoRA only beside models of its version, which they read from ss_v2; the kohya file
    of a LoRA trained on SD 2.x says so, and its model-spec architecture is 2.x's (sd-scripts' names)."""
    from safetensors import safe_open

    from studio.core.config.schema import ModelSection

    base = _tiny_sd2(tiny_sd15, tmp_path / "tiny-sd2")
    config = make_config(model=ModelSection(family="sd15", base=str(base), prediction_type=prediction),
                         training=SHORT, output=OutputSection(dir=str(tmp_path / "runs"), name="sd2", formats=["kohya"]))
    code, run_dir = run_training(config, tmp_path)
    assert code == 0, [e for e in events_of(run_dir) if e.type == "error"]
    with safe_open(str(run_dir / "output" / "sd2.safetensors"), framework="pt") as handle:
        metadata = handle.metadata()
    assert _a1111_version(metadata) == "SD2"
    assert metadata["ss_base_model_version"] == "sd_v2"
    assert metadata["modelspec.architecture"] == f"{architecture}/lora"


def _comfy_sdxl_model_type(checkpoint: dict[str, torch.Tensor]) -> str:
    """How ComfyUI samples an SDXL checkpoint (comfy/supported_models.py SDXL.model_type, without the EDM kinds):
    by its marker tensors."""
    if "v_pred" in checkpoint:
        return "V_PREDICTION (zsnr)" if "ztsnr" in checkpoint else "V_PREDICTION"
    return "EPS"


@pytest.mark.parametrize(("prediction", "expected"), [("v_prediction", "V_PREDICTION"), ("epsilon", "EPS"),
                                                      ("ztsnr", "V_PREDICTION (zsnr)")])
def test_an_sdxl_v_prediction_checkpoint_carries_the_marker_comfyui_and_a1111_read(
        prediction: str, expected: str, make_config, run_training, events_of, tiny_sdxl: Path, tmp_path: Path) -> None:
    """ComfyUI and A1111/Forge load an SDXL checkpoint as v-prediction only by its `v_pred` tensor, zero terminal SNR
    by `ztsnr` beside it (the studio reads them back so too); without them a v-prediction fine-tune was sampled as
    epsilon."""
    import json
    import shutil

    from diffusers import StableDiffusionXLPipeline
    from safetensors.torch import load_file

    from studio.core.config.schema import ModelSection

    base = tiny_sdxl
    if prediction == "ztsnr":  # a v-prediction base trained with zero terminal SNR, as its scheduler says
        base = Path(shutil.copytree(tiny_sdxl, tmp_path / "tiny-sdxl-ztsnr"))
        scheduler = base / "scheduler" / "scheduler_config.json"
        settings = json.loads(scheduler.read_text(encoding="utf-8"))
        settings.update(prediction_type="v_prediction", rescale_betas_zero_snr=True, timestep_spacing="trailing")
        scheduler.write_text(json.dumps(settings), encoding="utf-8")
        prediction = "auto"
    config = make_config("sdxl", model=ModelSection(family="sdxl", base=str(base), prediction_type=prediction),
                         method=MethodSection(kind="dreambooth"), training=SHORT,
                         output=OutputSection(dir=str(tmp_path / "runs"), name="xl",
                                              formats=["diffusers", "single_file"], save_precision="fp32"))
    code, run_dir = run_training(config, tmp_path)
    assert code == 0, [e for e in events_of(run_dir) if e.type == "error"]
    single = run_dir / "output" / "xl.safetensors"
    checkpoint = load_file(str(single))
    assert _comfy_sdxl_model_type(checkpoint) == expected
    # The marker is a key of its own: diffusers still reads the checkpoint as the trained pipeline.
    trained = StableDiffusionXLPipeline.from_pretrained(run_dir / "output", add_watermarker=False)
    loaded = StableDiffusionXLPipeline.from_single_file(str(single), config=str(run_dir / "output"),
                                                        local_files_only=True, add_watermarker=False)
    _state_equal(trained.unet, loaded.unet)

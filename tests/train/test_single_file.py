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

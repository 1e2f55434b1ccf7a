"""A LoRA run of the demo data: events, samples, checkpoints and output files that load in diffusers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fixtures.hub_layout import assert_lora_in_hub_layout, file_keys
from fixtures.training import train_in_process
from safetensors import safe_open

from studio.core.config.schema import MethodSection, OutputSection, SamplingSection, TrainingSection
from studio.core.runs.events import Checkpoint, RunFinished, RunStarted, Sample, Step

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def lora_run(tiny_sd15: Path, demo_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from studio.core.config.schema import ConceptSection, DatasetSection, ModelSection, TrainConfig

    root = tmp_path_factory.mktemp("lora")
    config = TrainConfig(
        model=ModelSection(family="sd15", base=str(tiny_sd15)),
        method=MethodSection(kind="lora", rank=4, alpha=8, train_text_encoder=True),
        dataset=DatasetSection(concepts=[ConceptSection(path=str(demo_data))], resolution=64, buckets=False),
        training=TrainingSection(batch_size=2, max_steps=8, learning_rate=5e-3, seed=3),
        sampling=SamplingSection(every_n_steps=4, prompts=["a red circle on a blue background"], steps=3),
        output=OutputSection(dir=str(root / "runs"), name="shapes", save_every_n_steps=3, keep_last=2),
    )
    code, run_dir = train_in_process(config, root)
    assert code == 0
    return run_dir


def test_events_are_valid_and_tell_the_whole_run(lora_run: Path, events_of) -> None:
    events = events_of(lora_run)
    started = [e for e in events if isinstance(e, RunStarted)]
    assert len(started) == 1
    assert started[0].world_size == 1 and started[0].total_steps == 8 and started[0].devices == ["cpu"]
    assert started[0].effective_batch == 2 and started[0].num_images == 8
    steps = [e for e in events if isinstance(e, Step)]
    assert [s.step for s in steps] == list(range(1, 9))
    assert all(np.isfinite(s.loss) and s.memory and s.memory[0].rss_mb > 0 for s in steps)
    samples = [e for e in events if isinstance(e, Sample)]
    assert [s.step for s in samples] == [4, 8]
    assert all(Path(p).is_file() for s in samples for p in s.images)
    checkpoints = [e for e in events if isinstance(e, Checkpoint)]
    assert [c.step for c in checkpoints] == [3, 6]
    finished = events[-1]
    assert isinstance(finished, RunFinished) and finished.status == "completed" and finished.step == 8


def test_only_the_last_checkpoints_are_kept(lora_run: Path) -> None:
    kept = sorted(p.name for p in (lora_run / "checkpoints").iterdir())
    assert kept == ["step-3", "step-6"]
    # A LoRA checkpoint holds the adapter, not the whole UNet.
    assert (lora_run / "checkpoints" / "step-6" / "training_state.json").is_file()
    size = sum(f.stat().st_size for f in (lora_run / "checkpoints" / "step-6").rglob("*") if f.is_file())
    assert size < 1_000_000


def test_kohya_file_has_the_names_comfyui_reads(lora_run: Path) -> None:
    path = lora_run / "output" / "shapes.safetensors"
    with safe_open(str(path), "pt") as handle:
        keys = list(handle.keys())
        meta = handle.metadata()
        alpha = handle.get_tensor(next(k for k in keys if k.endswith(".alpha")))
    assert any(k.startswith("lora_unet_") and k.endswith(".lora_down.weight") for k in keys)
    assert any(k.startswith("lora_te_text_model_encoder_layers_") for k in keys)
    assert not any(k.startswith("lora_te1_") for k in keys)
    assert float(alpha) == 8.0
    assert meta["ss_network_dim"] == "4" and meta["ss_steps"] == "8"
    assert "circle" in meta["ss_tag_frequency"] or "red" in meta["ss_tag_frequency"]


# The model-spec fields sd-scripts marks MUST (library/sai_model_spec.py), plus the date it always writes.
MODEL_SPEC_MUST = ("modelspec.sai_model_spec", "modelspec.architecture", "modelspec.implementation",
                   "modelspec.title", "modelspec.resolution")


def test_kohya_file_metadata_is_what_model_browsers_read(lora_run: Path) -> None:
    import json
    import time
    from datetime import datetime

    with safe_open(str(lora_run / "output" / "shapes.safetensors"), "pt") as handle:
        meta = handle.metadata()
    assert all(meta.get(key) for key in MODEL_SPEC_MUST), [k for k in MODEL_SPEC_MUST if not meta.get(k)]
    assert meta["modelspec.sai_model_spec"] == "1.0.1"
    assert meta["modelspec.architecture"] == "stable-diffusion-v1/lora"
    assert meta["ss_v2"] == "False" and meta["ss_base_model_version"] == "sd_v1"
    assert meta["modelspec.implementation"] == "diffusers"  # sd-scripts' id for an SD1.x LoRA
    assert meta["modelspec.prediction_type"] == "epsilon"
    assert meta["modelspec.title"] == meta["ss_output_name"] == "shapes"
    assert meta["modelspec.resolution"] == "64x64" and meta["ss_resolution"] == "(64, 64)"
    started, finished = float(meta["ss_training_started_at"]), float(meta["ss_training_finished_at"])
    assert time.time() - 3600 < started <= finished <= time.time()
    assert abs(datetime.fromisoformat(meta["modelspec.date"]).timestamp() - finished) < 120
    assert json.loads(meta["ss_dataset_dirs"]) == {"shapes": {"n_repeats": 1, "img_count": 8}}
    assert json.loads(meta["ss_reg_dataset_dirs"]) == {} and meta["ss_num_reg_images"] == "0"
    frequency = json.loads(meta["ss_tag_frequency"])
    assert list(frequency) == ["shapes"] and all(isinstance(n, int) and n > 0 for n in frequency["shapes"].values())
    assert meta["ss_num_train_images"] == "8" and meta["ss_batch_size_per_device"] == "2"
    assert meta["ss_seed"] == "3" and meta["ss_network_dim"] == "4" and meta["ss_network_alpha"] == "8.0"


def test_diffusers_file_names_modules_as_the_published_checkpoint(lora_run: Path) -> None:
    path = lora_run / "output" / "pytorch_lora_weights.safetensors"
    assert_lora_in_hub_layout(path, "sd15", {"unet", "text_encoder"})
    assert any(k.startswith("text_encoder.text_model.encoder.layers.") for k in file_keys(path))


def test_shared_lora_files_name_the_base_model_without_a_local_path(lora_run: Path, tiny_sd15: Path) -> None:
    for name in ("shapes.safetensors", "pytorch_lora_weights.safetensors"):
        with safe_open(str(lora_run / "output" / name), "pt") as handle:
            meta = handle.metadata() or {}
        assert not [k for k, v in meta.items() if str(tiny_sd15.parent) in v or str(Path.home()) + "/" in v], name
    with safe_open(str(lora_run / "output" / "shapes.safetensors"), "pt") as handle:
        assert handle.metadata()["ss_base_model"] == "tiny-sd15"


class _Payload:
    """A pickled object that creates a file when it is unpickled: code that runs on load."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return open, (str(self.marker), "w")


@pytest.mark.parametrize("name", ["custom_checkpoint_0.pkl", "optimizer.bin"])
def test_resume_refuses_a_tampered_checkpoint_and_runs_none_of_it(lora_run: Path, tmp_path: Path, name: str,
                                                                  events_of) -> None:
    import shutil

    from studio.core.config.files.toml_file import load_config
    from studio.core.runs.events import Error, RunWarning
    from studio.train.entry import train

    run = tmp_path / lora_run.name
    shutil.copytree(lora_run, run)
    folder = run / "checkpoints" / "step-6"
    # A checkpoint as older studios wrote it keeps the scheduler in accelerate's pickle.
    (folder / "scheduler.json").unlink(missing_ok=True)
    marker = tmp_path / "the-payload-ran"
    torch.save({"state": _Payload(marker)}, folder / name)

    code = train(load_config(run / "config.toml"), run, resume=True)
    assert not marker.exists()  # the pickle's code never ran
    # The tampered checkpoint is skipped by name and why; the run resumes from the newest intact one.
    assert code == 0
    warnings = [e.message for e in events_of(run) if isinstance(e, RunWarning)]
    assert any("skipped the damaged step-6" in w and name in w and "not loaded" in w for w in warnings), warnings
    assert not [e for e in events_of(run) if isinstance(e, Error)]


def _image(pipe, seed: int = 5) -> np.ndarray:
    generator = torch.Generator("cpu").manual_seed(seed)
    out = pipe("a red circle on a blue background", num_inference_steps=3, height=64, width=64,
               generator=generator, output_type="np")
    return np.asarray(out.images[0])


def test_lora_loads_changes_the_image_and_unloads(lora_run: Path, tiny_sd15: Path) -> None:
    from diffusers import StableDiffusionPipeline

    pipe = StableDiffusionPipeline.from_pretrained(str(tiny_sd15), safety_checker=None, requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    base = _image(pipe)
    pipe.load_lora_weights(str(lora_run / "output"), weight_name="pytorch_lora_weights.safetensors")
    with_lora = _image(pipe)
    assert np.abs(with_lora - base).max() > 1e-3
    pipe.unload_lora_weights()
    assert np.allclose(_image(pipe), base, atol=1e-6)
    # The kohya file is the same LoRA in other names: diffusers reads it to the same picture.
    pipe.load_lora_weights(str(lora_run / "output"), weight_name="shapes.safetensors")
    assert np.allclose(_image(pipe), with_lora, atol=2e-3)

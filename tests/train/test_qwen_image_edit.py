"""Qwen-Image-Edit on its tiny pipeline: the tiny folder is a QwenImageEditPipeline of the Qwen-Image family (its
processor built without torchvision), a caption is embedded with its pair's control exactly as the pipeline's
encode_prompt embeds it (and cached under the caption and the pair), the control's latents are packed after the
target's tokens as the pipeline calls its transformer, an edit-pair folder trains with samples that edit a held-out
control image, and the LoRA reloads into QwenImageEditPipeline and changes what it makes of a control image. Edit
Plus (QwenImageEditPlusPipeline) embeds each of a pair's controls as a picture of its own and trains pairs of two.
Plain Qwen-Image refuses edit pairs, and Qwen-Image-Edit plain images, naming the model that trains them."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from fixtures.training import train_in_process
from PIL import Image, ImageOps

from studio.core.config.schema import (
    ConceptSection,
    DatasetSection,
    MethodSection,
    ModelSection,
    OutputSection,
    SamplingSection,
    TrainConfig,
    TrainingSection,
)
from studio.core.dataset.demo_shapes import write_demo_dataset
from studio.core.project.preflight import check_dataset
from studio.core.runs.events import RunFinished, Sample, Step

torch = pytest.importorskip("torch")

INSTRUCTION = "make it negative"
STEPS = 4


def _pairs(root: Path, count: int = 4, controls: int = 1, layout: str = "folder") -> Path:
    """`count` edit pairs: the control a shape picture (the second one mirrored), the target its negative, the
    caption the instruction; the controls in a control/ folder (and control_1/ ... for more `controls`), beside
    each target as `name_control.png` ("suffix"), or in a folder of their own, controls/ ("separate")."""
    targets = root / "pairs"
    write_demo_dataset(targets, count=count, size=64, seed=5)
    for image in sorted(targets.glob("*.png")):
        with Image.open(image) as opened:
            control, target = opened.convert("RGB"), ImageOps.invert(opened.convert("RGB"))
        target.save(image)
        image.with_suffix(".txt").write_text(INSTRUCTION, encoding="utf-8")
        for n in range(controls):
            place = {"folder": targets / ("control" if n == 0 else f"control_{n}") / image.name,
                     "suffix": image.with_name(f"{image.stem}_control.png"),
                     "separate": root / "controls" / image.name}[layout]
            place.parent.mkdir(exist_ok=True)
            (ImageOps.mirror(control) if n else control).save(place)
    return targets


def _config(base: Path, targets: Path, out: Path, *, kind: str = "edit", folders: tuple[str, ...] = (),
            **training: object) -> TrainConfig:
    return TrainConfig(
        model=ModelSection(family="qwen-image", base=str(base)),
        method=MethodSection(kind="lora", rank=4, alpha=8),
        dataset=DatasetSection(concepts=[ConceptSection(path=str(targets))], resolution=64, buckets=False,
                               kind=kind, control_folders=list(folders)),  # type: ignore[arg-type]
        training=TrainingSection(batch_size=2, max_steps=STEPS, learning_rate=3e-2, seed=3,
                                 **training),  # type: ignore[arg-type]
        sampling=SamplingSection(every_n_steps=0, prompts=[INSTRUCTION], steps=2, guidance=1.0),
        output=OutputSection(dir=str(out / "runs"), name="edit", formats=["diffusers"]),
    )


@pytest.fixture(scope="module")
def tiny_edit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`studio-train tiny qwen-image DIR --edit`: the tiny Qwen-Image-Edit folder, built offline."""
    from studio.cli import main

    folder = tmp_path_factory.mktemp("models") / "tiny-qwen-image-edit"
    assert main(["tiny", "qwen-image", str(folder), "--edit"]) == 0
    return folder


def test_only_a_family_with_an_edit_model_of_its_own_builds_one(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from studio.cli import main

    assert main(["tiny", "flux2-klein", str(tmp_path / "klein"), "--edit"]) != 0
    assert "(qwen-image)" in capsys.readouterr().err and not (tmp_path / "klein").exists()


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _pairs(tmp_path_factory.mktemp("qwen-edit-pairs"))


@pytest.fixture(scope="module")
def loaded(tiny_edit: Path, pairs: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """The adapter and components of the tiny Edit model, loaded for edit pairs."""
    from studio.train.families.qwen_image import QwenImageAdapter

    adapter = QwenImageAdapter(_config(tiny_edit, pairs, tmp_path_factory.mktemp("out")))
    return adapter, adapter.load(torch.device("cpu"), torch.float32)


def _pipeline(base: Path) -> object:
    import diffusers

    from studio.core.families.qwen_image import edit_pipeline
    from studio.train.pipelines.qwen_image import load_edit_processor

    edit = getattr(diffusers, str(edit_pipeline(str(base))))
    pipe = edit.from_pretrained(str(base), processor=load_edit_processor(str(base)))
    pipe.set_progress_bar_config(disable=True)
    return pipe


@contextlib.contextmanager
def _controls_encoded_small() -> Iterator[None]:
    """The edit pipelines' calls resize each control to 1024 x 1024 pixels for the VAE (seconds for the tiny VAE on
    a CPU): inside the block they resize it to 64 x 64 pixels. The studio's own prompt images keep their size."""
    from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit, pipeline_qwenimage_edit_plus

    with pytest.MonkeyPatch.context() as patch:
        for module in (pipeline_qwenimage_edit, pipeline_qwenimage_edit_plus):
            original = module.calculate_dimensions
            patch.setattr(module, "calculate_dimensions",
                          lambda area, ratio, original=original: original(min(area, 64 * 64), ratio))
        yield


def _pixels(image: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.asarray(image.convert("RGB"), np.float32).transpose(2, 0, 1) / 127.5 - 1)


def test_the_tiny_edit_model_is_qwen_image_edit_and_loads_in_its_pipeline(tiny_edit: Path) -> None:
    from studio.core.families.qwen_image import is_edit_model
    from studio.core.models.files import detect_model

    assert detect_model(tiny_edit).family == "qwen-image"
    assert is_edit_model(str(tiny_edit)) and is_edit_model("Qwen/Qwen-Image-Edit")
    assert is_edit_model("Qwen/Qwen-Image-Edit-2511") and not is_edit_model("Qwen/Qwen-Image")
    pipe = _pipeline(tiny_edit)
    assert type(pipe).__name__ == "QwenImageEditPipeline"
    assert type(pipe.processor.image_processor).__name__ == "Qwen2VLImageProcessorPil"
    # The template's system prompt is the 64 tokens the pipeline drops; the vision tokens are the encoder's.
    config = pipe.text_encoder.config
    assert pipe.tokenizer.convert_tokens_to_ids("<|image_pad|>") == config.image_token_id


def test_a_caption_is_embedded_with_its_control_as_the_pipeline_embeds_it(loaded: tuple, tiny_edit: Path,
                                                                         pairs: Path) -> None:
    from diffusers.pipelines.qwenimage.pipeline_qwenimage_edit import calculate_dimensions

    from studio.train.data.cache import TextCache
    from studio.train.data.controls import edit_caption_key
    from studio.train.data.items import collect_items
    from studio.train.families.qwen_image import edit_prompt_image

    adapter, components = loaded
    wide = Image.new("RGB", (80, 40))  # another aspect ratio: the same size as the pipeline gives its encoder
    assert edit_prompt_image(wide).size == calculate_dimensions(1024 * 1024, 2.0)[:2]
    controls = sorted((pairs / "control").glob("*.png"))
    images = [Image.open(path).convert("RGB") for path in controls[:2]]
    pipe = _pipeline(tiny_edit)
    cond = adapter.encode_edit_prompts(components, [INSTRUCTION, INSTRUCTION],
                                       torch.stack([_pixels(image)[None] for image in images]))
    for i, image in enumerate(images):  # the pipeline's call resizes its image so before it encodes the prompt
        width, height, _ = calculate_dimensions(1024 * 1024, image.width / image.height)
        expected, _ = pipe.encode_prompt(INSTRUCTION, image=pipe.image_processor.resize(image, height, width))
        rows = int(cond["prompt_mask"][i].sum())
        assert rows == expected.shape[1]
        torch.testing.assert_close(cond["prompt_embeds"][i, :rows], expected[0], atol=1e-5, rtol=1e-4)
        assert not cond["prompt_embeds"][i, rows:].any()
    # The same caption with another control is another embedding: the cache keys it by the pair too.
    assert not torch.allclose(cond["prompt_embeds"][0], cond["prompt_embeds"][1])
    config = adapter.config.model_copy(deep=True)
    config.dataset.flip = True
    items = collect_items(config, lambda *a: None)
    cache = TextCache()
    cache.fill_edit_pairs(adapter, components, items[:2], config.dataset, 2, lambda *a: None)
    assert len(cache.embeddings) == 4  # two pairs, each as it is and mirrored
    for i, item in enumerate(items[:2]):
        assert item.controls and item.controls[0].name == controls[i].name
        torch.testing.assert_close(cache.embeddings[edit_caption_key(INSTRUCTION, item.index, False)]["prompt_embeds"],
                                   cond["prompt_embeds"][i], atol=1e-5, rtol=1e-4)
        mirrored = cache.embeddings[edit_caption_key(INSTRUCTION, item.index, True)]["prompt_embeds"]
        assert not torch.allclose(mirrored, cond["prompt_embeds"][i])


def test_the_controls_tokens_follow_the_targets_as_the_pipeline_calls_its_transformer(loaded: tuple) -> None:
    from studio.train.families.base import REFERENCES

    adapter, components = loaded
    calls: list[dict] = []
    hook = components.denoiser.register_forward_pre_hook(lambda m, a, k: calls.append(dict(k)), with_kwargs=True)
    noisy, reference = torch.randn(2, 4, 8, 8), torch.randn(2, 1, 4, 6, 10)
    cond = {"prompt_embeds": torch.randn(2, 5, 32), "prompt_mask": torch.ones(2, 5), REFERENCES: reference}
    try:
        out = adapter.predict(components.denoiser, noisy, torch.tensor([500.0, 250.0]), cond)
    finally:
        hook.remove()
    from studio.train.families.qwen_image import pack

    call = calls[0]
    assert call["img_shapes"] == [[(1, 4, 4), (1, 3, 5)]] * 2
    assert torch.equal(call["hidden_states"], torch.cat([pack(noisy), pack(reference[:, 0])], dim=1))
    assert out.shape == noisy.shape  # the target's tokens only


@pytest.fixture(scope="module")
def edit_run(tiny_edit: Path, pairs: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A LoRA of the tiny Edit model trained on the pairs (captions embedded as each step comes, latents cached),
    with one round of samples editing a held-out control image; (run folder, that control)."""
    root = tmp_path_factory.mktemp("qwen-edit-run")
    held_out = root / "held-out.png"
    Image.new("RGB", (64, 64), (20, 160, 220)).save(held_out)
    config = _config(tiny_edit, pairs, root, cache_latents=True, cache_text_embeddings=False)
    config.sampling.every_n_steps = STEPS
    config.sampling.control_image = str(held_out)
    assert check_dataset(config) is None
    with _controls_encoded_small():
        code, run_dir = train_in_process(config, root)
    assert code == 0, (run_dir / "events.jsonl").read_text()[-2000:]
    return run_dir, held_out


def test_edit_pairs_train_on_qwen_image_edit_with_samples_of_a_held_out_control(edit_run: tuple[Path, Path],
                                                                                events_of: Callable) -> None:
    run_dir, held_out = edit_run
    events = events_of(run_dir)
    assert isinstance(events[-1], RunFinished) and events[-1].status == "completed"
    losses = [e.loss for e in events if isinstance(e, Step)]
    assert len(losses) == STEPS and all(np.isfinite(losses))
    (sample,) = [e for e in events if isinstance(e, Sample)]
    assert sample.step == STEPS and Path(sample.images[0]).is_file()
    shown = run_dir / "samples" / "control-0.png"
    assert sample.controls == [str(shown)]
    with Image.open(shown) as image, Image.open(held_out) as original:
        assert np.array_equal(np.asarray(image), np.asarray(original.convert("RGB")))


def test_the_lora_reloads_into_the_edit_pipeline_and_changes_its_edit(edit_run: tuple[Path, Path],
                                                                      tiny_edit: Path) -> None:
    run_dir, held_out = edit_run
    pipe = _pipeline(tiny_edit)

    def edited() -> np.ndarray:
        with Image.open(held_out) as image:
            result = pipe(image=image.convert("RGB"), prompt=INSTRUCTION, height=64, width=64, num_inference_steps=2,
                          generator=torch.Generator("cpu").manual_seed(0), output_type="latent")
        return result.images.numpy()

    with _controls_encoded_small():
        before = edited()
        pipe.load_lora_weights(str(run_dir / "output"), weight_name="pytorch_lora_weights.safetensors")
        assert np.abs(edited() - before).mean() > 1e-4


@pytest.mark.parametrize("layout", ["suffix", "separate"])
def test_edit_pairs_in_the_other_layouts_are_checked_and_train(layout: str, tiny_edit: Path, tmp_path: Path,
                                                               events_of: Callable) -> None:
    targets = _pairs(tmp_path, layout=layout)
    folders = (str(tmp_path / "controls"),) if layout == "separate" else ()
    config = _config(tiny_edit, targets, tmp_path, folders=folders, cache_latents=True, cache_text_embeddings=True)
    config.training.max_steps = 2
    assert check_dataset(config) is None
    code, run_dir = train_in_process(config, tmp_path)
    assert code == 0, (run_dir / "events.jsonl").read_text()[-2000:]
    losses = [e.loss for e in events_of(run_dir) if isinstance(e, Step)]
    assert len(losses) == 2 and all(np.isfinite(losses))


@pytest.mark.parametrize("cache_text", [True, False])
def test_mirrored_pairs_train_with_their_captions_cached_or_embedded_each_step(
        cache_text: bool, tiny_edit: Path, pairs: Path, tmp_path: Path, events_of: Callable) -> None:
    """Cached: each caption with its control as it is and mirrored; not cached: with the batch's mirrored controls."""
    config = _config(tiny_edit, pairs, tmp_path, cache_text_embeddings=cache_text, cache_latents=False)
    config.dataset.flip = True
    config.training.max_steps = 2
    code, run_dir = train_in_process(config, tmp_path)
    assert code == 0, (run_dir / "events.jsonl").read_text()[-2000:]
    losses = [e.loss for e in events_of(run_dir) if isinstance(e, Step)]
    assert len(losses) == 2 and all(np.isfinite(losses))


def test_plain_qwen_image_refuses_edit_pairs_and_the_edit_model_plain_images(tiny_edit: Path, pairs: Path,
                                                                             tmp_path: Path) -> None:
    from studio.train.data.items import collect_items
    from studio.train.errors import TrainError

    plain = tmp_path / "qwen-image"
    plain.mkdir()
    (plain / "model_index.json").write_text('{"_class_name": "QwenImagePipeline"}', encoding="utf-8")
    problem = check_dataset(_config(plain, pairs, tmp_path))
    assert problem is not None and f"{plain} is no Qwen-Image-Edit model" in problem.message
    assert "Qwen-Image's own pipeline takes no control image" in problem.message
    with pytest.raises(TrainError, match="is no Qwen-Image-Edit model") as caught:
        collect_items(_config(plain, pairs, tmp_path), lambda *a: None)
    assert "Qwen-Image-Edit" in caught.value.hint
    problem = check_dataset(_config(tiny_edit, pairs, tmp_path, kind="images"))
    assert problem is not None and "it trains edit pairs only" in problem.message


def test_the_validation_loss_of_a_pair_embeds_its_caption_with_its_control(loaded: tuple, pairs: Path) -> None:
    """A held-out pair is measured with its control in the prompt and in the tokens: another control, another loss."""
    import contextlib
    import dataclasses
    import types

    from studio.train.data.items import collect_items
    from studio.train.extras.validation import ValidationLoss

    adapter, components = loaded
    config = adapter.config.model_copy(deep=True)
    config.training.validation_every = 1
    accelerator = types.SimpleNamespace(device=torch.device("cpu"), autocast=contextlib.nullcontext)
    trainer = types.SimpleNamespace(config=config, adapter=adapter, components=components, accelerator=accelerator,
                                    train_modules=[], total=1)
    held = collect_items(config, lambda *a: None)[:1]
    other = [dataclasses.replace(held[0], controls=(sorted((pairs / "control").glob("*.png"))[1],))]
    validations = [ValidationLoss(trainer, items) for items in (held, other)]
    assert not torch.allclose(validations[0].batches[0].cond["prompt_embeds"],
                              validations[1].batches[0].cond["prompt_embeds"])
    losses = [validation.measure(1).loss for validation in (*validations, validations[0])]
    assert np.isfinite(losses).all()
    assert losses[0] == losses[2] and abs(losses[0] - losses[1]) > 1e-6


def test_a_stopped_edit_run_resumes_to_the_uninterrupted_weights(tiny_edit: Path, pairs: Path, tmp_path: Path,
                                                                 events_of: Callable,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from safetensors.torch import load_file

    from studio.core.runs.events import Checkpoint, RunStarted
    from studio.train.loop import Trainer

    def config(where: Path) -> TrainConfig:
        made = _config(tiny_edit, pairs, where, cache_latents=True, cache_text_embeddings=True)
        made.output.save_every_n_steps = 2
        return made

    code, straight_run = train_in_process(config(tmp_path / "straight"), tmp_path)
    assert code == 0
    original = Trainer._after_step

    def stop_after_two(self: Trainer, epoch: int) -> None:
        original(self, epoch)
        if self.step == 2:
            (self.run_dir / "STOP").write_text("stop", encoding="utf-8")

    monkeypatch.setattr(Trainer, "_after_step", stop_after_two)
    code, run_dir = train_in_process(config(tmp_path / "stopped"), tmp_path)
    assert code == 0 and any(isinstance(e, Checkpoint) and e.step == 2 for e in events_of(run_dir))
    monkeypatch.setattr(Trainer, "_after_step", original)
    code, _ = train_in_process(None, tmp_path, resume_dir=run_dir)  # type: ignore[arg-type]
    assert code == 0
    events = events_of(run_dir)
    assert [e.resumed_from_step for e in events if isinstance(e, RunStarted)] == [0, 2]
    assert [round(e.loss, 5) for e in events if isinstance(e, Step)] == [
        round(e.loss, 5) for e in events_of(straight_run) if isinstance(e, Step)]
    resumed = load_file(str(run_dir / "output" / "pytorch_lora_weights.safetensors"))
    straight = load_file(str(straight_run / "output" / "pytorch_lora_weights.safetensors"))
    assert resumed.keys() == straight.keys()
    for key in straight:
        torch.testing.assert_close(resumed[key], straight[key], atol=1e-5, rtol=1e-4)


def test_a_pair_with_two_controls_is_named_before_the_run_and_by_the_trainer(tiny_edit: Path, tmp_path: Path) -> None:
    """QwenImageEditPipeline edits one image: a target with a second control (control_1/) is named with its file."""
    import shutil

    from studio.train.data.items import collect_items
    from studio.train.errors import TrainError

    targets = _pairs(tmp_path, count=2)
    second = sorted((targets / "control").glob("*.png"))[1]
    (targets / "control_1").mkdir()
    shutil.copy(second, targets / "control_1" / second.name)
    config = _config(tiny_edit, targets, tmp_path)
    problem = check_dataset(config)
    assert problem is not None and str(targets / second.name) in problem.message
    assert "has 2 control images, but Qwen-Image-Edit edits 1" in problem.message
    with pytest.raises(TrainError, match=second.name) as caught:
        collect_items(config, lambda *a: None)
    assert caught.value.kind == "data" and "1 control image per target" in caught.value.hint


# ---------------------------------------------------------------- Edit Plus (Qwen-Image-Edit-2509 / 2511)


@pytest.fixture(scope="module")
def tiny_plus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`studio-train tiny qwen-image DIR --edit plus`: Edit Plus, its control tokens at timestep 0 (2511's)."""
    from studio.cli import main

    folder = tmp_path_factory.mktemp("models") / "tiny-qwen-image-edit-plus"
    assert main(["tiny", "qwen-image", str(folder), "--edit", "plus"]) == 0
    return folder


def test_edit_plus_embeds_each_control_as_a_picture_as_its_pipeline_does(tiny_plus: Path, tmp_path: Path) -> None:
    from diffusers.pipelines.qwenimage.pipeline_qwenimage_edit_plus import (
        CONDITION_IMAGE_SIZE,
        calculate_dimensions,
    )

    from studio.core.models.files import detect_model
    from studio.train.families.qwen_image import QwenImageAdapter, edit_prompt_image

    assert detect_model(tiny_plus).family == "qwen-image"
    pipe = _pipeline(tiny_plus)
    assert type(pipe).__name__ == "QwenImageEditPlusPipeline" and pipe.transformer.config.zero_cond_t
    targets = _pairs(tmp_path, count=1, controls=2)
    adapter = QwenImageAdapter(_config(tiny_plus, targets, tmp_path))
    components = adapter.load(torch.device("cpu"), torch.float32)
    assert adapter.edit_plus
    images = [Image.open(sorted(folder.glob("*.png"))[0]).convert("RGB")
              for folder in (targets / "control", targets / "control_1")]
    cond = adapter.encode_edit_prompts(components, [INSTRUCTION], torch.stack([_pixels(i) for i in images])[None])
    shown = [pipe.image_processor.resize(i, *reversed(calculate_dimensions(CONDITION_IMAGE_SIZE, 1.0))) for i in images]
    expected, _ = pipe.encode_prompt(INSTRUCTION, image=shown)
    assert edit_prompt_image(Image.new("RGB", (80, 40)), plus=True).size == calculate_dimensions(CONDITION_IMAGE_SIZE,
                                                                                                 2.0)
    rows = int(cond["prompt_mask"][0].sum())
    assert rows == expected.shape[1]
    torch.testing.assert_close(cond["prompt_embeds"][0, :rows], expected[0], atol=1e-5, rtol=1e-4)


def test_pairs_of_two_controls_train_on_edit_plus_and_the_lora_changes_its_edit(tiny_plus: Path, tmp_path: Path,
                                                                                events_of: Callable) -> None:
    """Two controls per pair (control/ and control_1/): trained with their captions cached, samples edit the first
    pair's two controls, and the LoRA reloads into QwenImageEditPlusPipeline and changes what it makes of them."""
    targets = _pairs(tmp_path, controls=2)
    config = _config(tiny_plus, targets, tmp_path, cache_latents=True, cache_text_embeddings=True)
    config.sampling.every_n_steps = STEPS
    assert check_dataset(config) is None
    with _controls_encoded_small():
        code, run_dir = train_in_process(config, tmp_path)
    assert code == 0, (run_dir / "events.jsonl").read_text()[-2000:]
    events = events_of(run_dir)
    assert isinstance(events[-1], RunFinished) and events[-1].status == "completed"
    (sample,) = [e for e in events if isinstance(e, Sample)]
    assert len(sample.controls) == 2 and Path(sample.images[0]).is_file()

    pipe = _pipeline(tiny_plus)
    controls = [Image.open(sorted(folder.glob("*.png"))[1]).convert("RGB")
                for folder in (targets / "control", targets / "control_1")]

    def edited() -> np.ndarray:
        result = pipe(image=controls, prompt=INSTRUCTION, height=64, width=64, num_inference_steps=2,
                      generator=torch.Generator("cpu").manual_seed(0), output_type="latent")
        return result.images.numpy()

    with _controls_encoded_small():
        before = edited()
        pipe.load_lora_weights(str(run_dir / "output"), weight_name="pytorch_lora_weights.safetensors")
        assert np.abs(edited() - before).mean() > 1e-4


def test_an_edit_folder_without_its_processor_is_named_with_what_to_do(tiny_edit: Path, pairs: Path,
                                                                       tmp_path: Path) -> None:
    import shutil

    from studio.train.errors import TrainError
    from studio.train.families.qwen_image import QwenImageAdapter

    broken = tmp_path / "edit"
    shutil.copytree(tiny_edit, broken)
    shutil.rmtree(broken / "processor")
    with pytest.raises(TrainError, match=r"cannot load the processor \(processor/ folder\) of .*edit") as caught:
        QwenImageAdapter(_config(broken, pairs, tmp_path)).load(torch.device("cpu"), torch.float32)
    assert caught.value.kind == "model" and "processor/" in caught.value.hint


def test_an_edit_sample_encodes_its_control_with_the_vae_on_the_training_device(loaded: tuple, pairs: Path) -> None:
    """With cached latents the VAE waits in system memory between decodes; the edit pipeline encodes the control with
    it while it denoises, on the GPU, so every sample of a GPU run failed on a VAE left in system memory (on the
    CPU both are one). The VAE is on the training device whenever it encodes."""
    from studio.train.memory.placement import FrozenOffload
    from studio.train.samples import ImageJob, SamplingPlan, render_images, sample_references

    adapter, components = loaded
    plan = SamplingPlan(FrozenOffload(torch.device("cpu")))
    plan.offload.add("vae", components.vae)
    plan.offload.offload()  # parked, as a run with cached latents keeps it
    parked_while_encoding: list[bool] = []
    encode = components.vae.encode

    def spied(*args: object, **kwargs: object) -> object:
        parked_while_encoding.append("vae" in plan.offload.parked)
        return encode(*args, **kwargs)

    components.vae.encode = spied
    try:
        references = sample_references(adapter.config, [pairs / "control" / sorted(pairs.glob("*.png"))[0].name])
        images: list[object] = []
        render_images(adapter, components, plan, [ImageJob(INSTRUCTION, 1)], 64, lambda i, image: images.append(image),
                      lambda *a: None, references)
    finally:
        del components.vae.encode
    assert len(images) == 1
    assert parked_while_encoding and not any(parked_while_encoding)
    assert "vae" in plan.offload.parked  # and waits in system memory again after

"""Edit pairs train on FLUX.2 [klein]: a before/after folder in each layout people keep opens and trains with the
control images as the pipeline's reference tokens, samples edit a control image that is saved beside them, the
LoRA changes what Flux2KleinPipeline(image=control) makes, a broken pair is named with its file, and a family
whose pipeline takes no control image refuses edit pairs with words naming the one that trains them."""

from __future__ import annotations

from collections.abc import Callable
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
from studio.core.runs.events import Checkpoint, RunFinished, RunStarted, Sample, Step

torch = pytest.importorskip("torch")

INSTRUCTION = "make it negative"
STEPS = 4


def _pairs(root: Path, layout: str, count: int = 4) -> tuple[Path, list[str]]:
    """`count` edit pairs: the control is a shape picture, the target its negative, the caption the instruction.
    Returns the target folder and the control folders a "separate" layout names."""
    targets = root / "pairs"
    write_demo_dataset(targets, count=count, size=64, seed=5)
    separate = root / "controls"
    for image in sorted(targets.glob("*.png")):
        with Image.open(image) as opened:
            control, target = opened.convert("RGB"), ImageOps.invert(opened.convert("RGB"))
        target.save(image)
        image.with_suffix(".txt").write_text(INSTRUCTION, encoding="utf-8")
        where = {"folder": [targets / "control" / image.name],
                 "two-controls": [targets / "control" / image.name, targets / "control_1" / image.name],
                 "suffix": [image.with_name(f"{image.stem}_control.png")],
                 "separate": [separate / image.name]}[layout]
        for place in where:
            place.parent.mkdir(parents=True, exist_ok=True)
            control.save(place)
    return targets, [str(separate)] if layout == "separate" else []


def _controls(targets: Path) -> list[Path]:
    """The control/ folder's images, in file order."""
    return sorted((targets / "control").glob("*.png"))


def _config(base: Path, targets: Path, folders: list[str], out: Path, *, cache: bool = True,
            family: str = "flux2-klein") -> TrainConfig:
    return TrainConfig(
        model=ModelSection(family=family, base=str(base)),  # type: ignore[arg-type]
        method=MethodSection(kind="lora", rank=4, alpha=8),
        dataset=DatasetSection(concepts=[ConceptSection(path=str(targets))], resolution=64, buckets=False,
                               kind="edit", control_folders=folders),
        training=TrainingSection(batch_size=2, max_steps=STEPS, learning_rate=2e-2, seed=3,
                                 cache_text_embeddings=cache, cache_latents=cache),
        sampling=SamplingSection(every_n_steps=STEPS, prompts=[INSTRUCTION], steps=2, guidance=1.0),
        output=OutputSection(dir=str(out / "runs"), name="edit", formats=["diffusers"], save_every_n_steps=2),
    )


@pytest.fixture(scope="module")
def edit_run(tiny_flux2_klein: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A [klein] LoRA trained on edit pairs with control/ folders; (run folder, target folder)."""
    root = tmp_path_factory.mktemp("klein-edit")
    targets, folders = _pairs(root, "folder")
    code, run_dir = train_in_process(_config(tiny_flux2_klein, targets, folders, root), root)
    assert code == 0, (run_dir / "events.jsonl").read_text()[-2000:]
    return run_dir, targets


def test_an_edit_run_trains_and_samples_an_edit_of_the_first_pairs_control(edit_run: tuple[Path, Path],
                                                                           events_of: Callable) -> None:
    run_dir, targets = edit_run
    events = events_of(run_dir)
    assert isinstance(events[-1], RunFinished) and events[-1].status == "completed"
    assert len([e for e in events if isinstance(e, Step)]) == STEPS
    samples = [e for e in events if isinstance(e, Sample)]
    assert [s.step for s in samples] == [STEPS]
    assert Path(samples[0].images[0]).is_file()
    control = run_dir / "samples" / "control-0.png"
    assert samples[0].controls == [str(control)]
    with Image.open(control) as shown, Image.open(_controls(targets)[0]) as first:
        # The first pair's control, as training saw it (at the sample size): the before beside the after.
        assert shown.size == (64, 64)
        assert np.abs(np.asarray(shown, dtype=np.float32) - np.asarray(first.convert("RGB"), np.float32)).mean() < 2


def _edited(base: Path, control: Path, lora: Path | None) -> np.ndarray:
    from diffusers import Flux2KleinPipeline

    pipe = Flux2KleinPipeline.from_pretrained(str(base))
    if lora is not None:
        pipe.load_lora_weights(str(lora))
    pipe.set_progress_bar_config(disable=True)
    with Image.open(control) as image:
        result = pipe(image=[image.convert("RGB")], prompt=INSTRUCTION, height=64, width=64, num_inference_steps=2,
                      guidance_scale=1.0, generator=torch.Generator("cpu").manual_seed(0), output_type="np")
    return np.asarray(result.images[0])


def test_the_lora_changes_what_the_pipeline_makes_from_a_control_image(edit_run: tuple[Path, Path],
                                                                       tiny_flux2_klein: Path) -> None:
    run_dir, targets = edit_run
    control = _controls(targets)[1]
    lora = run_dir / "output" / "pytorch_lora_weights.safetensors"
    before, after = _edited(tiny_flux2_klein, control, None), _edited(tiny_flux2_klein, control, lora)
    assert np.abs(after - before).mean() > 1e-3


def test_the_denoiser_sees_the_controls_as_the_pipeline_gives_them(tiny_flux2_klein: Path, tmp_path: Path) -> None:
    """The trainer's prediction with reference latents is the transformer call Flux2KleinPipeline makes with
    image=[control]: the same tokens, the same position ids, the image tokens' output."""
    from diffusers import Flux2KleinPipeline

    from studio.train.families.base import REFERENCES
    from studio.train.families.flux2_klein import Flux2KleinAdapter

    targets, _ = _pairs(tmp_path, "folder", count=1)
    config = _config(tiny_flux2_klein, targets, [], tmp_path)
    adapter = Flux2KleinAdapter(config)
    components = adapter.load(torch.device("cpu"), torch.float32)
    pipe = Flux2KleinPipeline.from_pretrained(str(tiny_flux2_klein))
    seen: list[dict] = []

    def spy(module: object, args: tuple, kwargs: dict) -> None:
        seen.append({k: v.clone() for k, v in kwargs.items() if isinstance(v, torch.Tensor)})

    pipe.transformer.register_forward_pre_hook(spy, with_kwargs=True)
    with Image.open(_controls(targets)[0]) as image:
        control = image.convert("RGB")
        pipe(image=[control, control], prompt=INSTRUCTION, height=64, width=64, num_inference_steps=1,
             guidance_scale=1.0, generator=torch.Generator("cpu").manual_seed(0), output_type="latent")
    call = seen[0]
    pixels = torch.from_numpy(np.asarray(control, np.float32).transpose(2, 0, 1) / 127.5 - 1)[None]
    reference = adapter.encode_images(components, pixels)
    # The noisy latents of the call, unpacked: predict packs them again and adds the references.
    tokens = call["hidden_states"][:, :16]
    noisy = Flux2KleinPipeline._unpack_latents_with_ids(tokens, call["img_ids"][:, :16], 4, 4)
    cond = {"prompt_embeds": call["encoder_hidden_states"], REFERENCES: torch.stack([reference, reference], 1)}
    calls: list[dict] = []
    components.denoiser.register_forward_pre_hook(
        lambda m, a, k: calls.append({n: v.clone() for n, v in k.items() if isinstance(v, torch.Tensor)}),
        with_kwargs=True)
    adapter.predict(components.denoiser, noisy, call["timestep"] * 1000, cond)
    assert torch.equal(calls[0]["img_ids"], call["img_ids"])
    # The image's tokens, then two controls' tokens (the pipeline rounds the pixels its own way: 1e-4 apart).
    assert calls[0]["hidden_states"].shape == call["hidden_states"].shape == (1, 48, 32)
    torch.testing.assert_close(calls[0]["hidden_states"], call["hidden_states"], atol=1e-3, rtol=0)


def test_the_reference_position_ids_are_made_once_per_shape_not_every_step(tiny_flux2_klein: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Made on the host at every step, the controls' position ids were copied to the GPU from pageable memory: each
    step waited there for the steps queued before it. They are made once per shape of references, as the image's."""
    from diffusers import Flux2KleinPipeline

    from studio.train.families.base import REFERENCES
    from studio.train.families.flux2_klein import Flux2KleinAdapter

    targets, _ = _pairs(tmp_path, "folder", count=1)
    adapter = Flux2KleinAdapter(_config(tiny_flux2_klein, targets, [], tmp_path))
    components = adapter.load(torch.device("cpu"), torch.float32)
    made = []
    original = Flux2KleinPipeline._prepare_image_ids
    monkeypatch.setattr(Flux2KleinPipeline, "_prepare_image_ids",
                        staticmethod(lambda latents, scale=10: made.append(len(latents)) or original(latents, scale)))
    ids: list[torch.Tensor] = []
    components.denoiser.register_forward_pre_hook(lambda m, a, k: ids.append(k["img_ids"]), with_kwargs=True)
    embeds = adapter.encode_prompts(components, [INSTRUCTION, INSTRUCTION])
    channels = components.denoiser.config.in_channels
    for controls in (1, 1, 1, 2, 2):
        cond = {**embeds, REFERENCES: torch.randn(2, controls, channels, 4, 4)}
        adapter.predict(components.denoiser, torch.randn(2, channels, 4, 4), torch.full((2,), 500.0), cond)
    assert made == [1, 2]  # once for one control, once for two
    assert torch.equal(ids[0], ids[2]) and ids[3].shape == (2, 48, 4)
    assert torch.equal(ids[3][:, 32:, 0], torch.full((2, 16), 20))  # the second control at time 20, as the pipeline


@pytest.mark.parametrize("layout", ["suffix", "separate", "two-controls"])
def test_edit_pairs_in_every_layout_train_without_caches(layout: str, tiny_flux2_klein: Path, tmp_path: Path,
                                                         events_of: Callable) -> None:
    targets, folders = _pairs(tmp_path, layout)
    config = _config(tiny_flux2_klein, targets, folders, tmp_path, cache=False)
    config.sampling.every_n_steps = 0
    config.training.max_steps = 2
    assert check_dataset(config) is None
    code, run_dir = train_in_process(config, tmp_path)
    assert code == 0, (run_dir / "events.jsonl").read_text()[-2000:]
    losses = [e.loss for e in events_of(run_dir) if isinstance(e, Step)]
    assert len(losses) == 2 and all(np.isfinite(losses))


def test_a_target_without_its_control_is_named_before_the_run_and_by_the_trainer(tiny_flux2_klein: Path,
                                                                                tmp_path: Path) -> None:
    from studio.train.data.items import collect_items
    from studio.train.errors import TrainError

    targets, folders = _pairs(tmp_path, "folder")
    lost = _controls(targets)[2]
    lost.unlink()
    config = _config(tiny_flux2_klein, targets, folders, tmp_path)
    problem = check_dataset(config)
    assert problem is not None and str(targets / lost.name) in problem.message
    assert "has no control image" in problem.message and f"add {lost} " in problem.message
    with pytest.raises(TrainError, match=lost.name) as caught:
        collect_items(config, lambda *a: None)
    assert caught.value.kind == "data" and "control" in caught.value.hint


def test_a_family_whose_pipeline_takes_no_control_refuses_edit_pairs_naming_the_one_that_trains_them(
        tmp_path: Path) -> None:
    from studio.train.data.items import collect_items
    from studio.train.errors import TrainError

    targets, folders = _pairs(tmp_path, "folder", count=2)
    config = _config(tmp_path / "model", targets, folders, tmp_path, family="sdxl")
    problem = check_dataset(config)
    assert problem is not None
    assert "SDXL does not train edit pairs" in problem.message and "FLUX.2 [klein]" in problem.message
    with pytest.raises(TrainError, match="SDXL does not train edit pairs") as caught:
        collect_items(config, lambda *a: None)
    assert caught.value.kind == "config" and "FLUX.2 [klein]" in caught.value.hint


def test_a_stopped_edit_run_resumes_to_the_uninterrupted_weights(edit_run: tuple[Path, Path], tiny_flux2_klein: Path,
                                                                 events_of: Callable, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from safetensors.torch import load_file

    from studio.train.loop import Trainer

    straight_run, targets = edit_run
    original = Trainer._after_step

    def stop_after_two(self: Trainer, epoch: int) -> None:
        original(self, epoch)
        if self.step == 2:
            (self.run_dir / "STOP").write_text("stop", encoding="utf-8")

    monkeypatch.setattr(Trainer, "_after_step", stop_after_two)
    code, run_dir = train_in_process(_config(tiny_flux2_klein, targets, [], tmp_path), tmp_path)
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


def test_samples_edit_the_configured_held_out_control_or_else_the_first_pairs(tmp_path: Path) -> None:
    from studio.train.data.controls import sample_controls
    from studio.train.data.items import collect_items
    from studio.train.errors import TrainError

    targets, folders = _pairs(tmp_path, "folder", count=2)
    config = _config(tmp_path / "model", targets, folders, tmp_path)
    items = collect_items(config, lambda *a: None)
    assert sample_controls(config, items) == (_controls(targets)[0],)
    held_out = tmp_path / "held-out.png"
    Image.new("RGB", (80, 40), (10, 200, 30)).save(held_out)
    config.sampling.control_image = str(held_out)
    assert sample_controls(config, items) == (held_out,)
    config.sampling.control_image = str(tmp_path / "gone.png")
    with pytest.raises(TrainError, match=r"sampling\.control_image .*gone\.png is no image file"):
        sample_controls(config, items)
    broken = tmp_path / "broken.png"
    broken.write_bytes(Image.open(held_out).tobytes()[:100])  # no picture: every round of samples would fail on it
    config.sampling.control_image = str(broken)
    with pytest.raises(TrainError, match=r"sampling\.control_image .*broken\.png cannot be read: not a readable"):
        sample_controls(config, items)


def test_the_validation_loss_of_an_edit_pair_reads_its_control(tiny_flux2_klein: Path, tmp_path: Path) -> None:
    """A held-out pair is measured with its control's reference tokens: another control, another loss."""
    import contextlib
    import dataclasses
    import types

    from studio.train.data.items import collect_items
    from studio.train.extras.validation import ValidationLoss
    from studio.train.families.flux2_klein import Flux2KleinAdapter

    targets, folders = _pairs(tmp_path, "folder", count=2)
    config = _config(tiny_flux2_klein, targets, folders, tmp_path)
    config.training.validation_every = 1
    adapter = Flux2KleinAdapter(config)
    components = adapter.load(torch.device("cpu"), torch.float32)
    accelerator = types.SimpleNamespace(device=torch.device("cpu"), autocast=contextlib.nullcontext)
    trainer = types.SimpleNamespace(config=config, adapter=adapter, components=components, accelerator=accelerator,
                                    train_modules=[], total=1)
    held = collect_items(config, lambda *a: None)[:1]
    other = [dataclasses.replace(held[0], controls=(_controls(targets)[1],))]
    losses = [ValidationLoss(trainer, items).measure(1).loss for items in (held, other, held)]
    assert np.isfinite(losses).all()
    assert losses[0] == losses[2] and abs(losses[0] - losses[1]) > 1e-6


def test_a_mirrored_target_comes_with_its_controls_mirrored(tmp_path: Path) -> None:
    """With dataset.flip, a pair whose control is its target stays equal, mirrored or not, in every batch."""
    from studio.train.data.batches import EpochPlan, MicroBatches
    from studio.train.data.items import collect_items

    targets, folders = _pairs(tmp_path, "folder", count=2)
    for control in _controls(targets):
        (targets / control.name).write_bytes(control.read_bytes())  # the after is the before
    config = _config(tmp_path / "model", targets, folders, tmp_path, cache=False)
    config.dataset.flip = True
    items = collect_items(config, lambda *a: None)
    batches = MicroBatches(EpochPlan(items, 1, 1, seed=2), config.dataset, 0, 0, 8, with_pixels=True)
    flipped = 0
    for batch in (batches[i] for i in range(len(batches))):
        assert batch["controls"].shape == (1, 1, 3, 64, 64)
        torch.testing.assert_close(batch["controls"][:, 0], batch["pixels"])
        unflipped = torch.from_numpy(np.asarray(Image.open(items[batch["items"][0]].path).convert("RGB"),
                                                np.float32).transpose(2, 0, 1) / 127.5 - 1)
        flipped += not torch.allclose(batch["pixels"][0], unflipped)
    assert 0 < flipped < len(batches)  # some were mirrored, some not


def test_a_control_of_another_size_is_fitted_to_its_targets_bucket(tmp_path: Path) -> None:
    """Resolution policy: each control is resized to cover the target's bucket and cropped at its center."""
    from studio.train.data.controls import control_pixels
    from studio.train.data.items import TrainItem

    wide = tmp_path / "wide.png"
    image = Image.new("RGB", (200, 100), (255, 0, 0))
    image.paste((0, 0, 255), (0, 0, 30, 100))  # a blue band on the left, cut off by the center crop
    image.save(wide)
    item = TrainItem(0, tmp_path / "target.png", "", 1, bucket=(64, 48), size=(64, 48), controls=(wide, wide))
    pixels = control_pixels(item)
    assert pixels.shape == (2, 3, 48, 64)
    assert pixels.min() >= -1 and pixels.max() <= 1
    assert float(pixels[0, 0].mean()) > 0.9 and float(pixels[0, 2].mean()) < -0.9  # all red: the band cropped away
    mirrored = control_pixels(item, flipped=True)
    assert torch.equal(mirrored, pixels.flip(-1))


def test_a_prompts_own_size_gets_its_control_fitted_to_that_size(tiny_flux2_klein: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 events_of: Callable) -> None:
    """A prompt's --w and --h draw a wide picture: the control it edits is fitted to that shape (as training
    fits a pair's controls to its target), not to the tab's square, and control-0.png shows it at that shape."""
    from studio.train.families.base import FamilyAdapter

    targets, folders = _pairs(tmp_path, "folder", count=2)
    config = _config(tiny_flux2_klein, targets, folders, tmp_path, cache=False)
    config.training.max_steps, config.sampling.every_n_steps = 1, 1
    config.sampling.prompts = [f"{INSTRUCTION} --w 96 --h 64", INSTRUCTION]
    config.output.save_every_n_steps = 0
    seen: list[list[tuple[int, int]]] = []
    denoise = FamilyAdapter.denoise

    def spied(self: FamilyAdapter, pipeline: object, conditioning: object, generator: object, picture: object,
              references: object = ()) -> object:
        seen.append([image.size for image in references])  # type: ignore[attr-defined]
        return denoise(self, pipeline, conditioning, generator, picture, references)  # type: ignore[arg-type]

    monkeypatch.setattr(FamilyAdapter, "denoise", spied)
    code, run_dir = train_in_process(config, tmp_path)
    assert code == 0, (run_dir / "events.jsonl").read_text()[-2000:]
    (sample,) = [e for e in events_of(run_dir) if isinstance(e, Sample)]
    with Image.open(sample.images[0]) as wide, Image.open(sample.images[1]) as square:
        assert (wide.size, square.size) == ((96, 64), (64, 64))
    assert seen == [[(96, 64)], [(64, 64)]]
    with Image.open(run_dir / "samples" / "control-0.png") as shown:
        assert shown.size == (96, 64)  # the before beside the first after, at its shape

"""Images, captions, buckets and the order of batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from studio.core.config.schema import ConceptSection, DatasetSection, ModelSection, TrainConfig
from studio.core.dataset.demo_shapes import CAPTION_WORDS, caption_for, write_demo_dataset

pytest.importorskip("torch")

from studio.train.data.batches import EpochPlan, MicroBatches
from studio.train.data.items import (
    TrainItem,
    bucket_sizes,
    choose_bucket,
    collect_items,
    load_image,
    prepare_caption,
)


def _item(path: Path, bucket: tuple[int, int] = (64, 64), repeats: int = 1, index: int = 0) -> TrainItem:
    return TrainItem(index=index, path=path, caption="", repeats=repeats, bucket=bucket, size=bucket)


def test_demo_dataset_is_deterministic_and_described(tmp_path: Path) -> None:
    first = write_demo_dataset(tmp_path / "a", count=6, size=32, seed=4)
    second = write_demo_dataset(tmp_path / "b", count=6, size=32, seed=4)
    assert [d.caption for d in first] == [d.caption for d in second]
    assert all(a.path.read_bytes() == b.path.read_bytes() for a, b in zip(first, second, strict=True))
    image = np.asarray(Image.open(first[0].path))
    assert first[0].caption == caption_for(first[0].shape, first[0].colour, first[0].background)
    assert caption_for("circle", "orange", "white") == "an orange circle on a white background"
    assert first[0].path.with_suffix(".txt").read_text(encoding="utf-8").strip() == first[0].caption
    # The corner shows the background, the centre the shape.
    assert tuple(image[0, 0]) != tuple(image[16, 16])


def test_tiny_tokenizer_keeps_every_caption_word_whole(tiny_sd15: Path) -> None:
    from transformers import CLIPTokenizer

    tokenizer = CLIPTokenizer.from_pretrained(str(tiny_sd15 / "tokenizer"))
    for word in CAPTION_WORDS:
        assert tokenizer.tokenize(word) == [f"{word}</w>"]
    # Unknown words still encode, letter by letter, never as the unknown token.
    assert tokenizer.unk_token_id not in tokenizer("zebra!").input_ids[1:-1]


def test_exif_orientation_is_honoured(tmp_path: Path) -> None:
    pixels = np.zeros((32, 64, 3), dtype=np.uint8)
    pixels[:, :32] = 255  # left half white in the stored image
    image = Image.fromarray(pixels)
    exif = image.getexif()
    exif[0x0112] = 6  # shown rotated 90 degrees clockwise: the white half is on top
    path = tmp_path / "rotated.jpg"
    image.save(path, exif=exif, quality=95)
    loaded = load_image(_item(path, (32, 64)), "center", False, None)
    assert loaded.pixels.shape == (3, 64, 32)
    assert loaded.pixels[:, :16].mean() > 0.9 and loaded.pixels[:, -16:].mean() < -0.9


def test_buckets_follow_the_aspect_ratio() -> None:
    dataset = DatasetSection(resolution=512, buckets=True, bucket_step=64, min_bucket=256, max_bucket=1024)
    sizes = bucket_sizes(dataset)
    assert all(w * h <= 512 * 512 and w % 64 == 0 and h % 64 == 0 for w, h in sizes)
    assert choose_bucket((1000, 1000), dataset, sizes) == (512, 512)
    wide = choose_bucket((1920, 1080), dataset, sizes)
    assert wide[0] > wide[1] and abs(wide[0] / wide[1] - 16 / 9) < 0.3
    assert choose_bucket((1920, 1080), DatasetSection(resolution=512, buckets=False), None) == (512, 512)


def test_tag_shuffle_keeps_the_first_tags_and_dropout_empties() -> None:
    dataset = DatasetSection(shuffle_tags=True, keep_tokens=1)
    caption = "sks, red, circle, blue, background"
    seen = {prepare_caption(caption, dataset, np.random.default_rng(s)) for s in range(20)}
    assert len(seen) > 1 and all(c.startswith("sks, ") for c in seen)
    assert all(sorted(c.split(", ")) == sorted(caption.split(", ")) for c in seen)
    dropped = DatasetSection(caption_dropout=1.0)
    assert prepare_caption(caption, dropped, np.random.default_rng(0)) == ""
    assert prepare_caption(caption, dropped, None) == caption


def test_epoch_order_is_fixed_by_seed_and_split_between_ranks(tmp_path: Path) -> None:
    items = [_item(tmp_path / f"{i}.png", index=i, repeats=2 if i == 0 else 1) for i in range(7)]
    plan = EpochPlan(items, batch_size=2, world_size=2, seed=3)
    again = EpochPlan(items, batch_size=2, world_size=2, seed=3)
    assert plan.batches_per_epoch == 2  # 8 images seen per epoch, 4 per global batch
    assert plan.epoch(0) == again.epoch(0) and plan.epoch(0) != plan.epoch(1)
    seen = [i for batch in plan.epoch(0) for i in batch]
    assert sorted(seen) == [0, 0, 1, 2, 3, 4, 5, 6]
    batch = plan.epoch(0)[0]
    assert plan.rank_slice(batch, 0) + plan.rank_slice(batch, 1) == batch


def test_micro_batches_load_pixels_and_captions(demo_data: Path, tiny_sd15: Path) -> None:
    config = TrainConfig(
        model=ModelSection(family="sd15", base=str(tiny_sd15)),
        dataset=DatasetSection(concepts=[ConceptSection(path=str(demo_data))], resolution=64, buckets=False),
    )
    items = collect_items(config, lambda *a: None)
    plan = EpochPlan(items, batch_size=3, world_size=1, seed=0)
    batch = MicroBatches(plan, config.dataset, rank=0, start=0, count=2, with_pixels=True)[1]
    assert batch["pixels"].shape == (3, 3, 64, 64)
    assert float(batch["pixels"].min()) >= -1.0 and float(batch["pixels"].max()) <= 1.0
    assert all(c.startswith(("a ", "an ")) and c.endswith(" background") for c in batch["captions"])


def _collect(folder: Path) -> tuple[list[TrainItem], list[tuple[str, str | None]]]:
    warnings: list[tuple[str, str | None]] = []
    config = TrainConfig(model=ModelSection(family="sd15", base="org/model"),
                         dataset=DatasetSection(concepts=[ConceptSection(path=str(folder))], resolution=64))
    items = collect_items(config, lambda message, path, hint: warnings.append((message, path)))
    return items, warnings


def test_an_image_with_an_unreadable_caption_is_skipped_and_the_caption_named(tmp_path: Path) -> None:
    write_demo_dataset(tmp_path / "data", count=3, size=32, seed=1)
    caption = sorted((tmp_path / "data").glob("*.txt"))[1]
    caption.unlink()
    caption.mkdir()  # cannot be opened, as another user's caption file
    items, warnings = _collect(tmp_path / "data")
    assert len(items) == 2 and caption.with_suffix(".png") not in [i.path for i in items]
    assert any(path == str(caption) and "cannot be read" in message for message, path in warnings)
    assert not any("empty prompt" in message for message, _ in warnings)


def test_a_megabyte_caption_is_cut_before_it_reaches_the_tokenizer(tmp_path: Path) -> None:
    from studio.train.data.items import MAX_CAPTION_CHARS

    write_demo_dataset(tmp_path / "data", count=2, size=32, seed=1)
    caption = sorted((tmp_path / "data").glob("*.txt"))[0]
    caption.write_text("red," * 3_000_000, encoding="utf-8")  # 12 MB: ~25 s a step to tokenize whole
    items, warnings = _collect(tmp_path / "data")
    assert len(items[0].caption) == MAX_CAPTION_CHARS and items[0].caption.startswith("red,red")
    assert len(items[1].caption) < 100
    assert any(path == str(caption) and "12,000,000 characters" in message for message, path in warnings)


def test_the_trainer_skips_exactly_the_images_the_check_fails(tmp_path: Path) -> None:
    from studio.core.dataset.checks import check_concepts

    folder = tmp_path / "data"
    write_demo_dataset(folder, count=2, size=32, seed=1)
    for name, size in (("dot.png", (1, 1)), ("line.png", (5000, 1))):
        Image.new("RGB", size).save(folder / name)
    # Only the header of a 20000 x 20000 PNG: Pillow refuses to open it as a decompression bomb.
    import struct
    import zlib

    ihdr = struct.pack(">IIBBBBB", 20000, 20000, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", len(ihdr)) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    (folder / "bomb.png").write_bytes(b"\x89PNG\r\n\x1a\n" + chunk)
    for name in ("dot", "line", "bomb"):
        (folder / f"{name}.txt").write_text("x", encoding="utf-8")
    items, warnings = _collect(folder)
    skipped = {Path(path).name for message, path in warnings if message.startswith("skipped")}
    report = check_concepts([ConceptSection(path=str(folder))], None, 32)
    failed = {Path(p.path).name for p in report.errors}
    assert skipped == failed == {"dot.png", "line.png", "bomb.png"}
    assert len(items) == 2


def test_a_bundle_run_on_edit_pairs_of_a_family_without_control_images_is_refused_not_trained_on_targets_alone(
        tmp_path: Path) -> None:
    from studio.train.errors import TrainError

    write_demo_dataset(tmp_path / "data", count=2, size=32, seed=1)
    config = TrainConfig(model=ModelSection(family="sd15", base="x"),
                         dataset=DatasetSection(concepts=[ConceptSection(path=str(tmp_path / "data"))], kind="edit"))
    with pytest.raises(TrainError, match=r"SD 1\.x/2\.x does not train edit pairs") as caught:
        collect_items(config, lambda *a: None)
    assert caught.value.kind == "config" and 'set dataset.kind = "images"' in caught.value.hint


def _with_class_images(tmp_path: Path, instances: int, classes: int, **concept: object) -> TrainConfig:
    write_demo_dataset(tmp_path / "data", count=instances, size=32, seed=1)
    write_demo_dataset(tmp_path / "class", count=classes, size=32, seed=2)
    return TrainConfig(model=ModelSection(family="sd15", base="org/model"),
                       dataset=DatasetSection(concepts=[ConceptSection(
                           path=str(tmp_path / "data"), class_path=str(tmp_path / "class"),
                           class_prompt="a photo of a shape", **concept)], resolution=64))  # type: ignore[arg-type]


def test_more_class_images_than_instance_images_do_not_outweigh_them(tmp_path: Path) -> None:
    # 12 class images beside 3 photos: each epoch trained the class 4 times as often as the subject.
    config = _with_class_images(tmp_path, 3, 12)
    warnings: list[tuple[str, str | None]] = []
    items = collect_items(config, lambda message, path, hint: warnings.append((message, path)))
    instances = [i for i in items if not i.is_class]
    classes = [i for i in items if i.is_class]
    assert sum(i.repeats for i in classes) == sum(i.repeats for i in instances) == 3
    assert [i.path.name for i in classes] == sorted(p.name for p in (tmp_path / "class").glob("*.png"))[:3]
    assert any("12 class images for 3 instance images" in m and path == str(tmp_path / "class")
               for m, path in warnings)
    # With the concept repeated 4 times, all 12 are used once an epoch, without a word.
    config.dataset.concepts[0].repeats = 4
    warnings.clear()
    items = collect_items(config, lambda message, path, hint: warnings.append((message, path)))
    assert sum(i.repeats for i in items if i.is_class) == 12 and not warnings


def test_a_lora_run_says_its_wanted_class_images_are_not_made(tmp_path: Path) -> None:
    # Class images wanted for a LoRA: only DreamBooth makes them, and the run trained without them unsaid.
    config = _with_class_images(tmp_path, 3, 1, num_class_images=3)
    warnings: list[tuple[str, str | None]] = []
    items = collect_items(config, lambda message, path, hint: warnings.append((message, path)))
    assert sum(1 for i in items if i.is_class) == 1
    assert any("wants 3 class images" in m and "trains with the 1 in" in m for m, _ in warnings)


def test_a_mask_folder_inside_the_image_folder_is_not_trained_as_images(tmp_path: Path) -> None:
    # images/ with its loss masks in images/masks/: the concept walked into masks/ and trained every mask
    # as a picture of its own, with an empty caption.
    folder = tmp_path / "images"
    write_demo_dataset(folder, count=3, size=32, seed=1)
    (folder / "masks").mkdir()
    for image in sorted(folder.glob("*.png")):
        Image.new("L", (32, 32), 255).save(folder / "masks" / image.name)
    config = TrainConfig(model=ModelSection(family="sd15", base="org/model"),
                         dataset=DatasetSection(concepts=[ConceptSection(path=str(folder))], resolution=64,
                                                masks="folder", mask_folder=str(folder / "masks")))
    warnings: list[str] = []
    items = collect_items(config, lambda message, path, hint: warnings.append(message))
    assert [i.path.parent for i in items] == [folder] * 3
    assert not any("empty prompt" in m for m in warnings)


def test_class_images_inside_the_image_folder_are_not_trained_as_the_subject(tmp_path: Path) -> None:
    config = _with_class_images(tmp_path, 3, 2)
    write_demo_dataset(tmp_path / "data" / "class", count=2, size=32, seed=2)
    config.dataset.concepts[0].class_path = str(tmp_path / "data" / "class")
    items = collect_items(config, lambda *a: None)
    assert [i.path.parent.name for i in items if not i.is_class] == ["data"] * 3
    assert [i.path.parent.name for i in items if i.is_class] == ["class"] * 2


def test_two_gpus_augment_as_one_gpu_with_the_same_global_batch(tmp_path: Path) -> None:
    # The same global batch on 2 GPUs (2 images each) and on 1 (4 images): each image's crop, flip and caption
    # dropout came from the GPU that held it, so the two runs trained other pictures (docs/steps-and-batches.md).
    import torch

    rng = np.random.default_rng(0)
    for n in range(8):  # wider than tall: a random crop has room to move
        Image.fromarray(rng.integers(0, 255, (64, 128, 3), dtype=np.uint8)).save(tmp_path / f"{n}.png")
        (tmp_path / f"{n}.txt").write_text(f"picture {n}", encoding="utf-8")
    dataset = DatasetSection(concepts=[ConceptSection(path=str(tmp_path))], resolution=64, buckets=False,
                             crop="random", flip=True, caption_dropout=0.5)
    items = collect_items(TrainConfig(model=ModelSection(family="sd15", base="x"), dataset=dataset), lambda *a: None)
    one = MicroBatches(EpochPlan(items, 4, 1, seed=3), dataset, rank=0, start=0, count=2, with_pixels=True)
    two = [MicroBatches(EpochPlan(items, 2, 2, seed=3), dataset, rank=r, start=0, count=2, with_pixels=True)
           for r in (0, 1)]
    for index in range(2):
        whole = one[index]
        parts = [two[r][index] for r in (0, 1)]
        assert whole["items"] == parts[0]["items"] + parts[1]["items"]
        assert whole["captions"] == parts[0]["captions"] + parts[1]["captions"]
        assert whole["crops_top_left"] == parts[0]["crops_top_left"] + parts[1]["crops_top_left"]
        assert torch.equal(whole["pixels"], torch.cat([parts[0]["pixels"], parts[1]["pixels"]]))


def test_class_images_without_a_class_prompt_are_said_to_be_unused(tmp_path: Path) -> None:
    # A folder of class images chosen, the class prompt left empty: the run trained without them, unsaid.
    config = _with_class_images(tmp_path, 3, 2)
    config.dataset.concepts[0].class_prompt = None
    warnings: list[tuple[str, str | None, str]] = []
    items = collect_items(config, lambda message, path, hint: warnings.append((message, path, hint)))
    assert not any(i.is_class for i in items)
    assert [(path, "class_prompt" in hint) for m, path, hint in warnings if "are not used" in m] == [
        (str(tmp_path / "class"), True)]

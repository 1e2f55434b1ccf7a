"""The captioners on their own: the tiny tagger and the tiny BLIP, their inputs, devices and errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from studio.caption.base import CaptionerError, RunSettings, load_image
from studio.caption.registry import load_captioner
from studio.core.dataset.captions.auto_caption import CaptionRules, compose
from studio.core.dataset.captions.captioner_models import CaptionerSource, find_captioner

RED, BLUE = (220, 40, 40), (40, 70, 220)


def _scores(caption: object) -> dict[str, float]:
    return {t.name: t.score for t in caption.tags}  # type: ignore[attr-defined]


def test_the_tagger_sees_colours_in_the_order_it_was_trained_on(tiny_tagger: Path) -> None:
    tagger = load_captioner(find_captioner(str(tiny_tagger)), RunSettings(device="cpu"))
    assert (tagger.device, tagger.size, tagger.batch_size) == ("cpu", 16, 4)  # type: ignore[attr-defined]
    red, blue = tagger.caption([(Path("r.png"), Image.new("RGB", (40, 40), RED)),
                                (Path("b.png"), Image.new("RGB", (40, 40), BLUE))])
    assert _scores(red)["red"] > 0.9 and "blue" not in _scores(red)  # BGR input: swapped channels would say blue
    assert _scores(blue)["blue"] > 0.9 and "red" not in _scores(blue)
    # Underscores become spaces, emoticons keep theirs; every tag down to the floor is reported.
    assert {"hatsune miku", "simple background", "^_^", "general"} <= set(_scores(red))
    assert compose(None, red, CaptionRules("replace")) == "hatsune miku, red, simple background"


def test_a_half_precision_tagger_gets_half_precision_pixels_and_agrees(tiny_tagger: Path, tmp_path: Path) -> None:
    from fixtures.captioners import write_tiny_tagger

    images = [(Path("r.png"), Image.new("RGB", (40, 40), RED)), (Path("b.png"), Image.new("RGB", (40, 40), BLUE))]
    full = load_captioner(find_captioner(str(tiny_tagger)), RunSettings(device="cpu"))
    half = load_captioner(find_captioner(str(write_tiny_tagger(tmp_path / "half", half=True))),
                          RunSettings(device="cpu"))
    assert (full.precision, half.precision) == ("fp32", "fp16")
    for ours, theirs in zip(full.caption(images), half.caption(images), strict=True):
        assert _scores(ours).keys() == _scores(theirs).keys()
        assert all(abs(_scores(ours)[k] - _scores(theirs)[k]) < 0.01 for k in _scores(ours))


def test_the_tagger_pads_a_wide_image_with_white_instead_of_stretching_it(tiny_tagger: Path) -> None:
    tagger = load_captioner(find_captioner(str(tiny_tagger)), RunSettings(device="cpu"))
    strip = Image.new("RGB", (160, 16), RED)  # 1/10 of the square is red, the rest white padding
    [seen] = tagger.caption([(Path("strip.png"), strip)])
    assert "red" not in _scores(seen) and _scores(seen)["bright colours"] > 0.9


def test_a_tag_list_of_another_model_is_refused_with_both_counts(tiny_tagger: Path, tmp_path: Path) -> None:
    folder = tmp_path / "tagger"
    folder.mkdir()
    (folder / "model.onnx").write_bytes((tiny_tagger / "model.onnx").read_bytes())
    (folder / "selected_tags.csv").write_text("tag_id,name,category,count\n0,one,0,5\n", encoding="utf-8")
    tagger = load_captioner(find_captioner(str(folder)), RunSettings(device="cpu"))
    with pytest.raises(CaptionerError, match=r"scores 8 tags but its selected_tags.csv lists 1"):
        tagger.caption([(Path("a.png"), Image.new("RGB", (8, 8)))])
    (folder / "model.onnx").write_bytes(b"not a model")
    with pytest.raises(CaptionerError, match=r"Cannot load the tagger .*model.onnx.*Download the tagger again"):
        load_captioner(find_captioner(str(folder)), RunSettings(device="cpu"))


def test_an_image_is_read_upright_and_transparency_becomes_white(tmp_path: Path) -> None:
    path = tmp_path / "a.png"
    Image.new("RGBA", (4, 2), (255, 0, 0, 0)).save(path)
    image = load_image(path)
    assert image.mode == "RGB" and image.getpixel((0, 0)) == (255, 255, 255)


@pytest.mark.parametrize(("kind", "precision"), [("blip", "fp32"), ("blip", "bf16"), ("florence2", "bf16")])
def test_sentence_captioners_caption_a_batch_with_words_they_know(
        kind: str, precision: str, request: pytest.FixtureRequest) -> None:
    """bf16 on the CPU is what a GPU runs: the processor's fp32 pixels must meet bf16 weights."""
    import torch

    folder: Path = request.getfixturevalue(f"tiny_{kind}")
    settings = RunSettings(device="cpu", precision=precision, max_new_tokens=6)  # type: ignore[arg-type]
    captioner = load_captioner(find_captioner(str(folder)), settings)
    assert captioner.source.kind == kind
    assert captioner.model.dtype == (torch.bfloat16 if precision == "bf16" else torch.float32)  # type: ignore[attr-defined]
    images = [(Path(f"{i}.png"), Image.new("RGB", (48, 32), colour)) for i, colour in enumerate((RED, BLUE))]
    seen = captioner.caption(images)
    assert [caption.image for caption in seen] == [path for path, _ in images]
    for caption in seen:
        assert caption.text and not caption.tags and "<" not in caption.text  # no special tokens left
        if kind == "blip":  # one WordPiece token per word
            vocabulary = set((folder / "vocab.txt").read_text(encoding="utf-8").split())
            assert 1 <= len(caption.text.split()) <= 6 and set(caption.text.split()) <= vocabulary
    assert captioner.describe() == f"tiny-{kind} ({kind}) on cpu in {precision}"


def test_a_gpu_asked_for_on_a_machine_without_one_is_a_clear_error(tiny_blip: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    source = CaptionerSource(tiny_blip, "blip")
    with pytest.raises(CaptionerError, match=r"torch sees no CUDA GPU.*--device auto or cpu"):
        load_captioner(source, RunSettings(device="cuda"))


def test_a_gpu_the_tagger_cannot_start_on_is_a_clear_error_not_the_cpu(
        tiny_tagger: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """onnxruntime-gpu without its CUDA libraries falls back to the CPU: --device cuda:1 says so instead of
    captioning 2,000 images fifty times slower, and GPU 1 is the one asked for."""
    import onnxruntime

    asked: list[object] = []
    real_session = onnxruntime.InferenceSession

    def session(path: str, providers: list[object]) -> object:
        asked.extend(providers)
        return real_session(path, providers=["CPUExecutionProvider"])  # as a failed CUDA provider leaves it

    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    monkeypatch.setattr(onnxruntime, "InferenceSession", session)
    with pytest.raises(CaptionerError, match=r"--device cuda:1 was asked, but onnxruntime could not run the tagger"):
        load_captioner(find_captioner(str(tiny_tagger)), RunSettings(device="cuda:1"))
    assert asked[0] == ("CUDAExecutionProvider", {"device_id": 1})
    assert load_captioner(find_captioner(str(tiny_tagger)), RunSettings(device="auto")).device == "cpu"


def test_a_gpu_number_the_machine_does_not_have_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from studio.caption.vision_language import choose_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert choose_device("cuda:1") == torch.device("cuda:1")
    with pytest.raises(CaptionerError, match=r"--device cuda:2 was asked, but torch sees 2 GPUs \(cuda:0 to cuda:1\)"):
        choose_device("cuda:2")


def test_a_sentence_captioner_whose_weights_are_cut_short_says_download_it_again(
        tiny_blip: Path, tmp_path: Path) -> None:
    import shutil

    folder = Path(shutil.copytree(tiny_blip, tmp_path / "blip"))
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # a download stopped partway
    with pytest.raises(CaptionerError, match=r"Cannot load the blip model in .*Download the model again"):
        load_captioner(CaptionerSource(folder, "blip"), RunSettings(device="cpu"))


def test_a_gpu_out_of_memory_says_which_batch_size_to_try(tiny_blip: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Running the same command again would run out again; a smaller batch is what helps."""
    import torch

    captioner = load_captioner(CaptionerSource(tiny_blip, "blip"), RunSettings(device="cpu"))

    def out_of_memory(**_inputs: object) -> None:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(captioner.model, "generate", out_of_memory)  # type: ignore[attr-defined]
    images = [(Path(f"{i}.png"), Image.new("RGB", (40, 40), RED)) for i in range(4)]
    with pytest.raises(CaptionerError, match=r"cpu ran out of memory captioning 4 images at once\. Run the command "
                                             r"again with --batch-size 2"):
        captioner.caption(images)

"""A model folder's tokenizers are checked from their files alone (no torch): a folder without its
vocabulary is refused by `studio-train model`, naming the file that is missing and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from studio.cli import main as cli_main
from studio.core.models.files import detect_model

BIG = 200 * 1024  # a real vocabulary file's size: not opened


def _folder(root: Path, pipeline: str, tokenizers: dict[str, tuple[str, dict[str, int]]]) -> Path:
    """A pipeline folder whose tokenizer folders hold files of the given sizes (name -> class, {file: bytes})."""
    index: dict[str, object] = {"_class_name": pipeline}
    for name, (cls, files) in tokenizers.items():
        index[name] = ["transformers", cls]
        (root / name).mkdir(parents=True)
        for file, size in files.items():
            (root / name / file).write_bytes(b"x" * size)
    root.mkdir(parents=True, exist_ok=True)
    (root / "model_index.json").write_text(json.dumps(index), encoding="utf-8")
    return root


def test_complete_tokenizers_are_not_questioned(tmp_path: Path) -> None:
    clip = ("CLIPTokenizer", {"vocab.json": BIG, "merges.txt": BIG, "tokenizer_config.json": 10})
    t5 = ("T5TokenizerFast", {"spiece.model": BIG})
    sd3 = _folder(tmp_path / "sd3", "StableDiffusion3Pipeline", {"tokenizer": clip, "tokenizer_2": clip,
                                                                  "tokenizer_3": t5})
    assert detect_model(sd3).refused is None
    qwen = _folder(tmp_path / "klein", "Flux2KleinPipeline", {"tokenizer": ("Qwen2Tokenizer", {"tokenizer.json": BIG})})
    assert detect_model(qwen).refused is None


def test_a_klein_tokenizer_without_tokenizer_json_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path / "klein", "Flux2KleinPipeline",
                     {"tokenizer": ("Qwen2Tokenizer", {"tokenizer_config.json": 300, "chat_template.jinja": 200})})
    refused = detect_model(folder).refused or ""
    assert refused.startswith(f"its tokenizer folder {folder / 'tokenizer'} has no vocabulary (tokenizer.json is "
                              "missing, vocab.json is missing, merges.txt is missing; it reads tokenizer.json, or "
                              "vocab.json with merges.txt)")
    assert refused.endswith("copy tokenizer.json from the model's download into that folder, or download the "
                            "model again")
    assert cli_main(["model", str(folder)]) == 1
    out = capsys.readouterr().out
    assert "cannot train from it: its tokenizer folder" in out and "loads offline" not in out


def test_half_a_vocabulary_names_the_missing_half(tmp_path: Path) -> None:
    sdxl = _folder(tmp_path / "sdxl", "StableDiffusionXLPipeline", {
        "tokenizer": ("CLIPTokenizer", {"vocab.json": BIG, "merges.txt": BIG}),
        "tokenizer_2": ("CLIPTokenizer", {"vocab.json": BIG, "merges.txt": 0})})
    refused = detect_model(sdxl).refused or ""
    assert f"its tokenizer folder {sdxl / 'tokenizer_2'} has no vocabulary (tokenizer.json is missing, " \
           "merges.txt is empty;" in refused
    assert "copy merges.txt from the model's download" in refused


def test_a_small_vocabulary_file_is_counted(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "sd15", "StableDiffusionPipeline",
                     {"tokenizer": ("CLIPTokenizer", {"merges.txt": 10})})
    (folder / "tokenizer" / "vocab.json").write_text(json.dumps({"<|startoftext|>": 0, "<|endoftext|>": 1}))
    assert "vocab.json holds 2 tokens only" in (detect_model(folder).refused or "")
    (folder / "tokenizer" / "vocab.json").write_text(json.dumps({f"t{i}": i for i in range(300)}))
    assert detect_model(folder).refused is None


def test_a_missing_first_tokenizer_folder_is_named_and_an_optional_one_left_alone(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "zimage", "ZImagePipeline", {})
    (folder / "model_index.json").write_text(json.dumps({"_class_name": "ZImagePipeline",
                                                         "tokenizer": ["transformers", "Qwen2Tokenizer"]}))
    assert f"its tokenizer folder {folder / 'tokenizer'} is missing" in (detect_model(folder).refused or "")
    sd3 = _folder(tmp_path / "sd3", "StableDiffusion3Pipeline", {
        "tokenizer": ("CLIPTokenizer", {"tokenizer.json": BIG}), "tokenizer_2": ("CLIPTokenizer", {"tokenizer.json": BIG})})
    index = json.loads((sd3 / "model_index.json").read_text())
    (sd3 / "model_index.json").write_text(json.dumps({**index, "tokenizer_3": ["transformers", "T5TokenizerFast"]}))
    assert detect_model(sd3).refused is None  # SD3 trains without its T5 (model.use_t5 = false)

"""A tokenizer folder that lost its vocabulary loads as a tokenizer of almost no tokens, and every caption
then trains as an empty prompt. `studio-train model` says so, naming the file, and the trainer refuses it
before loading (from the files) and after loading (from the tokenizer itself)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from studio.cli import main as cli_main
from studio.core.config.schema import ModelSection, TrainConfig
from studio.core.runs.events import Error, Event, Step

pytest.importorskip("torch")

VOCABULARY = ("tokenizer.json", "vocab.json", "merges.txt")


def _without_vocabulary(model: Path, target: Path) -> Path:
    shutil.copytree(model, target)
    for name in VOCABULARY:
        (target / "tokenizer" / name).unlink(missing_ok=True)
    return target


def _refused(config: TrainConfig, run_training: Callable[..., tuple[int, Path]],
             events_of: Callable[[Path], list[Event]], root: Path) -> Error:
    code, run_dir = run_training(config, root)
    events = events_of(run_dir)
    errors = [e for e in events if isinstance(e, Error)]
    assert code == 1 and len(errors) == 1 and errors[0].kind == "model"
    assert not any(isinstance(e, Step) for e in events)
    return errors[0]


@pytest.mark.parametrize("family", ["sd15", "flux2-klein"])
def test_a_tokenizer_without_its_vocabulary_is_named_and_refused(
        family: str, tiny_model: Callable[[str], Path], make_config: Callable[..., TrainConfig],
        run_training: Callable[..., tuple[int, Path]], events_of: Callable[[Path], list[Event]],
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = _without_vocabulary(tiny_model(family), tmp_path / "model")
    folder = broken / "tokenizer"
    assert cli_main(["model", str(broken)]) == 1
    out = capsys.readouterr().out
    assert "loads offline" not in out
    assert f"cannot train from it: its tokenizer folder {folder} has no vocabulary (tokenizer.json is missing, " \
           "vocab.json is missing, merges.txt is missing; it reads tokenizer.json, or vocab.json with merges.txt)" \
           in out
    assert "copy tokenizer.json from the model's download into that folder, or download the model again" in out
    error = _refused(make_config(family, model=ModelSection(family=family, base=str(broken))),  # type: ignore[arg-type]
                     run_training, events_of, tmp_path)
    assert f"its tokenizer folder {folder} has no vocabulary (tokenizer.json is missing" in error.message
    assert error.path == str(broken)


def test_a_loaded_tokenizer_of_two_tokens_is_refused(
        tiny_model: Callable[[str], Path], make_config: Callable[..., TrainConfig],
        run_training: Callable[..., tuple[int, Path]], events_of: Callable[[Path], list[Event]],
        tmp_path: Path) -> None:
    """A vocabulary file that is there but holds two tokens, too large to be counted from the file: the
    trainer counts the tokenizer's tokens once it is loaded."""
    from transformers import Qwen2Tokenizer

    broken = _without_vocabulary(tiny_model("flux2-klein"), tmp_path / "model")
    Qwen2Tokenizer.from_pretrained(broken / "tokenizer").save_pretrained(broken / "tokenizer")  # 2 tokens
    fast = broken / "tokenizer" / "tokenizer.json"
    fast.write_text(fast.read_text(encoding="utf-8") + " " * 70_000, encoding="utf-8")
    assert cli_main(["model", str(broken)]) == 0  # the file's size says nothing is wrong
    config = make_config("flux2-klein", model=ModelSection(family="flux2-klein", base=str(broken)))  # type: ignore[arg-type]
    error = _refused(config, run_training, events_of, tmp_path)
    assert f"the tokenizer {broken / 'tokenizer'} of {broken} knows 2 tokens only" in error.message
    assert "every caption would train as an empty prompt" in error.message
    assert error.hint.startswith("copy the tokenizer folder's tokenizer.json")

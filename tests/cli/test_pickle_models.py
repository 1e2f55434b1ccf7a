"""A pickle base model (.ckpt/.pt/.bin) gets one answer everywhere: `model`, `validate`, `run` and the
pre-flight check refuse it with why and how to convert; `model.allow_pickle = true` loads it as data only."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from studio.cli import main as cli_main
from studio.core.config.rules.pickled import pickle_refusal
from studio.core.config.schema import ModelSection
from studio.core.project.preflight import check_model

CONFIG = """\
schema_version = 1
[model]
family = "sd15"
base = "{base}"
{allow}
[[dataset.concepts]]
path = "data"
[output]
dir = "runs"
"""


class Payload:
    """What a hostile pickle carries: an object whose loading calls a function of the attacker's choice."""

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (print, ("CODE RAN",))


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    path = tmp_path / "models" / "old model.ckpt"
    path.parent.mkdir()
    path.write_bytes(pickle.dumps({"state_dict": {}, "x": Payload()}))
    return path


def _config(tmp_path: Path, base: Path, allow: bool = False) -> Path:
    (tmp_path / "data").mkdir(exist_ok=True)
    path = tmp_path / "studio.toml"
    path.write_text(CONFIG.format(base=base.as_posix(), allow="allow_pickle = true" if allow else ""))
    return path


@pytest.mark.parametrize("suffix", [".ckpt", ".pt", ".bin"])
def test_every_command_refuses_a_pickle_base_the_same_way(tmp_path: Path, suffix: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / f"model{suffix}"
    model.write_bytes(pickle.dumps({"x": Payload()}))
    config = _config(tmp_path, model)
    why = pickle_refusal(str(model))
    assert "can run code" in why and "--to-safetensors" in why and "model.allow_pickle = true" in why
    assert cli_main(["model", str(model)]) == 1
    out = capsys.readouterr().out
    assert f"cannot train from it: {why}" in out and "CODE RAN" not in out
    for command in ("validate", "run"):
        assert cli_main([command, str(config)]) == 2
        captured = capsys.readouterr()
        assert why in captured.err and "model.base" in captured.err and "Traceback" not in captured.err
        assert "CODE RAN" not in captured.out + captured.err
    assert not (tmp_path / "runs").exists()


def test_allowed_explicitly_it_passes_the_checks(tmp_path: Path, ckpt: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path, ckpt, allow=True)
    assert cli_main(["validate", str(config)]) == 0
    from studio.core.config.schema import TrainConfig

    allowed = TrainConfig(model=ModelSection(family="sd15", base=str(ckpt), allow_pickle=True))
    assert check_model(allowed) is None
    assert "CODE RAN" not in capsys.readouterr().out


def test_conversion_reads_tensors_as_data_and_refuses_code(tmp_path: Path, ckpt: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    assert cli_main(["model", str(ckpt), "--to-safetensors"]) == 2
    captured = capsys.readouterr()
    assert "holds more than tensors" in captured.err and "CODE RAN" not in captured.out + captured.err
    assert not ckpt.with_suffix(".safetensors").exists()

    good = tmp_path / "models" / "weights.ckpt"
    torch.save({"state_dict": {"a.weight": torch.ones(2, 3)}, "global_step": 5}, good)
    assert cli_main(["model", str(good), "--to-safetensors"]) == 0
    assert f"wrote {good.with_suffix('.safetensors')} (1 tensors)" in capsys.readouterr().out
    from safetensors.torch import load_file

    assert torch.equal(load_file(str(good.with_suffix(".safetensors")))["a.weight"], torch.ones(2, 3))


def test_a_conversion_cut_short_leaves_no_safetensors_file_and_can_be_run_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    import safetensors.torch

    good = tmp_path / "models" / "weights.ckpt"
    good.parent.mkdir()
    torch.save({"state_dict": {"a.weight": torch.ones(2, 3)}}, good)
    save_file = safetensors.torch.save_file

    def cut_short(tensors: object, filename: str, *args: object, **kwargs: object) -> None:
        Path(filename).write_bytes(b"\x00" * 64)  # part of the file written, then Ctrl+C
        raise KeyboardInterrupt

    monkeypatch.setattr(safetensors.torch, "save_file", cut_short)
    assert cli_main(["model", str(good), "--to-safetensors"]) == 130
    assert sorted(p.name for p in good.parent.iterdir()) == ["weights.ckpt"]
    monkeypatch.setattr(safetensors.torch, "save_file", save_file)
    assert cli_main(["model", str(good), "--to-safetensors"]) == 0
    assert "wrote" in capsys.readouterr().out

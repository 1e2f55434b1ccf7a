"""`studio-train tiny --full-size`: real architectures counted on the meta device, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio.cli import main

pytest.importorskip("torch")


def test_full_size_sdxl_is_counted_without_writing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tiny", "--full-size", "sdxl", str(tmp_path / "xl")]) == 0
    out = capsys.readouterr().out
    assert "unet                2,567.5 M parameters" in out  # SDXL base 1.0's UNet: 2,567,463,684
    assert "text_encoder_2" in out and "nothing written" in out
    assert not (tmp_path / "xl").exists()


def test_tiny_refuses_unknown_families_and_misplaced_t5(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tiny", "flux", "somewhere"]) == 2
    assert "sd15, sdxl, sd3" in capsys.readouterr().err
    assert main(["tiny", "sdxl", "somewhere", "--t5"]) == 2
    assert "--t5 applies to the families with a T5 text encoder only (sd3)" in capsys.readouterr().err

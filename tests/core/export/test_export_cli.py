"""`studio-train export`: the bundle, and errors that say what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio.cli import main as cli_main
from studio.core.project.folder import Project


def test_export_command_writes_a_bundle_and_prints_the_remote_command(
    demo: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bundle"
    code = cli_main(["export", str(demo.config_path), "--out", str(out), "--gpus", "2", "--gpu-type", "h100",
                     "--include-model", "--manifest-only", "--zip"])
    assert code == 0
    text = capsys.readouterr().out
    assert "./launch.sh --check" in text and "1 node(s) x 2 H100 80GB" in text
    assert (out / "launch.sh").is_file() and (tmp_path / "bundle.zip").is_file()
    assert [p.name for p in (out / "dataset").iterdir()] == ["manifest.json"]


def test_export_command_explains_a_local_model(demo: Project, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main(["export", str(demo.config_path), "--out", str(tmp_path / "b")])
    assert code == 2
    assert "--include-model" in capsys.readouterr().err


def test_export_command_rejects_an_unknown_gpu_type(demo: Project, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main(["export", str(demo.config_path), "--out", str(tmp_path / "b"), "--gpu-type", "tpu9",
                     "--include-model"])
    assert code == 2
    assert "no GPU type 'tpu9'" in capsys.readouterr().err


def test_ctrl_c_while_zipping_leaves_no_zip_that_looks_finished(demo: Project, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import zipfile

    from_file = zipfile.ZipInfo.from_file
    entries: list[str] = []

    def interrupted(path: Path, arcname: str, **kwargs: object) -> zipfile.ZipInfo:
        entries.append(arcname)
        if len(entries) == 3:  # a few files into the zip: Ctrl+C
            raise KeyboardInterrupt
        return from_file(path, arcname, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(zipfile.ZipInfo, "from_file", staticmethod(interrupted))
    out = tmp_path / "bundle"
    code = cli_main(["export", str(demo.config_path), "--out", str(out), "--include-model", "--manifest-only",
                     "--zip"])
    assert code == 130
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("bundle")) == ["bundle"]
    assert (out / "launch.sh").is_file()  # the folder bundle was whole before the zip began


@pytest.mark.parametrize(("flag", "said"), [
    (["--port", "70000"], "error: --port 70000: must be at most 65535"),
    (["--main-address", "10.0.0.1\nnodes: 9"], "error: --main-address '10.0.0.1\\nnodes: 9': "),
    (["--main-address", "node 1"], "error: --main-address 'node 1': 'node 1' holds a space: give one host name"),
])
def test_a_port_or_address_accelerate_cannot_take_is_named_as_the_flag(
        demo: Project, tmp_path: Path, flag: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bundle"
    assert cli_main(["export", str(demo.config_path), "--out", str(out), "--include-model", "--manifest-only",
                     *flag]) == 2
    err = capsys.readouterr().err
    assert err.startswith(said) and "Traceback" not in err
    assert not out.exists()


def test_export_command_says_each_step_as_it_begins(demo: Project, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # Thousands of images take minutes to copy and zip: the command said nothing until it was done.
    code = cli_main(["export", str(demo.config_path), "--out", str(tmp_path / "b"), "--include-model", "--zip"])
    assert code == 0
    steps = capsys.readouterr().err.splitlines()
    images = len([p for p in (tmp_path / "b" / "dataset").rglob("*") if p.is_file()]) - 1  # not the manifest
    assert steps[0] == f"dataset: {images} files…" and steps[1] == "model: tiny-sd15…"
    assert steps[2] == "studio source…" and steps[3].startswith("zip: ") and len(steps) == 4

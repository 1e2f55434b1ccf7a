"""benchmarks/gpu_train_speed.py's models: each family's is written before its case's timeout starts, under a
limit of its own, into a staging folder renamed when complete; when the disk is short, the models of the
families whose cases are done are removed. The tiny model's build is slowed down and the trainer's case replaced
by one that only reads its model (the dry run's real code paths are tests/train/test_gpu_benchmark.py's)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fixtures.scripts import load_script

import studio.train.pipelines.tiny as tiny


def _benchmark(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, build_s: float) -> tuple[ModuleType, list[str]]:
    """The script with a tiny-model build of `build_s` seconds and a studio case that reads its model; the
    builds it made, by family."""
    bench = load_script("benchmarks/gpu_train_speed.py")
    builds: list[str] = []

    def build(family: str, folder: Path) -> Path:
        builds.append(family)
        time.sleep(build_s)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model_index.json").write_text("{}")
        return folder

    def studio_case(case: Any, settings: Any) -> Any:
        assert (bench._model(case.family, settings) / "model_index.json").is_file()
        return bench.Result(case, settings.resolution(case.family), s_per_step=0.01)

    monkeypatch.setattr(tiny, "build_tiny_pipeline", build)
    monkeypatch.setattr(bench, "measure_studio", studio_case)
    monkeypatch.setattr(bench.torch, "set_num_threads", lambda _count: None)  # the test worker's own
    monkeypatch.setenv("STUDIO_CACHE_DIR", str(tmp_path / "cache"))
    return bench, builds


def _run(bench: ModuleType, tmp_path: Path, *options: str) -> tuple[int, list[tuple[str, int, str]]]:
    code = bench.main(["--dry-run", "--paths", "studio", "--work", str(tmp_path / "work"),
                       "--out", str(tmp_path / "out"), *options])
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    return code, [(r["case"]["family"], r["case"]["batch"], r["note"]) for r in results]


def test_a_model_write_longer_than_the_case_timeout_does_not_time_the_cases_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Written inside the case, the model took the case's whole timeout, was cut short, and every later case of
    the family wrote it again and timed out again."""
    bench, builds = _benchmark(monkeypatch, tmp_path, build_s=1.0)
    code, notes = _run(bench, tmp_path, "--only", "sd15", "--case-timeout-s", "0.5")
    assert notes == [("sd15", 2, ""), ("sd15", 1, "")]
    assert code == 0 and builds == ["sd15"]


def test_a_write_past_its_own_limit_leaves_nothing_and_is_not_tried_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bench, builds = _benchmark(monkeypatch, tmp_path, build_s=1.0)
    code, notes = _run(bench, tmp_path, "--only", "sd15", "--write-timeout-s", "0.3")
    assert notes == [("sd15", 2, "timeout writing its model (over 0.3 s)"),
                     ("sd15", 1, "timeout writing its model (over 0.3 s)")]
    assert code == 1 and builds == ["sd15"]
    assert list((tmp_path / "work" / "models").iterdir()) == []  # no half-written model, no staging folder


def test_a_family_done_gives_its_disk_to_the_next_only_when_the_disk_is_short(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """10 GB free: SD1.5's model (2 GB) fits, SDXL's (6.5 GB, 8.8 GB with the margin) not beside it while SD1.5's
    batch-1 case is still to come; once it ran, SD1.5's model is removed and SDXL's written."""
    bench, builds = _benchmark(monkeypatch, tmp_path, build_s=0.0)
    code, notes = _run(bench, tmp_path, "--only", "sd15", "sdxl", "--disk-gb", "10")
    assert notes == [("sd15", 2, ""), ("sdxl", 2, "not run: its model needs about 9 GB of disk, 8 GB free"),
                     ("sd15", 1, ""), ("sdxl", 1, "")]
    assert code == 0 and builds == ["sd15", "sdxl"]
    assert [p.name for p in (tmp_path / "work" / "models").iterdir()] == ["tiny-sdxl"]

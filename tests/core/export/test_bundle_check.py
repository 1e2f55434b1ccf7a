"""The bundle's pre-flight check: a clear FAIL row for a missing file, a wrong hash, no GPU."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from studio.core.export.bundle import export_bundle
from studio.core.export.check import FAIL, PASS, SKIP, WARN, Result, format_results, run_checks
from studio.core.project.folder import Project

# These check the bundle against the packages of the environment running the tests; the
# core-only environment (no torch) has none of them to pin or find.
needs_training_packages = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="needs the training packages installed"
)


TWO_GPUS: dict[str, Any] = {"torch": "2.5.1", "cuda": True, "cuda_version": "12.4",
                            "gpus": [{"name": "NVIDIA H100", "total_mb": 81559}] * 2}
NO_GPU: dict[str, Any] = {"torch": "2.5.1+cpu", "cuda": False, "cuda_version": None, "gpus": []}


@pytest.fixture
def bundle(demo: Project, tmp_path: Path) -> Path:
    out = tmp_path / "bundle"
    export_bundle(demo.config_path, out, gpus=2, gpu_type="h100", include_model=True)
    return out


def row(results: list[Result], name: str) -> Result:
    return next(r for r in results if r.check == name)


@needs_training_packages
def test_a_complete_bundle_on_two_gpus_passes(bundle: Path) -> None:
    results = run_checks(bundle, probe=TWO_GPUS)
    failed = [r for r in results if r.status == FAIL]
    assert not failed, format_results(results)
    assert row(results, "Dataset").detail.startswith("48 files")
    assert row(results, "GPU count").status == PASS
    assert "All checks passed" in format_results(results)


@needs_training_packages
def test_a_missing_dataset_file_fails_and_is_named(bundle: Path) -> None:
    victim = sorted((bundle / "dataset" / "shapes").glob("*.png"))[3]
    victim.unlink()
    results = run_checks(bundle, probe=TWO_GPUS)
    dataset = row(results, "Dataset")
    assert dataset.status == FAIL
    assert f"1 missing: shapes/{victim.name}" in dataset.detail
    assert "1 check(s) FAILED" in format_results(results)


def test_a_changed_file_fails_on_its_hash(bundle: Path) -> None:
    victim = sorted((bundle / "dataset" / "shapes").glob("*.txt"))[0]
    text = victim.read_bytes()
    victim.write_bytes(text[:-2] + b"X\n")  # same size, other content
    dataset = row(run_checks(bundle, probe=TWO_GPUS), "Dataset")
    assert dataset.status == FAIL
    assert f"1 with another SHA-256: shapes/{victim.name}" in dataset.detail
    assert row(run_checks(bundle, probe=TWO_GPUS, hashes=False), "Dataset").status == PASS


def test_a_truncated_file_fails_on_its_size(bundle: Path) -> None:
    victim = sorted((bundle / "dataset" / "shapes").glob("*.png"))[0]
    victim.write_bytes(victim.read_bytes()[:10])
    assert "with another size" in row(run_checks(bundle, probe=TWO_GPUS), "Dataset").detail


def test_no_gpu_fails_unless_the_cpu_test_mode_allows_it(bundle: Path) -> None:
    results = run_checks(bundle, probe=NO_GPU)
    assert row(results, "CUDA").status == FAIL
    assert "no CUDA GPU visible" in row(results, "CUDA").detail
    assert row(results, "GPU count").detail == "0 GPUs, 2 needed on this node"
    allowed = run_checks(bundle, probe=NO_GPU, allow_no_gpu=True)
    assert row(allowed, "CUDA").status == SKIP and row(allowed, "GPU count").status == SKIP


def test_too_few_or_too_small_gpus_fail(bundle: Path) -> None:
    one = {**TWO_GPUS, "gpus": TWO_GPUS["gpus"][:1]}
    assert row(run_checks(bundle, probe=one), "GPU count").status == FAIL
    assert row(run_checks(bundle, gpus=1, probe=one), "GPU count").status == PASS
    info = json.loads((bundle / "bundle.json").read_text())
    (bundle / "bundle.json").write_text(json.dumps({**info, "vram_estimate_mb": 100000}))
    memory = row(run_checks(bundle, probe=TWO_GPUS), "GPU memory")
    assert memory.status == FAIL and "97.7 GB needed per GPU" in memory.detail


def test_a_missing_package_fails_with_the_install_command(bundle: Path) -> None:
    with open(bundle / "requirements.txt", "a") as handle:
        handle.write("no-such-package-for-studio==1.0\n")
    packages = row(run_checks(bundle, probe=TWO_GPUS), "Packages")
    assert packages.status == FAIL
    assert "no-such-package-for-studio" in packages.detail and "pip install -r requirements.txt" in packages.detail


@needs_training_packages
def test_another_version_only_warns(bundle: Path) -> None:
    text = (bundle / "requirements.txt").read_text()
    import re
    (bundle / "requirements.txt").write_text(re.sub(r"tomlkit==\S+", "tomlkit==0.0.1", text))
    packages = row(run_checks(bundle, probe=TWO_GPUS), "Packages")
    assert packages.status == WARN and "tomlkit" in packages.detail


def test_a_remote_model_path_that_is_not_there_fails(demo: Project, tmp_path: Path) -> None:
    out = tmp_path / "b"
    export_bundle(demo.config_path, out, remote_base=str(tmp_path / "nowhere" / "model"))
    model = row(run_checks(out, probe=TWO_GPUS), "Base model")
    assert model.status == FAIL and "nowhere" in model.detail


@needs_training_packages
def test_check_sh_exits_non_zero_without_a_gpu(bundle: Path) -> None:
    """The real script, with this machine's torch (a CPU build, or no GPU visible)."""
    env = {**os.environ, "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([str(bundle / "check.sh")], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "CUDA        FAIL" in done.stdout
    assert "check(s) FAILED" in done.stdout
    allowed = subprocess.run([str(bundle / "check.sh"), "--allow-no-gpu"], capture_output=True, text=True,
                             env=env, timeout=120)
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert "All checks passed" in allowed.stdout


@pytest.mark.parametrize(("base", "token", "status"), [
    ("stabilityai/stable-diffusion-3-medium-diffusers", None, FAIL),
    ("stabilityai/stable-diffusion-3-medium-diffusers", "env", PASS),
    ("stabilityai/stable-diffusion-3-medium-diffusers", "login", PASS),
    ("someone/public-sd3-model", None, PASS),
], ids=["gated-no-token", "gated-HF_TOKEN", "gated-hub-login", "not-known-gated"])
def test_a_gated_base_without_a_token_there_fails_before_training(
        base: str, token: str | None, status: str, demo: Project, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The check passed, and training failed at its first download after the set-up had been paid for.
    from studio.core.config.files.toml_file import save_config

    config = demo.load_config()
    config.model.family, config.model.base = "sd3", base
    save_config(config, demo.config_path)
    out = tmp_path / "b"
    export_bundle(demo.config_path, out, include_model=True)
    for name in ("HF_TOKEN", "HF_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    if token == "env":
        monkeypatch.setenv("HF_TOKEN", "hf_Elsewhere0123456789abcdef")
    elif token == "login":
        (tmp_path / "hf-home").mkdir()
        (tmp_path / "hf-home" / "token").write_text("hf_Elsewhere0123456789abcdef\n")
    model = row(run_checks(out, probe=TWO_GPUS), "Base model")
    assert model.status == status, model.detail
    if status == FAIL:
        assert f"{base} is gated and this machine has no Hugging Face token: set HF_TOKEN" in model.detail
        assert "hf auth login" in model.detail

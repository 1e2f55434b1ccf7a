"""benchmarks/gpu_memory.py's parent on the CPU: each case's subprocess stood in for, so what it keeps of a call
that goes wrong part-way is checked without a GPU."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_memory", ROOT / "benchmarks" / "gpu_memory.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_vae_case_past_its_timeout_is_a_row_and_the_finished_cases_are_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The VAE cases ran without the denoiser cases' timeout handling: one that hung ended the script with a
    traceback after every training case had been measured, and --json, written only at the end, was never
    written."""
    module = _script()

    def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if "--vae-child" in cmd:
            raise subprocess.TimeoutExpired(cmd, kwargs["timeout"])
        result = {"family": cmd[cmd.index("--child") + 1], "checkpointing": cmd[-3] == "1", "error": "OOM"}
        return subprocess.CompletedProcess(cmd, 0, "RESULT " + json.dumps(result) + "\n", "")

    monkeypatch.setattr(module.subprocess, "run", run)
    out = tmp_path / "rows.json"
    assert module.main(["--json", str(out), "--timeout", "5"]) == 0
    rows = json.loads(out.read_text())
    assert [(r["family"], r.get("checkpointing")) for r in rows[:6]] == list(module.CASES)
    assert rows[6:] == [{"family": family, "case": "vae_encode_fp32", "error": "timed out after 5 s"}
                        for family in module.VAE_CASES]


def test_the_rows_are_in_json_after_every_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A call cut short (the device's time limit) keeps the cases that finished in --json."""
    module = _script()
    out = tmp_path / "rows.json"
    seen: list[int] = []

    def run(cmd: list[str], **_kwargs: Any) -> subprocess.CompletedProcess[str]:
        seen.append(len(json.loads(out.read_text())) if out.exists() else 0)
        return subprocess.CompletedProcess(cmd, 1, "", "RuntimeError: no CUDA GPUs are available\n")

    monkeypatch.setattr(module.subprocess, "run", run)
    module.main(["--json", str(out)])
    assert seen == list(range(len(module.CASES) + len(module.VAE_CASES)))

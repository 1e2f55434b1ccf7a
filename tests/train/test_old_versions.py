"""The studio's LoRA files and DreamBooth folders load with transformers 4.x and diffusers 0.3x (what
kohya's scripts and many UIs pin); each family's own tests load them with the studio's versions.

The old versions live in `.venv-compat` (constraints/compat.txt), which `python dev.py test` makes;
tests/train/load_outputs.py loads the files there.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from fixtures.training import train_in_process

from studio.core.config.schema import (
    ConceptSection,
    DatasetSection,
    MethodSection,
    ModelSection,
    OutputSection,
    TrainConfig,
    TrainingSection,
)

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
LOADER = Path(__file__).with_name("load_outputs.py")
COMPAT_PYTHON = ROOT / ".venv-compat" / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
TEXT_ENCODERS = {"sd15": ["text_encoder"], "sdxl": ["text_encoder", "text_encoder_2"],
                 "sd3": ["text_encoder", "text_encoder_2"]}
FAMILIES = ("sd15", "sdxl", "sd3")


def _config(family: str, base: Path, data: Path, root: Path, kind: str) -> TrainConfig:
    return TrainConfig(
        model=ModelSection(family=family, base=str(base)),  # type: ignore[arg-type]
        method=MethodSection(kind=kind, train_text_encoder=True,  # type: ignore[arg-type]
                             **({"rank": 4, "alpha": 8} if kind == "lora" else {})),
        dataset=DatasetSection(concepts=[ConceptSection(path=str(data))], resolution=64, buckets=False),
        training=TrainingSection(batch_size=2, max_steps=2 if kind == "lora" else 1, learning_rate=5e-2, seed=3),
        output=OutputSection(dir=str(root / "runs"), name=f"{family}-{kind}", save_precision="fp32"),
    )


@pytest.fixture(scope="module")
def cases(tiny_models: dict[str, Path], demo_data: Path, tmp_path_factory: pytest.TempPathFactory,
          ) -> list[dict[str, Any]]:
    """A LoRA (text encoders trained too) and a DreamBooth folder of every family, as load cases."""
    out: list[dict[str, Any]] = []
    for family in FAMILIES:
        for kind in ("lora", "dreambooth"):
            root = tmp_path_factory.mktemp(f"{family}-{kind}")
            code, run_dir = train_in_process(_config(family, tiny_models[family], demo_data, root, kind), root)
            assert code == 0, (run_dir / "events.jsonl").read_text()[-2000:]
            output = str(run_dir / "output")
            if kind == "lora":
                out.append({"kind": "lora", "family": family, "base": str(tiny_models[family]), "folder": output,
                            "weight_name": "pytorch_lora_weights.safetensors"})
            else:
                out.append({"kind": "folder", "family": family, "folder": output})
    return out


def _load(python: Path, cases: list[dict[str, Any]]) -> dict[str, Any]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    done = subprocess.run([str(python), str(LOADER)], input=json.dumps(cases), capture_output=True, text=True,
                          env=env, timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.slow
@pytest.mark.skipif(not COMPAT_PYTHON.exists(), reason=(
    f"no compatibility environment at {COMPAT_PYTHON.parent.parent}: `python dev.py setup` makes it "
    "(transformers 4.x and diffusers 0.3x, pinned in constraints/compat.txt)"))
def test_outputs_load_with_transformers_4_and_diffusers_0_3x(cases: list[dict[str, Any]]) -> None:
    loaded = _load(COMPAT_PYTHON, cases)
    assert loaded["transformers"].startswith("4.") and loaded["diffusers"].startswith("0.3"), loaded
    for case, result in zip(cases, loaded["results"], strict=True):
        what = f"{case['family']} {case['kind']} with transformers {loaded['transformers']}"
        if case["kind"] == "lora":
            assert result["image_change"] > 1e-3, what
            # Every text encoder's LoRA was read (not silently skipped): its embedding moved.
            assert sorted(result["embedding_change"]) == TEXT_ENCODERS[case["family"]], what
            assert all(change > 1e-4 for change in result["embedding_change"].values()), (what, result)
        else:
            components = result["components"]
            assert set(TEXT_ENCODERS[case["family"]]) <= set(components), what
            for name, report in components.items():
                assert report == {"missing": [], "unexpected": [], "mismatched": []}, (what, name, report)
            assert result["image_finite"] and result["image_std"] > 0, what

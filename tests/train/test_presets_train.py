"""Every shipped preset trains a tiny pipeline with its own settings, samples and writes its outputs.

The presets are read from presets/*.toml, so a changed preset is what gets trained. Only
what the tiny models need changes (tests/fixtures/training.py scaled_to_tiny); what a
CPU cannot do falls back inside the trainer with a warning (fp16 autocast, 8-bit Adam).
`tests/e2e/test_cli_run.py` takes one preset through `studio-train run` as well.
"""

from __future__ import annotations

from typing import Any

import pytest

from studio.core.config.files.presets import apply_preset, list_presets
from studio.core.config.files.toml_file import load_config
from studio.core.families import FAMILIES
from studio.core.runs.events import RunFinished, RunWarning, Sample
from tests.fixtures.training import scaled_to_tiny

pytest.importorskip("torch")

PRESETS = list_presets(include_user=False)
# What scaled_to_tiny changes; every other key of a preset reaches the trainer as written.
SCALED = {("dataset", "resolution"), ("training", "epochs"), ("training", "max_steps"),
          ("sampling", "every_n_steps"), ("sampling", "prompts"), ("sampling", "steps"), ("sampling", "size"),
          ("model", "blocks_to_swap")}  # one of the tiny transformers' two blocks (scaled_to_tiny)


def test_the_shipped_presets_cover_every_family_and_method() -> None:
    assert len(PRESETS) >= 12
    assert {(p.family, p.method) for p in PRESETS} == {(spec.name, m) for spec in FAMILIES for m in spec.methods}


def _preset_keys(delta: dict[str, Any]) -> list[tuple[str, str, Any]]:
    return [(section, key, value) for section, table in delta.items() if isinstance(table, dict)
            for key, value in table.items() if (section, key) not in SCALED]


@pytest.mark.parametrize("preset", PRESETS, ids=[p.id for p in PRESETS])
def test_preset_trains_with_its_own_settings(preset, make_config, run_training, events_of, tmp_path) -> None:
    config = scaled_to_tiny(apply_preset(make_config(preset.family), preset))
    if config.model.use_t5:  # the preset reads T5's embeddings too: a tiny pipeline that has a T5
        from studio.train.pipelines.tiny import build_tiny_pipeline

        config.model.base = str(build_tiny_pipeline("sd3", tmp_path / "tiny-sd3-t5", t5=True))
    code, run_dir = run_training(config, tmp_path)
    events = events_of(run_dir)
    assert code == 0, [e for e in events if e.type in ("error", "warning")]
    trained = load_config(run_dir / "config.toml").model_dump()
    for section, key, value in _preset_keys(preset.delta):
        assert trained[section][key] == value, f"{preset.id}: {section}.{key}"
    warnings = " ".join(e.message for e in events if isinstance(e, RunWarning))
    if config.training.optimizer == "adamw8bit":
        assert "this run uses AdamW" in warnings
    assert [e.step for e in events if isinstance(e, Sample)] == [2, 4]
    assert all((run_dir / "samples" / f"step-00000{s}-0.png").is_file() for s in (2, 4))
    finished = events[-1]
    assert isinstance(finished, RunFinished) and finished.status == "completed" and finished.step == 4
    assert finished.outputs and all((run_dir / path).exists() for path in finished.outputs)

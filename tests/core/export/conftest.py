"""A fixed GPU catalogue for the export tests (the demo project is in fixtures/projects.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXED_CATALOGUE = """
schema_version = 1
prices_noted = "2026-01-01"
currency = "USD"

[speed]
reference_gpu = "ref"
seconds_per_image = { sd15 = 0.1, sdxl = 0.4, sd3 = 0.5 }
native_resolution = { sd15 = 512, sdxl = 1024, sd3 = 1024 }
dreambooth_factor = 2.0
gradient_checkpointing_factor = 1.5
full_precision_factor = 3.0
startup_minutes = 0.0

[scaling]
gpu_counts = [1, 2, 4]
efficiency = [1.0, 0.9, 0.8]
cross_node_infiniband = 0.9
cross_node_ethernet = 0.5

[[gpu]]
id = "fast"
name = "Fast 80GB"
vram_gb = 80
bf16 = true
throughput = 2.0
price_min = 2.0
price_max = 4.0

[[gpu]]
id = "slow"
name = "Slow 24GB"
vram_gb = 24
bf16 = true
throughput = 1.0
price_min = 0.5
price_max = 0.5
max_per_node = 2
"""


@pytest.fixture
def catalogue_file(tmp_path: Path) -> Path:
    path = tmp_path / "catalogue.toml"
    path.write_text(FIXED_CATALOGUE, encoding="utf-8")
    return path

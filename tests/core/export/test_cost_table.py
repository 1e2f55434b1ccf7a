"""Cost and time arithmetic on a fixed catalogue, and the catalogue files themselves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from studio.cli import main as cli_main
from studio.core.config.files.toml_file import save_config
from studio.core.export.cost import (
    Workload,
    assumptions,
    cost_table,
    format_table,
    seconds_per_image,
    workload_from_config,
)
from studio.core.export.gpu_catalogue import (
    CatalogueError,
    ensure_user_catalogue,
    load_catalogue,
    shipped_catalogue_path,
)
from studio.core.project.folder import Project

WORK = Workload(family="sd15", method="lora", resolution=512, images=3600, batch_size=1,
                gradient_accumulation=1, gradient_checkpointing=False, mixed_precision="bf16")


def by_label(rows: list) -> dict:
    return {(r.gpu.id, r.per_node, r.nodes): r for r in rows}


def test_time_and_cost_per_gpu_type_and_count(catalogue_file: Path) -> None:
    rows = by_label(cost_table(WORK, load_catalogue(catalogue_file), counts=(1, 2, 4)))
    one = rows["fast", 1, 1]
    assert one.hours == pytest.approx(180 / 3600)  # 3600 images x 0.1 s / throughput 2
    assert (one.cost_min, one.cost_max) == (pytest.approx(0.10), pytest.approx(0.20))
    two = rows["fast", 2, 1]
    assert two.speedup == pytest.approx(1.8)
    assert two.hours == pytest.approx(100 / 3600)
    assert two.cost_min == pytest.approx(100 / 3600 * 2 * 2.0)
    assert rows["fast", 4, 1].hours == pytest.approx(3600 * 0.05 / 3.2 / 3600)
    assert [rows["fast", n, 1].steps for n in (1, 2, 4)] == [3600, 1800, 900]
    assert rows["slow", 1, 1].cost_min == pytest.approx(0.1 * 0.5)
    assert ("slow", 4, 1) not in rows  # max_per_node = 2


def test_cheapest_and_fastest_are_marked_among_rows_that_fit(catalogue_file: Path) -> None:
    catalogue = load_catalogue(catalogue_file)
    rows = cost_table(WORK, catalogue, counts=(1, 2, 4))
    assert [r.label for r in rows if r.cheapest] == ["1x Slow 24GB"]
    assert [r.label for r in rows if r.fastest] == ["4x Fast 80GB"]
    needs_30gb = cost_table(WORK, catalogue, vram_needed=lambda gpu, gpus: 30 * 1024, counts=(1, 2, 4))
    assert all(r.fits is False for r in needs_30gb if r.gpu.id == "slow")
    assert [r.label for r in needs_30gb if r.cheapest] == ["1x Fast 80GB"]
    table = format_table(needs_30gb)
    assert "1x Slow 24GB  NO    30.0/24 GB" in table
    assert "cheapest" in table and "fastest" in table


def test_nodes_without_infiniband_scale_worse(catalogue_file: Path) -> None:
    catalogue = load_catalogue(catalogue_file)
    row = cost_table(WORK, catalogue, counts=(2,), nodes=2, gpu_ids=["fast"])[0]
    assert row.total_gpus == 4 and row.label == "2 nodes x 2 Fast 80GB"
    assert row.speedup == pytest.approx(4 * 0.9 * 0.5)
    assert catalogue.scaling.speedup(3) == pytest.approx(3 * 0.85)  # interpolated between 2 and 4
    assert catalogue.scaling.speedup(2, 2, infiniband=True) == pytest.approx(4 * 0.9 * 0.9)


def test_resolution_method_and_precision_factors(catalogue_file: Path) -> None:
    catalogue = load_catalogue(catalogue_file)
    fast = catalogue.get("fast")
    heavy = Workload(family="sdxl", method="dreambooth", resolution=512, images=1, batch_size=1,
                     gradient_accumulation=1, gradient_checkpointing=True, mixed_precision="no")
    seconds, measured = seconds_per_image(fast, heavy, catalogue)
    assert seconds == pytest.approx(0.4 / 2 * 0.25 * 2.0 * 1.5 * 3.0)
    assert not measured


def test_measured_figures_replace_the_scaled_ones(tmp_path: Path, catalogue_file: Path) -> None:
    text = catalogue_file.read_text().replace('id = "fast"', 'id = "fast"\nmeasured = { sd15 = 0.02 }')
    path = tmp_path / "measured.toml"
    path.write_text(text)
    catalogue = load_catalogue(path)
    assert seconds_per_image(catalogue.get("fast"), WORK, catalogue) == (pytest.approx(0.02), True)


def test_work_comes_from_steps_or_epochs(demo: Project) -> None:
    config = demo.load_config()
    assert workload_from_config(config, demo.root).images == 60 * 4
    config.training.max_steps = None
    config.training.epochs = 2
    assert workload_from_config(config, demo.root).images == 2 * 24


def test_shipped_catalogue_has_the_noted_prices() -> None:
    catalogue = load_catalogue(shipped_catalogue_path())
    prices = {g.id: (g.price_min, g.price_max, g.vram_gb) for g in catalogue.gpus}
    assert prices["h200"] == (3.59, 3.99, 141)
    assert prices["h100"] == (2.69, 2.99, 80)
    assert prices["rtx4090"] == (0.34, 0.69, 24)
    assert prices["h100-hyperscaler"][0] == 12.29
    assert catalogue.get("RTX 4090").id == "rtx4090"
    assert catalogue.get("4090").id == "rtx4090"
    notes = " ".join(assumptions(catalogue, WORK))
    assert catalogue.prices_noted in notes and "InfiniBand" in notes


def test_the_users_copy_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    path = ensure_user_catalogue()
    path.write_text(path.read_text().replace("price_min = 3.59", "price_min = 3.00"))
    assert load_catalogue().get("h200").price_min == 3.00


def test_prices_saved_by_notepad_with_a_byte_order_mark_are_read() -> None:
    path = ensure_user_catalogue()
    text = path.read_text(encoding="utf-8").replace("price_min = 3.59", "price_min = 3.00")
    path.write_text(text, encoding="utf-8-sig")  # Notepad's "UTF-8 with BOM"
    assert load_catalogue().get("h200").price_min == 3.00


def test_a_broken_catalogue_names_the_entry(tmp_path: Path, catalogue_file: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(catalogue_file.read_text().replace("price_min = 0.5", "price_min = 0.9"))
    with pytest.raises(CatalogueError, match=r"bad\.toml: \[\[gpu\]\] slow: .*price_min at most price_max"):
        load_catalogue(bad)
    unknown = tmp_path / "unknown.toml"
    unknown.write_text(catalogue_file.read_text().replace('id = "slow"', 'id = "slow"\ncolour = "red"'))
    with pytest.raises(CatalogueError, match=r"entry 2 \(slow\).*colour"):
        load_catalogue(unknown)
    with pytest.raises(KeyError, match="known: fast, slow"):
        load_catalogue(catalogue_file).get("tpu")


def test_cost_command_prints_the_table_and_json(demo: Project, catalogue_file: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    config = demo.load_config()
    config.training.max_steps = 9000
    config.training.batch_size = 4
    save_config(config, demo.config_path)
    assert cli_main(["cost", str(demo.config_path), "--catalogue", str(catalogue_file)]) == 0
    out = capsys.readouterr().out
    assert "1x Fast 80GB" in out and "Assumptions:" in out
    assert cli_main(["cost", str(demo.config_path), "--catalogue", str(catalogue_file), "--json",
                     "--counts", "1,2"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["rows"]) == 4
    fast1 = next(r for r in data["rows"] if r["gpu"] == "fast" and r["total_gpus"] == 1)
    # 36000 images at 64 px: 0.05 s x (64/512)^2 x 3 (no mixed precision) per image on "fast".
    assert fast1["hours"] == pytest.approx(36000 * 0.05 / 64 * 3 / 3600, abs=1e-4)
    assert fast1["steps"] == 9000
    assert cli_main(["cost", str(demo.config_path), "--gpu", "tpu", "--catalogue", str(catalogue_file)]) == 2
    assert "no GPU type 'tpu'" in capsys.readouterr().err
    for wrong in (["--counts", "0,1"], ["--nodes", "0"], ["--counts", ","]):  # no GPUs: nothing to cost
        assert cli_main(["cost", str(demo.config_path), "--catalogue", str(catalogue_file), *wrong]) == 2
        err = capsys.readouterr().err
        assert "give GPU counts and a node count of 1 or more" in err and "Traceback" not in err


def test_times_show_the_scaling_band_and_more_gpus_for_little_gain_are_never_fastest() -> None:
    catalogue = load_catalogue(shipped_catalogue_path())
    # A short run: the start-up dominates, so 8 H200s cost about 8 times one for a few minutes less.
    short = Workload(family="sd15", method="lora", resolution=512, images=200, batch_size=1,
                     gradient_accumulation=1, gradient_checkpointing=False, mixed_precision="bf16")
    rows = by_label(cost_table(short, catalogue, counts=(1, 2, 4, 8)))
    eight = rows["h200", 8, 1]
    assert eight.little_gain and not eight.fastest
    assert eight.cost_mid > 4 * rows["h200", 1, 1].cost_mid
    fastest = [r for r in rows.values() if r.fastest]
    assert len(fastest) == 1 and not fastest[0].little_gain
    # A long run: two GPUs nearly halve the time and are worth it; the band gives a time range.
    long = Workload(family="sdxl", method="lora", resolution=1024, images=200_000, batch_size=4,
                    gradient_accumulation=1, gradient_checkpointing=False, mixed_precision="bf16")
    rows = by_label(cost_table(long, catalogue, counts=(1, 2, 4, 8)))
    two = rows["h100", 2, 1]
    assert not two.little_gain
    assert two.hours_min < two.hours < two.hours_max
    one = rows["h100", 1, 1]
    assert one.hours_min == pytest.approx(one.hours_max)  # one GPU scales with nothing
    text = format_table(list(rows.values()))
    two_line = next(line for line in text.splitlines() if line.startswith("2x H100 80GB "))
    assert f"{two.hours_min:.1f}-{two.hours_max:.1f} h" in two_line
    notes = " ".join(assumptions(catalogue, long))
    assert "2 GPUs: 92% (88-97%)" in notes and "little gain" in notes


def test_a_catalogue_copy_older_than_a_family_still_costs_the_others(catalogue_file: Path) -> None:
    """A person's copy made before FLUX.2 [klein] existed has no figures for it: the other families are
    still costed, and that family's table names the file and what to add."""
    catalogue = load_catalogue(catalogue_file)
    assert cost_table(WORK, catalogue, counts=(1,))
    klein = Workload(family="flux2-klein", method="lora", resolution=1024, images=100, batch_size=1,
                     gradient_accumulation=1, gradient_checkpointing=True, mixed_precision="bf16")
    with pytest.raises(CatalogueError, match=r"\[speed\] has no figures for flux2-klein: add flux2-klein to "
                                             r"seconds_per_image and native_resolution"):
        cost_table(klein, catalogue, counts=(1,))

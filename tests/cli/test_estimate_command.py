"""`studio-train estimate`: a config, a preset by name or file, its promise against the estimate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from studio.cli import main as cli
from studio.core.config.files.presets import get_preset
from studio.core.estimate.plans.preset_estimate import estimate_preset
from studio.core.hardware.machine.probe import load_hardware

ROOT = Path(__file__).resolve().parents[2]


def test_a_shipped_preset_is_estimated_with_its_samples(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["estimate", "--preset", "sdxl-lora-8gb", "--hardware", "rtx3060-12gb"]) == 0
    out = capsys.readouterr().out
    expected = estimate_preset(get_preset("sdxl-lora-8gb"), load_hardware("rtx3060-12gb").gpus[0])
    assert out.splitlines()[0] == ("Preset sdxl-lora-8gb (SDXL LoRA (8 GB)): promises 8 GB · estimated "
                                   f"{expected.estimate.total_gb:.1f} GB with samples on NVIDIA GeForce RTX 3060")
    assert "The estimate keeps the promise." in out
    assert "fp8 e4m3 (frozen)" in out and "(sample images peak)" in out
    peak = next(line for line in out.splitlines() if line.strip().startswith("Peak"))
    assert peak.split()[1:] == [f"{expected.estimate.total_gb:.2f}", "GB"]
    assert "Verdict: fits" in out


def test_a_preset_file_given_as_the_config_is_read_as_a_preset(capsys: pytest.CaptureFixture[str]) -> None:
    # Before, a preset file was refused: "preset: unknown key", "model.base is required".
    assert cli(["estimate", str(ROOT / "presets" / "sd15-dreambooth.toml"), "--hardware", "rtx4090-24gb"]) == 0
    captured = capsys.readouterr()
    assert "unknown key" not in captured.err and "is required" not in captured.err
    assert "Preset sd15-dreambooth (SD1.5 DreamBooth): promises 20 GB · estimated" in captured.out


def test_json_names_the_promise_and_whether_it_holds(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["estimate", "--preset", "sd15-lora-6gb", "--hardware", "rtx4090-24gb", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["preset"]["id"] == "sd15-lora-6gb" and data["preset"]["promise_gb"] == 6
    assert data["preset"]["keeps_promise"] is True and data["preset"]["with_samples"] is True
    assert data["preset"]["estimate_gb"] == round(data["estimate"]["total_mb"] / 1024, 2)
    assert data["estimate"]["sampling_peak_mb"] > 0 and data["gpu"] == "NVIDIA GeForce RTX 4090"


def test_without_a_gpu_the_preset_is_estimated_on_its_promised_card(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["estimate", "--preset", "sd3-lora-12gb", "--hardware", "no-gpu"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("No GPU found here: the preset is estimated on a card of its promised size")
    assert "promises 12 GB · estimated" in out and "on a 12 GB GPU" in out


def test_a_preset_over_a_project_keeps_the_projects_samples(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = tmp_path / "studio.toml"
    project.write_text('[model]\nfamily = "sd15"\nbase = "m"\n[sampling]\nevery_n_steps = 7\nprompts = ["my dog"]\n')
    assert cli(["estimate", str(project), "--preset", "sd15-lora", "--hardware", "rtx3060-12gb", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["preset"]["id"] == "sd15-lora" and data["estimate"]["sampling_peak_mb"] > 0


def test_an_unknown_preset_names_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["estimate", "--preset", "sdxl-lora-4gb"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no preset named 'sdxl-lora-4gb' (did you mean 'sdxl-lora-8gb', 'sdxl-lora-6gb' or "
                          "'sdxl-lora'?); known presets: ") and "sd15-lora-6gb" in err
    assert cli(["estimate"]) == 2
    assert "give a config file, or --preset NAME" in capsys.readouterr().err


def test_gpus_shows_ddp_beside_fsdp_per_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "db.toml"
    config.write_text('[model]\nfamily = "sdxl"\nbase = "m"\ndtype = "bf16"\n[method]\nkind = "dreambooth"\n'
                      '[dataset]\nresolution = 1024\n[training]\nmixed_precision = "bf16"\n'
                      'gradient_checkpointing = true\ncache_latents = true\ncache_text_embeddings = true\n')
    assert cli(["estimate", str(config), "--hardware", "2x-rtx3090", "--gpus", "2"]) == 0
    out = capsys.readouterr().out
    from studio.core.config.files.paths import load_resolved
    from studio.core.estimate.sharded.sharded_estimate import plan_gpus

    plan = plan_gpus(load_resolved(config), load_hardware("2x-rtx3090").gpus[0], 2)
    assert plan.fsdp is not None
    lines = out.splitlines()
    table = lines[lines.index("Per GPU on 2 GPUs (NVIDIA GeForce RTX 3090, 24.0 GB free each):"):]
    assert table[1].split() == ["DDP", "FSDP"]
    peak = next(line for line in table if line.strip().startswith("Peak"))
    assert peak.split()[1:] == [f"{plan.ddp.total_gb:.2f}", "GB", f"{plan.fsdp.total_gb:.2f}", "GB"]
    verdict = next(line for line in table if line.strip().startswith("Verdict"))
    assert "does NOT fit" in verdict and verdict.split()[-1] in ("fits", "tight")
    assert 'FSDP fits where DDP does not: set launch.strategy = "fsdp", launch.num_processes = 2' in out
    assert "1. Shard across 2 GPUs" in out or "Shard across 2 GPUs:" in out
    # The config's own process count does the same without --gpus; JSON carries both estimates.
    config.write_text(config.read_text() + '[launch]\nnum_processes = 2\n')
    assert cli(["estimate", str(config), "--hardware", "2x-rtx3090", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["per_gpu"]
    assert data["gpus"] == 2 and data["proposes_fsdp"] is True and data["ddp_fit"] == "does_not_fit"
    assert round(data["fsdp"]["total_mb"]) == round(plan.fsdp.total_mb)


def test_a_lora_on_several_gpus_says_fsdp_does_not_apply(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "lora.toml"
    config.write_text('[model]\nfamily = "sd15"\nbase = "m"\n')
    assert cli(["estimate", str(config), "--hardware", "2x-rtx3090", "--gpus", "2"]) == 0
    assert 'FSDP does not apply: launch.strategy = "fsdp": shards the weights' in capsys.readouterr().out
    assert cli(["estimate", str(config), "--hardware", "2x-rtx3090", "--gpus", "0"]) == 2
    assert "--gpus 0: give a number of GPUs of 1 or more" in capsys.readouterr().err


def test_class_images_take_places_in_the_batch_rather_than_doubling_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The trainer's batches hold training.batch_size images, instance and class images alike: the estimate of
    # a DreamBooth with prior preservation is the estimate without it (it said "batch 4" for batch_size = 2).
    config = ('[model]\nfamily = "sdxl"\nbase = "org/model"\n[method]\nkind = "dreambooth"\n[[dataset.concepts]]\n'
              'path = "data"\n{prior}[training]\nbatch_size = 2\nmixed_precision = "bf16"\n')
    outputs = []
    for prior in ("", 'class_prompt = "a photo of a dog"\nclass_path = "class"\n'):
        path = tmp_path / "studio.toml"
        path.write_text(config.format(prior=prior), encoding="utf-8")
        assert cli(["estimate", str(path), "--hardware", "rtx4090-24gb"]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[1] == outputs[0]
    assert "512 px, batch 2" in outputs[1] and "batch 4" not in outputs[1]


def test_gpu_ids_naming_a_card_this_machine_lacks_say_why_the_estimate_is_the_cpus(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A config from a machine of two GPUs (launch.gpu_ids = "1") estimated on one with a single 4090.
    config = tmp_path / "studio.toml"
    config.write_text('schema_version = 1\n[model]\nfamily = "sd15"\nbase = "org/model"\n[[dataset.concepts]]\n'
                      'path = "data"\n[launch]\ngpu_ids = "1"\n', encoding="utf-8")
    assert cli(["estimate", str(config), "--hardware", "rtx4090-24gb"]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith('warning: launch.gpu_ids = "1" names GPU 1, which this machine does not have '
                                   "(its GPUs: 0 (NVIDIA GeForce RTX 4090))")
    assert "on no GPU: the CPU" in captured.out

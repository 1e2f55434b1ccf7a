"""`launch.strategy = "fsdp"` with two CPU ranks: a sharded DreamBooth of each tiny family trains, stops,
resumes, writes outputs diffusers loads, and ends where a one-rank run with the same global batch ends.

One `accelerate launch` runs the three families one after the other (tests/fixtures/sharded_runs.py);
the tests below read what it left on disk.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from fixtures.training import train_in_one_launch

from studio.core.config.files.paths import resolve_paths
from studio.core.config.schema import (
    ConceptSection,
    DatasetSection,
    LaunchSection,
    MethodSection,
    ModelSection,
    OutputSection,
    SamplingSection,
    TrainConfig,
    TrainingSection,
)
from studio.core.runs.events import Checkpoint, RunFinished, RunStarted, RunWarning, Sample, Step
from studio.core.runs.launch import prepare_run

torch = pytest.importorskip("torch")

STOP_AT, STEPS, BATCH = 2, 3, 2
DENOISER = {"sd15": "unet", "sdxl": "unet", "sd3": "transformer"}
# SD1.5 plain fp32 (tightest comparison) with a single-file output; SDXL trains its two text encoders
# too, with checkpointed blocks and samples (every rank runs the sharded forward passes); SD3 in bf16.
VARIANTS: dict[str, dict[str, Any]] = {
    "sd15": {"output": {"formats": ["diffusers", "single_file"]}},
    "sdxl": {"method": {"train_text_encoder": True}, "training": {"gradient_checkpointing": True},
             "sampling": {"every_n_steps": STEPS, "prompts": ["a red circle"], "steps": 2}},
    "sd3": {"training": {"mixed_precision": "bf16", "gradient_checkpointing": True}},
}


def config_for(family: str, base: Path, data: Path, out: Path, strategy: str, batch: int) -> TrainConfig:
    variant = VARIANTS[family]
    return TrainConfig(
        model=ModelSection(family=family, base=str(base)),  # type: ignore[arg-type]
        method=MethodSection(kind="dreambooth", **variant.get("method", {})),
        dataset=DatasetSection(concepts=[ConceptSection(path=str(data))], resolution=64, buckets=False),
        training=TrainingSection(batch_size=batch, max_steps=STEPS, learning_rate=1e-3, seed=3,
                                 **variant.get("training", {})),
        sampling=SamplingSection(**variant.get("sampling", {})),
        output=OutputSection(dir=str(out), save_precision="fp32",
                             **variant.get("output", {"formats": ["diffusers"]})),
        launch=LaunchSection(strategy=strategy),  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def sharded_runs(tiny_models: dict[str, Path], demo_data: Path,
                 tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each family trained by 2 ranks: stopped after STOP_AT steps, resumed to STEPS; its run folder."""
    root = tmp_path_factory.mktemp("sharded")
    runs = {family: prepare_run(resolve_paths(config_for(family, tiny_models[family], demo_data, root / "runs", "fsdp",
                                                         BATCH), root), num_processes=2).run_dir for family in VARIANTS}
    train_in_one_launch(list(runs.values()), "the sharded runs", stop_at=STOP_AT)
    return runs


@pytest.fixture(scope="module")
def one_rank_runs(tiny_models: dict[str, Path], demo_data: Path,
                  tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same runs on one rank, uninterrupted, with the same global batch (twice the per-rank batch)."""
    from fixtures.training import train_in_process

    root = tmp_path_factory.mktemp("one-rank")
    runs = {}
    for family in VARIANTS:
        config = config_for(family, tiny_models[family], demo_data, root / "runs", "ddp", 2 * BATCH)
        code, runs[family] = train_in_process(config, root)
        assert code == 0
    return runs


def weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return {key: value for path in sorted(folder.glob("*.safetensors")) for key, value in load_file(path).items()}


def assert_same_training(sharded: Path, single: Path, base: Path, component: str, tolerance: float) -> None:
    """The trained component of two output folders moved alike: the distance between them is within
    `tolerance` of how far training moved it (both as norms over all its weights; the largest single
    difference says little under Adam, which turns a rounding-sized gradient into a whole step)."""
    got, want, start = weights(sharded / component), weights(single / component), weights(base / component)
    assert got.keys() == want.keys()
    moved = sum(float((want[k].float() - start[k].float()).square().sum()) for k in want) ** 0.5
    apart = sum(float((got[k].float() - want[k].float()).square().sum()) for k in want) ** 0.5
    assert moved > 1e-3, f"{component}: training barely moved the weights ({moved})"
    assert apart <= tolerance * moved, f"{component}: {apart:.2e} apart, {moved:.2e} moved"


@pytest.mark.slow
@pytest.mark.parametrize("family", list(VARIANTS))
def test_a_sharded_dreambooth_stops_resumes_and_ends_as_one_rank(
        family: str, sharded_runs: dict[str, Path], one_rank_runs: dict[str, Path],
        tiny_models: dict[str, Path], events_of, tmp_path: Path) -> None:
    run_dir = sharded_runs[family]
    events = events_of(run_dir)
    started = [e for e in events if isinstance(e, RunStarted)]
    assert [(s.world_size, s.resumed_from_step) for s in started] == [(2, 0), (2, STOP_AT)]
    assert started[0].effective_batch == 2 * BATCH and started[0].sharding["strategy"] == "fsdp"
    finished = [e for e in events if isinstance(e, RunFinished)]
    assert [(f.status, f.step) for f in finished] == [("stopped", STOP_AT), ("completed", STEPS)]
    assert [c.step for c in events if isinstance(c, Checkpoint)] == [STOP_AT]
    assert [s.step for s in events if isinstance(s, Step)] == list(range(1, STEPS + 1))
    assert not [w for w in events if isinstance(w, RunWarning)]
    checksums = finished[-1].weight_checksums
    assert len(checksums) == 2 and checksums[0] == checksums[1]  # both ranks see the same whole model

    # The checkpoint is sharded: each rank wrote its own file of weights and optimizer state.
    sharded = run_dir / "checkpoints" / f"step-{STOP_AT}" / "sharded"
    assert sorted(p.name for p in sharded.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    assert not (run_dir / "checkpoints" / f"step-{STOP_AT}" / "trainable_0.safetensors").exists()

    # The outputs are whole (gathered to rank 0), load in diffusers and match the one-rank run.
    output = run_dir / "output"
    from diffusers import DiffusionPipeline

    pipeline = DiffusionPipeline.from_pretrained(output, **({"text_encoder_3": None, "tokenizer_3": None}
                                                            if family == "sd3" else {}))
    assert sum(p.numel() for p in getattr(pipeline, DENOISER[family]).parameters()) == \
        started[0].sharding["modules"][DENOISER[family]]["params"]
    # fp32 steps agree to float rounding (1e-4 of the move); bf16 gathers the weights rounded where one
    # rank's autocast rounds each operation's inputs, which Adam carries into its steps (0.15 of the move).
    tolerance = 0.25 if family == "sd3" else 0.01
    single, base = one_rank_runs[family] / "output", tiny_models[family]
    for component in (DENOISER[family], *(["text_encoder", "text_encoder_2"] if family == "sdxl" else [])):
        assert_same_training(output, single, base, component, tolerance)
    if family == "sdxl":  # samples of a sharded run: every rank ran them, rank 0 wrote them
        samples = [e for e in events if isinstance(e, Sample)]
        assert [s.step for s in samples] == [STEPS] and all(Path(p).is_file() for p in samples[0].images)
    else:  # the denoiser alone is trained: each rank holds half of it, as the estimate says
        each_rank_holds_half_as_estimated(run_dir, started[0].sharding, DENOISER[family])
    if family == "sd15":  # the single file is made from the gathered weights too
        assert (output / "run.safetensors").stat().st_size > 4 * started[0].sharding["modules"]["unet"]["params"]
        resumes_on_one_rank(run_dir, one_rank_runs["sd15"], tiny_models["sd15"], tmp_path, events_of)


def each_rank_holds_half_as_estimated(run_dir: Path, sharding: dict[str, Any], denoiser: str) -> None:
    """Each rank holds half of the parameters, and wrote the bytes the estimator's per-GPU figures give."""
    from torch.distributed.checkpoint import FileSystemReader

    from studio.core.config.files.toml_file import load_config
    from studio.core.estimate.memory_data import MB, load_calibration
    from studio.core.estimate.memory_parts import RunFacts, denoiser_weights, optimizer_state

    sizes = sharding["modules"][denoiser]
    held = sharding["params_by_rank"]
    assert sum(held) == sizes["params"] and max(held) - min(held) <= 0.01 * sizes["params"]
    # What each rank wrote to the sharded checkpoint, by the checkpoint's own index.
    written = _bytes_by_rank(FileSystemReader(str(run_dir / "checkpoints" / f"step-{STOP_AT}" / "sharded")))
    # The estimator's per-GPU figures for a model of these sizes on two GPUs.
    arch = {"components": {denoiser: {"role": "denoiser", "class": "tiny", "params": sizes["params"],
                                      "fsdp": sizes}}}
    facts = RunFacts(load_config(run_dir / "config.toml"), "gpu", arch, load_calibration())
    assert facts.shards == 2
    estimated = {"model": denoiser_weights(facts).mb * MB, "optimizer": optimizer_state(facts, sizes["params"]).mb * MB}
    for rank in (0, 1):
        assert written[rank]["model"] == pytest.approx(estimated["model"], rel=0.01), rank
        assert written[rank]["optimizer"] == pytest.approx(estimated["optimizer"], rel=0.01), rank


def _bytes_by_rank(reader: Any) -> dict[int, dict[str, int]]:
    """Bytes of sharded parameters ("model") and of AdamW's moments ("optimizer") in each rank's file
    (a buffer every rank holds whole, as SD3's position table, is written by one rank: left out)."""
    metadata = reader.read_metadata()
    out: dict[int, dict[str, int]] = {0: {"model": 0, "optimizer": 0}, 1: {"model": 0, "optimizer": 0}}
    for index, info in metadata.storage_data.items():
        kind = "model" if index.fqn.startswith("model.") else "optimizer" if "exp_avg" in index.fqn else None
        entry = metadata.state_dict_metadata[index.fqn]
        if kind is None or not hasattr(entry, "chunks") or len(entry.chunks) != 2:
            continue
        chunk = next(c for c in entry.chunks if c.offsets == index.offset)
        rank = int(info.relative_path.split("_")[2])
        out[rank][kind] += torch.Size(chunk.sizes).numel() * entry.properties.dtype.itemsize
    return out


def resumes_on_one_rank(sharded_run: Path, one_rank_run: Path, base: Path, tmp_path: Path, events_of) -> None:
    """DCP reshards a two-rank checkpoint's weights and optimizer state for one rank; with the same
    global batch the run ends as the one-rank run does."""
    from fixtures.training import train_in_process

    from studio.core.config.files.toml_file import load_config, save_config

    run_dir = tmp_path / "resumed"
    shutil.copytree(sharded_run, run_dir, ignore=shutil.ignore_patterns("output"))
    lines = (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    stopped = next(i for i, line in enumerate(lines) if '"status":"stopped"' in line)
    (run_dir / "events.jsonl").write_text("".join(lines[: stopped + 1]), encoding="utf-8")
    config = load_config(run_dir / "config.toml")
    config.training.batch_size, config.launch.num_processes = 2 * BATCH, 1
    save_config(config, run_dir / "config.toml")
    assert train_in_process(config, run_dir, resume_dir=run_dir)[0] == 0
    events = events_of(run_dir)
    assert [(e.world_size, e.resumed_from_step) for e in events if isinstance(e, RunStarted)][-1] == (1, STOP_AT)
    warning = next(e for e in events if isinstance(e, RunWarning))
    assert warning.message.startswith('launch.strategy = "fsdp" with one process shards nothing')
    assert_same_training(run_dir / "output", one_rank_run / "output", base, "unet", 0.01)
    assert json.loads((run_dir / "output" / "training_info.json").read_text())["step"] == STEPS

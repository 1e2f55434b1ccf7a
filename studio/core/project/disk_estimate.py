"""How much disk a run will fill, counted the way the trainer writes it, and sizes as people read them.

A checkpoint holds the trained weights in fp32 and the optimizer's two moments (12 bytes a
weight) plus a few small files; a new one is written before the oldest is pruned, so at most
`keep_last + 1` are on disk at once, and no more than the run makes (a run with no
`save_every_n_steps` writes one only when stopped). The outputs hold the trained weights at
the save precision once per file format (a full fine-tune's, the whole pipeline); samples are PNGs; the events and console grow with
the steps. A margin of a tenth and a megabyte covers what varies (PNG sizes, metadata).
"""

from __future__ import annotations

from pathlib import Path

from studio.core.config.files.paths import ResolvedConfig
from studio.core.config.prompt_options import sample_draws
from studio.core.estimate.estimate import estimate_vram
from studio.core.families import family
from studio.core.runs.folders import CHECKPOINTS_DIR

MB = 1024**2
GB = 1024**3
_SAVE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
_CHECKPOINT_FILES = 64 * 1024  # scheduler, RNG states, training state, the optimizer file's own
_LOG_BYTES_PER_STEP = 700  # a step event and its console line
_UNKNOWN_STEPS = 1000  # a run given in epochs: its steps depend on the dataset


def format_size(count: int | float) -> str:
    """Bytes as a person reads them: "24 MB" below a gigabyte, "1.5 GB" above."""
    if count < GB:
        return f"{max(count, 0) / MB:,.0f} MB" if count >= MB else f"{max(count, 0) / MB:.1f} MB"
    return f"{count / GB:,.1f} GB"


def estimate_disk_bytes(config: ResolvedConfig, trainable_params: int | None = None) -> int:
    """Disk a run fills at its fullest: the checkpoints kept at once, the outputs, samples and logs.

    `trainable_params` defaults to the VRAM estimate's count of the weights the run trains."""
    params = estimate_vram(config, None).trainable_params if trainable_params is None else trainable_params
    output, sampling, training = config.output, config.sampling, config.training
    steps = training.max_steps or _UNKNOWN_STEPS
    ema = training.ema
    checkpoint = params * (16 if ema else 12) + _CHECKPOINT_FILES  # the EMA: an fp32 copy in each checkpoint
    made = steps // output.save_every_n_steps if output.save_every_n_steps else 0
    kept = max(1, min(made, output.keep_last + 1))  # at least the one a stop writes
    per_format = params * _SAVE_BYTES.get(output.save_precision, 4)
    if config.method.kind == "lora":
        copies = 1 if config.method.network in ("loha", "lokr") else \
            sum(f in output.formats for f in ("diffusers", "kohya")) or 1
        copies *= 2 if ema else 1  # the EMA's files beside the raw ones
        epochs = training.epochs or 0
        copies += epochs // output.save_every_n_epochs if output.save_every_n_epochs else 0
    else:
        # The pipeline folder and the single file; the EMA writes both again (its folder and `<name>-ema`).
        copies = (2 if "single_file" in output.formats else 1) * (2 if ema else 1)
        per_format = pipeline_params(config) * _SAVE_BYTES.get(output.save_precision, 4)
    rounds = steps // sampling.every_n_steps + 1 if sampling.every_n_steps and sampling.prompts else 0
    rounds += 1 if sampling.at_start and sampling.prompts else 0  # the base model's, before the first step
    # Each prompt's picture at its own size (--w/--h); a PNG of a picture: about half its pixels.
    pixels = sum(draw.width * draw.height for draw in sample_draws(sampling, config.dataset.resolution,
                                                                    family(config.model.family).pixel_multiple))
    samples = rounds * pixels * 3 // 2
    logs = steps * _LOG_BYTES_PER_STEP
    return int((kept * checkpoint + copies * per_format + samples + logs) * 1.1) + MB


def pipeline_params(config: ResolvedConfig) -> int:
    """The weights a full fine-tune's outputs hold: the whole pipeline, the VAE and the frozen text encoders with
    the trained ones (a model folder of the project counted as it is). SD3's T5 is there when the run loads it, or
    copied from a base folder that has it; counting the trained weights alone left out a third of an SDXL output
    and three quarters of an SD3 one, and a run the disk check let start failed when it wrote them."""
    from studio.core.estimate.local_architecture import local_architecture
    from studio.core.estimate.memory_data import load_architecture

    model = config.model
    arch = local_architecture(load_architecture(family(model.family).architecture(model.base)), model.base)
    t5 = model.use_t5 or (Path(model.base) / "text_encoder_3").is_dir()
    return sum(int(part["params"]) for part in arch["components"].values()
               if part.get("role") != "text_encoder_t5" or t5)


def resume_disk_bytes(config: ResolvedConfig, run_dir: Path) -> int:
    """What resuming `run_dir` still writes: the estimate less the checkpoints already on disk
    (the new ones replace them), but at least one more checkpoint and the outputs."""
    params = estimate_vram(config, None).trainable_params
    have = sum(p.stat().st_size for p in (run_dir / CHECKPOINTS_DIR).rglob("*") if p.is_file()) \
        if (run_dir / CHECKPOINTS_DIR).is_dir() else 0
    floor = params * 12 + _CHECKPOINT_FILES + params * _SAVE_BYTES.get(config.output.save_precision, 4) * 2 + MB
    return max(estimate_disk_bytes(config) - have, floor)

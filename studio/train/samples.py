"""Sample images during training and DreamBooth class images, made with the family's pipeline in three stages.

The text encoders embed every prompt and leave (unless the prompts were embedded with the
cached captions: then no encoder comes back), the denoiser makes the latents, the VAE
decodes them (tiled when asked). With the frozen modules parked off the GPU
(placement.py), each stage brings back only what it uses, so sampling peaks at its
largest stage, not at their sum. Each stage works in its own precision whatever
model.dtype, the mixed precision and the method make of the modules: the denoiser gets
its inputs in the dtype it computes in (a trained fp32 UNet, frozen bf16 encoders), the
VAE gets the latents in its own.

A sample that fails never ends the run: it becomes an `error` event of kind "sample",
its traceback goes to the console, what it took is given back, and training goes on.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from studio.core.config.prompt_options import SampleDraw, sample_draws
from studio.core.config.schema import TrainConfig
from studio.core.dataset.image_headers import IMAGE_EXTENSIONS
from studio.core.estimate.sampling_plan import VAE_TILE_PX
from studio.core.families import family
from studio.core.runs.events import Sample
from studio.core.runs.folders import SAMPLES_DIR
from studio.train.components import Components
from studio.train.data.controls import fitted_control, save_sample_controls
from studio.train.families.base import Conditioning, FamilyAdapter, Picture
from studio.train.memory.placement import FrozenOffload
from studio.train.memory.precision import compute_dtype, forward_in_precision
from studio.train.progress.reporting import Reporter

# What a stage reports before each piece of work: (stage, index of the image or prompt, the prompt).
Progress = Callable[[str, int, str], None]
OnImage = Callable[[int, Any], None]
# The control images an edit sample edits (PIL), fitted to a picture's (width, height): the same for every
# picture, or made for each picture's size.
References = Sequence[Any] | Callable[[int, int], Sequence[Any]]
# What a prompt is embedded from: its words and negative prompt, and for an edit the picture's width and height
# (the controls the encoder may see are fitted to them).
EmbeddingKey = tuple[Any, ...]


@dataclass(frozen=True)
class ImageJob:
    """One picture to make: its prompt's words and seed, and what its prompt sets for itself (--w 768 --n blurry);
    None is the Sample settings tab's value (the size: what `render_images` is given)."""

    prompt: str
    seed: int
    width: int | None = None
    height: int | None = None
    steps: int | None = None
    guidance: float | None = None
    negative: str | None = None


@dataclass
class SamplingPlan:
    """How a run's images are made: where the parked modules wait, whether the VAE decodes in tiles,
    and the autocast the denoiser runs in (the run's mixed precision)."""

    offload: FrozenOffload
    tiled: bool = False
    autocast: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    # The sample prompts' embeddings made with the cached captions' (data/caching_phase.py), by embedding_key (the
    # prompt's words, its negative prompt and an edit's picture size): a prompt found here brings back no encoder.
    embedded: dict[EmbeddingKey, Conditioning] = field(default_factory=dict)
    # Edit pairs: the control images every sample prompt edits (data/controls.py's sample_controls).
    controls: tuple[Path, ...] = ()


@contextlib.contextmanager
def decode_tiled(vae: Any, tiled: bool) -> Iterator[None]:
    """The VAE decodes in tiles of at most VAE_TILE_PX (and one image at a time) inside the block when `tiled`.

    AutoencoderKL keeps one square tile side (`tile_sample_min_size`); the VAEs tiled by height and
    width (Qwen-Image's) keep both and the stride between tiles, which overlap by a quarter."""
    if not tiled:
        yield
        return
    if hasattr(vae, "tile_sample_min_size"):
        names: tuple[str, ...] = ("use_tiling", "use_slicing", "tile_sample_min_size", "tile_latent_min_size")
    else:
        names = ("use_tiling", "use_slicing", "tile_sample_min_height", "tile_sample_min_width",
                 "tile_sample_stride_height", "tile_sample_stride_width")
    saved = {name: getattr(vae, name) for name in names}
    if "tile_sample_min_size" in saved:
        side = vae.tile_sample_min_size
        if isinstance(side, int) and side > VAE_TILE_PX:
            vae.tile_latent_min_size = vae.tile_latent_min_size * VAE_TILE_PX // side
            vae.tile_sample_min_size = VAE_TILE_PX
        vae.enable_tiling()
    else:
        side = min(VAE_TILE_PX, vae.tile_sample_min_height, vae.tile_sample_min_width)
        vae.enable_tiling(side, side, side * 3 // 4, side * 3 // 4)
    vae.enable_slicing()
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(vae, name, value)


@contextlib.contextmanager
def evaluating(components: Components) -> Iterator[None]:
    """Trained modules in eval mode for the block (no dropout), back in train mode after it, come what may."""
    trained = [m for m in (components.denoiser, *components.text_encoders) if m.training]
    for module in trained:
        module.eval()
    try:
        yield
    finally:
        for module in trained:
            module.train()


@contextlib.contextmanager
def reports_compute_dtype(denoiser: torch.nn.Module) -> Iterator[None]:
    """Inside the block, `denoiser.dtype` answers the dtype its weights compute in.

    Pipelines cast the latents to `transformer.dtype` before each denoising step, and diffusers answers with
    the first floating weight's dtype: with model.fp8_base, FLUX.2 [klein]'s first layer (the timestep
    embedding) is stored in 8 bits, so every step's latents were rounded to 3 mantissa bits before the
    transformer saw them, and its samples came out worse than the LoRA makes them."""
    wide = compute_dtype(denoiser)
    narrow = type(denoiser)
    if getattr(denoiser, "dtype", wide) == wide:
        yield
        return
    denoiser.__class__ = type(narrow.__name__, (narrow,), {"dtype": property(lambda _self: wide)})
    try:
        yield
    finally:
        denoiser.__class__ = narrow


def render_images(
    adapter: FamilyAdapter, components: Components, plan: SamplingPlan, jobs: list[ImageJob], size: int,
    on_image: OnImage, progress: Progress, references: References = (),
) -> None:
    """Make one image per job (prompt and seed, and the settings it gives itself; `size` a side of those that give
    none) and hand each to `on_image` as it is decoded; every job edits `references` (PIL control images, or
    what makes them at a picture's width and height) when there are some."""
    pipeline = adapter.make_pipeline(components)
    pipeline.set_progress_bar_config(disable=True)
    sampling = adapter.config.sampling
    edits = callable(references) or bool(references)
    fitted: dict[tuple[int, int], Sequence[Any]] = {}

    def shape(job: ImageJob) -> tuple[int, int]:
        return job.width or size, job.height or size

    def controls(width: int, height: int) -> Sequence[Any]:
        if not callable(references):
            return references
        if (width, height) not in fitted:
            fitted[width, height] = references(width, height)
        return fitted[width, height]

    def key(job: ImageJob) -> EmbeddingKey:
        return embedding_key(*text_of(job, sampling.negative_prompt), shape(job) if edits else None)

    texts = list(dict.fromkeys(key(job) for job in jobs))
    offload = plan.offload
    with torch.no_grad(), evaluating(components):
        embedded = {text: plan.embedded[text] for text in texts if text in plan.embedded}
        missing = [text for text in texts if text not in embedded]
        device = next(components.denoiser.parameters()).device
        with offload.resident(offload.text_encoder_names() if missing else []):
            for index, text in enumerate(missing):
                prompt, negative = text[:2]
                progress("encoding", index, prompt)
                made = adapter.sample_edit_conditioning(pipeline, prompt, negative,
                                                        controls(*text[2:]) if edits else ())
                # Encoders kept in system memory (model.text_encoder_on_cpu) embed there, and SD3's pipeline
                # hands given embeddings to its transformer where they are: they go where the denoiser is.
                embedded[text] = {name: on_device(value, device) for name, value in made.items()}
        latents = []
        # An edit's pipeline encodes its control images with the VAE as it denoises: the VAE comes with the denoiser
        # (left in system memory, Qwen-Image-Edit's samples failed on a GPU and FLUX.2 [klein]'s encoded on the CPU).
        with offload.resident(["vae"] if edits else []), \
                forward_in_precision(components.denoiser, plan.autocast), reports_compute_dtype(components.denoiser):
            for index, job in enumerate(jobs):
                progress("denoising", index, job.prompt)
                generator = torch.Generator("cpu").manual_seed(job.seed)
                picture = Picture(job.width or size, job.height or size, job.steps or sampling.steps,
                                  sampling.guidance if job.guidance is None else job.guidance)
                latents.append(adapter.denoise(pipeline, embedded[key(job)], generator, picture,
                                               controls(*shape(job)) if edits else ()))
        embedded.clear()
        with offload.resident(["vae"]), decode_tiled(components.vae, plan.tiled):
            for index, (job, latent) in enumerate(zip(jobs, latents, strict=True)):
                progress("decoding", index, job.prompt)
                pixels = adapter.decode(components.vae, latent)
                on_image(index, pipeline.image_processor.postprocess(pixels.float(), output_type="pil")[0])


def text_of(job: ImageJob, negative: str) -> tuple[str, str]:
    """What a job's prompt is embedded from: its words and its negative prompt (its own, else `negative`)."""
    return job.prompt, negative if job.negative is None else job.negative


def embedding_key(prompt: str, negative: str, shape: tuple[int, int] | None = None) -> EmbeddingKey:
    """The key of a prompt's embeddings: its words and negative prompt, and for an edit sample the picture's
    (width, height), which its controls are fitted to (an encoder that sees them embeds each shape apart)."""
    return (prompt, negative) if shape is None else (prompt, negative, *shape)


def on_device(value: Any, device: torch.device) -> Any:
    """A tensor, or a list of them (Z-Image's embedding rows), on `device`; anything else as it is."""
    if isinstance(value, list):
        return [on_device(one, device) for one in value]
    return value.to(device) if isinstance(value, torch.Tensor) else value


def make_samples(
    adapter: FamilyAdapter, components: Components, plan: SamplingPlan, run_dir: Path, step: int,
    reporter: Reporter,
) -> list[Path]:
    """One PNG per prompt at the sample seed (rank 0 only), announced by a `sample` event; a prompt's own
    options (--w 768 --d 42) set its picture's size, seed, steps, guidance and negative prompt.

    A failure is reported (the prompt, the step, what to do) and ends only this round of samples.
    """
    config = adapter.config
    sampling = config.sampling
    prompts = list(sampling.prompts)
    if not prompts:
        return []
    folder = run_dir / SAMPLES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    size = sampling.size or config.dataset.resolution
    draws = sample_draws(sampling, config.dataset.resolution, family(config.model.family).pixel_multiple)
    paths: list[Path] = []
    where = ["preparing", prompts[0]]
    failing: list[int | None] = [None]  # the picture being made, whose own size a hint names
    # A step's samples sort in the prompts' order in a file browser past nine prompts too (step-...-07, -10).
    digits = len(str(len(prompts) - 1))

    def progress(stage: str, index: int, prompt: str) -> None:
        # A picture is named by the line the person wrote (the same words may be drawn at two sizes).
        where[:] = [stage, prompt if stage == "encoding" else prompts[index]]
        failing[:] = [None if stage == "encoding" else index]
        if stage == "denoising":
            reporter.phase("sampling", index, len(prompts), f"step {step}")

    def save(index: int, image: Any) -> None:
        path = folder / f"step-{step:06d}-{index:0{digits}d}.png"
        image.save(path)
        paths.append(path)

    jobs = [ImageJob(draw.text, draw.seed, draw.width, draw.height, draw.steps, draw.guidance, draw.negative)
            for draw in draws]
    failed = False
    controls: list[Path] = []
    try:
        # Edit samples: the controls as training saw them, fitted to each picture's own size (its prompt's --w and
        # --h, as a target's bucket fits its controls), saved beside the samples at the first picture's size.
        if plan.controls:
            controls = save_sample_controls(sample_references(config, plan.controls, draws[0].width,
                                                              draws[0].height), run_dir)
        render_images(adapter, components, plan, jobs, size, save, progress,
                      (lambda width, height: sample_references(config, plan.controls, width, height))
                      if plan.controls else ())
    except Exception as exc:  # a sample never ends the run: reported here, with its traceback
        stage, prompt = where
        first_line = str(exc).splitlines()[0] if str(exc) else ""
        message = f"sample at step {step} failed while {stage} the prompt \"{prompt}\": {exc.__class__.__name__}"
        reporter.failure("sample", exc, f"{message}: {first_line}" if first_line else message,
                         sample_hint(exc, config, size, plan.tiled,
                                     None if failing[0] is None else draws[failing[0]]))
        failed = True
    if failed:  # out of the except block: the exception and the tensors its frames hold are gone now
        give_back_memory(components)
    if paths:
        reporter.emit(Sample(step=step, images=[str(p) for p in paths], prompts=prompts[: len(paths)],
                             controls=[str(p) for p in controls]))
    return paths


def sample_references(config: TrainConfig, controls: Sequence[Path], width: int | None = None,
                      height: int | None = None) -> list[Any]:
    """The control images edit samples edit (PIL), each fitted to a picture's width and height (None: the sample
    size) as training fits a pair's controls to its target."""
    size = config.sampling.size or config.dataset.resolution
    return [fitted_control(path, (width or size, height or size)) for path in controls]


def sample_hint(
    exc: BaseException, config: TrainConfig, size: int, tiled: bool, draw: SampleDraw | None = None,
) -> str:
    """What to do about a failed sample (`draw`: the picture it was making); training goes on either way."""
    if isinstance(exc, torch.OutOfMemoryError):
        if draw is not None and (draw.width, draw.height) != (size, size):
            steps = [f"lower the prompt's --w and --h ({draw.width} x {draw.height} px)"]
        else:
            steps = [f"lower sampling.size ({size} px)"]
        if not tiled:
            steps.append("set sampling.vae_tiling = \"on\"")
        steps.append(f"sample less often (sampling.every_n_steps = {config.sampling.every_n_steps})")
        return "the GPU ran out of memory for the sample: " + ", ".join(steps) + "; training goes on"
    return ("training goes on without this sample; console.log holds the traceback. If every sample "
            "fails, set sampling.every_n_steps = 0 and report the traceback")


def give_back_memory(components: Components) -> None:
    """After a failed sample: the failure's tensors are unreachable now; hand their memory back."""
    gc.collect()
    device = next(components.denoiser.parameters()).device
    if device.type == "cuda":
        torch.cuda.empty_cache()


def count_images(folder: Path) -> int:
    if not folder.is_dir():
        return 0
    return sum(1 for p in folder.rglob("*") if p.suffix.lower() in IMAGE_EXTENSIONS and p.is_file())


CLASS_IMAGE_CHUNK = 8  # class images rendered (and written) per round
SEED_KEY = "seed"  # the PNG text entry of a class image that holds the seed it was made with
_CLASS_NAME = re.compile(r"class-(\d+)\.png", re.IGNORECASE)


def used_seeds(folder: Path, seed: int) -> set[int]:
    """The seeds the class images in `folder` were made with: each one's own record, or for one an older studio
    made (no record), the run's seed plus its number, which it was made with unless some were deleted before."""
    from PIL import Image, UnidentifiedImageError

    used: set[int] = set()
    for path in folder.rglob("*"):
        if path.suffix.lower() != ".png" or not path.is_file():
            continue
        try:
            with Image.open(path) as image:
                recorded = image.info.get(SEED_KEY)
        except (OSError, UnidentifiedImageError, ValueError):
            recorded = None
        if isinstance(recorded, str) and recorded.strip().isdigit():
            used.add(int(recorded))
        elif (numbered := _CLASS_NAME.fullmatch(path.name)) is not None:
            used.add(seed + int(numbered.group(1)))
    return used


def ensure_class_images(
    adapter: FamilyAdapter, components: Components, plan: SamplingPlan, config: TrainConfig,
    run_dir: Path, writer: bool, reporter: Reporter,
) -> TrainConfig:
    """Generate the DreamBooth class images that are missing (with the base model, before training).

    A concept without class_path gets RUN_DIR/class_images/concept-N. Only `writer` generates;
    the caller waits for it on every rank.
    """
    out = config.model_copy(deep=True)
    for number, concept in enumerate(out.dataset.concepts):
        if not concept.uses_prior_preservation or out.method.kind != "dreambooth":
            continue
        folder = Path(concept.class_path) if concept.class_path else run_dir / "class_images" / f"concept-{number}"
        concept.class_path = str(folder)
        missing = concept.num_class_images - count_images(folder)
        if missing <= 0 or not writer:
            continue
        folder.mkdir(parents=True, exist_ok=True)
        _write_class_images(adapter, components, plan, folder, concept.class_prompt or "", missing,
                            out.training.seed, out.dataset.resolution, reporter)
    return out


def _write_class_images(
    adapter: FamilyAdapter, components: Components, plan: SamplingPlan, folder: Path, prompt: str,
    missing: int, seed: int, size: int, reporter: Reporter,
) -> None:
    """`missing` more class images of `prompt` in `folder`, under numbers no file there has: numbered after the
    count of those there, a folder whose person had deleted a few bad ones had the newest kept ones overwritten.
    Each is made with a seed no kept image was made with (recorded in the PNG): seeded after the count, the
    images that topped up such a folder were copies of the newest kept ones."""
    existing = count_images(folder)
    done = 0
    taken = {p.name.lower() for p in folder.iterdir()}
    free = (name for number in itertools.count() if (name := f"class-{number:05d}.png") not in taken)
    used = used_seeds(folder, seed)
    seeds = (candidate for candidate in itertools.count(seed + existing) if candidate not in used)
    jobs: list[ImageJob] = []

    def save(index: int, image: Any) -> None:
        from PIL.PngImagePlugin import PngInfo

        record = PngInfo()
        record.add_text(SEED_KEY, str(jobs[index].seed))
        image.save(folder / next(free), pnginfo=record)

    def progress(stage: str, index: int, _prompt: str) -> None:
        if stage == "denoising":
            reporter.phase("class_images", done + index, missing, prompt)

    while done < missing:
        count = min(CLASS_IMAGE_CHUNK, missing - done)
        jobs = [ImageJob(prompt, next(seeds)) for _ in range(count)]
        render_images(adapter, components, plan, jobs, size, save, progress)
        done += count
    reporter.phase("class_images", missing, missing, f"{missing} class images written to {folder}")

"""The checks before every run (the Train button, `studio-train run`, the queue).

Each finds a mistake a person can fix before minutes of start-up are spent on it: a base
model that is not on this machine, a dataset with no images, an output folder that cannot
be written or whose disk is too full, a run that will not fit the GPU, a training
environment without CUDA. Each problem is one line: what, where, and what to do.
"""

from __future__ import annotations

import shlex
import shutil
import tempfile
from pathlib import Path

from studio.core.app_words import command_or_action
from studio.core.config.files.paths import ResolvedConfig
from studio.core.config.schema import TrainConfig
from studio.core.dataset.edit_pairs.pair_checks import sample_control_problem
from studio.core.dataset.edit_pairs.training import (
    control_limit,
    describe,
    edit_training_refusal,
    pair_errors,
)
from studio.core.dataset.image_facts import inspect_image
from studio.core.dataset.layouts import DatasetError
from studio.core.dataset.mask_checks import mask_problems
from studio.core.dataset.scan import list_concept
from studio.core.dataset.split import KEY, split_problem
from studio.core.estimate.estimate import ArchitectureDataError, estimate_vram, fit
from studio.core.estimate.ram.ram_estimate import ram_problem
from studio.core.hardware.report import GPUInfo, HardwareReport
from studio.core.models.files import (
    FAMILY_NAMES,
    SINGLE_FILE_SUFFIXES,
    ModelFileError,
    detect_model,
    single_file_refusal,
)
from studio.core.models.hub_cache import cached_snapshot, missing_components, repo_folder
from studio.core.models.known import find_known
from studio.core.models.snapshot_check import snapshot_problems
from studio.core.models.weight_files import folder_weight_problem, variant_only
from studio.core.project.demo import is_demo_model
from studio.core.project.disk_estimate import estimate_disk_bytes, format_size, resume_disk_bytes
from studio.core.project.library_check import check_quantization_library
from studio.core.project.problems import PreflightProblem
from studio.core.project.sample_prompts import check_sample_prompts
from studio.core.project.torch_probe import check_torch_cuda

GB = 1024**3
# A project's own folder for its models (the demo's models/tiny-sd15): a path, never a hub organisation.
LOCAL_MODEL_FOLDERS = ("models",)
# What a run started with no one to ask (`studio-train run`) starts with anyway, said as a warning: the
# estimates may be cautious, and the prompts are the person's own.
HEADLESS_WARNINGS = ("vram", "ram_tight", "gpus_idle", "sample_prompts")
# What `python -m studio.train.launcher` imports besides torch.


def preflight(config: ResolvedConfig, gpu: GPUInfo | None = None, check_torch: bool = True,
              gpu_count: int | None = None, ram_mb: int | None = None) -> list[PreflightProblem]:
    """Every problem found before starting a run of `config` (its paths resolved against its folder,
    `config.base_dir`); `gpu` is the first GPU of the machine, `gpu_count` how many it has and `ram_mb` its
    system memory (None: not known)."""
    resolved, base_dir = config, config.base_dir
    # The trainer's GPU is an NVIDIA one, through CUDA (train/runtime.py): on a Mac (its Apple GPU) or with
    # launch.cpu it trains on the CPU, and its memory is the system's, not a card's.
    trains_on = gpu if gpu is not None and gpu.vendor != "apple" and not config.launch.cpu else None
    problems = [p for p in (check_model(resolved, base_dir), check_dataset(resolved), check_mask_files(resolved),
                            check_validation_folder(resolved), check_sample_control(resolved),
                            check_sample_prompts(resolved)) if p is not None]
    problems += check_output(resolved)
    if gpu_count and trains_on is not None:  # on the CPU (no NVIDIA GPU, or launch.cpu) the ranks train there
        problems += [p for p in (check_gpu_count(config, gpu_count),) if p is not None]
    if ram_mb:
        problems += [p for p in (check_ram(resolved, trains_on, ram_mb),) if p is not None]
    if trains_on is not None:
        problems += [p for p in (check_vram(resolved, trains_on),
                                 check_torch_cuda(config.launch.python) if check_torch else None) if p]
    on_gpu = trains_on is not None
    library = check_quantization_library(config, config.launch.python, on_gpu) if check_torch else None
    if library is not None:
        problems.append(PreflightProblem(*library))
    return problems


def _looks_like_hub_id(value: str) -> bool:
    parts = value.split("/")
    return len(parts) == 2 and all(parts) and not value.startswith((".", "~", "/")) \
        and not value.endswith(SINGLE_FILE_SUFFIXES)


def looks_local(value: str) -> bool:
    """Whether model.base is meant as a path on this machine: never offered as a hub download."""
    text = value.replace("\\", "/")
    return (Path(value).expanduser().is_absolute() or text.startswith((".", "~", "/"))
            or text.split("/")[0] in LOCAL_MODEL_FOLDERS or (len(text) > 1 and text[1] == ":"))


def check_model(config: TrainConfig, base_dir: Path | None = None) -> PreflightProblem | None:
    """The base model is on this machine, readable, of the config's family and trainable."""
    base, family = config.model.base, config.model.family
    path = Path(base).expanduser()
    if not path.is_absolute() and base_dir is not None and looks_local(base):
        path = base_dir / path
    if path.exists():
        return _check_local_model(path, family, config.model.allow_pickle) or _check_variant(path, config.model.variant)
    if looks_local(base) and is_demo_model(base):
        return PreflightProblem("model", f"The demo's tiny model is not built yet ({path}): it is built with "
                                         "the training environment's PyTorch; set that up in Tools → Training "
                                         "Environment, then press Train again.")
    if _looks_like_hub_id(base) and not looks_local(base):
        return _check_cached_model(base, config.model.revision)
    return PreflightProblem("model", f"Base model {path} does not exist: check model.base (a diffusers folder, a "
                                     ".safetensors file or a hub id like org/name) or choose one on the Model & "
                                     "Preset page.")


def _check_local_model(path: Path, family: str, allow_pickle: bool = False) -> PreflightProblem | None:
    if path.is_dir() and not (path / "model_index.json").is_file():
        return PreflightProblem("model", f"Base model folder {path} has no model_index.json: choose a diffusers "
                                         "model folder (with unet/, vae/, …) or a .safetensors file.")
    try:
        info = detect_model(path)
    except ModelFileError as exc:
        return PreflightProblem("model", f"Base model: {exc}.")
    if allow_pickle and info.pickled:  # loaded as data only, with the run's warning
        return None
    if info.refused:
        return PreflightProblem("model", f"Base model {path.name} is {info.a_label}: {info.refused}.")
    if info.family is not None and info.family != family:
        return PreflightProblem("model", f"Base model {path.name} is {info.a_label} ({FAMILY_NAMES[info.family]}) "
                                         f"but model.family is {family}: set model.family = \"{info.family}\" or "
                                         "choose another model.")
    refusal = single_file_refusal(family) if path.is_file() else None
    if refusal:
        return PreflightProblem("model", f"Base model {path.name} is a single checkpoint file: {refusal}.")
    return None


def _check_variant(path: Path, variant: str | None) -> PreflightProblem | None:
    """A diffusers folder whose component holds only a variant's weight files loads only with that model.variant."""
    found = variant_only(path) if path.is_dir() else None
    if found is None or found[1] == variant:
        return None
    component, wanted, file = found
    return PreflightProblem("model", f"Base model folder {path} holds {component}'s weights only as {wanted} files "
                                     f"({file}): set model.variant = \"{wanted}\", or download the model's "
                                     "full-precision files.")


def _check_cached_model(repo_id: str, revision: str | None) -> PreflightProblem | None:
    snapshot = cached_snapshot(repo_id, revision)
    missing = missing_components(snapshot) if snapshot is not None else []
    if snapshot is not None and not missing:
        storage = repo_folder(repo_id)
        problems = snapshot_problems(storage, snapshot, hashes=False)  # where its files lie: milliseconds
        if problems:
            return PreflightProblem("model", f"The cached {repo_id} cannot be trusted: {problems[0]}. Delete the "
                                             f"cache folder {storage} and download the model again; if it comes "
                                             "back the same way, check HF_ENDPOINT and the network's proxy.")
        damaged = folder_weight_problem(snapshot)  # a file cut short, a config that does not fit its weights
        if damaged is not None:
            return PreflightProblem("model", f"The cached {repo_id} cannot be trained from: {damaged.why}. Delete "
                                             f"the cache folder {storage} and download the model again.")
        return None
    known = find_known(repo_id)
    size = f" (about {known.size_gb:g} GB)" if known else ""
    what = f"lacks {', '.join(missing)}" if snapshot is not None else "is not on this machine"
    if known is None and snapshot is None:
        what = "is no folder or file here and no downloaded hub model"
    return PreflightProblem(
        # The studio's Train asks to download it (the Model page's list has no Download button).
        "model", f"Base model {repo_id} {what}: download it first"
                 + command_or_action(f" with `studio-train download {shlex.quote(repo_id)}`{size} (or press Train "
                                     "in the studio, which offers to),", f": Train offers to{size};")
                 + " or choose a model folder or file.",
        can_confirm=True, download=repo_id)


def check_dataset(config: TrainConfig) -> PreflightProblem | None:
    """Every concept folder exists and, together, they hold at least one image; edit pairs train on a family
    that conditions on control images, and every pair is whole (the first bad one is named with its file)."""
    refusal = edit_training_refusal(config)
    if refusal is not None:
        return PreflightProblem("dataset", f"{refusal[0]}: {refusal[1]}.")
    try:
        errors = pair_errors(config.dataset, None, control_limit(config))
    except DatasetError as exc:
        return PreflightProblem("dataset", str(exc))
    except OSError as exc:
        return PreflightProblem("dataset", f"The edit pairs cannot be read ({exc.strerror or exc}): check that the "
                                           "folders are there and readable.")
    if errors:
        more = f" ({len(errors) - 1} more: `studio-train check-dataset` lists them)" if len(errors) > 1 else ""
        return PreflightProblem("dataset", describe(errors[0])[:-1] + more + ".")
    images = 0
    folders = []
    for concept in config.dataset.concepts:
        try:
            listing = list_concept(concept)
        except DatasetError as exc:
            return PreflightProblem("dataset", str(exc))
        except OSError as exc:  # a folder that cannot be read: permissions, a drive gone
            return PreflightProblem("dataset", f"The image folder {concept.path} cannot be read ({exc.strerror or exc}): "
                                               "check that it is there and readable.")
        images += len(listing.paths)
        folders.append(str(listing.result.folder))
    split = None if config.dataset.validation_folder else \
        split_problem(images, config.dataset.validation_fraction, ", ".join(folders))
    if split is not None:
        return PreflightProblem("dataset", f"{KEY} = {config.dataset.validation_fraction:g} {split}.")
    if images:
        return None
    where = ", ".join(folders) if folders else "no concept folder (dataset.concepts is empty)"
    return PreflightProblem("dataset", f"The dataset has no images ({where}): add .png, .jpg, .webp or .bmp files, "
                                       "or point dataset.concepts at your image folder on the Dataset page.")


def check_validation_folder(config: TrainConfig) -> PreflightProblem | None:
    """dataset.validation_folder names a folder that is there (the validation loss reads its images)."""
    folder = config.dataset.validation_folder
    if not folder or Path(folder).is_dir():
        return None
    return PreflightProblem("dataset", f"The validation folder {folder} (dataset.validation_folder) does not exist: "
                                       "create it with held-out images and their captions, or choose another "
                                       "folder (validation folder on the Model & Preset page).")


def check_sample_control(config: TrainConfig) -> PreflightProblem | None:
    """sampling.control_image of an edit run names an image file that is there (the trainer reads it once the
    model has loaded, minutes into the run)."""
    image = config.sampling.control_image
    if config.dataset.kind != "edit" or not image:
        return None
    why = sample_control_problem(Path(image))
    if why is None:
        return None
    return PreflightProblem("dataset", f"The control image {image} (sampling.control_image) {why}: choose "
                                       "the image every sample prompt edits, or leave it empty to edit the first "
                                       "pair's control images (control image on the Model & Preset page).")


def check_mask_files(config: TrainConfig) -> PreflightProblem | None:
    """With dataset.masks = "folder": no mask that cannot be read or has another shape than its image (the
    run would stop on it); headers only, and only then."""
    d = config.dataset
    if d.masks != "folder" or not d.mask_folder:
        return None
    images: list[tuple[Path, tuple[int, int] | None]] = []
    for concept in d.concepts:
        try:
            images += [(path, inspect_image(path).size) for path in list_concept(concept).paths]
        except (DatasetError, OSError):
            return None  # said by check_dataset
    errors = [p for p in mask_problems(images, Path(d.mask_folder)) if p.severity == "error"]
    if not errors:
        return None
    lists = command_or_action("`studio-train check-dataset` lists them", "the Dataset page shows them")
    more = f" ({len(errors) - 1} more: {lists})" if len(errors) > 1 else ""
    return PreflightProblem("dataset", f"Loss mask {errors[0].path}: {errors[0].message}{more}; "
                                       f"{errors[0].hint}.")


def _nearest_existing(folder: Path) -> Path:
    while not folder.exists() and folder.parent != folder:
        folder = folder.parent
    return folder


def check_output(config: ResolvedConfig) -> list[PreflightProblem]:
    """The output folder can be written and its disk has room for the run."""
    folder = Path(config.output.dir)
    existing = _nearest_existing(folder)
    if not existing.is_dir():
        return [PreflightProblem("output", f"Output folder {folder} is inside a file ({existing}): set output.dir "
                                           "to a folder.")]
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".studio-write-test-"):
            pass
    except OSError as exc:
        return [PreflightProblem("output", f"Output folder {folder} cannot be written ({exc.strerror or exc} in "
                                           f"{existing}): set output.dir to a folder you may write to.")]
    needed, free = estimate_disk_bytes(config), shutil.disk_usage(existing).free
    if free < needed:
        return [PreflightProblem("disk", f"Not enough free disk for {folder}: the run needs about "
                                         f"{format_size(needed)} (checkpoints and outputs), {format_size(free)} "
                                         "free: free some space, keep fewer checkpoints (output.keep_last) or set "
                                         "output.dir to another disk.")]
    return []


def check_resume_disk(config: ResolvedConfig, run_dir: Path) -> str | None:
    """Why the disk of `run_dir` has too little room to resume it, or None."""
    try:
        free = shutil.disk_usage(run_dir).free
    except OSError:
        return None
    needed = resume_disk_bytes(config, run_dir)
    if free >= needed:
        return None
    return (f"Not enough free disk to resume {run_dir.name}: it still writes about {format_size(needed)} "
            f"(checkpoints and outputs), {format_size(free)} free on the disk of {run_dir}: free some space, "
            "then resume it again.")


def check_gpu_count(config: TrainConfig, gpu_count: int) -> PreflightProblem | None:
    """A GPU run starts one process per GPU: more processes on this machine than its GPUs would put
    several ranks on one card (each with the whole model), so it is refused before launch."""
    launch = config.launch
    here = -(-launch.num_processes // launch.num_machines)  # the processes each machine starts
    usable = gpu_count if launch.gpu_ids == "all" else min(gpu_count, len(launch.gpu_ids.split(",")))
    if here < usable and launch.gpu_ids != "all":
        # GPUs chosen by number and fewer processes than them: the cards past the processes stay idle.
        chosen = launch.gpu_ids.split(",")
        return PreflightProblem(
            "gpus_idle", f"launch.gpu_ids = \"{launch.gpu_ids}\" chooses {len(chosen)} GPUs, but launch.num_processes "
                         f"= {launch.num_processes} trains on {here} of them (GPU {', '.join(chosen[:here])}): set "
                         f"launch.num_processes to {usable * launch.num_machines} to train on all of them, or "
                         "launch.gpu_ids to the GPUs to train on.", can_confirm=True)
    if here <= usable:
        return None
    on = f"each of {launch.num_machines} machines" if launch.num_machines > 1 else "this machine"
    gpus = f"{usable} GPU{'s' if usable != 1 else ''}"
    if launch.gpu_ids != "all":
        gpus += f" (launch.gpu_ids = \"{launch.gpu_ids}\")"
    fewer = usable * launch.num_machines
    return PreflightProblem(
        "gpus", f"launch.num_processes = {launch.num_processes} starts {here} processes on {on}, which has "
                f"{gpus}: set launch.num_processes to {fewer}"
                + command_or_action(f" (or `studio-train run --processes {fewer}`), or export the run (`studio-train "
                                    f"export CONFIG --out DIR --gpus {here}`, or the Export page)",
                                    ", or export the run on the Export page")
                + f" for a machine with {here} GPUs.")


def check_gpu_ids(config: TrainConfig, report: HardwareReport) -> PreflightProblem | None:
    """launch.gpu_ids naming a GPU the machine lacks: CUDA would hide every card and the run would train on
    the CPU (hours for minutes), or on fewer GPUs than asked."""
    ids = config.launch.gpu_ids
    nvidia = [g for g in report.gpus if g.vendor == "nvidia"]
    if ids == "all" or config.launch.cpu or not nvidia:
        return None
    have = {g.index for g in nvidia}
    missing = [i for i in dict.fromkeys(int(part) for part in ids.split(",")) if i not in have]
    if not missing:
        return None
    names = ", ".join(f"{g.index} ({g.name})" for g in nvidia)
    gpus = f"GPU{'s' if len(missing) > 1 else ''} {', '.join(str(i) for i in missing)}"
    return PreflightProblem(
        "gpus", f"launch.gpu_ids = \"{ids}\" names {gpus}, which this machine does not have (its GPUs: {names}): "
                "set launch.gpu_ids to the GPUs to train on, or to \"all\".")


def check_vram(config: ResolvedConfig, gpu: GPUInfo) -> PreflightProblem | None:
    estimate = estimate_vram(config, gpu)
    if fit(estimate, gpu) != "does_not_fit":
        return None
    return PreflightProblem(
        "vram", f"The run needs about {estimate.total_gb:.1f} GB of GPU memory, GPU {gpu.index} ({gpu.name}) has "
                f"{gpu.free_mb / 1024:.1f} GB free: choose a preset that fits or apply the fixes on the Model & "
                "Preset page (it may still run out of memory if you go ahead).", can_confirm=True)


def check_ram(config: ResolvedConfig, gpu: GPUInfo | None, ram_mb: int) -> PreflightProblem | None:
    """The run's system memory (`estimate/ram_estimate.py`) against the machine's: refused over 95% of it (the
    system would swap or end the trainer), a warning over 80%."""
    try:
        found = ram_problem(config, gpu, ram_mb)
    except ArchitectureDataError:
        return None  # the VRAM check says the data is broken
    if found is None:
        return None
    verdict, message = found
    if verdict == "tight":
        return PreflightProblem("ram_tight", message, can_confirm=True)
    return PreflightProblem("ram", message)


def preflight_headless(config: ResolvedConfig) -> tuple[list[PreflightProblem], list[PreflightProblem]]:
    """(errors, warnings) for a run started with no one to ask (`studio-train run`, a remote machine).

    The GPU and the RAM are this machine's (or $STUDIO_HARDWARE's profile). Nobody can confirm there, so
    a VRAM estimate over the GPU and a RAM estimate near the machine's are warnings (the estimates may be
    cautious), and a model that is not downloaded and a run far over the machine's RAM are errors.
    """
    from studio.core.hardware.machine.probe import load_hardware

    report = load_hardware(disk_path=_nearest_existing(Path(config.output.dir)))
    gpu, gpu_count = report.run_gpus(config.launch)
    problems = [p for p in (check_gpu_ids(config, report),) if p is not None]
    problems += preflight(config, gpu, gpu_count=gpu_count, ram_mb=report.ram_mb)
    return ([p for p in problems if p.check not in HEADLESS_WARNINGS],
            [p for p in problems if p.check in HEADLESS_WARNINGS])

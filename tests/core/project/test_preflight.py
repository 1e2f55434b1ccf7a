"""The checks before a run: each problem is one line that says what, where and what to do."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest
from fixtures.checkpoints import SD15, SDXL, diffusers_folder, write_checkpoint
from PIL import Image

from studio.cli import EXIT_INVALID, main
from studio.core.config.files.paths import resolve_paths
from studio.core.config.files.toml_file import save_config
from studio.core.config.schema import TrainConfig
from studio.core.hardware.machine.probe import load_profile
from studio.core.project import preflight as preflight_module
from studio.core.project.folder import create_project
from studio.core.project.preflight import preflight

HUB_ID = "stable-diffusion-v1-5/stable-diffusion-v1-5"


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


def _cache_model(cache: Path, repo_id: str, components: tuple[str, ...]) -> Path:
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    index = {"_class_name": "StableDiffusionPipeline", "safety_checker": [None, None],
             **{name: ["diffusers", "X"] for name in ("unet", "vae", "text_encoder", "tokenizer", "scheduler")}}
    (snapshot / "model_index.json").write_text(json.dumps(index))
    for name in components:
        (snapshot / name).mkdir()
    return snapshot


def _project(tmp_path: Path, images: int = 2, base: str = HUB_ID, family: str = "sd15") -> tuple[TrainConfig, Path]:
    root = tmp_path / "project"
    (root / "10_shapes").mkdir(parents=True)
    for i in range(images):
        Image.new("RGB", (16, 16)).save(root / "10_shapes" / f"{i}.png")
    project = create_project(root)
    config = project.load_config()
    config.model.base, config.model.family = base, family  # type: ignore[assignment]
    project.save_config(config)
    return config, root


def _lines(config: TrainConfig, root: Path, **kwargs: Any) -> list[str]:
    return [str(p) for p in preflight(resolve_paths(config, root), **kwargs)]


def test_a_ready_project_passes(tmp_path: Path, hub_cache: Path) -> None:
    _cache_model(hub_cache, HUB_ID, ("unet", "vae", "text_encoder", "tokenizer", "scheduler"))
    config, root = _project(tmp_path)
    assert _lines(config, root) == []


def test_a_model_not_downloaded_says_how_to_get_it(tmp_path: Path, hub_cache: Path) -> None:
    config, root = _project(tmp_path)
    (problem,) = preflight(resolve_paths(config, root))
    assert problem.message == (
        f"Base model {HUB_ID} is not on this machine: download it first with `studio-train download {HUB_ID}` "
        "(about 4.3 GB) (or press Train in the studio, which offers to), or choose a model folder or file.")
    assert problem.can_confirm and problem.download == HUB_ID



def test_a_local_looking_base_is_never_offered_as_a_download(tmp_path: Path, hub_cache: Path) -> None:
    config, root = _project(tmp_path)
    config.model.base = "models/tiny-sd15"  # the demo's model, not built yet: a path, not the hub's "models" org
    (problem,) = preflight(resolve_paths(config, root))
    assert problem.download is None and not problem.can_confirm
    assert problem.message == (
        f"The demo's tiny model is not built yet ({root / 'models/tiny-sd15'}): it is built with the training "
        "environment's PyTorch; set that up in Tools → Training Environment, then press Train again.")
    for base in ("models/my-model", "./my-model", str(tmp_path / "elsewhere")):
        config.model.base = base
        (problem,) = preflight(resolve_paths(config, root))
        assert problem.download is None and "does not exist" in problem.message, base


def test_a_cached_model_whose_weights_link_outside_the_cache_is_not_trained(tmp_path: Path, hub_cache: Path) -> None:
    snapshot = _cache_model(hub_cache, HUB_ID, ("unet", "vae", "text_encoder", "tokenizer", "scheduler"))
    planted = tmp_path / "planted.safetensors"  # what a hostile hub's answer once wrote beside the cache
    planted.write_bytes(b"not the model")
    (snapshot / "unet" / "diffusion_pytorch_model.safetensors").symlink_to(planted)
    config, root = _project(tmp_path)
    storage = snapshot.parents[1]
    assert _lines(config, root) == [
        f"The cached {HUB_ID} cannot be trusted: unet/diffusion_pytorch_model.safetensors links outside the cache "
        f"folder {storage}, to {planted}. Delete the cache folder {storage} and download the model again; if it "
        "comes back the same way, check HF_ENDPOINT and the network's proxy."]
    (snapshot / "unet" / "diffusion_pytorch_model.safetensors").unlink()
    (storage / "refs" / "main").write_text("../../../elsewhere")  # a ref that names a folder outside
    (tmp_path / "elsewhere").mkdir()
    assert _lines(config, root)[0].startswith(f"Base model {HUB_ID} is not on this machine")


def test_a_cached_model_with_a_weight_file_cut_short_names_it(tmp_path: Path, hub_cache: Path) -> None:
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    import numpy as np

    snapshot = _cache_model(hub_cache, HUB_ID, ("unet", "vae", "text_encoder", "tokenizer", "scheduler"))
    file = snapshot / "text_encoder" / "model.safetensors"
    safetensors_numpy.save_file({"w": np.ones((64, 64), np.float32)}, str(file))
    config, root = _project(tmp_path)
    assert _lines(config, root) == []
    size = file.stat().st_size
    file.write_bytes(file.read_bytes()[: size // 2])  # a download cut off
    assert _lines(config, root) == [
        f"The cached {HUB_ID} cannot be trained from: {file} is cut short: it holds {size // 2:,} bytes, its header "
        f"says {size:,}. Delete the cache folder {snapshot.parents[1]} and download the model again."]


def test_a_partly_downloaded_model_names_what_it_lacks(tmp_path: Path, hub_cache: Path) -> None:
    _cache_model(hub_cache, HUB_ID, ("unet", "tokenizer", "scheduler"))
    config, root = _project(tmp_path)
    assert _lines(config, root)[0].startswith(f"Base model {HUB_ID} lacks vae/, text_encoder/: download it first")


def test_local_models_missing_damaged_or_of_another_family(tmp_path: Path, hub_cache: Path) -> None:
    config, root = _project(tmp_path, base="models/gone.safetensors")
    assert _lines(config, root) == [f"Base model {root / 'models/gone.safetensors'} does not exist: check "
                                    "model.base (a diffusers folder, a .safetensors file or a hub id like org/name) "
                                    "or choose one on the Model & Preset page."]
    write_checkpoint(root / "xl.safetensors", SDXL)
    config.model.base = "xl.safetensors"
    assert _lines(config, root) == ['Base model xl.safetensors is an SDXL base checkpoint (SDXL) but model.family '
                                    'is sd15: set model.family = "sdxl" or choose another model.']
    (root / "cut.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{")
    config.model.base = "cut.safetensors"
    assert "is cut short" in _lines(config, root)[0]
    write_checkpoint(root / "ok.safetensors", SD15)
    config.model.base = "ok.safetensors"
    assert _lines(config, root) == []


def test_an_empty_dataset_and_a_missing_folder(tmp_path: Path, hub_cache: Path) -> None:
    write_checkpoint(tmp_path / "m.safetensors", SD15)
    config, root = _project(tmp_path, images=0, base=str(tmp_path / "m.safetensors"))
    assert _lines(config, root) == [
        f"The dataset has no images ({root / 'images'}): add .png, .jpg, .webp or .bmp files, or point "
        "dataset.concepts at your image folder on the Dataset page."]
    config.dataset.concepts[0].path = "nothere"
    assert _lines(config, root)[0].startswith(f"Image folder {root / 'nothere'} does not exist.")


def test_a_loss_mask_of_another_shape_is_named_before_the_run(tmp_path: Path, hub_cache: Path) -> None:
    write_checkpoint(tmp_path / "m.safetensors", SD15)
    config, root = _project(tmp_path, images=2, base=str(tmp_path / "m.safetensors"))
    config.dataset.masks, config.dataset.mask_folder = "folder", "masks"
    (root / "masks").mkdir()
    Image.new("L", (16, 16), 255).save(root / "masks" / "0.png")
    Image.new("L", (16, 8), 255).save(root / "masks" / "1.png")
    assert _lines(config, root) == [
        f"Loss mask {root / 'masks' / '1.png'}: the mask is 16x8 but its image 1.png is 16x16: stretched to fit, it "
        "would not line up with the picture; save the mask at 16x16, the size of 1.png."]
    Image.new("L", (8, 8), 255).save(root / "masks" / "1.png")  # half size, same shape: scaled
    assert _lines(config, root) == []


@pytest.mark.skipif(os.name == "nt" or os.geteuid() == 0, reason="needs POSIX permissions, not root")
def test_an_output_folder_that_cannot_be_written(tmp_path: Path, hub_cache: Path) -> None:
    write_checkpoint(tmp_path / "m.safetensors", SD15)
    config, root = _project(tmp_path, base=str(tmp_path / "m.safetensors"))
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    config.output.dir = str(locked / "runs")
    try:
        assert _lines(config, root)[0].startswith(f"Output folder {locked / 'runs'} cannot be written")
    finally:
        locked.chmod(stat.S_IRWXU)


def test_an_output_folder_inside_a_file(tmp_path: Path, hub_cache: Path) -> None:
    write_checkpoint(tmp_path / "m.safetensors", SD15)
    config, root = _project(tmp_path, base=str(tmp_path / "m.safetensors"))
    config.output.dir = "m.txt/runs"
    (root / "m.txt").write_text("")
    assert _lines(config, root) == [f"Output folder {root / 'm.txt/runs'} is inside a file ({root / 'm.txt'}): "
                                    "set output.dir to a folder."]


def test_a_full_disk_names_the_room_needed(tmp_path: Path, hub_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_checkpoint(tmp_path / "m.safetensors", SD15)
    config, root = _project(tmp_path, base=str(tmp_path / "m.safetensors"))
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: shutil._ntuple_diskusage(100 * 2**30, 100 * 2**30, 2**20))  # type: ignore[attr-defined]
    (line,) = _lines(config, root)
    assert line == (f"Not enough free disk for {root / 'runs'}: the run needs about 55 MB (checkpoints and "
                    "outputs), 1 MB free: free some space, keep fewer checkpoints (output.keep_last) or set "
                    "output.dir to another disk.")


def test_sizes_below_a_gigabyte_are_shown_in_megabytes() -> None:
    from studio.core.project.disk_estimate import format_size

    assert [format_size(n) for n in (24 * 2**20, 2**19, 1023 * 2**20, 3 * 2**30 // 2)] == [
        "24 MB", "0.5 MB", "1,023 MB", "1.5 GB"]


def test_a_run_too_big_for_the_gpu_can_be_confirmed(tmp_path: Path, hub_cache: Path) -> None:
    write_checkpoint(tmp_path / "xl.safetensors", SDXL)
    config, root = _project(tmp_path, base=str(tmp_path / "xl.safetensors"), family="sdxl")
    config.method.kind = "dreambooth"
    config.dataset.resolution = 1024
    gpu = load_profile("rtx3060-12gb").gpus[0]
    (problem,) = preflight(resolve_paths(config, root), gpu, check_torch=False)
    assert problem.check == "vram" and problem.can_confirm
    assert problem.message.startswith("The run needs about ") and "GPU 0 (NVIDIA GeForce RTX 3060)" in problem.message


@pytest.mark.skipif(os.name == "nt", reason="a shell script stands in for the training interpreter")
def test_a_training_python_without_cuda_on_a_gpu_machine(tmp_path: Path, hub_cache: Path) -> None:
    write_checkpoint(tmp_path / "m.safetensors", SD15)
    config, root = _project(tmp_path, base=str(tmp_path / "m.safetensors"))
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'STUDIO_TORCH_PROBE [\"2.5.1+cpu\", false, \"/no/such/torch/__init__.py\", []]'\n")
    fake.chmod(0o755)
    config.launch.python = str(fake)
    gpu = load_profile("rtx4090-24gb").gpus[0]
    assert _lines(config, root, gpu=gpu) == [
        f"torch 2.5.1+cpu in {fake} cannot use the GPU (a build without CUDA): install a CUDA build of torch "
        "(see pytorch.org), or set launch.cpu = true to train on the CPU."]
    fake.write_text("#!/bin/sh\nexit 1\n")
    assert "has no torch" in _lines(config, root, gpu=gpu)[0]
    config.launch.cpu = True
    assert _lines(config, root, gpu=gpu) == []


def _run_cli(config: TrainConfig, root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    save_config(config, root / "studio.toml")
    code = main(["run", str(root / "studio.toml")])
    return code, capsys.readouterr().err


def test_studio_train_run_exits_2_before_starting_anything(
    tmp_path: Path, hub_cache: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    started: list[Any] = []
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a))
    config, root = _project(tmp_path)
    code, err = _run_cli(config, root, capsys)
    assert code == EXIT_INVALID and err == f"error: Base model {HUB_ID} is not on this machine: download it " \
        f"first with `studio-train download {HUB_ID}` (about 4.3 GB) (or press Train in the studio, which " \
        "offers to), or choose a model folder or file.\n"
    write_checkpoint(tmp_path / "m.safetensors", SD15)
    config.model.base = str(tmp_path / "m.safetensors")
    for image in (root / "10_shapes").iterdir():
        image.unlink()
    code, err = _run_cli(config, root, capsys)
    assert code == EXIT_INVALID and err.count("\n") == 1 and err.startswith("error: The dataset has no images")
    Image.new("RGB", (16, 16)).save(root / "10_shapes" / "a.png")
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: shutil._ntuple_diskusage(2**40, 2**40, 0))  # type: ignore[attr-defined]
    code, err = _run_cli(config, root, capsys)
    assert code == EXIT_INVALID and err.count("\n") == 1 and err.startswith("error: Not enough free disk for")
    assert started == [] and list((root / "runs").iterdir()) == []  # no run folder was made
    assert "Traceback" not in err


def test_a_small_model_of_the_project_is_checked_against_the_gpu_at_its_own_size(tmp_path: Path,
                                                                                   hub_cache: Path) -> None:
    import dataclasses

    config, root = _project(tmp_path)
    diffusers_folder(root / "models" / "my-model", 800_000)  # a tiny SD1.5 by its headers
    config.model.base = "models/my-model"  # relative to the project, as the demo writes its model
    gpu = dataclasses.replace(load_profile("rtx3060-12gb").gpus[0], total_mb=3072, free_mb=3072)
    assert [p.check for p in preflight(resolve_paths(config, root), gpu, check_torch=False)] == []
    config.model.base = HUB_ID  # the full-size model does not fit 3 GB
    _cache_model(hub_cache, HUB_ID, ("unet", "vae", "text_encoder", "tokenizer", "scheduler"))
    assert [p.check for p in preflight(resolve_paths(config, root), gpu, check_torch=False)] == ["vram"]


def test_more_processes_than_gpus_is_refused_with_the_fix(tmp_path: Path, hub_cache: Path) -> None:
    write_checkpoint(tmp_path / "m.safetensors", SD15)
    config, root = _project(tmp_path, base=str(tmp_path / "m.safetensors"))
    one = load_profile("rtx4090-24gb")
    config.launch.num_processes = 8
    (problem,) = [p for p in preflight(resolve_paths(config, root), one.gpus[0], check_torch=False, gpu_count=len(one.gpus))
                  if p.check == "gpus"]
    assert not problem.can_confirm
    assert problem.message == (
        "launch.num_processes = 8 starts 8 processes on this machine, which has 1 GPU: set launch.num_processes to "
        "1 (or `studio-train run --processes 1`), or export the run (`studio-train export CONFIG --out DIR --gpus "
        "8`, or the Export page) for a machine with 8 GPUs.")
    eight = load_profile("8x-h100-80gb")
    assert [p.check for p in preflight(resolve_paths(config, root), eight.gpus[0], check_torch=False,
                                       gpu_count=len(eight.gpus))] == []
    config.launch.gpu_ids = "0,1"  # two of the eight cards chosen
    assert "which has 2 GPUs (launch.gpu_ids = \"0,1\"): set launch.num_processes to 2" in \
        _lines(config, root, gpu=eight.gpus[0], check_torch=False, gpu_count=8)[0]
    config.launch.num_processes = 1  # two cards chosen, one process: the second card would stay idle
    (idle,) = [p for p in preflight(resolve_paths(config, root), eight.gpus[0], check_torch=False, gpu_count=8)
               if p.check == "gpus_idle"]
    assert idle.can_confirm and idle.message == (
        "launch.gpu_ids = \"0,1\" chooses 2 GPUs, but launch.num_processes = 1 trains on 1 of them (GPU 0): set "
        "launch.num_processes to 2 to train on all of them, or launch.gpu_ids to the GPUs to train on.")
    config.launch.gpu_ids = "all"  # every card of the machine offered: one process is a plain one-GPU run
    assert _lines(config, root, gpu=eight.gpus[0], check_torch=False, gpu_count=8) == []
    config.launch.num_processes, config.launch.gpu_ids = 8, "0,1"
    config.launch.cpu = True  # CPU ranks (gloo) are not GPUs
    assert _lines(config, root, gpu=one.gpus[0], check_torch=False, gpu_count=1) == []


def test_studio_train_run_refuses_more_ranks_than_the_hardware_report_has_gpus(
    tmp_path: Path, hub_cache: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    started: list[Any] = []
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a))
    monkeypatch.setenv("STUDIO_HARDWARE", "2x-rtx3090")
    monkeypatch.setattr(preflight_module, "check_torch_cuda", lambda _python: None)  # this machine has no CUDA
    write_checkpoint(tmp_path / "m.safetensors", SD15)
    config, root = _project(tmp_path, base=str(tmp_path / "m.safetensors"))
    save_config(config, root / "studio.toml")
    code = main(["run", str(root / "studio.toml"), "--processes", "4"])
    err = capsys.readouterr().err
    assert code == EXIT_INVALID and "error: launch.num_processes = 4 starts 4 processes on this machine, which has " \
        "2 GPUs: set launch.num_processes to 2 (or `studio-train run --processes 2`)" in err
    assert started == [] and list((root / "runs").glob("*")) == []  # nothing launched, no run folder


def test_a_mac_trains_on_the_cpu_and_is_not_told_to_install_cuda(tmp_path: Path, hub_cache: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The studio trains on NVIDIA GPUs through CUDA: a Mac's Apple GPU is not one, so Train is not refused
    with "install a CUDA build of torch" (there is none for a Mac), its memory is not checked as a card's,
    and the RAM the run needs is counted as a CPU run's (everything in system memory)."""
    from studio.core.hardware.report import GPUInfo

    write_checkpoint(tmp_path / "m.safetensors", SD15)
    config, root = _project(tmp_path, base=str(tmp_path / "m.safetensors"))
    asked: list[Any] = []
    monkeypatch.setattr(preflight_module, "check_torch_cuda", lambda python: asked.append(python))
    monkeypatch.setattr(preflight_module, "check_ram", lambda config, gpu, ram_mb: asked.append(gpu))
    apple = GPUInfo(index=0, name="Apple M3 Max", total_mb=48 * 1024, free_mb=48 * 1024, vendor="apple",
                    unified_memory=True)
    assert preflight(resolve_paths(config, root), apple, gpu_count=1, ram_mb=48 * 1024) == []
    assert asked == [None]  # the RAM check, for a run on the CPU; no CUDA asked for
    nvidia = load_profile("rtx4090-24gb").gpus[0]
    asked.clear()
    assert preflight(resolve_paths(config, root), nvidia, gpu_count=1, ram_mb=64 * 1024) == []
    assert asked == [nvidia, None]  # the RAM check for a GPU run, then the training Python's CUDA
    config.launch.cpu = True
    asked.clear()
    assert preflight(resolve_paths(config, root), nvidia, gpu_count=1, ram_mb=64 * 1024) == []
    assert asked == [None]  # launch.cpu: a CPU run on a GPU machine


def test_the_run_is_held_against_the_gpu_launch_gpu_ids_chooses(
    tmp_path: Path, hub_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A workstation with a 4090 in the first slot and a 3 GB card in the second: the estimate is held against
    the card the run trains on, and a GPU number the machine lacks is refused (CUDA would hide every card and
    the run would train on the CPU)."""
    from studio.core.project.preflight import preflight_headless

    big = {"index": 0, "name": "NVIDIA GeForce RTX 4090", "total_mb": 24564}
    small = {"index": 1, "name": "NVIDIA GeForce GTX 1060 3GB", "total_mb": 3072}
    profile = tmp_path / "mixed.json"
    profile.write_text(json.dumps({"gpus": [big, small], "ram_mb": 65536}))
    monkeypatch.setenv("STUDIO_HARDWARE", str(profile))
    monkeypatch.setattr(preflight_module, "check_torch_cuda", lambda _python: None)  # this machine has no CUDA
    _cache_model(hub_cache, HUB_ID, ("unet", "vae", "text_encoder", "tokenizer", "scheduler"))
    config, root = _project(tmp_path)

    def checks(gpu_ids: str, processes: int = 1) -> tuple[list[str], list[str]]:
        config.launch.gpu_ids, config.launch.num_processes = gpu_ids, processes
        errors, warnings = preflight_headless(resolve_paths(config, root))
        return [p.message for p in errors], [p.check for p in warnings]

    assert checks("all") == ([], [])  # one process: the first GPU, the 4090
    assert checks("0") == ([], [])
    assert checks("1")[1] == ["vram"]  # the 3 GB card, not the 4090
    assert checks("all", processes=2)[1] == ["vram"]  # the second rank trains on the 3 GB card
    assert checks("1,0")[1] == ["gpus_idle", "vram"]  # one process trains on the first GPU listed, GPU 0 idles
    assert checks("1,0", processes=2)[1] == ["vram"]  # both cards train; the 3 GB one is too small
    errors, _ = checks("2")
    assert errors == ["launch.gpu_ids = \"2\" names GPU 2, which this machine does not have (its GPUs: 0 (NVIDIA "
                      "GeForce RTX 4090), 1 (NVIDIA GeForce GTX 1060 3GB)): set launch.gpu_ids to the GPUs to train "
                      "on, or to \"all\"."]
    config.launch.cpu = True  # a CPU run uses no GPU number
    assert checks("2") == ([], [])


@pytest.mark.skipif(os.name == "nt", reason="the stand-in interpreter is a shell script")
def test_a_python_with_torch_but_not_the_trainer_is_named_before_the_launch(tmp_path: Path) -> None:
    """launch.python set to another program's environment (a ComfyUI or kohya venv): its torch sees the GPU, but
    the trainer started there ended at once with "No module named 'studio'". The check says what is missing,
    whatever folder the studio itself was started from (a source checkout holds a `studio` of its own)."""
    import sys

    stub = tmp_path / "other-env-site"
    stub.mkdir()
    (stub / "torch.py").write_text("__version__ = '2.9.0+cu128'\nclass cuda:\n    is_available = staticmethod("
                                   "lambda: True)\n")
    python = tmp_path / "other-env-python"
    # -S: none of this test's site-packages (the studio, accelerate...); only the stand-in torch.
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{stub}" exec "{sys.executable}" -S "$@"\n')
    python.chmod(0o755)
    problem = preflight_module.check_torch_cuda(str(python))
    assert problem is not None and problem.check == "torch"
    assert problem.message.startswith(f"The training interpreter {python} lacks studio, accelerate, diffusers, "
                                      "transformers, peft, safetensors, which the trainer needs"), problem
    assert "remove launch.python" in problem.message


@pytest.mark.skipif(os.name == "nt", reason="the stand-in interpreter is a shell script")
def test_a_damaged_studio_environment_is_answered_with_its_repair(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The training environment the studio set up, with its torch gone or broken (an antivirus that took a DLL):
    the fix is the studio's Repair, not a pip command in a Python the desktop app's person never sees."""
    from studio.core.training_python import READY_FILE, env_python

    folder = tmp_path / "training-env"
    python = env_python(folder)
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\necho 'ImportError: DLL load failed while importing _C' >&2\nexit 1\n")
    python.chmod(0o755)
    (folder / READY_FILE).write_text("{}")
    monkeypatch.setenv("STUDIO_TRAINING_ENV", str(folder))
    problem = preflight_module.check_torch_cuda(None)
    assert problem is not None and problem.message == (
        f"The training interpreter {python} has no torch: repair the training environment (`studio-train env "
        "repair`, or Repair in Tools → Training Environment).")
    # launch.python naming that same Python is the person's own choice: pip is the words there.
    assert "pip install" in str(preflight_module.check_torch_cuda(str(python)))


def test_sample_prompts_the_encoder_would_misread_are_named_before_the_run(tmp_path: Path, hub_cache: Path) -> None:
    _cache_model(hub_cache, HUB_ID, ("unet", "vae", "text_encoder", "tokenizer", "scheduler"))
    config, root = _project(tmp_path)
    config.sampling.every_n_steps = 100
    # A line with its own settings, as other trainers' prompt files write them (drawn as its settings, not its
    # words), a prompt of a hundred words, and a plain one (a dash in the words is no option).
    config.sampling.prompts = ["a red circle", "a cat --n blurry, low quality --w 768 --h 512 --d 42 --l 6",
                               " ".join(["word"] * 100), "a blue square -- on grass"]
    (problem,) = preflight(resolve_paths(config, root))
    assert problem.check == "sample_prompts" and problem.can_confirm and problem.question == "Sample prompts"
    assert problem.message == (
        "Sample prompt 3 is longer than the 75 tokens CLIP reads: the samples ignore the rest. Shorten "
        "them or put the important words first.")
    # The tokens are counted on the words alone: a long negative prompt after --n is not the prompt's.
    config.sampling.prompts += ["a dog --n " + " ".join(["cat"] * 80), " ".join(["long"] * 80)]
    (problem,) = preflight(resolve_paths(config, root))
    assert problem.message.startswith("Sample prompts 3 and 6 are longer than the 75 tokens CLIP reads")
    config.sampling.prompts = ["(masterpiece:1.2), a cat <lora:style:0.8>", "a cat (sitting), 2:1 ratio"]
    (problem,) = preflight(resolve_paths(config, root))
    assert problem.message == (
        "Sample prompt 1 holds (masterpiece:1.2), <lora:style:0.8>: weights and LoRA tags of other programs' "
        "prompts, which the samples read as plain words (what is trained is always drawn at its full "
        "strength). Write the words alone.")
    config.sampling.every_n_steps = 0  # no samples: the prompts are never read
    assert _lines(config, root) == []


def test_studio_train_run_says_odd_sample_prompts_and_starts(tmp_path: Path, hub_cache: Path) -> None:
    from studio.core.project.preflight import preflight_headless

    _cache_model(hub_cache, HUB_ID, ("unet", "vae", "text_encoder", "tokenizer", "scheduler"))
    config, root = _project(tmp_path)
    config.sampling.every_n_steps, config.sampling.prompts = 10, ["a (cat:1.2) --n dog"]
    errors, warnings = preflight_headless(resolve_paths(config, root))
    assert errors == [] and [w.check for w in warnings] == ["sample_prompts"]

"""The bundle on disk: relative paths, no secrets, dataset or manifest, scripts, zip."""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import zipfile
from pathlib import Path

import pytest

from studio.core.config.files.paths import load_resolved
from studio.core.config.files.toml_file import load_config, save_config
from studio.core.export.bundle import ExportError, export_bundle
from studio.core.export.bundle_files import installed_version
from studio.core.project.folder import Project

# These check the bundle against the packages of the environment running the tests; the
# core-only environment (no torch) has none of them to pin or find.
needs_training_packages = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="needs the training packages installed"
)


TEXT_FILES = ("config.toml", "README.md", "launch.sh", "check.sh", "bundle.json", "Dockerfile",
              "requirements.txt", "accelerate/single_node.yaml", "accelerate/multi_node.yaml")


def test_exported_config_has_no_local_path_and_resolves_inside_the_bundle(demo: Project, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    report = export_bundle(demo.config_path, out, gpus=2, include_model=True)

    for name in TEXT_FILES:
        text = (out / name).read_text(encoding="utf-8")
        assert str(demo.root) not in text, name
        assert str(tmp_path) not in text, name
        assert str(Path.home()) + "/" not in text, name
    config = load_resolved(out / "config.toml")
    assert Path(config.model.base) == out / "model" / "tiny-sd15"
    assert Path(config.dataset.concepts[0].path) == out / "dataset" / "shapes"
    assert Path(config.output.dir) == out / "runs"
    assert config.launch.python is None
    assert (out / "model" / "tiny-sd15" / "model_index.json").is_file()
    assert report.command == "./launch.sh --check"


def test_only_images_captions_and_metadata_go_in_and_links_out_are_not_followed(demo: Project, tmp_path: Path) -> None:
    shapes = demo.root / "data" / "shapes"
    pictures = sorted(p.name for p in shapes.iterdir())
    (shapes / "notes.txt").write_text("hf_" + "a" * 30 + " my token", encoding="utf-8")  # no image of that name
    (shapes / "private").mkdir()
    (shapes / "private" / "creds.txt").write_text("password=hunter2", encoding="utf-8")
    secret = tmp_path / "home" / ".bashrc"
    secret.parent.mkdir()
    secret.write_text("export API_KEY=abc", encoding="utf-8")
    (shapes / "extra.png").symlink_to(secret)  # looks like an image, leads to the shell rc file
    (shapes / "extra.txt").write_text("a caption", encoding="utf-8")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "img.png").write_bytes((shapes / pictures[0]).read_bytes())
    (shapes / "linked").symlink_to(outside, target_is_directory=True)

    out = tmp_path / "bundle"
    report = export_bundle(demo.config_path, out, include_model=True)
    copied = sorted(p.relative_to(out / "dataset" / "shapes").as_posix()
                    for p in (out / "dataset" / "shapes").rglob("*") if p.is_file())
    assert copied == pictures  # the demo's images and captions, nothing else
    for text in ("hunter2", "my token", "API_KEY"):
        assert not any(text in p.read_text(errors="replace") for p in out.rglob("*") if p.is_file()
                       and p.suffix in (".txt", ".png", ".json", "")), text
    skipped = {entry["path"]: entry["reason"] for entry in json.loads((out / "dataset" / "manifest.json").read_text())["skipped"]}
    assert set(skipped) >= {"shapes/notes.txt", "shapes/private/creds.txt", "shapes/extra.png", "shapes/linked"}
    assert "link out of the dataset folder" in skipped["shapes/extra.png"]
    assert any("left out" in w and "shapes/notes.txt" in w for w in report.warnings)
    assert "shapes/notes.txt" in report.summary() and "manifest.json lists each" in report.summary()
    assert any(line.startswith("shapes/private/creds.txt: not an image") for line in report.skipped)


def test_dataset_is_copied_with_a_manifest_of_sizes_and_hashes(demo: Project, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    export_bundle(demo.config_path, out, include_model=True)
    manifest = json.loads((out / "dataset" / "manifest.json").read_text())
    source = sorted((demo.root / "data" / "shapes").iterdir())
    assert [e["path"] for e in manifest["files"]] == [f"shapes/{p.name}" for p in source]
    first = manifest["files"][0]
    copied = out / "dataset" / first["path"]
    assert copied.read_bytes() == source[0].read_bytes()
    assert first["size"] == source[0].stat().st_size
    import hashlib
    assert first["sha256"] == hashlib.sha256(source[0].read_bytes()).hexdigest()


def test_manifest_only_leaves_the_images_out_and_says_so(demo: Project, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    report = export_bundle(demo.config_path, out, include_dataset=False, include_model=True)
    assert [p.name for p in (out / "dataset").iterdir()] == ["manifest.json"]
    assert report.dataset_files == 48 and not report.dataset_included
    assert "The dataset is not inside" in (out / "README.md").read_text()


def test_remote_dataset_path_is_written_as_given(demo: Project, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    export_bundle(demo.config_path, out, include_dataset=False, remote_dataset="/workspace/data",
                  remote_base="/workspace/models/tiny")
    config = load_config(out / "config.toml")
    assert config.dataset.concepts[0].path == "/workspace/data/shapes"
    assert config.model.base == "/workspace/models/tiny"
    assert json.loads((out / "bundle.json").read_text())["base_model"] == {
        "kind": "remote", "value": "/workspace/models/tiny"}


def test_a_local_model_needs_a_remote_path_or_a_copy(demo: Project, tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"--include-model.*--remote-base") as err:
        export_bundle(demo.config_path, tmp_path / "bundle")
    assert "tiny-sd15" in str(err.value)
    assert not (tmp_path / "bundle").exists()


def test_hub_ids_stay_and_remote_base_replaces_the_model(demo: Project, tmp_path: Path) -> None:
    export_bundle(demo.config_path, tmp_path / "a", remote_base="org/some-model")
    assert load_config(tmp_path / "a" / "config.toml").model.base == "org/some-model"
    config = demo.load_config()
    config.model.base = "stabilityai/stable-diffusion-xl-base-1.0"
    config.model.family = "sdxl"
    save_config(config, demo.config_path)
    report = export_bundle(demo.config_path, tmp_path / "b")
    assert report.base_kind == "hub"
    assert "HF_TOKEN" in (tmp_path / "b" / "README.md").read_text()


def test_a_token_in_the_config_stops_the_export(demo: Project, tmp_path: Path) -> None:
    config = demo.load_config()
    config.sampling.prompts = ["a cat", "hf_abcdefghijklmnopqrstuvwxyz123456"]
    save_config(config, demo.config_path)
    with pytest.raises(ExportError, match=r"sampling\.prompts\[1\].*HF_TOKEN") as err:
        export_bundle(demo.config_path, tmp_path / "bundle", include_model=True)
    assert "hf_abcdefghij" not in str(err.value)


def test_steps_scale_so_the_run_sees_the_same_images(demo: Project, tmp_path: Path) -> None:
    report = export_bundle(demo.config_path, tmp_path / "b", gpus=2, nodes=2, include_model=True)
    config = load_config(tmp_path / "b" / "config.toml")
    assert (report.original_steps, report.steps) == (60, 15)
    assert config.training.max_steps == 15
    assert config.sampling.every_n_steps == 5 and config.output.save_every_n_steps == 5
    assert report.effective_batch == 16
    assert "= **16** images per optimizer step" in (tmp_path / "b" / "README.md").read_text()
    kept = export_bundle(demo.config_path, tmp_path / "k", gpus=2, include_model=True, keep_steps=True)
    assert kept.steps == 60


def test_a_warm_up_and_the_validation_interval_shrink_with_the_steps(demo: Project, tmp_path: Path) -> None:
    # On four times the GPUs a warm-up of 1 step became 0, and the validation loss was measured every 8 of the
    # fewer, larger steps: a quarter as often.
    config = load_config(demo.config_path)
    config.training.lr_scheduler, config.training.lr_warmup_steps = "linear", 1
    config.dataset.validation_fraction, config.training.validation_every = 0.25, 8
    save_config(config, demo.config_path)
    export_bundle(demo.config_path, tmp_path / "b", gpus=2, nodes=2, include_model=True)
    scaled = load_config(tmp_path / "b" / "config.toml").training
    assert (scaled.max_steps, scaled.lr_warmup_steps, scaled.validation_every) == (15, 1, 2)


def test_accelerate_configs_for_one_and_several_nodes(demo: Project, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    export_bundle(demo.config_path, out, gpus=4, nodes=3, include_model=True, main_address="10.0.0.5", port=29555)
    single = (out / "accelerate" / "single_node.yaml").read_text()
    multi = (out / "accelerate" / "multi_node.yaml").read_text()
    assert "num_processes: 4\n" in single and "num_machines: 1\n" in single
    assert "num_processes: 12\n" in multi and "num_machines: 3\n" in multi
    assert "main_process_ip: '10.0.0.5'" in multi and "main_process_port: 29555" in multi
    assert "distributed_type: 'MULTI_GPU'" in multi
    launch = (out / "launch.sh").read_text()
    assert 'GPUS_PER_NODE="${GPUS_PER_NODE:-4}"' in launch and 'NUM_MACHINES="${NUM_MACHINES:-3}"' in launch
    assert "torchrun --standalone --nproc_per_node" in launch and "NCCL_DEBUG=INFO" in launch


@needs_training_packages
def test_requirements_are_pinned_to_this_environment(demo: Project, tmp_path: Path) -> None:
    export_bundle(demo.config_path, tmp_path / "b", include_model=True)
    lines = (tmp_path / "b" / "requirements.txt").read_text().splitlines()
    assert f"accelerate=={installed_version('accelerate')}" in lines
    torch = next(line for line in lines if line.startswith("torch=="))
    assert "+" not in torch
    dockerfile = (tmp_path / "b" / "Dockerfile").read_text()
    assert f"pytorch/pytorch:{torch.split('==')[1]}-cuda" in dockerfile
    assert not any(line.startswith("bitsandbytes") for line in lines)


def test_a_quantized_base_brings_bitsandbytes_to_the_remote_machine() -> None:
    from studio.core.export.bundle_files import pinned_requirements

    for optimizer in ("adamw", "adamw8bit"):  # once, whether the optimizer asks for it too or not
        lines = pinned_requirements(optimizer, "nf4").splitlines()
        assert len([line for line in lines if line.startswith("bitsandbytes")]) == 1


def test_every_package_the_trainer_imports_is_in_the_requirements() -> None:
    # The trainer's modules import orjson (the model files' header reader), which requirements.txt did not
    # list: on a fresh cloud machine the run stopped at "No module named 'orjson'" after the setup was paid for.
    import ast
    import importlib.metadata
    import sys

    from studio.core.export.bundle_files import pinned_requirements
    from studio.core.resources import app_root

    listed = {line.split("==")[0].split()[0].lower() for line in pinned_requirements("adamw").splitlines()
              if line and not line.startswith("#")}
    owners = importlib.metadata.packages_distributions()
    missing = set()
    for folder in ("train", "core"):
        for path in (app_root() / "studio" / folder).rglob("*.py"):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:  # what importing the module needs
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for top in {name.split(".")[0] for name in names} - set(sys.stdlib_module_names):
                    if top not in ("studio", "__future__"):
                        missing |= {d.lower() for d in owners.get(top, [top])} - listed
    assert missing == set()


def test_the_trainer_source_travels_without_the_gui(demo: Project, tmp_path: Path) -> None:
    export_bundle(demo.config_path, tmp_path / "b", include_model=True)
    src = tmp_path / "b" / "src"
    assert (src / "studio" / "train" / "__main__.py").is_file()
    assert (src / "studio" / "core" / "export" / "start_run.py").is_file()
    assert (src / "resources" / "architectures").is_dir()
    assert not (src / "studio" / "gui").exists()
    assert not list(src.rglob("__pycache__"))


def test_scripts_are_executable_and_the_zip_keeps_their_mode(demo: Project, tmp_path: Path) -> None:
    report = export_bundle(demo.config_path, tmp_path / "b", include_model=True, zip=True)
    for script in ("launch.sh", "check.sh", "studio_check.py"):
        assert os.access(tmp_path / "b" / script, os.X_OK)
    assert report.zip_path == tmp_path / "b.zip"
    with zipfile.ZipFile(report.zip_path) as archive:
        info = archive.getinfo("b/launch.sh")
        assert stat.S_IMODE(info.external_attr >> 16) & 0o100
        assert "b/runs/" in archive.namelist()
        assert "b/dataset/manifest.json" in archive.namelist()


def test_the_zip_made_where_files_have_no_executable_bit_still_runs_its_scripts(demo: Project, tmp_path: Path) -> None:
    # On Windows the scripts have no executable bit and the zip's entries were MS-DOS ones: unpacked on the
    # rented Linux machine, `./launch.sh --check` said "Permission denied".
    from studio.core.export.bundle import zip_bundle

    export_bundle(demo.config_path, tmp_path / "b", include_model=True)
    for path in (tmp_path / "b").rglob("*"):
        if path.is_file():
            path.chmod(0o644)
    with zipfile.ZipFile(zip_bundle(tmp_path / "b")) as archive:
        archive.extractall(tmp_path / "there")  # as unzip does on Linux: the modes of Unix entries
        for info in archive.infolist():
            if not info.is_dir():
                os.chmod(tmp_path / "there" / info.filename, stat.S_IMODE(info.external_attr >> 16))
        assert {info.create_system for info in archive.infolist()} == {3}
        assert archive.read("b/config.toml") == (tmp_path / "b" / "config.toml").read_bytes()
    there = tmp_path / "there" / "b"
    assert [os.access(there / script, os.X_OK) for script in ("launch.sh", "check.sh", "studio_check.py")] == [True] * 3
    assert not os.access(there / "config.toml", os.X_OK) and (there / "runs").is_dir()


def test_a_non_empty_folder_is_refused(demo: Project, tmp_path: Path) -> None:
    out = tmp_path / "b"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ExportError, match="not empty"):
        export_bundle(demo.config_path, out, include_model=True)
    assert (out / "keep.txt").read_text() == "mine"


def test_a_dreambooth_too_large_for_data_parallel_is_sharded_in_the_bundle(demo: Project, tmp_path: Path) -> None:
    config = load_config(demo.config_path)
    data = config.model_dump()
    data["model"].update(family="sdxl", base="stabilityai/stable-diffusion-xl-base-1.0", dtype="bf16")
    data["method"].update(kind="dreambooth")
    data["dataset"].update(resolution=1024)
    data["training"].update(mixed_precision="bf16", gradient_checkpointing=True, cache_latents=True,
                            cache_text_embeddings=True, optimizer="adamw", batch_size=1)
    save_config(type(config).model_validate(data), demo.config_path)
    out = tmp_path / "bundle"
    report = export_bundle(demo.config_path, out, gpus=2, gpu_type="rtx4090")
    # A whole SDXL UNet with AdamW state is ~40 GB per GPU as DDP; 2 x 24 GB hold it sharded.
    assert load_config(out / "config.toml").launch.strategy == "fsdp"
    single = (out / "accelerate" / "single_node.yaml").read_text()
    assert "distributed_type: 'FSDP'" in single and "  fsdp_version: 2\n" in single
    assert "  fsdp_state_dict_type: 'SHARDED_STATE_DICT'\n" in single
    assert any(w.startswith("launch.strategy ddp -> fsdp") for w in report.warnings)
    assert report.vram_estimate_mb is not None and report.vram_estimate_mb < 24 * 1024
    assert not any("exceeds" in w for w in report.warnings)
    # One GPU of the same kind cannot hold it either way: the bundle says so and stays data parallel.
    alone = export_bundle(demo.config_path, tmp_path / "alone", gpus=1, gpu_type="rtx4090")
    assert load_config(tmp_path / "alone" / "config.toml").launch.strategy == "ddp"
    assert any("exceeds" in w for w in alone.warnings)


def test_a_training_adapter_travels_in_the_bundle(demo: Project, tmp_path: Path) -> None:
    adapter = demo.root / "adapters" / "turbo-adapter.safetensors"
    adapter.parent.mkdir()
    adapter.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    config = demo.load_config()
    config.model.family, config.model.base = "zimage", "Tongyi-MAI/Z-Image-Turbo"
    config.model.training_adapter = "adapters/turbo-adapter.safetensors"
    save_config(config, demo.config_path)
    out = tmp_path / "bundle"
    export_bundle(demo.config_path, out)
    assert load_config(out / "config.toml").model.training_adapter == "model/turbo-adapter.safetensors"
    assert (out / "model" / "turbo-adapter.safetensors").read_bytes() == adapter.read_bytes()
    assert Path(load_resolved(out / "config.toml").model.training_adapter or "") == out / "model" / "turbo-adapter.safetensors"


def test_a_remote_dataset_path_with_a_space_and_a_semicolon_is_one_word_in_the_readme(demo: Project,
                                                                                     tmp_path: Path) -> None:
    import shlex

    remote = "/workspace/my data;touch pwned"
    out = tmp_path / "my bundle"
    export_bundle(demo.config_path, out, include_dataset=False, remote_dataset=remote,
                  remote_base="/workspace/models/tiny")
    readme = (out / "README.md").read_text(encoding="utf-8")
    (line,) = [line.strip() for line in readme.splitlines() if line.strip().startswith("rsync -a path/to/")]
    assert line == "rsync -a path/to/<concept folder>/ user@remote:'/workspace/my data;touch pwned'/<concept folder>/"
    words = shlex.split(line.replace("<concept folder>", "shapes"))
    assert words == ["rsync", "-a", "path/to/shapes/", f"user@remote:{remote}/shapes/"]  # no second command
    assert "    cd 'my bundle'\n" in readme


def test_the_zip_of_a_folder_with_a_dot_in_its_name_is_that_name_plus_zip(tmp_path: Path) -> None:
    """Bundles named by version (flux-v1.4, flux-v1.5): each zip is FOLDER.zip, and the second export's zip
    does not replace the first one's (both were flux-v1.zip)."""
    from studio.core.export.bundle import zip_bundle

    zips = []
    for version in ("1.4", "1.5"):
        folder = tmp_path / f"flux-v{version}"
        folder.mkdir()
        (folder / "config.toml").write_text(f"# {version}\n")
        zips.append(zip_bundle(folder))
    assert zips == [tmp_path / "flux-v1.4.zip", tmp_path / "flux-v1.5.zip"]
    with zipfile.ZipFile(zips[0]) as archive:
        assert archive.read("flux-v1.4/config.toml") == b"# 1.4\n"


def test_the_mask_and_validation_folders_travel_and_a_val_folder_among_the_images_keeps_its_place(
        demo: Project, tmp_path: Path) -> None:
    # The bundle's config named the project's masks/ and val/ folders, which the rented machine does not have:
    # the run stopped there ("the mask folder masks does not exist") once the machine was paid for.
    shapes = demo.root / "data" / "shapes"
    images = sorted(shapes.glob("*.png"))
    masks = demo.root / "masks"
    masks.mkdir()
    for image in images:
        (masks / image.name).write_bytes(image.read_bytes())
    (masks / "notes.md").write_text("not a mask")
    config = demo.load_config()
    config.dataset.masks, config.dataset.mask_folder = "folder", "masks"
    config.dataset.validation_folder, config.training.validation_every = "data/shapes/val", 10
    (shapes / "val").mkdir()
    for held in (images[0], images[0].with_suffix(".txt")):
        held.rename(shapes / "val" / held.name)
    save_config(config, demo.config_path)

    out = tmp_path / "bundle"
    report = export_bundle(demo.config_path, out, include_model=True)
    bundle = load_resolved(out / "config.toml")
    assert Path(bundle.dataset.mask_folder or "") == out / "dataset" / "masks"
    assert sorted(p.name for p in (out / "dataset" / "masks").iterdir()) == sorted(p.name for p in images)
    # Inside the image folder's copy, so the run holds these images out of training as it does here.
    assert Path(bundle.dataset.validation_folder or "") == out / "dataset" / "shapes" / "val"
    assert (out / "dataset" / "shapes" / "val" / images[0].name).read_bytes() == (
        shapes / "val" / images[0].name).read_bytes()
    manifest = json.loads((out / "dataset" / "manifest.json").read_text())
    assert f"masks/{images[1].name}" in {entry["path"] for entry in manifest["files"]}
    assert report.skipped == ["masks/notes.md: not an image, caption or metadata file the trainer reads"]


def test_an_edit_datasets_control_folders_and_sample_control_image_travel(demo: Project, tmp_path: Path) -> None:
    from studio.core.dataset.edit_pairs.pairs import control_settings
    from studio.core.dataset.scan import scan_concept_report

    (demo.root / "models" / "tiny-sd15" / "model_index.json").write_text('{"_class_name": "QwenImageEditPipeline"}')
    shapes = demo.root / "data" / "shapes"
    images = sorted(shapes.glob("*.png"))
    beside, separate = demo.root / "data" / "control", demo.root / "references"
    for folder in (beside, separate):
        folder.mkdir()
        for image in images:
            (folder / image.name).write_bytes(image.read_bytes())
    config = demo.load_config()
    config.model.family, config.dataset.kind = "qwen-image", "edit"
    config.sampling.control_image = "references/" + images[0].name
    save_config(config, demo.config_path)

    def pairs(out: Path) -> int:
        bundle = load_resolved(out / "config.toml")
        scan = scan_concept_report(bundle.dataset.concepts[0], None, control_settings(bundle.dataset, None))
        return sum(1 for entry in scan.entries if entry.controls)

    # data/control/ beside data/shapes/ is found by its place: the bundle keeps it beside the images' copy.
    out = tmp_path / "beside"
    export_bundle(demo.config_path, out, include_model=True)
    assert pairs(out) == len(images)
    sample = load_resolved(out / "config.toml").sampling.control_image
    assert Path(sample or "") == out / "dataset" / "references" / images[0].name
    assert (out / "dataset" / "references").is_dir() and len(list((out / "dataset" / "references").iterdir())) == 1

    config.dataset.control_folders = ["references"]
    save_config(config, demo.config_path)
    out = tmp_path / "separate"
    export_bundle(demo.config_path, out, include_model=True)
    assert load_config(out / "config.toml").dataset.control_folders == ["dataset/references"]
    assert pairs(out) == len(images)
    assert load_config(out / "config.toml").sampling.control_image == f"dataset/references/{images[0].name}"


def test_a_bundle_exported_into_the_image_folder_is_not_trained_on_nor_exported_again(demo: Project,
                                                                                      tmp_path: Path) -> None:
    """A project kept in its image folder exports to its exports/ folder, inside the images: the next run trained
    each image twice (the bundle's copy too), and the next export carried the first bundle's copy along."""
    from studio.core.dataset.scan import scan_dataset

    shapes = demo.root / "data" / "shapes"
    before = sorted(str(e.path) for e in scan_dataset(load_resolved(demo.config_path).dataset))
    export_bundle(demo.config_path, shapes / "exports" / "first", include_model=True)
    assert sorted(str(e.path) for e in scan_dataset(load_resolved(demo.config_path).dataset)) == before
    export_bundle(demo.config_path, tmp_path / "second", include_model=True)
    manifest = json.loads((tmp_path / "second" / "dataset" / "manifest.json").read_text())
    assert not [e["path"] for e in manifest["files"] if "exports" in e["path"]]


def test_an_export_that_fails_halfway_leaves_no_half_bundle_among_the_images(demo: Project,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk while the studio's source is copied: the half bundle (its copy of the dataset, without the
    bundle.json that marks a bundle) stayed in exports/ inside the image folder, and the next run trained on it."""
    from studio.core.dataset.scan import scan_dataset
    from studio.core.export import bundle

    shapes = demo.root / "data" / "shapes"
    before = sorted(str(e.path) for e in scan_dataset(load_resolved(demo.config_path).dataset))

    def disk_full(_folder: Path) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(bundle, "copy_studio_source", disk_full)
    with pytest.raises(OSError, match="No space left"):
        export_bundle(demo.config_path, shapes / "exports" / "first", include_model=True)
    assert not (shapes / "exports" / "first").exists()
    assert sorted(str(e.path) for e in scan_dataset(load_resolved(demo.config_path).dataset)) == before
    (shapes / "exports" / "mine").mkdir(parents=True)  # a folder of the person's, empty: kept, emptied again
    with pytest.raises(OSError, match="No space left"):
        export_bundle(demo.config_path, shapes / "exports" / "mine", include_model=True)
    assert (shapes / "exports" / "mine").is_dir() and not any((shapes / "exports" / "mine").iterdir())


def test_a_cancelled_export_removes_what_it_wrote_its_zip_too(demo: Project, tmp_path: Path) -> None:
    from studio.core.export.bundle import ExportCancelled

    for stage in ("dataset", "zip"):
        seen: list[str] = []  # the reports so far; the person cancels once the stage has begun
        out = tmp_path / f"cancelled in {stage}"
        with pytest.raises(ExportCancelled, match="the export was cancelled"):
            export_bundle(demo.config_path, out, include_model=True, zip=True,
                          progress=lambda message, _done, _total, seen=seen: seen.append(message),
                          cancel=lambda stage=stage, seen=seen: any(m.startswith(stage) for m in seen))
        assert not out.exists() and list(tmp_path.glob("*.zip*")) == []


def test_the_zip_tells_each_file_it_adds(demo: Project, tmp_path: Path) -> None:
    # Zipping thousands of images takes minutes: the page showed "zip 0/1" all along.
    seen: list[tuple[str, int, int]] = []
    report = export_bundle(demo.config_path, tmp_path / "b", include_model=True, zip=True,
                           progress=lambda message, done, total: seen.append((message, done, total)))
    zipped = [(done, total) for message, done, total in seen if message == "zip"]
    with zipfile.ZipFile(report.zip_path) as archive:  # type: ignore[arg-type]
        entries = len(archive.infolist())
    assert zipped[-1] == (entries, entries) and len(zipped) == entries

"""The run folder and the command the GUI, the CLI and bundles start."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio.core.config.files.paths import resolve_paths
from studio.core.config.files.toml_file import validate_data
from studio.core.runs.launch import prepare_run, training_env


def yaml_of(run_dir: Path) -> dict[str, str]:
    lines = (run_dir / "accelerate.yaml").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines)


def test_run_folder_holds_resolved_config_yaml_and_command(tmp_path: Path) -> None:
    config = validate_data({"model": {"family": "sd15", "base": "models/m"}, "dataset": {"concepts": [{"path": "img"}]}})
    plan = prepare_run(resolve_paths(config, tmp_path))
    assert plan.run_dir.parent == tmp_path / "runs"
    assert plan.run_dir.name.endswith("-run")
    text = (plan.run_dir / "config.toml").read_text()
    assert f'path = "{tmp_path / "img"}"' in text
    assert (plan.run_dir / "command.txt").read_text().strip().endswith(f"-m studio.train {plan.run_dir / 'config.toml'}")
    assert plan.command[1:4] == ["-m", "studio.train.launcher", "--config_file"]
    assert yaml_of(plan.run_dir)["distributed_type"] == "'NO'"


def test_local_multi_process_runs_get_a_free_port_unless_one_is_set(tmp_path: Path) -> None:
    base = {"model": {"family": "sd15", "base": "m/n"}}
    first = prepare_run(resolve_paths(validate_data({**base, "launch": {"num_processes": 2}}), tmp_path))
    second = prepare_run(resolve_paths(validate_data({**base, "launch": {"num_processes": 2}}), tmp_path))
    ports = {yaml_of(first.run_dir)["main_process_port"], yaml_of(second.run_dir)["main_process_port"]}
    assert "29500" not in ports
    assert yaml_of(first.run_dir)["distributed_type"] == "'MULTI_GPU'"
    fixed = prepare_run(resolve_paths(validate_data({**base, "launch": {"num_processes": 2, "main_process_port": 29555}}), tmp_path))
    assert yaml_of(fixed.run_dir)["main_process_port"] == "29555"


def test_a_sharded_run_writes_accelerates_fsdp_fields(tmp_path: Path) -> None:
    base = {"model": {"family": "sdxl", "base": "m/n"}, "method": {"kind": "dreambooth"},
            "training": {"gradient_checkpointing": True, "mixed_precision": "bf16"}}
    plan = prepare_run(resolve_paths(validate_data({**base, "launch": {"strategy": "fsdp", "num_processes": 2}}), tmp_path))
    text = (plan.run_dir / "accelerate.yaml").read_text()
    assert "distributed_type: 'FSDP'\n" in text
    fsdp = dict(line.strip().split(": ", 1) for line in text.split("fsdp_config:\n", 1)[1].splitlines())
    assert fsdp["fsdp_version"] == "2" and fsdp["fsdp_state_dict_type"] == "'SHARDED_STATE_DICT'"
    assert fsdp["fsdp_activation_checkpointing"] == "true" and fsdp["fsdp_reshard_after_forward"] == "true"
    assert fsdp["fsdp_transformer_layer_cls_to_wrap"].strip("'").split(",")[:2] == ["ResnetBlock2D",
                                                                                   "BasicTransformerBlock"]
    # One process has nothing to shard: a plain single-process config, as for ddp.
    alone = prepare_run(resolve_paths(validate_data({**base, "launch": {"strategy": "fsdp"}}), tmp_path))
    assert "fsdp_config" not in (alone.run_dir / "accelerate.yaml").read_text()


def test_accelerate_reads_the_fsdp_fields(tmp_path: Path) -> None:
    pytest.importorskip("accelerate")
    from accelerate.commands.config.config_args import load_config_from_file

    config = validate_data({"model": {"family": "sd3", "base": "m/n"}, "method": {"kind": "dreambooth"},
                            "launch": {"strategy": "fsdp", "num_processes": 4}})
    plan = prepare_run(resolve_paths(config, tmp_path))
    loaded = load_config_from_file(str(plan.run_dir / "accelerate.yaml"))
    assert loaded.distributed_type.value == "FSDP" and loaded.num_processes == 4
    assert loaded.fsdp_config["fsdp_version"] == 2
    assert loaded.fsdp_config["fsdp_transformer_layer_cls_to_wrap"] == "JointTransformerBlock"


def test_a_run_folder_that_cannot_be_made_names_the_folder_and_the_fix(tmp_path: Path) -> None:
    import pytest

    from studio.core.runs.launch import RunFolderError

    (tmp_path / "disk").write_text("a file where a folder should be", encoding="utf-8")
    config = validate_data({"model": {"family": "sd15", "base": "m/n"}, "output": {"dir": "disk/runs"}})
    with pytest.raises(RunFolderError) as caught:
        prepare_run(resolve_paths(config, tmp_path))
    assert f"cannot write the run folder under {tmp_path / 'disk' / 'runs'}" in str(caught.value)
    assert "fix output.dir" in str(caught.value)


class _WindowsOs:
    """The os module as launch.py reads it on Windows (the rest is this machine's)."""

    name = "nt"

    def __getattr__(self, attribute: str) -> object:
        import os

        return getattr(os, attribute)


@pytest.mark.parametrize("windows", [False, True])
def test_a_missing_training_python_is_answered_with_a_path_of_this_computers_kind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, windows: bool) -> None:
    from studio.core.config.schema import TrainConfig
    from studio.core.runs import launch

    if windows:
        monkeypatch.setattr(launch, "os", _WindowsOs())
    config = TrainConfig.model_validate({"model": {"family": "sd15", "base": "x"},
                                         "launch": {"python": str(tmp_path / "missing" / "python")}})
    problem = launch.python_problem(config)
    assert problem is not None and "cannot be started (no such file)" in problem
    example = r"e.g. C:\path\to\venv\Scripts\python.exe" if windows else "e.g. /path/to/venv/bin/python"
    assert example in problem


def test_the_trainer_numbers_the_gpus_as_the_studio_shows_them(monkeypatch: pytest.MonkeyPatch) -> None:
    # nvidia-smi's GPU 1 is the trainer's GPU 1 (launch.gpu_ids), not CUDA's second fastest.
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    assert training_env({})["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert training_env()["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    # An order the person chose stays.
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    assert training_env({})["CUDA_DEVICE_ORDER"] == "FASTEST_FIRST"


def test_the_command_a_windows_person_copies_runs_in_their_shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """command.txt, `studio-train command` and the resume a stopped run names, on Windows: POSIX single quotes
    around every path (for its backslashes) made lines that cmd.exe could not run; a path with a space goes in
    double quotes."""
    from studio.core import quoting
    from studio.core.runs import launch
    from studio.core.runs.records.outcome import outcome_line

    python = r"C:\Users\Jane Doe\AppData\Local\sd-training-studio\training-env\Scripts\python.exe"
    monkeypatch.setattr(quoting, "os", _WindowsOs())
    assert launch.format_command([python, "-m", "studio.train.launcher", "--config_file",
                                  r"D:\runs\20260101-120000-run\accelerate.yaml"]) == (
        f'"{python}" -m studio.train.launcher --config_file D:\\runs\\20260101-120000-run\\accelerate.yaml')
    config = validate_data({"model": {"family": "sd15", "base": "m/n"}, "launch": {"python": python}})
    plan = prepare_run(resolve_paths(config, tmp_path / "my projects"))
    line = (plan.run_dir / "command.txt").read_text(encoding="utf-8").strip()
    assert "'" not in line
    assert line.startswith(f'"{python}" -m studio.train.launcher --config_file "{plan.run_dir / "accelerate.yaml"}"')
    assert outcome_line(plan.run_dir, 1).endswith(f'continue it with: studio-train resume "{plan.run_dir}"')

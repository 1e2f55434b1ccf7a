"""The run folder and the command the GUI, the CLI and bundles start."""

from __future__ import annotations

from pathlib import Path

from studio.core.config.toml_file import validate_data
from studio.core.runs.launch import prepare_run


def yaml_of(run_dir: Path) -> dict[str, str]:
    lines = (run_dir / "accelerate.yaml").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines)


def test_run_folder_holds_resolved_config_yaml_and_command(tmp_path: Path) -> None:
    config = validate_data({"model": {"family": "sd15", "base": "models/m"}, "dataset": {"concepts": [{"path": "img"}]}})
    plan = prepare_run(config, tmp_path)
    assert plan.run_dir.parent == tmp_path / "runs"
    assert plan.run_dir.name.endswith("-run")
    text = (plan.run_dir / "config.toml").read_text()
    assert f'path = "{tmp_path / "img"}"' in text
    assert (plan.run_dir / "command.txt").read_text().strip().endswith(f"-m studio.train {plan.run_dir / 'config.toml'}")
    assert plan.command[1:4] == ["-m", "studio.train.launcher", "--config_file"]
    assert yaml_of(plan.run_dir)["distributed_type"] == "'NO'"


def test_local_multi_process_runs_get_a_free_port_unless_one_is_set(tmp_path: Path) -> None:
    base = {"model": {"family": "sd15", "base": "m/n"}}
    first = prepare_run(validate_data({**base, "launch": {"num_processes": 2}}), tmp_path)
    second = prepare_run(validate_data({**base, "launch": {"num_processes": 2}}), tmp_path)
    ports = {yaml_of(first.run_dir)["main_process_port"], yaml_of(second.run_dir)["main_process_port"]}
    assert "29500" not in ports
    assert yaml_of(first.run_dir)["distributed_type"] == "'MULTI_GPU'"
    fixed = prepare_run(validate_data({**base, "launch": {"num_processes": 2, "main_process_port": 29555}}), tmp_path)
    assert yaml_of(fixed.run_dir)["main_process_port"] == "29555"


def test_a_run_folder_that_cannot_be_made_names_the_folder_and_the_fix(tmp_path: Path) -> None:
    import pytest

    from studio.core.runs.launch import RunFolderError

    (tmp_path / "disk").write_text("a file where a folder should be", encoding="utf-8")
    config = validate_data({"model": {"family": "sd15", "base": "m/n"}, "output": {"dir": "disk/runs"}})
    with pytest.raises(RunFolderError) as caught:
        prepare_run(config, tmp_path)
    assert f"cannot write the run folder under {tmp_path / 'disk' / 'runs'}" in str(caught.value)
    assert "fix output.dir" in str(caught.value)

"""Every bundle carries a SkyPilot task that SkyPilot's own loader accepts, for one GPU, one node of
eight and two nodes of eight; the README says the one command and what it costs per hour."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from studio.core.export.bundle import ExportError, export_bundle
from studio.core.export.sky_task import SKY_FILE, CloudOptions, dump_sky_yaml
from studio.core.project.folder import Project

ROOT = Path(__file__).resolve().parents[3]
# dev.py makes an environment with SkyPilot (and nothing of the studio's) for these checks.
SKY_PYTHON = Path(os.environ.get("STUDIO_SKY_PYTHON") or ROOT / ".venv-cloud" / ("Scripts/python.exe" if os.name == "nt"
                                                                                   else "bin/python"))

# Read each task with SkyPilot's loader and validator; print what it understood.
SKY_READ = """\
import json, sys
import sky
out = []
for path in sys.argv[1:]:
    task = sky.Task.from_yaml(path)
    resources = sorted(task.resources, key=lambda r: str(r.accelerators))
    out.append({"name": task.name, "num_nodes": task.num_nodes,
                "accelerators": [r.accelerators for r in resources],
                "use_spot": [r.use_spot for r in resources], "disk_size": [r.disk_size for r in resources],
                "autostop": [None if r.autostop_config is None else r.autostop_config.idle_minutes for r in resources],
                "envs": task.envs, "run": task.run, "setup": task.setup,
                "file_mounts": {k: str(v) for k, v in (task.storage_mounts or {}).items()}})
print(json.dumps(out))
"""


def _sky_read(*paths: Path) -> list[dict[str, object]]:
    if not SKY_PYTHON.is_file():
        pytest.skip(f"SkyPilot's environment is not at {SKY_PYTHON} (python3 dev.py test makes it)")
    done = subprocess.run([str(SKY_PYTHON), "-c", SKY_READ, *map(str, paths)], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, SKYPILOT_DISABLE_USAGE_COLLECTION="1",
                                                SKYPILOT_DEBUG="0", HOME=str(paths[0].parent.parent / "home")))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_skypilot_reads_the_tasks_of_one_gpu_eight_gpus_two_nodes_and_any_gpu(demo: Project, tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    one = export_bundle(demo.config_path, tmp_path / "one", gpus=1, gpu_type="rtx4090", include_model=True)
    eight = export_bundle(demo.config_path, tmp_path / "eight", gpus=8, gpu_type="h100", include_model=True)
    nodes = export_bundle(demo.config_path, tmp_path / "nodes", gpus=8, nodes=2, gpu_type="h100",
                          include_model=True, cloud=CloudOptions(spot=True, bucket="s3://studio-runs/demo"))
    any_gpu = export_bundle(demo.config_path, tmp_path / "any", gpus=2, include_model=True)
    read = _sky_read(*(report.out_dir / SKY_FILE for report in (one, eight, nodes, any_gpu)))

    assert read[0]["num_nodes"] == 1 and read[0]["accelerators"] == [{"RTX4090": 1}]
    assert read[1]["num_nodes"] == 1 and read[1]["accelerators"] == [{"H100": 8}]
    assert read[2]["num_nodes"] == 2 and read[2]["accelerators"] == [{"H100": 8}]
    assert read[0]["use_spot"] == [False] and read[2]["use_spot"] == [True]
    assert all(minutes == 10 for task in read for minutes in task["autostop"])  # the cluster ends itself after the run
    assert read[2]["envs"]["STUDIO_RESUME_NEWEST"] == "1"  # a preempted spot run continues
    assert "/studio-outputs" in read[2]["file_mounts"]
    # Without a GPU type SkyPilot may take any GPU that fits, two of it.
    offered = {name for candidate in read[3]["accelerators"] for name in candidate}  # type: ignore[union-attr]
    assert {"RTX4090", "H100", "A100-80GB"} <= offered
    assert all(count == 2 for candidate in read[3]["accelerators"] for count in candidate.values())  # type: ignore[union-attr]
    for task in read:
        assert "./launch.sh --check" in str(task["run"]) and 'MACHINE_RANK="$SKYPILOT_NODE_RANK"' in str(task["run"])
        assert "-r requirements.txt" in str(task["setup"])


def test_the_readme_gives_the_one_command_and_the_price_per_hour(demo: Project, tmp_path: Path) -> None:
    report = export_bundle(demo.config_path, tmp_path / "b", gpus=8, gpu_type="h100", include_model=True)
    readme = (report.out_dir / "README.md").read_text(encoding="utf-8")
    info = json.loads((report.out_dir / "bundle.json").read_text(encoding="utf-8"))
    cluster = info["cloud"]["cluster"]
    assert f"sky launch -c {cluster} sky.yaml" in readme
    per_hour = info["cloud"]["per_hour"]
    assert per_hour["gpu"] == "H100 80GB" and per_hour["min"] > 0
    assert f"{per_hour['min']:.2f}-{per_hour['max']:.2f} USD per hour" in readme
    assert f"sky down {cluster}" in readme


def test_a_hub_bases_readme_launches_with_the_token_as_a_secret(demo: Project, tmp_path: Path) -> None:
    # A gated base downloads on the cluster: `sky launch` as the README said gave it no token, and it failed there.
    config = demo.load_config()
    config.model.family, config.model.base = "sd3", "stabilityai/stable-diffusion-3-medium-diffusers"
    from studio.core.config.files.toml_file import save_config

    save_config(config, demo.config_path)
    report = export_bundle(demo.config_path, tmp_path / "b", include_model=True)
    cluster = json.loads((report.out_dir / "bundle.json").read_text(encoding="utf-8"))["cloud"]["cluster"]
    assert f"    sky launch -c {cluster} sky.yaml --secret HF_TOKEN\n" in (report.out_dir / "README.md").read_text()
    # A public hub base: SkyPilot refuses --secret HF_TOKEN in a shell without one, so it is only offered.
    config.model.base = "someone/public-sd3-model"
    save_config(config, demo.config_path)
    readme = (export_bundle(demo.config_path, tmp_path / "public", include_model=True).out_dir / "README.md").read_text()
    assert "sky.yaml\n" in readme and "sky.yaml --secret" not in readme
    assert "add it for a gated or private base model" in readme


def test_skypilots_own_task_takes_the_launchs_secret(demo: Project, tmp_path: Path) -> None:
    """What the studio's adapter does at a launch (skypilot.py), with the pinned SkyPilot's own Task: the token
    becomes one of its secrets (set as HF_TOKEN there), and sky.yaml stays without it."""
    if not SKY_PYTHON.is_file():
        pytest.skip(f"SkyPilot's environment is not at {SKY_PYTHON} (python3 dev.py test makes it)")
    report = export_bundle(demo.config_path, tmp_path / "b", include_model=True)
    written = (report.out_dir / SKY_FILE).read_text(encoding="utf-8")
    script = ("import json, sys, sky\n"
              "task = sky.Task.from_yaml(sys.argv[1])\n"
              "task.update_secrets({'HF_TOKEN': 'hf_SecretOfTheLaunch0123456789'})\n"
              "print(json.dumps({k: v.get_secret_value() for k, v in task.secrets.items()}))\n")
    done = subprocess.run([str(SKY_PYTHON), "-c", script, str(report.out_dir / SKY_FILE)], capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, SKYPILOT_DISABLE_USAGE_COLLECTION="1",
                                                           HOME=str(tmp_path / "home")))
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"HF_TOKEN": "hf_SecretOfTheLaunch0123456789"}
    assert (report.out_dir / SKY_FILE).read_text(encoding="utf-8") == written


def test_a_bucket_that_is_not_an_address_is_refused_before_anything_is_written(demo: Project,
                                                                               tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="not a bucket address"):
        export_bundle(demo.config_path, tmp_path / "b", cloud=CloudOptions(bucket="my bucket; rm -rf ~"))
    assert not (tmp_path / "b").exists()


def test_the_yaml_is_the_task_it_was_made_from() -> None:
    yaml = pytest.importorskip("yaml")
    task = {"name": "studio-x", "resources": {"accelerators": {"H100": 8, "A100-80GB": 8}, "use_spot": False,
                                              "autostop": {"idle_minutes": 10, "down": True}},
            "num_nodes": 2, "workdir": ".", "envs": {"A": "1", "B": "yes", "C": "a: b"},
            "setup": "set -e\npip install x\n", "run": "echo \"$SKYPILOT_NODE_RANK\"\n\nexit 0\n"}
    assert yaml.safe_load(dump_sky_yaml(task, header="two\nlines")) == task


@pytest.mark.skipif(os.name != "posix", reason="launch.sh is a POSIX shell script")
def test_a_spot_task_resumes_the_newest_unfinished_run(demo: Project, tmp_path: Path) -> None:
    from studio.core.export.start_run import main as start_run

    report = export_bundle(demo.config_path, tmp_path / "b", include_model=True, cloud=CloudOptions(spot=True))
    config = report.out_dir / "config.toml"
    runs = report.out_dir / "runs"
    done = runs / "20260101-000000-done"
    (done / "checkpoints" / "step-4").mkdir(parents=True)
    (done / "events.jsonl").write_text('{"v":1,"type":"run_finished","time":1,"status":"completed","step":8}\n')
    cut = runs / "20260102-000000-cut"
    (cut / "checkpoints" / "step-4").mkdir(parents=True)
    (cut / "events.jsonl").write_text("")
    newer_empty = runs / "20260103-000000-empty"
    newer_empty.mkdir()
    out = subprocess.run([sys.executable, "-c", "import sys; from studio.core.export.start_run import main; "
                          "sys.exit(main(sys.argv[1:]))", str(config), "--processes", "1", "--resume-newest"],
                         capture_output=True, text=True, cwd=report.out_dir,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == f"resume:{cut}"
    assert start_run([str(config), "--processes", "1"]) == 0  # without the flag: a new run folder


def test_a_launch_sends_the_bundle_whatever_folder_the_studio_was_started_from(demo: Project,
                                                                              tmp_path: Path) -> None:
    if not SKY_PYTHON.is_file():
        pytest.skip(f"SkyPilot's environment is not at {SKY_PYTHON} (python3 dev.py test makes it)")
    report = export_bundle(demo.config_path, tmp_path / "b", include_model=True)
    elsewhere = tmp_path / "started-here"
    elsewhere.mkdir()
    # The studio's adapter reads the task; SkyPilot then expands the workdir as its launch does.
    read = ("import sys; from pathlib import Path; from studio.core.cloud.skypilot import SkyPilotApi\n"
            "task = SkyPilotApi()._task(Path(sys.argv[1])); task.expand_and_validate_workdir(); print(task.workdir)")
    done = subprocess.run([str(SKY_PYTHON), "-c", read, str(report.out_dir / SKY_FILE)], capture_output=True,
                          text=True, timeout=600, cwd=elsewhere,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), SKYPILOT_DISABLE_USAGE_COLLECTION="1",
                                   HOME=str(tmp_path)))
    assert done.returncode == 0, done.stderr[-3000:]
    assert Path(done.stdout.strip().splitlines()[-1]) == report.out_dir.resolve()


@pytest.mark.skipif(os.name != "posix", reason="SkyPilot runs the task's scripts with bash on Linux")
def test_the_task_trains_with_the_exported_python_on_an_image_whose_python3_is_older(demo: Project,
                                                                                    tmp_path: Path) -> None:
    yaml = pytest.importorskip("yaml")
    report = export_bundle(demo.config_path, tmp_path / "b", include_model=True)
    task = yaml.safe_load((report.out_dir / SKY_FILE).read_text(encoding="utf-8"))
    # A rented machine: Ubuntu 22.04's python3 (3.10), on which the pinned packages do not install, and uv
    # (a stand-in that makes the environment with this interpreter and records what it was asked).
    home, bin_dir = tmp_path / "home", tmp_path / "bin"
    home.mkdir()
    bin_dir.mkdir()
    (bin_dir / "python3").write_text("#!/bin/sh\necho 'Python 3.10: no numpy==2.4 for it' >&2\nexit 1\n")
    (bin_dir / "uv").write_text(f"""#!/bin/sh
echo "uv $*" >> "$HOME/uv.log"
if [ "$1" = venv ]; then for last; do :; done; mkdir -p "$last/bin"; ln -sf {sys.executable} "$last/bin/python"; fi
""")
    (report.out_dir / "launch.sh").write_text("#!/bin/sh\n\"$PYTHON\" -c 'import sys; print(sys.version_info[:2])'\n")
    for script in (*bin_dir.iterdir(), report.out_dir / "launch.sh"):
        script.chmod(0o755)
    env = {"HOME": str(home), "PATH": f"{bin_dir}:/usr/bin:/bin", "SKYPILOT_NUM_NODES": "1",
           "SKYPILOT_NODE_RANK": "0", "SKYPILOT_NUM_GPUS_PER_NODE": "1", "SKYPILOT_NODE_IPS": "10.0.0.1"}

    setup = subprocess.run(["bash", "-c", task["setup"]], cwd=report.out_dir, env=env, capture_output=True, text=True)
    assert setup.returncode == 0, setup.stderr
    run = subprocess.run(["bash", "-c", task["run"]], cwd=report.out_dir, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr

    exported = f"{sys.version_info.major}.{sys.version_info.minor}"
    asked = (home / "uv.log").read_text()
    assert f"--python {exported} {home}/studio-env" in asked
    assert f"pip install --python {home}/studio-env/bin/python -r requirements.txt" in asked
    assert run.stdout.strip().splitlines()[-1] == str(tuple(sys.version_info[:2]))  # launch.sh got that Python


@pytest.mark.skipif(os.name != "posix", reason="SkyPilot runs the task's scripts with bash on Linux")
def test_a_launch_onto_a_bucket_with_an_earlier_run_follows_only_its_own(demo: Project, tmp_path: Path) -> None:
    from studio.core.cloud.run import _NEWEST, WORKDIR

    yaml = pytest.importorskip("yaml")
    report = export_bundle(demo.config_path, tmp_path / "b", include_model=True,
                           cloud=CloudOptions(bucket="s3://studio-runs/demo"))
    task = yaml.safe_load((report.out_dir / SKY_FILE).read_text(encoding="utf-8"))
    bucket = tmp_path / "bucket"  # what SkyPilot mounts at /studio-outputs on every cluster
    run_script = str(task["run"]).replace("/studio-outputs", str(bucket))

    def launch(cluster: str, trains: bool) -> Path:
        """A new cluster: the bundle as its workdir, the task's run with launch.sh making its run folder."""
        home = tmp_path / cluster
        workdir = home / WORKDIR
        shutil.copytree(report.out_dir, workdir)
        (workdir / "launch.sh").write_text("#!/bin/sh\nmkdir -p runs/20260101-000000-demo\n"
                                           ": > runs/20260101-000000-demo/events.jsonl\n" if trains else "#!/bin/sh\n")
        (workdir / "launch.sh").chmod(0o755)
        env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "SKYPILOT_TASK_ID": f"sky-2026_{cluster}_1",
               "SKYPILOT_NUM_NODES": "1", "SKYPILOT_NODE_RANK": "0", "SKYPILOT_NODE_IPS": "10.0.0.1"}
        done = subprocess.run(["bash", "-c", run_script], cwd=workdir, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return home

    launch("earlier", trains=True)
    home = launch("now", trains=False)  # still installing: no run folder of its own yet
    # The run folder the studio follows (and brings back) there: none yet, never the earlier launch's.
    found = subprocess.run(["sh", "-c", f'{_NEWEST}; printf %s "$d"'], cwd=home, capture_output=True, text=True)
    assert found.stdout == ""


def test_the_disk_asked_for_holds_the_model_files_the_bundle_carries(demo: Project, tmp_path: Path) -> None:
    # A local base model travels in the bundle, but the disk asked for counted only a hub id's download: a 150 GB
    # model folder got SkyPilot's 100 GB disk, and copying the bundle there ran out of room.
    from studio.core.export.bundle import _cloud_info
    from studio.core.export.bundle_plan import validate_bundle

    with open(demo.root / "models" / "tiny-sd15" / "weights.dat", "wb") as big:
        big.truncate(150 * 2**30)  # sparse: nothing is written
    plan = validate_bundle(demo.config_path, tmp_path / "bundle", 1, 1, None, True, None, True, None,
                           "127.0.0.1", 29500, False)
    assert _cloud_info(plan, 0)["task"]["resources"]["disk_size"] >= 225  # 150 GB with room

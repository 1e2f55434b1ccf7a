"""`studio-train cloud`: launch a project's run through the cloud boundary (a fake of SkyPilot's API here),
see SkyPilot's offer beside the studio's price, follow, bring back and end it; without SkyPilot, how to enable it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.fake_cloud import FakeCloud

from studio.cli import main as cli_main
from studio.core.cloud import launcher as cloud
from studio.core.project.folder import Project


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeCloud]:
    instance = FakeCloud(tmp_path / "clusters", live=False)
    cloud.set_cloud_api(lambda: instance)
    yield instance
    cloud.set_cloud_api(None)


def test_launch_follow_pull_and_down_a_project_on_a_cloud(demo: Project, fake: FakeCloud,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main(["cloud", "launch", str(demo.config_path), "--gpus", "2", "--gpu-type", "h100", "--yes"])
    out = capsys.readouterr().out
    assert code == 0, out
    (cluster,) = fake.launched
    assert "SkyPilot's offer: {'H100': 2} on runpod (EU-RO-1), 5.98 USD/h on demand" in out
    assert "The studio's catalogue: H100 80GB x 2 about" in out
    assert f"studio-train cloud logs {cluster}" in out
    bundle = fake.launched[cluster]
    assert (bundle / "sky.yaml").is_file() and json.loads((bundle / "cluster.json").read_text())["job"] == 7

    assert cli_main(["cloud", "logs", cluster]) == 0
    assert "steps: 8/8 loss=0.123" in capsys.readouterr().out
    assert cli_main(["cloud", "status", str(demo.config_path)]) == 0  # the project's CONFIG names its cluster
    assert capsys.readouterr().out.strip() == f"{cluster}: cluster UP, run SUCCEEDED"

    assert cli_main(["cloud", "pull", cluster]) == 0
    lora = demo.root / "runs" / "20261201-120000-demo" / "output" / "pytorch_lora_weights.safetensors"
    assert lora.read_bytes() == b"lora"
    assert cli_main(["cloud", "down", cluster, "--yes"]) == 0
    assert fake.downed == [cluster] and "billing has stopped" in capsys.readouterr().out


class Terminal:
    """A terminal on stdin whose person answers `answer` (Ctrl-D when it is empty)."""

    def __init__(self, answer: str) -> None:
        self.answer = answer

    def isatty(self) -> bool:
        return True

    def readline(self) -> str:
        return self.answer


def test_down_asks_first_and_says_what_was_brought_back(demo: Project, fake: FakeCloud,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    # Ending a cluster deletes its disk: the LoRA trained there, when not brought back, with the hours paid for it.
    assert cli_main(["cloud", "launch", str(demo.config_path), "--yes"]) == 0
    (cluster,) = fake.launched
    capsys.readouterr()
    assert cli_main(["cloud", "down", cluster]) == 2  # a script without --yes
    err = capsys.readouterr().err
    assert not fake.downed and f"nothing was asked and {cluster} still runs (and bills): pass --yes" in err

    asked: list[str] = []
    monkeypatch.setattr("builtins.input", lambda question: asked.append(question) or "n")
    monkeypatch.setattr("sys.stdin", Terminal("n"))
    assert cli_main(["cloud", "down", cluster]) == 0
    assert not fake.downed and f"{cluster} still runs." in capsys.readouterr().out
    assert f"nothing was brought back here from it: `studio-train cloud pull {cluster}` does that" in asked[-1]

    assert cli_main(["cloud", "pull", cluster]) == 0
    monkeypatch.setattr("builtins.input", lambda question: asked.append(question) or "y")
    assert cli_main(["cloud", "down", cluster]) == 0
    assert fake.downed == [cluster] and "its run folders were last brought back here at" in asked[-1]


def test_launch_asks_first_and_starts_nothing_without_an_answer(demo: Project, fake: FakeCloud,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    # Run from a script without --yes: it exited 0 having started nothing, and the script went on as if it had.
    assert cli_main(["cloud", "launch", str(demo.config_path)]) == 2
    captured = capsys.readouterr()
    assert not fake.launched and "Not started" in captured.out
    assert "error: not a terminal, so nothing was asked and nothing started: pass --yes" in captured.err


def test_no_at_the_question_starts_nothing_and_is_not_an_error(demo: Project, fake: FakeCloud,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    import io

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdin", Terminal(""))  # Ctrl-D at the question
    assert cli_main(["cloud", "launch", str(demo.config_path)]) == 0
    assert not fake.launched and "Not started" in capsys.readouterr().out


def test_without_skypilot_the_command_says_how_to_enable_it(demo: Project, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cloud.importlib.util, "find_spec", lambda name: None)
    assert cli_main(["cloud", "launch", str(demo.config_path), "--yes"]) != 0
    err = capsys.readouterr().err
    assert "SkyPilot is not installed" in err and 'pip install "skypilot[runpod]"' in err and "sky check" in err
    assert "studio-train cloud setup" in err


def test_cloud_setup_installs_skypilot_in_a_cloud_environment_of_its_own(
        demo: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from fixtures.wheelhouse import build_wheel

    from studio.core.cloud.bridge import BridgeApi
    from studio.core.cloud.environment import CLOUD_ENV_VAR
    from studio.core.resources import app_root
    from studio.core.trainenv.packages import pinned_versions

    version = pinned_versions(app_root() / "constraints" / "cloud.txt")["skypilot"]
    build_wheel(tmp_path / "wheels", "skypilot", version, {"sky/__init__.py": "def get(request):\n    return request\n"})
    monkeypatch.setenv(CLOUD_ENV_VAR, str(tmp_path / "cloud-env"))
    monkeypatch.setattr(cloud.importlib.util, "find_spec", lambda name: None)
    assert cli_main(["cloud", "setup", "--wheelhouse", str(tmp_path / "wheels")]) == 0
    out = capsys.readouterr().out
    assert f"Installing SkyPilot into {tmp_path / 'cloud-env'}" in out and "SkyPilot is ready" in out and "check" in out
    assert isinstance(cloud.cloud_api(), BridgeApi)
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv(CLOUD_ENV_VAR, str(tmp_path / "second"))
    assert cli_main(["cloud", "setup", "--wheelhouse", str(tmp_path / "empty")]) == 1
    assert "installing SkyPilot failed" in capsys.readouterr().err


def test_pull_brings_the_run_into_the_projects_output_folder(demo: Project, fake: FakeCloud,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    # A project whose runs go to outputs/ had its cloud run brought back into runs/, which its Runs page never shows.
    from studio.core.config.files.toml_file import save_config

    config = demo.load_config()
    config.output.dir = "outputs"
    save_config(config, demo.config_path)
    assert cli_main(["cloud", "launch", str(demo.config_path), "--yes"]) == 0
    (cluster,) = fake.launched
    assert cli_main(["cloud", "logs", cluster]) == 0
    capsys.readouterr()
    assert cli_main(["cloud", "pull", str(demo.config_path)]) == 0
    assert f"Brought back into {demo.root / 'outputs'};" in capsys.readouterr().out
    lora = demo.root / "outputs" / "20261201-120000-demo" / "output" / "pytorch_lora_weights.safetensors"
    assert lora.read_bytes() == b"lora" and not (demo.root / "runs" / "20261201-120000-demo").exists()


SECRET = "hf_ClusterOnly0123456789abcdef"
GATED = "stabilityai/stable-diffusion-3-medium-diffusers"  # gated in the studio's list of known models


@pytest.fixture
def no_token_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A keyring of the test's own (keyrings.alt's file backend, allowed explicitly), empty; no HF_TOKEN and no
    huggingface_hub login."""
    pytest.importorskip("keyrings.alt", reason="the test keyring is keyrings.alt's file backend")
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyrings.alt.file.PlaintextKeyring")
    monkeypatch.setenv("STUDIO_ALLOW_FILE_KEYRING", "1")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "keyring-home"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    for name in ("HF_TOKEN", "HF_TOKEN_PATH", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    import keyring.core

    monkeypatch.setattr(keyring.core, "_keyring_backend", None)  # chosen again from the environment above
    yield
    keyring.core._keyring_backend = None


def _gated_base(demo: Project) -> None:
    from studio.core.config.files.toml_file import save_config

    config = demo.load_config()
    config.model.family, config.model.base = "sd3", GATED
    save_config(config, demo.config_path)


def _holding(secret: str, *folders: Path) -> list[Path]:
    return [p for folder in folders for p in folder.rglob("*")
            if p.is_file() and "keyring-home" not in p.parts and secret.encode() in p.read_bytes()]


@pytest.mark.parametrize("kept", ["keyring", "HF_TOKEN"])
def test_a_launch_gives_the_cluster_the_hub_token_and_no_file_holds_it(
        kept: str, demo: Project, fake: FakeCloud, no_token_here: None, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # A gated base downloads on the cluster: without the token it failed there after minutes of paid set-up.
    from studio.core.models.hub_token import store_token
    from studio.core.user_dirs import data_dir

    if kept == "keyring":
        store_token(SECRET)
    else:
        monkeypatch.setenv("HF_TOKEN", SECRET)
    _gated_base(demo)
    assert cli_main(["cloud", "launch", str(demo.config_path), "--yes"]) == 0
    (cluster,) = fake.launched
    assert fake.secrets[cluster] == {"HF_TOKEN": SECRET}
    printed = capsys.readouterr()
    assert SECRET not in printed.out + printed.err
    assert _holding(SECRET, data_dir(), demo.root, fake.homes) == []  # bundle, sky.yaml, cluster.json, the cluster


def test_a_gated_base_with_no_token_is_refused_before_anything_is_rented(
        demo: Project, fake: FakeCloud, no_token_here: None, capsys: pytest.CaptureFixture[str]) -> None:
    _gated_base(demo)
    assert cli_main(["cloud", "launch", str(demo.config_path), "--yes"]) == 1
    err = capsys.readouterr().err
    assert f"{GATED} is gated and no Hugging Face token is kept here" in err and "--set-token" in err
    assert not fake.offered and not fake.launched


def test_a_bundle_with_its_model_inside_gets_no_token(demo: Project, fake: FakeCloud,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET)  # the demo's model goes with the bundle: nothing downloads there
    assert cli_main(["cloud", "launch", str(demo.config_path), "--yes"]) == 0
    (cluster,) = fake.launched
    assert fake.secrets[cluster] == {}


def test_following_a_run_that_failed_there_exits_non_zero(demo: Project, fake: FakeCloud,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # `cloud logs` exited 0 after a failed run, so `launch --yes && logs && use the result` went on.
    from studio.core.cloud.api import ClusterState

    assert cli_main(["cloud", "launch", str(demo.config_path), "--yes"]) == 0
    (cluster,) = fake.launched
    monkeypatch.setattr(fake, "state", lambda name: ClusterState(name, "UP", "FAILED_SETUP"))
    capsys.readouterr()
    assert cli_main(["cloud", "logs", cluster]) == 1
    captured = capsys.readouterr()
    assert "steps: 8/8" in captured.out
    assert f"error: the run on {cluster} ended FAILED_SETUP" in captured.err
    monkeypatch.setattr(fake, "state", lambda name: ClusterState(name, "UP", "RUNNING"))  # the stream was cut
    assert cli_main(["cloud", "logs", cluster]) == 0


def test_a_second_launch_onto_a_cluster_still_running_the_first_is_refused(
        demo: Project, fake: FakeCloud, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # Both launches name the cluster after the run: SkyPilot synced the second bundle over the first run's files
    # as it trained and queued the second behind it, and the first one's end took the cluster down under it.
    from studio.core.cloud.api import ClusterState

    assert cli_main(["cloud", "launch", str(demo.config_path), "--yes"]) == 0
    (cluster,) = fake.launched
    first = fake.launched[cluster]
    monkeypatch.setattr(fake, "state", lambda name: ClusterState(name, "UP", "RUNNING") if name == cluster
                        else ClusterState(name, "gone"))
    capsys.readouterr()
    assert cli_main(["cloud", "launch", str(demo.config_path), "--yes"]) == 1
    err = capsys.readouterr().err
    assert f"error: {cluster} is still running a run launched before (cluster UP, job RUNNING)" in err
    assert "nothing was started" in err and f"studio-train cloud pull {cluster}" in err and "--name" in err
    assert fake.launched == {cluster: first} and len(fake.offered) == 1
    assert cli_main(["cloud", "launch", str(demo.config_path), "--yes", "--name", "second"]) == 0
    assert "studio-second" in fake.launched


def test_two_exports_for_a_launch_in_one_second_get_folders_of_their_own(demo: Project,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # The bundle's folder is named by the second: a quote asked for again (or a script's next launch) within it
    # failed with "... exists and is not empty".
    import datetime

    from studio.core.cloud.run import export_for_cloud

    class Frozen(datetime.datetime):
        @classmethod
        def now(cls, tz: object = None) -> Frozen:  # type: ignore[override]
            return cls(2026, 12, 7, 12, 0, 0)

    monkeypatch.setattr(datetime, "datetime", Frozen)
    first, second = (export_for_cloud(demo.config_path, include_model=True) for _ in range(2))
    assert (first.folder.name, second.folder.name) == (f"20261207-120000-{first.cluster}",
                                                       f"20261207-120000-{first.cluster}-2")
    assert (first.task_file).is_file() and (second.task_file).is_file()


def test_a_launch_whose_record_cannot_be_written_still_names_the_running_cluster(
        demo: Project, fake: FakeCloud, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # The cluster ran (and billed) while a traceback hid its name and the command that ends it.
    from studio.core.cloud import run

    def disk_full(*_args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(run, "write_launch_record", disk_full)
    assert cli_main(["cloud", "launch", str(demo.config_path), "--yes"]) == 1
    (cluster,) = fake.launched
    captured = capsys.readouterr()
    assert f"studio-train cloud down {cluster}" in captured.out
    assert f"error: {cluster} started, but its record could not be written" in captured.err


def test_the_status_of_a_cluster_that_is_not_there_exits_non_zero(demo: Project, fake: FakeCloud,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """`cloud status` of a cluster ended (or never launched) printed "cluster gone" and exited 0, so a script that
    asked whether its cluster was still there could not tell."""
    assert cli_main(["cloud", "launch", str(demo.config_path), "--yes"]) == 0
    (cluster,) = fake.launched
    assert cli_main(["cloud", "down", cluster, "--yes"]) == 0
    capsys.readouterr()
    assert cli_main(["cloud", "status", str(demo.config_path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"error: there is no cluster {cluster}: it has ended (`studio-train cloud down`")
    assert "`sky status` lists the clusters there are" in captured.err
    assert cli_main(["cloud", "status", "studio-never-launched"]) == 1
    assert "error: there is no cluster studio-never-launched: none was launched under that name from here" in (
        capsys.readouterr().err)
    other = demo.root / "other.toml"
    other.write_text(demo.config_path.read_text(encoding="utf-8"), encoding="utf-8")
    assert cli_main(["cloud", "status", str(other)]) == 2  # a project never launched: no cluster to ask about
    assert f"error: no launch of '{other}' is recorded on this machine" in capsys.readouterr().err

"""`studio-train cloud`: launch a project's run through the cloud boundary (a fake of SkyPilot's API here),
see SkyPilot's offer beside the studio's price, follow, bring back and end it; without SkyPilot, how to enable it."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from studio.cli import main as cli_main
from studio.core.cloud import launcher as cloud
from studio.core.cloud.api import ClusterState, Offer
from studio.core.project.folder import Project


class FakeCloud:
    """SkyPilot's side: takes the task file as SkyPilot would, and 'runs' it by leaving a finished run folder."""

    def __init__(self) -> None:
        self.launched: dict[str, Path] = {}
        self.downed: list[str] = []

    def offers(self, task_file: Path) -> list[Offer]:
        assert task_file.name == "sky.yaml" and task_file.is_file()
        return [Offer("runpod", "EU-RO-1", "{'H100': 2}", 5.98)]

    def launch(self, task_file: Path, cluster: str) -> int:
        self.launched[cluster] = task_file.parent
        run = task_file.parent / "runs" / "20261201-120000-demo"
        (run / "output").mkdir(parents=True)
        (run / "events.jsonl").write_text('{"v":1,"type":"run_finished","time":1,"status":"completed","step":8}\n')
        (run / "output" / "pytorch_lora_weights.safetensors").write_bytes(b"lora")
        return 7

    def state(self, cluster: str) -> ClusterState:
        return ClusterState(cluster, "gone" if cluster in self.downed else "UP", "SUCCEEDED")

    def logs(self, cluster: str, follow: bool = True) -> Iterator[str]:
        yield "launch.sh: node 0 of 1, 2 process(es) here, 2 in all\n"
        yield "steps: 8/8 loss=0.123\n"

    def down(self, cluster: str) -> None:
        self.downed.append(cluster)

    def pull(self, cluster: str, remote_path: str, local_dir: Path) -> None:
        shutil.copytree(self.launched[cluster] / remote_path, local_dir, dirs_exist_ok=True)


@pytest.fixture
def fake() -> Iterator[FakeCloud]:
    instance = FakeCloud()
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
    assert cli_main(["cloud", "down", cluster]) == 0
    assert fake.downed == [cluster] and "billing has stopped" in capsys.readouterr().out


def test_launch_asks_first_and_starts_nothing_without_an_answer(demo: Project, fake: FakeCloud,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["cloud", "launch", str(demo.config_path)]) == 0
    captured = capsys.readouterr()
    assert not fake.launched and "Not started" in captured.out and "--yes" in captured.err


def test_without_skypilot_the_command_says_how_to_enable_it(demo: Project, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cloud.importlib.util, "find_spec", lambda name: None)
    assert cli_main(["cloud", "launch", str(demo.config_path), "--yes"]) != 0
    err = capsys.readouterr().err
    assert "SkyPilot is not installed" in err and 'pip install "skypilot[runpod]"' in err and "sky check" in err

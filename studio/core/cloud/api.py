"""The boundary between the studio and a cloud launcher: what the studio asks of it, and which one is used.

`CloudApi` is all the studio needs from SkyPilot: an answer on price and availability, launch a
bundle's sky.yaml detached, its status, its log stream, tear it down, bring results back, and a
shell command on the cluster (the run's events and console are followed through it, as over SSH). `skypilot.py` is the one module that imports SkyPilot; `launcher.py` picks it
(or a test's fake of this protocol). The person's cloud credentials stay in SkyPilot's own configuration.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

ENABLE_HINT = ("SkyPilot is not installed in the studio's environment: install the studio's cloud extra, "
               "`pip install \"sd-training-studio[cloud]\"`, or SkyPilot with the clouds you use, "
               "`pip install \"skypilot[runpod]\"` (e.g. skypilot[aws,gcp,lambda]), then enable a cloud with "
               "`sky check`; the bundle's sky.yaml also runs with `sky launch` by hand")


class CloudError(RuntimeError):
    """A cloud request that failed; the message says what and what to do."""


@dataclass(frozen=True)
class Offer:
    """One answer of the launcher's optimizer: where the task would run and what it costs per hour."""

    cloud: str
    region: str
    accelerators: str
    per_hour: float
    spot: bool = False

    def describe(self) -> str:
        kind = "spot" if self.spot else "on demand"
        return f"{self.accelerators} on {self.cloud} ({self.region}), {self.per_hour:.2f} USD/h {kind}"


@dataclass(frozen=True)
class ClusterState:
    name: str
    status: str  # UP | INIT | STOPPED | gone
    job: str | None = None  # the run's job status: PENDING | RUNNING | SUCCEEDED | FAILED | CANCELLED ...

    @property
    def running(self) -> bool:
        return self.status in ("UP", "INIT") and self.job in (None, "INIT", "PENDING", "SETTING_UP", "RUNNING")


class CloudApi(Protocol):
    def offers(self, task_file: Path) -> list[Offer]:
        """The cheapest matching offers for the task, best first (nothing is started)."""
        ...

    def launch(self, task_file: Path, cluster: str, secrets: Mapping[str, str] | None = None) -> int:
        """Start the task on a new cluster, detached; the job id. `secrets` (the hub token) are set in the
        task's environment there, never written into the task file."""
        ...

    def state(self, cluster: str) -> ClusterState: ...

    def logs(self, cluster: str, follow: bool = True) -> Iterator[str]: ...

    def down(self, cluster: str) -> None: ...

    def pull(self, cluster: str, remote_path: str, local_dir: Path) -> None:
        """Copy `remote_path` (relative to the task's workdir there) into `local_dir`."""
        ...

    def shell(self, cluster: str, script: str) -> list[str]:
        """The command (argv, run here) that runs the `sh` script `script` on the cluster's head node, in the
        home folder there (the task's workdir is `sky_workdir/` in it); its stdout comes back as the command's,
        and a lost connection exits 255 as ssh does. Following the run's files and Stop go through it."""
        ...

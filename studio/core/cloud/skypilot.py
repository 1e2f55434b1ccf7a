"""SkyPilot's Python API behind the studio's `CloudApi`: the only module that imports `sky`.

Every SkyPilot call is a request to its API server (started on demand); `sky.get` and
`sky.stream_and_get` wait for the answer. Errors come back as SkyPilot's exceptions and leave
here as CloudError with SkyPilot's own words, which name the cloud, the quota or the credential.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from studio.core.cloud.api import CloudError, ClusterState, Offer


def _sky() -> Any:
    import sky

    return sky


class SkyPilotApi:
    def _task(self, task_file: Path) -> Any:
        try:
            task = _sky().Task.from_yaml(str(task_file))
        except Exception as exc:  # SkyPilot's schema errors are many types; all are the file's fault
            raise CloudError(f"SkyPilot cannot read {task_file}: {exc}") from None
        # SkyPilot reads a relative workdir against the folder the studio was started from; the bundle's
        # `workdir: .` is the bundle itself, the files that must reach the cluster.
        workdir = getattr(task, "workdir", None)
        if isinstance(workdir, str) and not os.path.isabs(os.path.expanduser(workdir)):
            task.workdir = str(task_file.resolve().parent / workdir)
        return task

    def _call(self, what: str, request: Any, stream: bool = False) -> Any:
        sky = _sky()
        try:
            return sky.stream_and_get(request) if stream else sky.get(request)
        except Exception as exc:
            raise CloudError(f"SkyPilot could not {what}: {exc}") from None

    def offers(self, task_file: Path) -> list[Offer]:
        sky = _sky()
        task = self._task(task_file)
        dag = sky.Dag()
        dag.add(task)
        optimized = self._call("find an offer (run `sky check` to enable a cloud)", sky.optimize(dag))
        out = []
        for chosen in getattr(optimized, "tasks", [task]):
            resources = getattr(chosen, "best_resources", None)
            if resources is None:
                continue
            out.append(Offer(cloud=str(resources.cloud), region=str(resources.region or "?"),
                             accelerators=str(resources.accelerators), spot=bool(resources.use_spot),
                             per_hour=float(resources.get_cost(3600)) * max(int(chosen.num_nodes), 1)))
        return out

    def launch(self, task_file: Path, cluster: str, secrets: Mapping[str, str] | None = None) -> int:
        sky = _sky()
        task = self._task(task_file)
        if secrets:
            # SkyPilot's own secrets: set for setup and run there, shown redacted in its logs and dashboard.
            task.update_secrets(dict(secrets))
        job_id, _handle = self._call(f"launch {cluster}", sky.launch(task, cluster_name=cluster), stream=True)
        return int(job_id or 1)

    def state(self, cluster: str) -> ClusterState:
        sky = _sky()
        records = self._call(f"read the status of {cluster}", sky.status(cluster_names=[cluster]))
        if not records:
            return ClusterState(cluster, "gone")
        # A record is a mapping up to SkyPilot 0.10, an object with attributes after.
        record = records[0]
        found = record.get("status", "?") if isinstance(record, dict) else getattr(record, "status", "?")
        status = str(found).rsplit(".", 1)[-1]
        jobs = self._call(f"read the job of {cluster}", sky.job_status(cluster)) if status == "UP" else {}
        job = next(iter(jobs.values()), None) if jobs else None
        return ClusterState(cluster, status, None if job is None else str(job).rsplit(".", 1)[-1])

    def logs(self, cluster: str, follow: bool = True) -> Iterator[str]:
        sky = _sky()
        try:
            lines = sky.tail_logs(cluster, None, follow=follow, preload_content=False)
        except Exception as exc:
            raise CloudError(f"SkyPilot could not stream the logs of {cluster}: {exc}") from None
        for line in lines if not isinstance(lines, int) else ():
            if line is not None:
                yield line

    def down(self, cluster: str) -> None:
        sky = _sky()
        self._call(f"tear down {cluster}", sky.down(cluster))

    def shell(self, cluster: str, script: str) -> list[str]:
        """ssh to the alias SkyPilot writes for every cluster (its keys, its user); never a password prompt."""
        return ["ssh", "-o", "BatchMode=yes", "-o", "ServerAliveInterval=15", cluster, f"sh -c {shlex.quote(script)}"]

    def pull(self, cluster: str, remote_path: str, local_dir: Path) -> None:
        """rsync over the ssh alias SkyPilot writes for every cluster; links copied as links, never followed."""
        local_dir.mkdir(parents=True, exist_ok=True)
        source = f"{cluster}:sky_workdir/{remote_path.strip('/')}/"
        done = subprocess.run(["rsync", "-a", "--links", "--safe-links", "--no-devices", "--no-specials",
                               source, f"{local_dir}/"], capture_output=True, text=True)
        if done.returncode != 0:
            raise CloudError(f"bringing back {source} failed (rsync {done.returncode}): {done.stderr.strip()[-500:]}; "
                             f"run it again (only what is missing is copied): rsync -a {shlex.quote(source)} "
                             f"{shlex.quote(str(local_dir))}/")

"""SkyPilot in another Python: the desktop app carries no SkyPilot, so its cloud requests go to the
cloud environment's interpreter (environment.py), one process per request.

`BridgeApi` is the studio's side (a `CloudApi`); `python -m studio.core.cloud.bridge` is the other side: it
reads one request as JSON on stdin, asks SkyPilot (skypilot.py) in its own process and prints the answer
as one JSON line (`{"ok": ...}` or `{"error": "..."}`); log lines stream as `{"line": "..."}` first. Only
the standard library and this package's cloud modules are imported there.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from studio.core.app_words import command_or_action
from studio.core.cloud.api import CloudError, ClusterState, Offer

REQUEST_TIMEOUT_S = 3600  # a launch streams SkyPilot's provisioning, which can take many minutes


class BridgeApi:
    """A `CloudApi` whose every call runs in `python` (an interpreter with SkyPilot)."""

    def __init__(self, python: Path, source: Path, extra_paths: Sequence[Path] = ()) -> None:
        self.python = python
        # The studio's own source (the frozen app's copy) and, for a stand-in SkyPilot, its folder.
        self.paths = [str(source), *map(str, extra_paths)]

    def _command(self) -> tuple[list[str], dict[str, str]]:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(self.paths), PYTHONUNBUFFERED="1")
        return [str(self.python), "-m", "studio.core.cloud.bridge"], env

    def _request(self, verb: str, **args: Any) -> Any:
        command, env = self._command()
        try:
            done = subprocess.run(command, input=json.dumps({"verb": verb, "args": args}), capture_output=True,
                                  text=True, env=env, timeout=REQUEST_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CloudError(f"the cloud environment ({self.python}) did not answer: {exc}") from None
        return _answer(done.stdout, done.stderr, self.python)

    def offers(self, task_file: Path) -> list[Offer]:
        return [Offer(**offer) for offer in self._request("offers", task_file=str(task_file))]

    def launch(self, task_file: Path, cluster: str, secrets: Mapping[str, str] | None = None) -> int:
        # The secrets travel in the request on stdin: not on the command line, not in the environment.
        return int(self._request("launch", task_file=str(task_file), cluster=cluster, secrets=dict(secrets or {})))

    def state(self, cluster: str) -> ClusterState:
        return ClusterState(**self._request("state", cluster=cluster))

    def logs(self, cluster: str, follow: bool = True) -> Iterator[str]:
        command, env = self._command()
        with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True, env=env) as process:
            assert process.stdin is not None and process.stdout is not None
            process.stdin.write(json.dumps({"verb": "logs", "args": {"cluster": cluster, "follow": follow}}))
            process.stdin.close()
            try:
                for raw in process.stdout:
                    message = _parse(raw)
                    if "line" in message:
                        yield message["line"]
                    elif "error" in message:
                        raise CloudError(message["error"])
            finally:
                if process.poll() is None:
                    process.kill()

    def down(self, cluster: str) -> None:
        self._request("down", cluster=cluster)

    def pull(self, cluster: str, remote_path: str, local_dir: Path) -> None:
        self._request("pull", cluster=cluster, remote_path=remote_path, local_dir=str(local_dir))

    def shell(self, cluster: str, script: str) -> list[str]:
        return [str(part) for part in self._request("shell", cluster=cluster, script=script)]


def _parse(raw: str) -> dict[str, Any]:
    try:
        message = json.loads(raw)
    except json.JSONDecodeError:
        return {}
    return message if isinstance(message, dict) else {}


def _answer(stdout: str, stderr: str, python: Path) -> Any:
    for raw in reversed(stdout.splitlines()):
        message = _parse(raw)
        if "error" in message:
            raise CloudError(str(message["error"]))
        if "ok" in message:
            return message["ok"]
    last = stderr.strip().splitlines()[-3:]
    raise CloudError(f"the cloud environment ({python}) gave no answer" + (f": {' / '.join(last)}" if last else "")
                     + "; set it up again (Install SkyPilot…"
                     + command_or_action(", or studio-train cloud setup)", " on the Export page)"))


def serve(request: dict[str, Any], out: Any = sys.stdout) -> None:
    """Answer one request with SkyPilot's adapter in this process."""
    from studio.core.cloud.skypilot import SkyPilotApi

    api, verb, args = SkyPilotApi(), request.get("verb"), request.get("args") or {}

    def say(message: dict[str, Any]) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    try:
        if verb == "offers":
            result: Any = [dataclasses.asdict(o) for o in api.offers(Path(args["task_file"]))]
        elif verb == "launch":
            result = api.launch(Path(args["task_file"]), args["cluster"], args.get("secrets") or None)
        elif verb == "state":
            result = dataclasses.asdict(api.state(args["cluster"]))
        elif verb == "logs":
            for line in api.logs(args["cluster"], bool(args.get("follow", True))):
                say({"line": line})
            result = None
        elif verb == "down":
            api.down(args["cluster"])
            result = None
        elif verb == "pull":
            api.pull(args["cluster"], args["remote_path"], Path(args["local_dir"]))
            result = None
        elif verb == "shell":
            result = api.shell(args["cluster"], args["script"])
        else:
            raise CloudError(f"the cloud bridge does not know the request {verb!r}")
    except CloudError as exc:
        say({"error": str(exc)})
        return
    except Exception as exc:  # SkyPilot's own failures: its words reach the person
        say({"error": f"SkyPilot failed: {type(exc).__name__}: {exc}"})
        return
    say({"ok": result})


if __name__ == "__main__":
    serve(json.loads(sys.stdin.read()))

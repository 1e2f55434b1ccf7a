"""What a remote machine offers a run: Python, GPUs (nvidia-smi), rsync, tmux/screen, workspace and disk.

One SSH call runs a short sh script that prints `key=value` lines; `MachineReport`
reads them and says what is missing in words a person can act on.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from studio.core.remote.machines import STATE_DIR
from studio.core.remote.ssh import RemoteError, SshClient, remote_path

MIN_PYTHON = (3, 11)


@dataclass
class RemoteGpu:
    index: int
    name: str
    total_mb: int


@dataclass
class MachineReport:
    machine: str
    target: str
    workspace: str = ""  # absolute, on the machine
    writable: bool = False
    python: str = ""  # its version, or what went wrong
    python_ok: bool = False
    rsync: bool = False
    tmux: bool = False
    screen: bool = False
    setsid: bool = False
    nvidia_smi: bool = False
    gpus: list[RemoteGpu] = field(default_factory=list)
    gpu_error: str = ""
    free_gb: float | None = None
    system: str = ""
    active_runs: list[str] = field(default_factory=list)  # pid files of the project's live runs there

    @property
    def detach_mode(self) -> str:
        """How a run outlives the SSH session there when the machine says "auto"."""
        return "tmux" if self.tmux else "screen" if self.screen else "nohup"

    def gpu_text(self) -> str:
        if not self.nvidia_smi:
            return "no GPU on the remote (nvidia-smi is not installed there)"
        if not self.gpus:
            return f"no GPU on the remote ({self.gpu_error or 'nvidia-smi lists none'})"
        names = sorted({g.name for g in self.gpus})
        return f"{len(self.gpus)} GPU(s): " + ", ".join(f"{n} ({self._size(n)})" for n in names)

    def _size(self, name: str) -> str:
        sizes = sorted({g.total_mb for g in self.gpus if g.name == name})
        return "/".join(f"{mb / 1024:.0f} GB" for mb in sizes)

    def problems(self) -> list[str]:
        """What stops a run from starting there."""
        found = []
        if not self.python_ok:
            found.append(f"Python {'.'.join(map(str, MIN_PYTHON))}+ is needed there: {self.python or 'not found'}; "
                         "set the machine's python to the interpreter that has the training packages")
        if not self.writable:
            found.append(f"the workspace {self.workspace or '?'} cannot be written; choose another workspace folder")
        return found

    def summary(self) -> str:
        lines = [
            f"Connected to {self.machine} ({self.target}): {self.system}",
            f"  Python: {self.python or 'not found'}",
            f"  GPUs: {self.gpu_text()}",
            f"  Workspace: {self.workspace}" + (f" ({self.free_gb:.1f} GB free)" if self.free_gb is not None else "")
            + ("" if self.writable else " (NOT writable)"),
            f"  Copies with: {'rsync' if self.rsync else 'sftp (no rsync there)'}; runs detached with: "
            f"{self.detach_mode}",
        ]
        lines += [f"Problem: {p}" for p in self.problems()]
        return "\n".join(lines)


_SCRIPT = r"""
echo "system=$(uname -sm 2>/dev/null)"
WS=@@WORKSPACE@@
PROJECT=@@PROJECT@@
if mkdir -p "$WS" 2>/dev/null && cd "$WS"; then
    echo "workspace=$(pwd -P)"
    if touch .studio-write-test 2>/dev/null; then rm -f .studio-write-test; echo writable=1; fi
    echo "free_kb=$(df -Pk . | awk 'NR==2 {print $4}')"
else
    echo "workspace=$WS"
fi
echo "python=$(@@PYTHON@@ -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>&1 | tail -n 1)"
for tool in rsync tmux screen setsid nvidia-smi; do
    command -v "$tool" >/dev/null 2>&1 && echo "has_$tool=1"
done
if [ -n "$PROJECT" ] && [ -d "$WS/$PROJECT/@@STATE@@" ]; then
    for f in "$WS/$PROJECT"/@@STATE@@/*.pid; do
        pid=$(cat "$f" 2>/dev/null)
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
            # Still the run's launcher (as control.py judges): after a restart of the machine an old pid
            # file's number may be another program's.
            if [ ! -d /proc ] || grep -aq launch.sh "/proc/$pid/cmdline" 2>/dev/null; then echo "active=$f"; fi
        fi
    done
fi
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader,nounits 2>&1 | sed 's/^/gpu=/'
fi
"""


def probe_machine(client: SshClient, project: str = "") -> MachineReport:
    """Ask the machine what it has (one SSH call), and which runs of `project` (a folder in its
    workspace) are still going there; raises RemoteError when it cannot be reached."""
    m = client.machine
    script = (_SCRIPT.replace("@@WORKSPACE@@", remote_path(m.workspace)).replace("@@PYTHON@@", remote_path(m.python))
              .replace("@@PROJECT@@", shlex.quote(project)).replace("@@STATE@@", STATE_DIR))
    out = client.run(script, "checking the machine", timeout_s=60).stdout
    return parse_report(m.name, m.describe(), out)


def parse_report(name: str, target: str, out: str) -> MachineReport:
    report = MachineReport(machine=name, target=target)
    for line in out.splitlines():
        key, _, value = line.partition("=")
        value = value.strip()
        if key == "system":
            report.system = value
        elif key == "workspace":
            report.workspace = value
        elif key == "writable":
            report.writable = True
        elif key == "free_kb" and value.isdigit():
            report.free_gb = int(value) / 2**20
        elif key == "python":
            report.python = value
            report.python_ok = _version_ok(value)
        elif key.startswith("has_"):
            setattr(report, key[4:].replace("-", "_"), True)
        elif key == "gpu":
            _add_gpu(report, value)
        elif key == "active":
            report.active_runs.append(value)
    return report


def _version_ok(text: str) -> bool:
    try:
        parts = tuple(int(p) for p in text.split(".")[:2])
    except ValueError:
        return False
    return len(parts) == 2 and parts >= MIN_PYTHON


def _add_gpu(report: MachineReport, value: str) -> None:
    parts = [p.strip() for p in value.split(",")]
    try:
        report.gpus.append(RemoteGpu(int(parts[0]), parts[1], int(float(parts[2]))))
    except (IndexError, ValueError):
        report.gpu_error = value  # nvidia-smi's own words: "has failed because it couldn't communicate ..."


def require_ready(report: MachineReport) -> None:
    problems = report.problems()
    if problems:
        raise RemoteError(f"{report.machine} is not ready for a run: " + "; ".join(problems))

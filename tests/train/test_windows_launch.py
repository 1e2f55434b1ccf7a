"""A run on several GPUs of a Windows workstation: the rendezvous that starts its ranks does without libuv,
which PyTorch for Windows is built without.

Windows is simulated (the platform as the launcher reads it); the rendezvous is torch's own, run for one
process, and says which kind of store it made.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from studio.core.runs.launch import free_port
from studio.train import launcher


class _Windows:
    platform = "win32"

    def __getattr__(self, attribute: str) -> Any:
        return getattr(sys, attribute)


@pytest.mark.parametrize("platform", ["linux", "win32"])
def test_the_ranks_of_a_windows_workstation_meet_without_libuv(monkeypatch: pytest.MonkeyPatch, platform: str) -> None:
    from accelerate.commands import launch
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend, static_tcp_rendezvous

    stores: list[bool] = []

    def start_ranks(args: Any) -> None:  # where torch's launcher meets its ranks (the static rendezvous)
        rendezvous = static_tcp_rendezvous.StaticTCPRendezvous("127.0.0.1", free_port(), 0, 1, "run", 30)
        rendezvous.next_rendezvous()
        stores.append(rendezvous._store.libuvBackend)  # type: ignore[union-attr]

    for module in (static_tcp_rendezvous, c10d_rendezvous_backend):
        monkeypatch.setattr(module, "TCPStore", module.TCPStore)  # as they were, after the test
    for name in ("simple_launcher", "_validate_launch_command"):
        monkeypatch.setattr(launch, name, getattr(launch, name))  # main() wraps them
    monkeypatch.setattr(launch, "multi_gpu_launcher", start_ranks)
    if platform == "win32":
        monkeypatch.setattr(launcher, "sys", _Windows())
    argv = ["--multi_gpu", "--num_processes", "2", "--num_machines", "1", "-m", "studio.train", "run/config.toml"]
    assert launcher.main(argv) == 0
    assert stores == [platform != "win32"]  # libuv where PyTorch has it

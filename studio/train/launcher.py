"""`python -m studio.train.launcher ARGS`: `accelerate launch ARGS`, without its two waits.

accelerate's launcher imports torch, then starts the trainer: a second interpreter that
imports torch again. For a run of one process on one machine (what a desktop run is)
this launcher runs the trainer in its own process instead, with the environment
accelerate prepares for it: the first step comes one import of torch sooner. Every
other run (several processes or machines, chosen GPUs) is accelerate's own launch.
Once the trainer is done, the process leaves at once: the interpreter's teardown of
torch would keep the GUI or the terminal waiting one to three seconds for the exit
code. A trainer's failure is this process's exit code (the trainer has reported it in
its events and console) instead of a traceback of the launcher, for a run of several
processes too: the first rank that failed gives it.

A trainer that accelerate starts in a process of its own gets the machine's cores shared
among the machine's processes, not accelerate's one thread (`OMP_NUM_THREADS=1` on a GPU):
a text encoder kept in system memory (model.text_encoder_on_cpu) encodes every caption on
the CPU, and with one thread a run on a chosen GPU or on several took many times longer.
A thread count given by the person (`OMP_NUM_THREADS`, `--num_cpu_threads_per_process`) stays.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

TRAINER_MODULE = "studio.train"


def runs_here(args: argparse.Namespace) -> bool:
    """Whether accelerate's simple launch of these (validated) arguments is this trainer in one process."""
    return bool(
        args.module and not args.no_python and args.training_script == TRAINER_MODULE
        and (args.num_processes or 1) == 1 and (args.num_machines or 1) == 1
        and args.mpirun_hostfile is None
        # Choosing GPUs sets CUDA_VISIBLE_DEVICES, which only a new process is sure to honour.
        and args.gpu_ids in (None, "all")
    )


def _trainer_in_this_process(spawn: Callable[[argparse.Namespace], None],
                             root_handlers: list[logging.Handler]) -> Callable[[argparse.Namespace], None]:
    def simple_launcher(args: argparse.Namespace) -> None:
        if not runs_here(args):
            spawn(args)
            return
        from accelerate.utils.launch import prepare_simple_launcher_cmd_env

        command, env = prepare_simple_launcher_cmd_env(args)
        os.environ.update(env)
        # accelerate's launcher module gives the root logger a rich handler; the trainer runs as
        # it would in a process of its own.
        logging.getLogger().handlers[:] = root_handlers
        from studio.train.entry import main as trainer

        code = trainer(list(args.training_script_args))
        if code:
            raise subprocess.CalledProcessError(code, command)

    return simple_launcher


def cpu_threads(processes_here: int) -> int:
    """The CPU threads of each of a machine's `processes_here` trainers: its physical cores shared among them."""
    import psutil

    cores = psutil.cpu_count(logical=False) or os.cpu_count() or 1
    return max(1, cores // max(1, processes_here))


def _sharing_the_cores(validate: Callable[[argparse.Namespace], Any]) -> Callable[[argparse.Namespace], Any]:
    def validate_sharing_the_cores(args: argparse.Namespace) -> Any:
        given = args.num_cpu_threads_per_process is not None or "OMP_NUM_THREADS" in os.environ
        validated = validate(args)
        if not given:  # args now holds the config file's values too
            args.num_cpu_threads_per_process = cpu_threads((args.num_processes or 1) // (args.num_machines or 1))
        return validated

    return validate_sharing_the_cores


def _rendezvous_without_libuv(spawn: Callable[[argparse.Namespace], None]) -> Callable[[argparse.Namespace], None]:
    """PyTorch for Windows is built without libuv, which the rendezvous that starts several processes asks for
    by default: a run on several GPUs of a Windows workstation failed before its first rank started."""

    def multi_gpu_launcher(args: argparse.Namespace) -> None:
        import functools

        from torch.distributed import TCPStore
        from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend, static_tcp_rendezvous

        for module in (static_tcp_rendezvous, c10d_rendezvous_backend):  # the fixed port, or a free one
            module.TCPStore = functools.partial(TCPStore, use_libuv=False)  # type: ignore[attr-defined]
        spawn(args)

    return multi_gpu_launcher


def main(argv: Sequence[str] | None = None) -> int:
    root_handlers = list(logging.getLogger().handlers)
    from accelerate.commands import launch

    launch.simple_launcher = _trainer_in_this_process(launch.simple_launcher, root_handlers)
    if sys.platform == "win32":
        launch.multi_gpu_launcher = _rendezvous_without_libuv(launch.multi_gpu_launcher)
    launch._validate_launch_command = _sharing_the_cores(launch._validate_launch_command)
    args = launch.launch_command_parser().parse_args(argv)
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    try:
        launch.launch_command(args)
    except subprocess.CalledProcessError as failed:
        return failed.returncode
    except ChildFailedError as failed:  # a rank of several failed: it said why in the events and the console
        code = failed.get_first_failure()[1].exitcode
        return code if code >= 0 else 128 - code  # a rank ended by a signal: as a shell says it
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

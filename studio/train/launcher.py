"""`python -m studio.train.launcher ARGS`: `accelerate launch ARGS`, without its two waits.

accelerate's launcher imports torch, then starts the trainer: a second interpreter that
imports torch again. For a run of one process on one machine (what a desktop run is)
this launcher runs the trainer in its own process instead, with the environment
accelerate prepares for it: the first step comes one import of torch sooner. Every
other run (several processes or machines, chosen GPUs) is accelerate's own launch.
Once the trainer is done, the process leaves at once: the interpreter's teardown of
torch would keep the GUI or the terminal waiting one to three seconds for the exit
code. A trainer's failure is this process's exit code (the trainer has reported it in
its events and console) instead of a traceback of the launcher.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Sequence

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


def main(argv: Sequence[str] | None = None) -> int:
    root_handlers = list(logging.getLogger().handlers)
    from accelerate.commands import launch

    launch.simple_launcher = _trainer_in_this_process(launch.simple_launcher, root_handlers)
    args = launch.launch_command_parser().parse_args(argv)
    try:
        launch.launch_command(args)
    except subprocess.CalledProcessError as failed:
        return failed.returncode
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

"""Before a launch: the training environment holds the libraries the config asks for that the studio's
own training packages leave out (bitsandbytes for model.quantized_base = "nf4" and for 8-bit AdamW on a
GPU), asked of its interpreter in a subprocess (the window never imports them)."""

from __future__ import annotations

import subprocess

from studio.core.config.rules.quantized_rules import QUANTIZATION_INSTALL
from studio.core.config.schema import TrainConfig
from studio.core.console_window import no_window
from studio.core.training_python import NoTrainingPython, default_training_python

PROBE_TIMEOUT_S = 60
MISSING = 3  # the probe's exit code for a library that is not there


def check_quantization_library(config: TrainConfig, python: str | None, on_gpu: bool = False) -> tuple[str, str] | None:
    """(check, message) when model.quantized_base is nf4, or the optimizer adamw8bit on an NVIDIA GPU (`on_gpu`:
    on the CPU the trainer uses AdamW), and the training interpreter (`python`, else the default one) cannot
    import bitsandbytes; None when it can, or when it cannot be asked (the torch check says why)."""
    needs: tuple[str, str, str] | None = None  # (key, value, the other way)
    if config.model.quantized_base == "nf4":  # int8 is the studio's own
        needs = ("model.quantized_base", "nf4", 'set model.quantized_base = "none"')
    elif config.training.optimizer == "adamw8bit" and on_gpu:
        needs = ("training.optimizer", "adamw8bit", 'choose training.optimizer = "adamw"')
    if needs is None:
        return None
    key, value, instead = needs
    try:
        interpreter = python or default_training_python()
    except NoTrainingPython:
        return None
    script = f"import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('bitsandbytes') else {MISSING})"
    try:
        out = subprocess.run([interpreter, "-c", script], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                             creationflags=no_window())
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != MISSING:
        return None
    return ("library", f'{key} = "{value}" needs the bitsandbytes library, which the training '
                       f"environment {interpreter} lacks: install it there with {QUANTIZATION_INSTALL}, or "
                       f"{instead}.")

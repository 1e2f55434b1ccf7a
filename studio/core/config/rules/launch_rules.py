"""Consistency rules of how a run is launched: the strategy across processes and the launch settings
(see schema.CONSISTENCY_RULES).

Each raises a `Contradiction` naming the key, its value and what to do, as schema's other rules do.
"""

from __future__ import annotations

from typing import Any

from studio.core.config.errors import Contradiction
from studio.core.quoting import control_characters, shown


def check_strategy(config: Any) -> None:
    """What sharding cannot do, named with the reason (one process is allowed: the trainer warns)."""
    if config.launch.strategy != "fsdp":
        return
    if config.method.kind == "lora":
        raise Contradiction("launch.strategy", "fsdp",
                            "shards the weights a full fine-tune trains; a LoRA's trained weights are a few "
                            "megabytes, and the frozen base is not sharded. Use strategy \"ddp\" for LoRA "
                            "(or method.kind = \"dreambooth\")")
    if config.training.mixed_precision == "fp16":
        raise Contradiction("launch.strategy", "fsdp",
                            "is not available with training.mixed_precision = \"fp16\" (sharded gradients "
                            "would need a sharded loss scaler); use \"bf16\" (every GPU since the RTX 30 and "
                            "A100 series has it) or \"no\"")
    if config.training.optimizer in ("adamw8bit", "adafactor"):
        raise Contradiction("training.optimizer", config.training.optimizer,
                            "is not available with launch.strategy = \"fsdp\" (its update cannot take weights split "
                            "across the GPUs: the first step would fail); use \"adamw\", whose state is split with "
                            "the weights (1/N on each GPU), or strategy \"ddp\"")
    if config.training.optimizer == "prodigy":
        raise Contradiction("training.optimizer", "prodigy",
                            "is not available with launch.strategy = \"fsdp\": it finds its step size from the "
                            "weights it holds, and each GPU holds only its share of them, so the GPUs would train "
                            "with step sizes of their own; use \"adamw\", or strategy \"ddp\"")
    if config.training.compile != "off":
        raise Contradiction("training.compile", config.training.compile,
                            "is not available with launch.strategy = \"fsdp\" (sharding wraps the very blocks the "
                            "compiler would compile, and the pair is untested); set training.compile = \"off\"")


def check_launch(config: Any) -> None:
    launch = config.launch
    if launch.machine_rank >= launch.num_machines:
        raise Contradiction(
            "launch.machine_rank",
            launch.machine_rank,
            f"must be below launch.num_machines ({launch.num_machines})",
        )
    if launch.num_processes < launch.num_machines:
        raise Contradiction(
            "launch.num_processes",
            launch.num_processes,
            f"must be at least launch.num_machines ({launch.num_machines})",
        )


def processes_problem(config: Any, processes: int | None) -> str:
    """What is wrong with `--processes N` given for `config` ("" when nothing, or when none is given): it
    takes launch.num_processes' place, so it is held to that key's bounds and rules (one process per machine
    at least), named as the flag."""
    if processes is None:
        return ""
    bounds = type(config.launch).model_fields["num_processes"].metadata
    low = next((b.ge for b in bounds if getattr(b, "ge", None) is not None), 1)
    high = next((b.le for b in bounds if getattr(b, "le", None) is not None), None)
    if processes < low:
        return f"--processes must be at least {low}, not {processes}"
    if high is not None and processes > high:
        return f"--processes must be at most {high}, not {processes}"
    try:
        check_launch(config.model_copy(update={"launch": config.launch.model_copy(
            update={"num_processes": processes})}))
    except Contradiction as exc:
        if exc.key != "launch.num_processes":
            raise
        return f"--processes {processes} {exc.message}: it counts the processes of all the machines together"
    return ""


def gpu_ids_in_one_string(value: object) -> object:
    """launch.gpu_ids = [0, 1] or gpu_ids = 0, as a TOML list or number: named with the string accelerate takes,
    in the file's words."""
    if isinstance(value, list) or (isinstance(value, int) and not isinstance(value, bool)):
        ids = ",".join(str(i) for i in value) if isinstance(value, list) else str(value)
        raise Contradiction("launch.gpu_ids", value, f"is one string of GPU numbers joined by commas: write "
                            f"gpu_ids = \"{ids}\" (or \"all\")")
    return value


def address_on_one_line(value: str) -> str:
    """launch.main_process_ip: written into accelerate.yaml, where a line break would add keys of its own; no host
    name or address holds a space, and the other machines could not connect to one."""
    if not value.isprintable():
        said = " and ".join(control_characters(value)) or "a character that is not printable"
        raise ValueError(f"{shown(value)} holds {said}: give a host name or an address such as 10.0.0.1")
    if any(char.isspace() for char in value):
        raise ValueError(f"{shown(value)} holds a space: give one host name or address, such as 10.0.0.1")
    return value

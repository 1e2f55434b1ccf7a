"""Checking a checkpoint before it is used, and resuming from the newest intact one.

A checkpoint can be damaged after the studio wrote it: a disk that filled up in another
program, a copy cut short, a file edited by hand. Each one is checked before a byte of it
is loaded (the state file, every safetensors header against the file's size, every trained
weight's name and shape against this run's model, the optimizer's archive), and a damaged
one is skipped with the reason, so a resume continues from the newest checkpoint that is
whole. Only the header is read: checking a checkpoint costs milliseconds.
"""

from __future__ import annotations

import json
import struct
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from studio.core.text import plural
from studio.train.errors import TrainError

Shapes = Mapping[str, tuple[int, ...]]
_DTYPE_BYTES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2,
                "U16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
MAX_HEADER_BYTES = 100 * (1 << 20)


class OtherNetwork(str):
    """A checkpoint problem that is no damage: its trained weights are whole but of another network than this run
    builds (the rank, the network kind or the layers trained edited in the run's config.toml since)."""


def safetensors_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """The tensors of a .safetensors file by name and shape, once its header agrees with the file's bytes;
    ValueError saying what is wrong otherwise."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        raw = handle.read(8)
        if len(raw) < 8:
            raise ValueError(f"{path.name} is {size} bytes long: too short for a safetensors header")
        (length,) = struct.unpack("<Q", raw)
        if length > min(MAX_HEADER_BYTES, size - 8):
            raise ValueError(f"{path.name} announces a {length}-byte header in a {size}-byte file (cut short?)")
        try:
            header = json.loads(handle.read(length))
        except (ValueError, UnicodeDecodeError):
            raise ValueError(f"{path.name} has an unreadable header (not JSON)") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path.name} has a header that is not a table of tensors")
    shapes, end = {}, 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            shape = tuple(int(n) for n in info["shape"])
            start, stop = (int(n) for n in info["data_offsets"])
            width = _DTYPE_BYTES[info["dtype"]]
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path.name}: the entry of {name!r} is not a tensor's") from None
        count = 1
        for n in shape:
            count *= n
        if stop - start != count * width or start < 0 or stop < start:
            raise ValueError(f"{path.name}: {name!r} has {stop - start} bytes for a {list(shape)} tensor")
        shapes[name], end = shape, max(end, stop)
    if 8 + length + end != size:
        raise ValueError(f"{path.name} is {size} bytes but its header needs {8 + length + end} (cut short or "
                         "padded)")
    return shapes


def checkpoint_problem(folder: Path, models: Sequence[Shapes], optimizers: int) -> str | None:
    """Why the checkpoint in `folder` cannot resume this run, or None when it is whole.

    `models` holds each trained model's weights (name -> shape) as this run has them; `optimizers`
    is how many optimizer files accelerate wrote.
    """
    from studio.train.saving.checkpoints import STATE_FILE

    try:
        state = json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
        int(state["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return f"{STATE_FILE} is unreadable or names no step"
    for index, expected in enumerate(models):
        path = folder / f"trainable_{index}.safetensors"
        if not path.is_file():
            if index and (folder / "trainable_0.safetensors").is_file():  # its run trained fewer models
                return OtherNetwork(f"{path.name} is missing: its run trained {plural(index, 'model')}, this run "
                                    f"trains {len(models)}")
            return f"{path.name} is missing"
        try:
            shapes = safetensors_shapes(path)
        except (OSError, ValueError) as exc:
            return str(exc)
        missing = sorted(set(expected) - set(shapes))
        if missing:
            return OtherNetwork(f"{path.name} lacks {len(missing)} trained weight(s), e.g. {missing[0]}")
        for name, shape in expected.items():
            if shapes[name] != tuple(shape):
                return OtherNetwork(f"{path.name}: {name} is {list(shapes[name])}, this run's model has {list(shape)}")
    for index in range(optimizers):
        path = folder / ("optimizer.bin" if index == 0 else f"optimizer_{index}.bin")
        if not path.is_file():
            return f"{path.name} is missing"
        try:
            with zipfile.ZipFile(path) as archive:  # torch.save's format: a zip, checked entry by entry
                bad = archive.testzip()
        except (OSError, zipfile.BadZipFile, EOFError) as exc:
            return f"{path.name} is damaged ({exc})"
        if bad is not None:
            return f"{path.name} is damaged (its entry {bad} fails its checksum)"
    return None


def resume_from(found: Sequence[tuple[int, Path]], problem: Callable[[Path], str | None],
                load: Callable[[Path], Any], warn: Callable[[str], None],
                edited: Callable[[], str] = lambda: "") -> Any:
    """Load the newest intact checkpoint of `found` (oldest first); every skipped one is named with its reason.

    A checkpoint that passes the check but still fails to load (a TrainError of kind checkpoint) is
    skipped too: loading the next one replaces everything the failed one had set. With none left,
    a TrainError of kind checkpoint lists them all; of kind config when every one is whole but of another
    network than this run builds (its settings edited since: `edited` names them, "" when it cannot tell).
    """
    skipped: list[str] = []
    others = 0
    for step, folder in reversed(found):
        why = problem(folder)
        if why is None:
            try:
                result = load(folder)
            except TrainError as exc:
                if exc.kind != "checkpoint":
                    raise
                why = exc.message
            else:
                if skipped:
                    warn(f"resumed from the checkpoint of step {step}; skipped the damaged "
                         f"{'; '.join(skipped)}")
                return result
        skipped.append(f"step-{step} ({why})")
        others += isinstance(why, OtherNetwork)
    if found and others == len(found):
        config = found[-1][1].parent.parent / "config.toml"
        changes = edited()
        raise TrainError(
            "config", f"the checkpoints of this run hold another network than its config now builds"
            f"{f' ({changes})' if changes else ''}: {'; '.join(skipped)}",
            f"set {'those' if changes else 'the method settings (rank, network, layers trained)'} back as they were "
            f"when the run started, in {config}, and resume again; or start a new run with the new settings (the "
            "checkpoints are whole and were left as they are)", path=str(config))
    raise TrainError("checkpoint", f"no checkpoint of this run is intact: {'; '.join(skipped)}",
                     "start a new run from the same settings (the damaged checkpoints were left as they are)",
                     path=str(found[-1][1].parent) if found else None)

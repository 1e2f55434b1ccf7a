"""Reading a sharded checkpoint's index as data only.

torch.distributed.checkpoint keeps the index of a checkpoint (`.metadata`: which rank wrote which
part of which tensor) as a pickle, and its reader unpickles it as it is, so a checkpoint folder
changed by someone else could run code on resume. `DataOnlyReader` reads it with an unpickler that
builds only the index's own data classes, torch's dtypes, layouts and sizes, paths and plain
containers, and refuses anything else with a message, as `studio.train.saving.checkpoints` does for
accelerate's files.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import pickle
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

from studio.train.errors import TrainError

_PLAIN = {("builtins", name) for name in ("set", "frozenset", "slice", "complex", "bytearray")} | {
    ("collections", "OrderedDict"), ("torch", "Size"), ("torch.serialization", "_get_layout")} | {
    ("pathlib", name) for name in ("Path", "PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath")}


class _IndexUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _PLAIN:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if module.startswith("torch.distributed.checkpoint."):
            found = super().find_class(module, name)
            if isinstance(found, type) and (dataclasses.is_dataclass(found) or issubclass(found, enum.Enum)):
                return found
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a checkpoint index")


def read_index(path: Path) -> Metadata:
    """The checkpoint index at `path`, built from data only; TrainError when it holds anything else."""
    try:
        index = _IndexUnpickler(io.BytesIO(path.read_bytes())).load()
    except (pickle.UnpicklingError, AttributeError, EOFError, ImportError, TypeError, ValueError) as exc:
        raise TrainError("checkpoint", f"the index {path} of the sharded checkpoint {path.parent.parent} cannot be "
                         f"read as data ({exc}); it was not loaded",
                         "resume from an earlier checkpoint (delete this one) or start a new run",
                         path=str(path)) from None
    if not isinstance(index, Metadata):
        raise TrainError("checkpoint", f"{path} is not the index of a sharded checkpoint; it was not loaded",
                         "resume from an earlier checkpoint (delete this one) or start a new run", path=str(path))
    return index


class DataOnlyReader(FileSystemReader):
    """torch's file reader, with the index read by `read_index` (the tensors are read as torch reads them)."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        index = read_index(Path(self._get_metadata_path(kwargs.get("rank"))))
        meta = getattr(index, "storage_meta", None) or StorageMeta()
        meta.load_id = self.load_id
        index.storage_meta = meta
        return index

"""A `.safetensors` file's JSON header: 8 bytes giving its length, then a table naming every tensor with its
dtype, shape and data offsets. Read without torch, so a 7 GB checkpoint is described from a few hundred KB."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import orjson

_MAX_HEADER = 100 * 1024 * 1024


class ModelFileError(ValueError):
    """A model file or folder that cannot be read; the message names it and says what to do."""


def safetensors_entries(path: Path) -> dict[str, dict[str, object]]:
    """The header's entry of every tensor of a `.safetensors` file (dtype, shape, data_offsets)."""
    try:
        with open(path, "rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise ModelFileError(f"{path} is too short to be a .safetensors file ({len(prefix)} bytes)")
            if prefix.startswith(b"PK\x03\x04"):
                raise ModelFileError(f"{path} is a .ckpt checkpoint (a zip archive) named .safetensors: rename it "
                                     "to .ckpt, or download the .safetensors version")
            (length,) = struct.unpack("<Q", prefix)
            if not 2 <= length <= _MAX_HEADER:
                raise ModelFileError(f"{path} is not a .safetensors file (its header length {length} is impossible)")
            if length > os.fstat(handle.fileno()).st_size - 8:
                raise ModelFileError(f"{path} is cut short: its header alone should be {length} bytes; "
                                     "re-download the file")
            header = orjson.loads(handle.read(length))
    except OSError as exc:
        raise ModelFileError(f"{path} cannot be read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, orjson.JSONDecodeError):
        raise ModelFileError(f"{path} has a damaged header: it is not a .safetensors file, or was cut short "
                             "while downloading") from None
    if not isinstance(header, dict):
        raise ModelFileError(f"{path} has a damaged header (not a table of tensors)")
    header.pop("__metadata__", None)
    if all(type(entry) is dict for entry in header.values()):
        return header  # the usual case, without copying thousands of entries
    return {name: entry for name, entry in header.items() if isinstance(entry, dict)}

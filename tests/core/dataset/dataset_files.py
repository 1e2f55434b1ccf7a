"""Small real images and header-only PNGs for the dataset tests (imported by name: keep the name unique)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PIL import Image


def make_image(path: Path, size: tuple[int, int] = (64, 48), color: tuple[int, int, int] = (200, 30, 30),
               mode: str = "RGB") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fmt = {".jpg": "JPEG", ".jpeg": "JPEG", ".png": "PNG", ".webp": "WEBP", ".bmp": "BMP"}.get(
        path.suffix.lower(), "PNG")
    Image.new(mode, size, color if mode == "RGB" else 0).save(path, format=fmt)
    return path


MakeDataset = Callable[[dict[str, str | None]], Path]


def png_header_only(path: Path, width: int, height: int) -> Path:
    """A PNG that declares a size but holds no pixel data: a huge image without the memory."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b""))
    return path

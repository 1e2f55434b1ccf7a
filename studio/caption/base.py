"""The interface every captioner implements, the images it is given, and where and how it runs.

A captioner is loaded once per job and called with batches of images; it returns what it
saw (a sentence, or scored tags) and never decides what is written: that is the core's
`compose`, so the Dataset page can re-decide without the model.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from studio.core.dataset.captions.auto_caption import MachineCaption
from studio.core.dataset.captions.captioner_models import CaptionerSource
from studio.core.dataset.image_pixels import as_rgb, upright

if TYPE_CHECKING:
    from PIL import Image

Precision = Literal["auto", "fp32", "fp16", "bf16"]
PRECISIONS: tuple[Precision, ...] = ("auto", "fp32", "fp16", "bf16")
CPU_BATCH_SIZE = 4  # a CPU gains nothing from larger batches and shows progress sooner


class CaptionerError(Exception):
    """A captioning model that cannot be loaded or run; the message says what, where and what to do."""


@dataclass(frozen=True)
class RunSettings:
    """Where and how a captioner runs: "auto" picks the GPU when there is one, in fp16 or bf16."""

    device: str = "auto"  # auto | cpu | cuda | cuda:N
    precision: Precision = "auto"
    batch_size: int | None = None  # None: the model's default on a GPU, CPU_BATCH_SIZE on the CPU
    max_new_tokens: int = 60  # the longest sentence a captioner writes, in its own tokens


class Captioner(ABC):
    """One loaded captioning model; `caption` turns a batch of images into what it saw."""

    kind: str = ""  # blip, florence2, wd14

    def __init__(self, source: CaptionerSource, settings: RunSettings) -> None:
        self.source = source
        self.settings = settings
        self.device = "cpu"
        self.precision = "fp32"

    @property
    def batch_size(self) -> int:
        if self.settings.batch_size:
            return self.settings.batch_size
        if self.device == "cpu":
            return CPU_BATCH_SIZE
        return self.source.known.batch_size if self.source.known is not None else 8

    @abstractmethod
    def caption(self, images: Sequence[tuple[Path, Image.Image]]) -> list[MachineCaption]:
        """What the model says about each image, in order."""

    def describe(self) -> str:
        return f"{self.source.name} ({self.kind}) on {self.device} in {self.precision}"


def load_image(path: Path) -> Image.Image:
    """An image as the trainer sees it: EXIF rotation applied, transparency on white, RGB.

    Raises OSError (or ValueError) for a file that is no readable image, or one larger than Pillow opens.
    """
    from PIL import Image

    try:
        with Image.open(path) as opened:
            return as_rgb(upright(opened))
    except (SyntaxError, Image.DecompressionBombError) as exc:  # a broken header; a picture past Pillow's limit
        raise ValueError(str(exc)) from exc

"""Captioners that write a sentence: BLIP and Florence-2 through transformers' own classes.

Both load from a model folder with `from_pretrained` (no remote code), run in fp16/bf16 on
a GPU and in fp32 on the CPU unless told otherwise, and caption a batch with one `generate`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from studio.caption.base import Captioner, CaptionerError, RunSettings
from studio.core.dataset.captions.auto_caption import MachineCaption
from studio.core.dataset.captions.captioner_models import CaptionerSource

if TYPE_CHECKING:
    import torch
    from PIL import Image

# Florence-2 is asked for a caption of a few sentences: longer ones run past CLIP's 77 tokens.
FLORENCE_TASK = "<DETAILED_CAPTION>"
NUM_BEAMS = 3
_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def choose_device(requested: str) -> torch.device:
    """The torch device for "auto" (the first CUDA GPU, else the CPU) or the one asked for."""
    import torch

    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(requested)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise CaptionerError(f"--device {requested} was asked, but torch sees no CUDA GPU on this machine. "
                             "Use --device auto or cpu, or install a CUDA build of torch.")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise CaptionerError(f"--device {requested} was asked, but torch sees {count} GPU{'s' if count != 1 else ''} "
                             f"(cuda:0 to cuda:{count - 1}). Use one of those, or --device auto.")
    return device


def choose_precision(device: torch.device, requested: str) -> str:
    """fp32 on the CPU; on a GPU bf16 where it is supported, else fp16 (for "auto")."""
    import torch

    if requested != "auto":
        return requested
    if device.type != "cuda":
        return "fp32"
    return "bf16" if torch.cuda.is_bf16_supported() else "fp16"


class VisionLanguageCaptioner(Captioner):
    """BLIP (`BlipForConditionalGeneration`) or Florence-2 (`Florence2ForConditionalGeneration`)."""

    def __init__(self, source: CaptionerSource, settings: RunSettings) -> None:
        super().__init__(source, settings)
        import torch
        import transformers
        from safetensors import SafetensorError

        self.kind = source.kind
        names = {"blip": ("BlipForConditionalGeneration", "BlipProcessor"),
                 "florence2": ("Florence2ForConditionalGeneration", "Florence2Processor")}[source.kind]
        model_class, processor_class = (getattr(transformers, n) for n in names)
        transformers.utils.logging.disable_progress_bar()  # the job reports its own progress
        self.torch_device = choose_device(settings.device)
        self.device = str(self.torch_device)
        self.precision = choose_precision(self.torch_device, settings.precision)
        self.dtype = getattr(torch, _DTYPES[self.precision])
        try:
            self.processor = processor_class.from_pretrained(source.folder)
            self.model = model_class.from_pretrained(source.folder, dtype=self.dtype)
        except (OSError, ValueError, KeyError, SafetensorError) as exc:  # missing, or cut short by a download
            raise CaptionerError(f"Cannot load the {source.kind} model in {source.folder}: {exc}. "
                                 "Download the model again or choose another one.") from exc
        self.model.to(self.torch_device).eval()

    def _inputs(self, images: list[Image.Image]) -> dict[str, Any]:
        if self.kind == "florence2":
            batch = self.processor(text=[FLORENCE_TASK] * len(images), images=images, return_tensors="pt")
        else:
            batch = self.processor(images=images, return_tensors="pt")
        inputs = {key: value.to(self.torch_device) for key, value in batch.items()}
        # The processor makes fp32 pixels; the weights may be fp16/bf16.
        inputs["pixel_values"] = inputs["pixel_values"].to(self.dtype)
        return inputs

    def caption(self, images: Sequence[tuple[Path, Image.Image]]) -> list[MachineCaption]:
        import torch

        if not images:
            return []
        inputs = self._inputs([image for _, image in images])
        try:
            with torch.inference_mode():
                ids = self.model.generate(**inputs, max_new_tokens=self.settings.max_new_tokens,
                                          num_beams=NUM_BEAMS, do_sample=False)
        except torch.OutOfMemoryError as exc:  # the same command would run out again: the batch must shrink
            smaller = max(1, len(images) // 2)
            raise CaptionerError(f"{self.device} ran out of memory captioning {len(images)} images at once. Run the "
                                 f"command again with --batch-size {smaller}: the captions written so far are kept "
                                 "and the job goes on where it stopped.") from exc
        texts = self.processor.batch_decode(ids, skip_special_tokens=True)
        return [MachineCaption(path, " ".join(text.split())) for (path, _), text in zip(images, texts, strict=True)]

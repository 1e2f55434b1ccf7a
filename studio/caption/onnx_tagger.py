"""The WD14-style tagger: an ONNX image classifier with a list of booru tags, run by onnxruntime.

The folder holds `model.onnx` (input: a batch of square BGR images, 0-255, NHWC; output: one
probability per tag) and `selected_tags.csv` (tag_id, name, category, count; category 0 is a
general tag, 4 a character, 9 a rating). Every tag scored at or above the floor is reported
with its score, so thresholds can be changed afterwards without running the model again.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from studio.caption.base import Captioner, CaptionerError, RunSettings
from studio.core.dataset.captions.auto_caption import TAG_SCORE_FLOOR, MachineCaption, ScoredTag, TagCategory
from studio.core.dataset.captions.captioner_models import CaptionerSource

if TYPE_CHECKING:
    import numpy as np
    from PIL import Image

TAG_LIST = "selected_tags.csv"
MODEL_FILE = "model.onnx"
_CATEGORIES: dict[int, TagCategory] = {0: "general", 4: "character", 9: "rating"}
# Emoticons whose underscores are part of the tag; every other tag's underscores become spaces.
_KAOMOJI = frozenset({"0_0", "(o)_(o)", "+_+", "+_-", "._.", "<o>_<o>", "<|>_<|>", "=_=", ">_<", "3_3", "6_9",
                      ">_o", "@_@", "^_^", "o_o", "u_u", "x_x", "|_|", "||_||"})


def tag_name(raw: str) -> str:
    return raw if raw in _KAOMOJI else raw.replace("_", " ")


def read_tag_list(path: Path) -> list[tuple[str, TagCategory]]:
    """(name, category) for every row of a selected_tags.csv, in the model's output order."""
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise CaptionerError(f"Cannot read the tag list {path}: {exc}. Download the tagger again.") from exc
    tags = []
    for number, row in enumerate(rows, start=2):
        name = (row.get("name") or "").strip()
        if not name:
            raise CaptionerError(f"{path} line {number} has no tag name (the file needs the columns "
                                 "tag_id,name,category,count). Download the tagger again.")
        try:
            category = _CATEGORIES.get(int(row.get("category") or 0), "general")
        except ValueError as exc:
            raise CaptionerError(f"{path} line {number}: category {row.get('category')!r} is not a number. "
                                 "Download the tagger again.") from exc
        tags.append((tag_name(name), category))
    return tags


def square_pixels(image: Image.Image, size: int) -> np.ndarray:
    """The tagger's input for one image: padded to a white square, resized, BGR, float 0-255, HWC."""
    import numpy as np
    from PIL import Image

    side = max(image.size)
    square = Image.new("RGB", (side, side), (255, 255, 255))
    square.paste(image, ((side - image.width) // 2, (side - image.height) // 2))
    if side != size:
        square = square.resize((size, size), Image.Resampling.BICUBIC)
    return np.asarray(square, dtype=np.float32)[:, :, ::-1]


class OnnxTagger(Captioner):
    kind = "wd14"

    def __init__(self, source: CaptionerSource, settings: RunSettings) -> None:
        super().__init__(source, settings)
        import onnxruntime
        from onnxruntime.capi import onnxruntime_pybind11_state as ort_errors

        self.tags = read_tag_list(source.folder / TAG_LIST)
        available = onnxruntime.get_available_providers()
        wants_gpu = settings.device == "auto" or settings.device.startswith("cuda")
        if settings.device.startswith("cuda") and "CUDAExecutionProvider" not in available:
            raise CaptionerError(f"--device {settings.device} was asked, but this onnxruntime has no CUDA support. "
                                 "Install onnxruntime-gpu, or use --device auto or cpu.")
        providers: list[str | tuple[str, dict[str, int]]] = ["CPUExecutionProvider"]
        if wants_gpu and "CUDAExecutionProvider" in available:
            index = settings.device.partition(":")[2]  # cuda:N runs on GPU N, not on the first
            providers.insert(0, ("CUDAExecutionProvider", {"device_id": int(index)}) if index else "CUDAExecutionProvider")
        try:
            self.session = onnxruntime.InferenceSession(str(source.folder / MODEL_FILE), providers=providers)
        except (ort_errors.Fail, ort_errors.InvalidProtobuf, ort_errors.InvalidGraph, ort_errors.NoSuchFile,
                ort_errors.InvalidArgument, ort_errors.NotImplemented) as exc:
            raise CaptionerError(f"Cannot load the tagger {source.folder / MODEL_FILE}: {exc}. "
                                 "Download the tagger again.") from exc
        on_gpu = self.session.get_providers()[0] == "CUDAExecutionProvider"
        if settings.device.startswith("cuda") and not on_gpu:
            # onnxruntime falls back to the CPU with a log line when its CUDA provider cannot start.
            raise CaptionerError(f"--device {settings.device} was asked, but onnxruntime could not run the tagger "
                                 "there (a CUDA or cuDNN library it needs is missing, or no such GPU; see the lines "
                                 "above). Install what onnxruntime-gpu needs, or use --device auto or cpu.")
        self.device = (settings.device if settings.device.startswith("cuda") else "cuda") if on_gpu else "cpu"
        model_input = self.session.get_inputs()[0]
        self.precision = {"tensor(float16)": "fp16", "tensor(float)": "fp32"}.get(model_input.type, model_input.type)
        self.input_name = model_input.name
        shape = list(model_input.shape)
        if len(shape) != 4 or not isinstance(shape[1], int) or shape[1] != shape[2] or shape[3] != 3:
            raise CaptionerError(f"{source.folder / MODEL_FILE} takes input of shape {model_input.shape}; a WD14 "
                                 "tagger takes a batch of square RGB images (batch, size, size, 3).")
        self.size = shape[1]

    def caption(self, images: Sequence[tuple[Path, Image.Image]]) -> list[MachineCaption]:
        import numpy as np

        if not images:
            return []
        batch = np.stack([square_pixels(image, self.size) for _, image in images])
        if self.precision == "fp16":
            batch = batch.astype(np.float16)  # a tagger exported in half precision takes half-precision pixels
        scores = self.session.run(None, {self.input_name: batch})[0]
        if scores.shape[-1] != len(self.tags):
            raise CaptionerError(f"The tagger in {self.source.folder} scores {scores.shape[-1]} tags but its "
                                 f"{TAG_LIST} lists {len(self.tags)}; the two files belong to different models.")
        out = []
        for (path, _), row in zip(images, scores, strict=True):
            found = [ScoredTag(self.tags[i][0], float(row[i]), self.tags[i][1])
                     for i in np.flatnonzero(row >= TAG_SCORE_FLOOR)]
            found.sort(key=lambda t: -t.score)
            out.append(MachineCaption(path, tags=tuple(found)))
        return out

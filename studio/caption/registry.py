"""Captioner kinds: which class loads a model of each kind (imported only when used)."""

from __future__ import annotations

import importlib

from studio.caption.base import Captioner, RunSettings
from studio.core.dataset.captions.captioner_models import CaptionerSource

# kind -> (module, class); the module imports torch/transformers or onnxruntime, so it loads on demand.
CAPTIONER_CLASSES: dict[str, tuple[str, str]] = {
    "blip": ("studio.caption.vision_language", "VisionLanguageCaptioner"),
    "florence2": ("studio.caption.vision_language", "VisionLanguageCaptioner"),
    "wd14": ("studio.caption.onnx_tagger", "OnnxTagger"),
}


def load_captioner(source: CaptionerSource, settings: RunSettings) -> Captioner:
    """Load the model of `source` for `settings` (device, precision, batch size)."""
    module_name, class_name = CAPTIONER_CLASSES[source.kind]
    captioner_class: type[Captioner] = getattr(importlib.import_module(module_name), class_name)
    return captioner_class(source, settings)

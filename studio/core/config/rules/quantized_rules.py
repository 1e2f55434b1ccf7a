"""The rules of model.quantized_base: where a quantized base (int8, or bitsandbytes' nf4) can carry the training.

Each raises a `Contradiction` naming the key, its value and what to do, as schema's other rules do.
"""

from __future__ import annotations

from typing import Any

from studio.core.config.errors import Contradiction

# A TrainConfig (schema.py imports these rules, so they do not import it).
TrainConfig = Any

KEY = "model.quantized_base"
# The words that put bitsandbytes (nf4) into a training environment: the studio's extra under its distribution
# name ("studio" on the package index is another project), or the package alone.
QUANTIZATION_INSTALL = 'pip install "sd-training-studio[cuda]" (or pip install bitsandbytes)'


def check_quantized_base(config: TrainConfig) -> None:
    kind, method = config.model.quantized_base, config.method
    if kind == "none":
        return
    if method.kind != "lora":
        raise Contradiction(KEY, kind, "applies to LoRA runs; a full fine-tune (dreambooth) trains the very weights "
                            "it would quantize; set it to \"none\", or train a LoRA")
    if config.model.fp8_base:
        raise Contradiction(KEY, kind, "and model.fp8_base both store the frozen base in fewer bits; choose one: "
                            "set model.fp8_base = false, or model.quantized_base = \"none\"")
    if method.use_dora:
        raise Contradiction(KEY, kind, "cannot be combined with method.use_dora = true: DoRA computes with the base "
                            "weights themselves, which a quantized base does not hold; turn one of them off")
    if kind == "nf4" and method.network in ("loha", "lokr"):
        raise Contradiction(KEY, kind, f"cannot carry a {method.network} (method.network): its update is shaped "
                            "like the base weight, which nf4 packs two to a byte; use int8, or a lora or locon")

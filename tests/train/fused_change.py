"""Load a LoRA file into an SD1.5 or SDXL pipeline with whatever diffusers this interpreter has, fuse it, and write
the change it made to each named module.

Run by tests/train/test_diffusers_strength.py in the compatibility environment (diffusers 0.3x, which
reads no `lora_adapter_metadata`); imports nothing of the studio. Reads {"pipeline", "base", "folder",
"weight_name", "names", "out"} as JSON on stdin (names: "unet.<module>", "text_encoder.<module>" or
"text_encoder_2.<module>"),
writes the changes to `out` (safetensors) and prints the diffusers version.
"""

from __future__ import annotations

import json
import sys

import diffusers
import torch
from safetensors.torch import save_file


def main() -> None:
    case = json.loads(sys.stdin.read())
    name = case.get("pipeline", "StableDiffusionPipeline")
    extra = {"safety_checker": None, "requires_safety_checker": False} if name == "StableDiffusionPipeline" else {}
    pipe = getattr(diffusers, name).from_pretrained(case["base"], **extra)
    modules = {part: getattr(pipe, part) for part in ("unet", "text_encoder", "text_encoder_2") if hasattr(pipe, part)}

    def weight(name: str) -> torch.Tensor:
        component, _, rest = name.partition(".")
        module = modules[component]
        try:
            return module.get_submodule(rest).weight.detach().clone()
        except AttributeError:  # transformers 4.x keeps the CLIP model under text_model
            return module.get_submodule(f"text_model.{rest}").weight.detach().clone()

    before = {name: weight(name) for name in case["names"]}
    pipe.load_lora_weights(case["folder"], weight_name=case["weight_name"])
    pipe.fuse_lora(components=list(modules), lora_scale=1.0)
    save_file({name: (weight(name) - before[name]).contiguous() for name in case["names"]}, case["out"])
    print(json.dumps({"diffusers": diffusers.__version__}))


if __name__ == "__main__":
    main()

"""Load the studio's outputs with whatever diffusers and transformers this interpreter has.

Run by tests/train/test_old_versions.py in the compatibility environment (transformers 4.x,
diffusers 0.3x) and in the studio's own; imports nothing of the studio. Reads a JSON list of
cases on stdin and prints one JSON object: the library versions and a result per case.

- {"kind": "lora", "family", "base", "folder", "weight_name"}: the image and every text
  encoder's embedding with the LoRA loaded, against the base pipeline's.
- {"kind": "folder", "family", "folder"}: each component loaded with its loading report
  (missing and unexpected weights), and an image made by the loaded pipeline.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import diffusers
import numpy as np
import torch
import transformers

PIPELINES = {"sd15": "StableDiffusionPipeline", "sdxl": "StableDiffusionXLPipeline",
             "sd3": "StableDiffusion3Pipeline"}
OPTIONS: dict[str, dict[str, Any]] = {
    "sd15": {"safety_checker": None, "requires_safety_checker": False},
    "sdxl": {},
    "sd3": {"text_encoder_3": None, "tokenizer_3": None},
}
PROMPT = "a red circle on a blue background"
TEXT_ENCODERS = ("text_encoder", "text_encoder_2")


def _pipeline(family: str, folder: str) -> Any:
    pipe = getattr(diffusers, PIPELINES[family]).from_pretrained(folder, **OPTIONS[family])
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _image(pipe: Any) -> np.ndarray:
    out = pipe(PROMPT, num_inference_steps=2, height=64, width=64, guidance_scale=5.0,
               generator=torch.Generator("cpu").manual_seed(5), output_type="np")
    return np.asarray(out.images[0])


def _embeddings(pipe: Any) -> dict[str, np.ndarray]:
    out = {}
    for name in TEXT_ENCODERS:
        encoder, tokenizer = getattr(pipe, name, None), getattr(pipe, name.replace("text_encoder", "tokenizer"), None)
        if encoder is None or tokenizer is None:
            continue
        ids = tokenizer(PROMPT, padding="max_length", max_length=tokenizer.model_max_length, truncation=True,
                        return_tensors="pt").input_ids
        with torch.no_grad():
            out[name] = encoder(ids)[0].float().numpy()
    return out


def lora(case: dict[str, Any]) -> dict[str, Any]:
    pipe = _pipeline(case["family"], case["base"])
    base_image, base_embeddings = _image(pipe), _embeddings(pipe)
    pipe.load_lora_weights(case["folder"], weight_name=case["weight_name"])
    image, embeddings = _image(pipe), _embeddings(pipe)
    return {
        "image_change": float(np.abs(image - base_image).max()),
        "embedding_change": {name: float(np.abs(embeddings[name] - base).max())
                             for name, base in base_embeddings.items()},
    }


def folder(case: dict[str, Any]) -> dict[str, Any]:
    index = json.loads(Path(case["folder"], "model_index.json").read_text(encoding="utf-8"))
    reports = {}
    for name in (*TEXT_ENCODERS, "unet", "transformer", "vae"):
        if not isinstance(index.get(name), list) or index[name][0] is None:
            continue
        library, class_name = index[name]
        module = transformers if library == "transformers" else diffusers
        _, info = getattr(module, class_name).from_pretrained(f"{case['folder']}/{name}", output_loading_info=True)
        reports[name] = {"missing": sorted(info.get("missing_keys", [])),
                         "unexpected": sorted(info.get("unexpected_keys", [])),
                         "mismatched": [str(m[0]) for m in info.get("mismatched_keys", [])]}
    image = _image(_pipeline(case["family"], case["folder"]))
    return {"components": reports, "image_finite": bool(np.isfinite(image).all()), "image_std": float(image.std())}


def main() -> None:
    cases = json.loads(sys.stdin.read())
    results = [lora(case) if case["kind"] == "lora" else folder(case) for case in cases]
    print(json.dumps({"transformers": transformers.__version__, "diffusers": diffusers.__version__,
                      "results": results}))


if __name__ == "__main__":
    main()

"""Count the forward FLOPs of the real denoisers per image: SD1.5, SDXL, SD3-medium, FLUX.2 [klein] 4B,
Z-Image and Qwen-Image.

Run: `python benchmarks/count_flops.py` (writes resources/architectures/flops.json).

Each denoiser is built from its published config on the meta device and runs one
forward pass of batch 1 at its native resolution under torch's FlopCounterMode
(matrix multiplies, convolutions and attention; elementwise work is not counted, as
MFU conventions do). The text input is what the studio trains with: 77 CLIP tokens
for SD1.5 and SDXL, 77 CLIP + 256 zero T5 tokens for SD3, and for the transformer families
(declared by a `COUNTING` in their pipeline module) the 512 caption tokens and the default size
(the [klein] 4B) their counter uses. The trainer turns these
figures into TFLOP/s and MFU (studio/core/estimate/throughput.py);
`tests/train/test_flop_counts.py` recounts SD1.5 and compares.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

import torch

from studio.train.pipelines.arch_configs import (
    LATENT_CHANNELS,
    NATIVE_RESOLUTION,
    architecture_families,
    build_component,
    denoiser_spec,
)

COMPONENT_FAMILIES = architecture_families()
TRANSFORMER_FAMILIES = ("flux2-klein", "zimage", "qwen-image")  # counted from their COUNTING
FAMILIES = (*COMPONENT_FAMILIES, *TRANSFORMER_FAMILIES)

OUT = Path(__file__).resolve().parents[1] / "resources" / "architectures" / "flops.json"
TEXT = {"sd15": (77, 768), "sdxl": (77, 2048), "sd3": (77 + 256, 4096)}


def denoiser_inputs(family: str, resolution: int) -> dict[str, Any]:
    """Keyword arguments of one forward pass of batch 1 on the meta device."""
    meta: dict[str, Any] = {"device": "meta"}
    side = resolution // 8
    tokens, width = TEXT[family]
    latents = torch.empty(1, LATENT_CHANNELS[family], side, side, **meta)
    text = torch.empty(1, tokens, width, **meta)
    if family == "sd3":
        return {"hidden_states": latents, "encoder_hidden_states": text,
                "pooled_projections": torch.empty(1, 2048, **meta), "timestep": torch.ones(1, **meta)}
    kwargs: dict[str, Any] = {"sample": latents, "timestep": torch.ones(1, **meta), "encoder_hidden_states": text}
    if family == "sdxl":
        kwargs["added_cond_kwargs"] = {"text_embeds": torch.empty(1, 1280, **meta),
                                       "time_ids": torch.empty(1, 6, **meta)}
    return kwargs


def _transformer_flops(family: str, resolution: int | None) -> tuple[int, int, str, int, int]:
    """(FLOPs, parameters, class name, resolution, text tokens) of a transformer family's default size."""
    from torch.utils.flop_counter import FlopCounterMode

    from studio.train.pipelines.counting import counting_of

    spec = counting_of(family)
    model = spec.components(spec.sizes[0] if spec.sizes else None)["transformer"].to(torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    side = resolution or spec.resolution
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(**spec.inputs(model, 1, torch.bfloat16, resolution=side, text_tokens=spec.text_tokens))
    return int(counter.get_total_flops()), params, type(model).__name__, side, spec.text_tokens


def forward_flops(family: str, resolution: int | None = None) -> tuple[int, int]:
    """(FLOPs of one forward pass of one image, the denoiser's parameter count)."""
    from torch.utils.flop_counter import FlopCounterMode

    if family in TRANSFORMER_FAMILIES:
        flops, params, *_ = _transformer_flops(family, resolution)
        return flops, params
    _name, class_name, config = denoiser_spec(family)
    model = build_component(class_name, config, "meta")
    params = sum(p.numel() for p in model.parameters())
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(**denoiser_inputs(family, resolution or NATIVE_RESOLUTION[family]), return_dict=False)
    return int(counter.get_total_flops()), params


def count(families: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for family in families:
        if family in TRANSFORMER_FAMILIES:
            flops, params, class_name, side, tokens = _transformer_flops(family, None)
        else:
            flops, params = forward_flops(family)
            _name, class_name, _config = denoiser_spec(family)
            side, tokens = NATIVE_RESOLUTION[family], TEXT[family][0]
        out[family] = {"denoiser": class_name, "params": params, "resolution": side,
                       "text_tokens": tokens, "forward_tflop": round(flops / 1e12, 4)}
        print(f"{family}: {class_name} at {side} px: {flops / 1e12:.3f} TFLOP per image "
              f"(forward), {params / 1e6:,.1f} M parameters", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("families", nargs="*", help=f"families to count: {', '.join(FAMILIES)} (default: all)")
    parser.add_argument("--print-only", action="store_true", help="print, do not write the resource file")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.families) - set(FAMILIES))
    if unknown:
        parser.error(f"unknown families {unknown}; choose from {', '.join(FAMILIES)}")
    counted = count(list(args.families or FAMILIES))
    if args.print_only:
        return 0
    data = json.loads(OUT.read_text()) if OUT.is_file() else {}
    data.update({
        "note": "forward FLOPs of one image at the native resolution (FlopCounterMode on the meta device: "
                "matmuls, convolutions, attention); a training step costs a multiple of it",
        "counted_with": f"benchmarks/count_flops.py, torch {torch.__version__}",
        "date": datetime.date.today().isoformat(),
    })
    data.setdefault("families", {}).update(counted)
    OUT.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

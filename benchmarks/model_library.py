"""How long the model library takes to list checkpoints: headers only, no weights.

Writes N checkpoint files with the tensor names and shapes of real SD1.5, SDXL and SD3
checkpoints (about 1,100 to 2,500 tensors each, as the published files have) and their
real sizes as sparse files, then times `scan_library` over them (cold: nothing cached).

    python benchmarks/model_library.py [--files 500] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from studio.core.models.library import ModelPlace, scan_library

UNET = "model.diffusion_model."


def _tensors(kind: str) -> dict[str, list[int]]:
    """Tensor names and shapes shaped like a real checkpoint of `kind` (counts match the published files)."""
    shapes: dict[str, list[int]] = {f"first_stage_model.decoder.block.{i}.weight": [128, 128, 3, 3] for i in range(248)}
    if kind == "sd15":
        shapes |= {UNET + "input_blocks.0.0.weight": [320, 4, 3, 3],
                   UNET + "input_blocks.2.1.transformer_blocks.0.attn2.to_k.weight": [320, 768]}
        shapes |= {f"{UNET}blocks.{i}.weight": [320, 320] for i in range(686)}
        shapes |= {f"cond_stage_model.transformer.text_model.encoder.layers.{i}.w": [768] for i in range(196)}
    elif kind == "sdxl":
        shapes |= {UNET + "input_blocks.0.0.weight": [320, 4, 3, 3], UNET + "label_emb.0.0.weight": [1280, 2816]}
        shapes |= {f"{UNET}blocks.{i}.weight": [640, 640] for i in range(1680)}
        shapes |= {f"conditioner.embedders.0.transformer.text_model.encoder.layers.{i}.w": [768] for i in range(196)}
        shapes |= {f"conditioner.embedders.1.model.transformer.resblocks.{i}.w": [1280] for i in range(392)}
    else:
        shapes |= {f"{UNET}joint_blocks.{i // 20}.x_block.attn.w{i % 20}": [1536, 1536] for i in range(24 * 20)}
        shapes |= {f"text_encoders.clip_l.transformer.text_model.encoder.layers.{i}.w": [768] for i in range(196)}
        shapes |= {f"text_encoders.clip_g.transformer.text_model.encoder.layers.{i}.w": [1280] for i in range(517)}
    return shapes


def write_checkpoint(path: Path, shapes: dict[str, list[int]], size: int) -> None:
    offset, header = 0, {"__metadata__": {"format": "pt"}}
    for name, shape in shapes.items():
        count = 2
        for dim in shape:
            count *= dim
        header[name] = {"dtype": "F16", "shape": shape, "data_offsets": [offset, offset + count]}
        offset += count
    raw = json.dumps(header).encode()
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)) + raw)
        handle.truncate(max(size, 8 + len(raw)))  # sparse: the real size, no data written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    kinds = {"sd15": 2_132_000_000, "sdxl": 6_938_000_000, "sd3": 5_970_000_000}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "checkpoints"
        folder.mkdir()
        headers = {kind: _tensors(kind) for kind in kinds}
        for i in range(args.files):
            kind = list(kinds)[i % 3]
            sub = folder / f"group {i % 10}"
            sub.mkdir(exist_ok=True)
            write_checkpoint(sub / f"{kind}-model-{i}.safetensors", headers[kind], kinds[kind])
        header_kb = statistics.mean((folder / "group 0" / "sd15-model-0.safetensors").read_bytes()[:8] and
                                    [struct.unpack("<Q", (folder / f"group {i}" / f"{k}-model-{i}.safetensors")
                                                   .read_bytes()[:8])[0] / 1024
                                     for i, k in ((0, "sd15"), (1, "sdxl"), (2, "sd3"))])
        os.environ["STUDIO_CACHE_DIR"] = str(Path(tmp) / "cache")
        cold, warm = [], []
        for _ in range(args.repeat):
            shutil.rmtree(Path(tmp) / "cache", ignore_errors=True)  # a first scan: every header is read
            start = time.perf_counter()
            models = scan_library([ModelPlace("benchmark", folder)])
            cold.append(time.perf_counter() - start)
            start = time.perf_counter()
            scan_library([ModelPlace("benchmark", folder)])  # the next scans: unchanged files are not read again
            warm.append(time.perf_counter() - start)
        families = sorted({m.family or "?" for m in models})
        print(json.dumps({"files": len(models), "families": families, "mean_header_kb": round(header_kb),
                          "first_scan_median_s": round(statistics.median(cold), 3),
                          "first_scan_runs_s": [round(t, 3) for t in cold],
                          "next_scan_median_s": round(statistics.median(warm), 3), "target_s": 2.0,
                          "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
                          "cpus": os.cpu_count()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

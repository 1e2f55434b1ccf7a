"""How fast a single checkpoint file is identified and loaded with no network.

    .venv/bin/python benchmarks/single_file_load.py [--repeat 3]

Writes a full-size SD1.5 checkpoint with random weights (2.0 GB in fp16) into a
temporary folder, then measures:
* `detect_model` (the core, as the Model & Preset page calls it): reading the header
  and naming the kind, median of 50 calls;
* loading the pipeline as the trainer does (`load_single_file`, offline, an empty
  Hugging Face cache), each in a fresh process: the first with no pipeline configs in
  the studio's cache folder (they are written), then with them already there.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, sys, time
start = time.perf_counter()
from diffusers import StableDiffusionPipeline
from studio.train.families.loading import load_single_file
imported = time.perf_counter()
import torch
dtype = {"fp16": torch.float16, "fp32": torch.float32}[sys.argv[2]]
pipe = load_single_file(StableDiffusionPipeline, sys.argv[1], "sd15", dtype, safety_checker=None,
                        requires_safety_checker=False)
done = time.perf_counter()
assert pipe.tokenizer("a photo of a cat").input_ids == [49406, 320, 1125, 539, 320, 2368, 49407]
# VmHWM, not ru_maxrss: the latter keeps the parent's high-water mark across fork and exec.
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"import_s": imported - start, "load_s": done - imported, "rss_mb": hwm / 1024}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from studio.core.models.files import detect_model
    from studio.train.pipelines.full_size import write_random_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        start = time.perf_counter()
        path = write_random_checkpoint(root / "sd15.safetensors", "sd15")
        print(f"wrote {path.stat().st_size / 2**30:.2f} GiB in {time.perf_counter() - start:.1f} s", flush=True)
        times = []
        for _ in range(50):
            start = time.perf_counter()
            info = detect_model(path)
            times.append(time.perf_counter() - start)
        print(f"detect_model: {info.label}, median {statistics.median(times) * 1000:.2f} ms, "
              f"max {max(times) * 1000:.2f} ms (header of {path.stat().st_size / 2**30:.1f} GiB file)")
        env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(root / "hf-empty"), STUDIO_CACHE_DIR=str(root / "cache"))
        for run, dtype in enumerate(["fp16"] * (args.repeat + 1) + ["fp32"]):
            out = subprocess.run([sys.executable, "-c", CHILD, str(path), dtype], env=env, capture_output=True,
                                 text=True, check=False)
            if out.returncode != 0:
                print(out.stderr[-2000:], file=sys.stderr)
                return 1
            figures = json.loads(out.stdout.strip().splitlines()[-1])
            label = "first load (configs written)" if run == 0 else "load (configs cached)"
            label += ", training in fp32 (loaded as fp32)" if dtype == "fp32" else ", training in fp16"
            print(f"{label}: imports {figures['import_s']:.2f} s, pipeline {figures['load_s']:.2f} s, "
                  f"peak RSS {figures['rss_mb']:.0f} MB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

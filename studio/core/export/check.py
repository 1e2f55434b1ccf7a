"""Pre-flight check of an exported bundle, run on the remote machine before paying for training.

Copied into every bundle as `studio_check.py` and run by its check.sh. It uses the
standard library only, so it runs before anything is installed; torch is asked
in a subprocess. Prints a pass/fail table and exits 1 when any check fails.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as metadata
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PASS, WARN, FAIL, SKIP = "PASS", "WARN", "FAIL", "SKIP"
BUNDLE_FILE = "bundle.json"
MANIFEST_FILE = "manifest.json"
REQUIREMENTS_FILE = "requirements.txt"
MIN_PYTHON = (3, 11)
SHOWN = 5  # file names listed per dataset problem

_TORCH_PROBE = r"""
import json, torch
out = {"torch": torch.__version__, "cuda": torch.cuda.is_available(),
       "cuda_version": torch.version.cuda, "gpus": []}
if out["cuda"]:
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out["gpus"].append({"name": p.name, "total_mb": p.total_memory // 2**20})
print(json.dumps(out))
"""


@dataclass
class Result:
    check: str
    status: str
    detail: str


def check_python(bundle: dict[str, Any]) -> Result:
    have = f"{sys.version_info.major}.{sys.version_info.minor}"
    want = str(bundle.get("python", have))
    text = f"{sys.version.split()[0]} (exported with {want})"
    if sys.version_info[:2] < MIN_PYTHON:
        return Result("Python", FAIL, f"{text}: the studio needs Python {'.'.join(map(str, MIN_PYTHON))} or newer")
    return Result("Python", PASS if have == want else WARN, text)


def read_requirements(path: Path) -> list[tuple[str, str | None]]:
    wanted = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        name, _, version = line.partition("==")
        wanted.append((name.strip(), version.strip() or None))
    return wanted


def check_packages(root: Path) -> list[Result]:
    path = root / REQUIREMENTS_FILE
    if not path.is_file():
        return [Result("Packages", FAIL, f"{path} is missing; copy the whole bundle")]
    missing, different = [], []
    for name, version in read_requirements(path):
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
            continue
        if version and have.split("+")[0] != version:
            different.append(f"{name} {have} (exported {version})")
    if missing:
        return [Result("Packages", FAIL, f"not installed: {', '.join(missing)}; run "
                       f"{sys.executable} -m pip install -r {REQUIREMENTS_FILE}")]
    if different:
        return [Result("Packages", WARN, "other versions: " + "; ".join(different))]
    return [Result("Packages", PASS, f"all {len(read_requirements(path))} match {REQUIREMENTS_FILE}")]


def probe_torch(timeout: float = 180.0) -> dict[str, Any] | str:
    """What torch sees, or the reason it could not be asked."""
    try:
        done = subprocess.run([sys.executable, "-c", _TORCH_PROBE], capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return f"importing torch took more than {timeout:.0f} s"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"torch failed to load: {last}"
    try:
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        return f"torch probe printed no result: {done.stdout[-200:]!r}"


def check_gpus(bundle: dict[str, Any], probe: dict[str, Any] | str, gpus_wanted: int,
               allow_no_gpu: bool) -> list[Result]:
    if isinstance(probe, str):
        return [Result("CUDA", FAIL, f"{probe}; install the requirements (pip install -r {REQUIREMENTS_FILE})")]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    where = f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else ""
    if not probe["cuda"]:
        if allow_no_gpu:
            note = "CPU test mode: no GPU needed"
            return [Result("CUDA", SKIP, f"torch {probe['torch']}; {note}"),
                    Result("GPU count", SKIP, note), Result("GPU memory", SKIP, note)]
        build = probe.get("cuda_version") or "none (a CPU-only build)"
        return [Result("CUDA", FAIL, f"no CUDA GPU visible to torch {probe['torch']}{where}, CUDA build {build}; "
                       "check nvidia-smi, the driver and CUDA_VISIBLE_DEVICES, and install a CUDA build of torch"),
                Result("GPU count", FAIL, f"0 GPUs, {gpus_wanted} needed on this node")]
    gpus = probe["gpus"]
    results = [Result("CUDA", PASS, f"torch {probe['torch']}, CUDA {probe.get('cuda_version')}")]
    if len(gpus) < gpus_wanted:
        results.append(Result("GPU count", FAIL, f"{len(gpus)} GPU(s){where}, {gpus_wanted} needed on this node; "
                              "rent more GPUs or set GPUS_PER_NODE (fewer processes train longer)"))
    else:
        results.append(Result("GPU count", PASS, f"{len(gpus)} visible{where}, {gpus_wanted} used: "
                              + ", ".join(sorted({g['name'] for g in gpus}))))
    needed = bundle.get("vram_estimate_mb")
    smallest = min(gpus[:gpus_wanted] or gpus, key=lambda g: g["total_mb"])
    have = f"{smallest['total_mb'] / 1024:.1f} GB on the smallest GPU ({smallest['name']})"
    if not needed:
        results.append(Result("GPU memory", WARN, f"{have}; no estimate in {BUNDLE_FILE}"))
    elif smallest["total_mb"] < needed:
        results.append(Result("GPU memory", FAIL, f"{have}, about {needed / 1024:.1f} GB needed per GPU; "
                              "use larger GPUs, or a smaller batch / gradient checkpointing in the config"))
    else:
        results.append(Result("GPU memory", PASS, f"{have}, about {needed / 1024:.1f} GB needed per GPU"))
    return results


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def human_size(size: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def _listed(names: list[str]) -> str:
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more


def check_dataset(root: Path, bundle: dict[str, Any], hashes: bool = True) -> Result:
    info = bundle.get("dataset", {})
    data_root = root / str(info.get("root", "dataset"))  # an absolute remote root stays absolute
    manifest_path = root / str(info.get("manifest", "dataset/" + MANIFEST_FILE))
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return Result("Dataset", FAIL, f"cannot read {manifest_path}: {exc}")
    missing, wrong_size, wrong_hash = [], [], []
    for entry in manifest["files"]:
        path = data_root / entry["path"]
        if not path.is_file():
            missing.append(entry["path"])
        elif path.stat().st_size != entry["size"]:
            wrong_size.append(entry["path"])
        elif hashes and sha256_file(path) != entry["sha256"]:
            wrong_hash.append(entry["path"])
    problems = []
    if missing:
        problems.append(f"{len(missing)} missing: {_listed(missing)}")
    if wrong_size:
        problems.append(f"{len(wrong_size)} with another size: {_listed(wrong_size)}")
    if wrong_hash:
        problems.append(f"{len(wrong_hash)} with another SHA-256: {_listed(wrong_hash)}")
    if problems:
        return Result("Dataset", FAIL, f"under {data_root}: " + "; ".join(problems)
                      + "; copy the dataset again (see README.md)")
    count, size = len(manifest["files"]), human_size(manifest.get("total_bytes", 0))
    how = "sizes and SHA-256" if hashes else "sizes only (--no-hash)"
    return Result("Dataset", PASS, f"{count} files, {size} under {data_root}, {how} match")


def hub_login_file() -> Path | None:
    """The token file of huggingface_hub's login on this machine (`hf auth login`), when there is one."""
    if os.environ.get("HF_TOKEN_PATH"):
        path = Path(os.environ["HF_TOKEN_PATH"]).expanduser()
    elif os.environ.get("HF_HOME"):
        path = Path(os.environ["HF_HOME"]).expanduser() / "token"
    else:
        path = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "huggingface" / "token"
    try:
        return path if path.read_text(encoding="utf-8").strip() else None
    except (OSError, UnicodeDecodeError):
        return None


def check_model(root: Path, bundle: dict[str, Any]) -> Result:
    model = bundle.get("base_model", {})
    kind, value = model.get("kind"), str(model.get("value", ""))
    if kind == "hub":
        login = hub_login_file()
        if os.environ.get("HF_TOKEN"):
            token = "HF_TOKEN set"
        elif login is not None:
            token = f"the hub login of this machine ({login})"
        elif model.get("gated"):
            # Training would fail at its first download, after the environment and the dataset are in place.
            return Result("Base model", FAIL, f"hub id {value} is gated and this machine has no Hugging Face token: "
                          "set HF_TOKEN (a token of an account that accepted its licence at "
                          f"https://huggingface.co/{value}) in the environment that starts the run, or log in "
                          "here with `hf auth login`")
        else:
            token = "HF_TOKEN not set (needed only for gated models)"
        return Result("Base model", PASS, f"hub id {value}, downloaded at start; {token}")
    path = root / value
    if path.exists():
        return Result("Base model", PASS, f"{path}")
    return Result("Base model", FAIL, f"{path} not found; copy the base model there or export again "
                  "with another --remote-base")


def check_disk(root: Path, bundle: dict[str, Any]) -> Result:
    runs = root / "runs"
    target = runs if runs.exists() else root
    free_mb = shutil.disk_usage(target).free / 2**20
    needed = float(bundle.get("disk_needed_mb", 0))
    text = f"{free_mb / 1024:.1f} GB free at {target}, about {needed / 1024:.1f} GB needed for checkpoints and outputs"
    return Result("Free disk", PASS if free_mb >= needed else FAIL, text)


def run_checks(root: Path, gpus: int | None = None, allow_no_gpu: bool = False, hashes: bool = True,
               probe: dict[str, Any] | str | None = None) -> list[Result]:
    try:
        bundle = json.loads((root / BUNDLE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return [Result("Bundle", FAIL, f"cannot read {root / BUNDLE_FILE}: {exc}; run this inside the bundle")]
    wanted = gpus or int(bundle.get("gpus_per_node", 1))
    results = [check_python(bundle), *check_packages(root)]
    results += check_gpus(bundle, probe if probe is not None else probe_torch(), wanted, allow_no_gpu)
    results += [check_dataset(root, bundle, hashes), check_model(root, bundle), check_disk(root, bundle)]
    return results


def format_results(results: list[Result]) -> str:
    width = max(len(r.check) for r in results)
    lines = [f"{'Check'.ljust(width)}  Result  Detail"]
    lines += [f"{r.check.ljust(width)}  {r.status.ljust(6)}  {r.detail}" for r in results]
    failed = [r for r in results if r.status == FAIL]
    if failed:
        lines.append(f"\n{len(failed)} check(s) FAILED: fix the FAIL rows above, then run ./check.sh again.")
    else:
        lines.append("\nAll checks passed" + (" (see the WARN rows)." if any(r.status == WARN for r in results) else "."))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check this machine before training the bundle.")
    parser.add_argument("--bundle", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument("--gpus", type=int, default=None, help="GPUs this node must have (default: the bundle's)")
    parser.add_argument("--allow-no-gpu", action="store_true", help="CPU test mode: pass without a GPU")
    parser.add_argument("--no-hash", action="store_true", help="check dataset sizes only (faster)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    results = run_checks(args.bundle, args.gpus, args.allow_no_gpu, not args.no_hash)
    if args.json:
        print(json.dumps([r.__dict__ for r in results], indent=1))
    else:
        print(format_results(results))
    return 1 if any(r.status == FAIL for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())

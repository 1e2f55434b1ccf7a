"""What goes into a bundle besides its scripts and dataset: source copy, pinned requirements, secret scan."""

from __future__ import annotations

import importlib.metadata as metadata
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from studio.core.resources import app_root, resources_dir

Progress = Callable[[str, int, int], None]  # (message, done, total)

# Packages the trainer imports, pinned to the exporting environment's versions.
RUNTIME_PACKAGES = (
    "torch", "diffusers", "transformers", "accelerate", "peft", "safetensors", "huggingface-hub",
    "pydantic", "tomlkit", "platformdirs", "psutil", "pillow", "numpy", "nvidia-ml-py", "orjson",
)
QUANTIZATION_PACKAGE = "bitsandbytes"  # model.quantized_base = "nf4"
OPTIMIZER_PACKAGES = {"prodigy": "prodigyopt", "adamw8bit": QUANTIZATION_PACKAGE}

# Hugging Face, OpenAI-style, GitHub and AWS access keys; a long hex/base64 blob under a secret-ish key.
SECRET_VALUE = re.compile(
    r"(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16})"
)
# A word of a key's name that says its value is a credential: HF_TOKEN, MY_SECRET, DB_PASSWORD, DB_PASS,
# SMTP_PWD, SSH_PASSPHRASE, GCP_CREDENTIALS, accessToken; a last word "key" too (WANDB_KEY, OPENAI_API_KEY,
# AWS_SECRET_ACCESS_KEY). Words, not letters anywhere: keep_tokens and max_tokens count caption tokens.
SECRET_WORD = re.compile(r"^([a-z0-9]*(token|secret|secrets|password|passwd|passphrase|credentials?|apikey)|pass|pwd)$")
_WORD_BREAK = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")


def is_secret_name(key: str) -> bool:
    """Whether a key or environment variable name says its value is a secret (see SECRET_WORD)."""
    words = [w.lower() for w in _WORD_BREAK.split(str(key)) if w]
    return bool(words) and (words[-1] == "key" or any(SECRET_WORD.match(w) for w in words))


def find_secrets(data: Any, prefix: str = "") -> list[str]:
    """Keys (dotted) whose name or value looks like a credential."""
    found: list[str] = []
    if isinstance(data, dict):
        for key, value in data.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            if is_secret_name(str(key)) and value not in (None, "", False):
                found.append(path)
            else:
                found.extend(find_secrets(value, path))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            found.extend(find_secrets(value, f"{prefix}[{i}]"))
    elif isinstance(data, str) and SECRET_VALUE.search(data):
        found.append(prefix)
    return found


def secrets_in_text(text: str) -> list[str]:
    """Credential-looking strings in a file's text (shown shortened, never whole)."""
    return [m.group(0)[:6] + "..." for m in SECRET_VALUE.finditer(text)]


def absolute_paths(data: Any, prefix: str = "", allowed: frozenset[str] = frozenset()) -> list[str]:
    """Keys whose value is an absolute path (POSIX, home or Windows drive), except `allowed` values."""
    found: list[str] = []
    if isinstance(data, dict):
        for key, value in data.items():
            found.extend(absolute_paths(value, f"{prefix}.{key}" if prefix else str(key), allowed))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            found.extend(absolute_paths(value, f"{prefix}[{i}]", allowed))
    elif isinstance(data, str) and data not in allowed and re.match(r"^(/|~|[A-Za-z]:[\\/]|\\\\)", data):
        found.append(prefix)
    return found


def folder_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def copy_tree(src: Path, dest: Path) -> None:
    if src.is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest)
    else:
        shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", ".*"))


def copy_studio_source(dest: Path) -> int:
    """Copy the `studio` package (no GUI) and `resources/` under `dest`; returns bytes copied.

    The remote machine runs the trainer from this copy (launch.sh puts it on PYTHONPATH),
    so it needs no studio install and trains with exactly the code that exported it.
    """
    package = app_root() / "studio"
    shutil.copytree(
        package, dest / "studio",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".*", "gui"),
    )
    # resources.py finds resources/ beside the package.
    shutil.copytree(resources_dir(), dest / "resources", ignore=shutil.ignore_patterns("icons", "*.qss", ".*"))
    return folder_size(dest)


def installed_version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def pinned_requirements(optimizer: str, quantized_base: str = "none") -> str:
    """requirements.txt pinned to this environment; a local build tag (+cpu, +cu124) is dropped. The
    optimizer's package and, for a 4-bit base (model.quantized_base = "nf4"), bitsandbytes join the runtime's."""
    lines = [
        "# Pinned to the environment the bundle was exported from.",
        "# torch: keep the version; take the CUDA build of your machine or image",
        "# (e.g. pip install torch==VERSION --index-url https://download.pytorch.org/whl/cu124).",
    ]
    wanted = list(RUNTIME_PACKAGES)
    if optimizer in OPTIMIZER_PACKAGES:
        wanted.append(OPTIMIZER_PACKAGES[optimizer])
    if quantized_base == "nf4" and QUANTIZATION_PACKAGE not in wanted:
        wanted.append(QUANTIZATION_PACKAGE)
    for package in wanted:
        version = installed_version(package)
        if version is None:
            lines.append(f"{package}  # not installed where the bundle was exported; any recent version")
        else:
            lines.append(f"{package}=={version.split('+')[0]}")
    return "\n".join(lines) + "\n"

#!/usr/bin/env python3
"""Set up and run the studio, or its test suite, with nothing but Python 3.11+.

    python3 dev.py run      # make .venv, install the studio, open it on the demo project
    python3 dev.py test     # make .venv, install everything, run lint and the whole test suite
    python3 dev.py test --repeat 3   # the suite three times, listing every test that failed once or more
    python3 dev.py package  # build the desktop app for this system (dist/: the app and its download)
    python3 dev.py setup    # only make the environments

On Windows use `py dev.py run` / `py dev.py test`.

Torch: with an NVIDIA driver present (nvidia-smi on PATH) the CUDA build is
installed; without one, the pinned CPU build from constraints/ci.txt (which is
what CI uses). Set STUDIO_TORCH to a pip requirement to choose yourself.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
CORE_VENV = ROOT / ".venv-core"
PACKAGE_VENV = ROOT / ".venv-package"
CLOUD_VENV = ROOT / ".venv-cloud"
CLOUD_CONSTRAINTS = ROOT / "constraints" / "cloud.txt"
COMPAT_VENV = ROOT / ".venv-compat"
CONSTRAINTS = ROOT / "constraints" / "ci.txt"
COMPAT_PINS = ROOT / "constraints" / "compat.txt"
WINDOWS = os.name == "nt"
# PyPI's Windows wheels of torch are CPU-only; the CUDA ones come from PyTorch's own index.
WINDOWS_CUDA_INDEX = "https://download.pytorch.org/whl/cu128"


def python_of(env: Path) -> Path:
    return env / ("Scripts/python.exe" if WINDOWS else "bin/python")


def run(command: list[str | Path], **kwargs: object) -> None:
    printable = " ".join(str(c) for c in command)
    print(f"+ {printable}", flush=True)
    result = subprocess.run([str(c) for c in command], cwd=ROOT, **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        sys.exit(result.returncode)


def stamp_of(*parts: str) -> str:
    digest = hashlib.sha256()
    for name in ("pyproject.toml", "constraints/ci.txt"):
        digest.update((ROOT / name).read_bytes())
    for part in parts:
        digest.update(part.encode())
    return digest.hexdigest()


def ensure_env(env: Path, extras: str, torch_args: list[str], label: str) -> Path:
    """Create `env` and install the studio with `extras`; skipped when nothing changed."""
    python = python_of(env)
    stamp_file = env / ".studio-stamp"
    stamp = stamp_of(extras, *torch_args)
    if python.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        return python
    if not python.exists():
        print(f"Creating the {label} environment in {env.name}/ …", flush=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(env)
    install(python, [*torch_args, "-e", f".[{extras}]" if extras else "."])
    stamp_file.write_text(stamp)
    return python


def install(python: Path, requirements: list[str | Path]) -> None:
    """pip install into `python`'s environment, through uv when it can be had (several times faster:
    parallel downloads, a shared cache, bytecode compiled in parallel), else through pip itself."""
    pip: list[str | Path] = [python, "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    uv = uv_command(python)
    if uv is not None:
        command = [*map(str, uv), "pip", "install", "-q", "--python", str(python), "--compile-bytecode",
                   # pip's rule: the best version from any of the sources.
                   "--index-strategy", "unsafe-best-match", *pip_sources(), *map(str, requirements)]
        result = subprocess.run(command, cwd=ROOT, env=uv_env())
        if result.returncode == 0:
            return
        print("uv could not install the environment; pip tries instead.", flush=True)
    run([*pip, *requirements])


def uv_command(python: Path) -> list[str | Path] | None:
    """uv, installed into the environment by pip at the version of the constraints; None without it."""
    pin = next((line.strip() for line in CONSTRAINTS.read_text().splitlines() if line.startswith("uv==")), "uv")
    installed = subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", pin],
                               cwd=ROOT, capture_output=True, text=True)
    return [python, "-m", "uv"] if installed.returncode == 0 else None


def pip_sources() -> list[str]:
    """The package sources pip is configured with (its config files and PIP_* variables), for uv,
    which reads neither: a company index or a folder of wheels works for both."""
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    settings: dict[str, str] = {}
    for line in listed.stdout.splitlines():
        key, _, value = line.partition("=")
        settings[key.split(".", 1)[-1]] = value.strip().strip("'\"")
    for key in ("index-url", "extra-index-url", "find-links"):
        variable = "PIP_" + key.upper().replace("-", "_")
        if os.environ.get(variable):
            settings[key] = os.environ[variable]
    args: list[str] = []
    for key in ("index-url", "extra-index-url", "find-links"):
        for source in settings.get(key, "").split():
            local = source.removeprefix("file://")
            if source.startswith(("http://", "https://")) or Path(local).exists():
                args += [f"--{key}", source]
    return args


def uv_env() -> dict[str, str]:
    env = dict(os.environ)
    cert = os.environ.get("PIP_CERT")
    if cert and "SSL_CERT_FILE" not in env:
        env["SSL_CERT_FILE"] = cert
    return env


def torch_args() -> list[str]:
    choice = os.environ.get("STUDIO_TORCH")
    if choice:
        return [choice]
    if shutil.which("nvidia-smi"):
        return ["torch", "--extra-index-url", WINDOWS_CUDA_INDEX] if WINDOWS else ["torch"]
    return ["-c", str(CONSTRAINTS)]


def setup(dev: bool) -> Path:
    extras = "gui,train,dev" if dev else "gui,train"
    args = ["-c", str(CONSTRAINTS)] if dev and not os.environ.get("STUDIO_TORCH") else torch_args()
    return ensure_env(VENV, extras, args, "studio")


def setup_core() -> Path:
    """An environment with the core's dependencies and pytest but no Qt and no torch."""
    python = python_of(CORE_VENV)
    stamp_file = CORE_VENV / ".studio-stamp"
    stamp = stamp_of("core")
    if python.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        return python
    if not python.exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(CORE_VENV)
    install(python, ["-c", CONSTRAINTS, "-e", ".", "pytest"])
    stamp_file.write_text(stamp)
    return python


def setup_cloud() -> Path:
    """SkyPilot alone (pinned by constraints/cloud.txt): the tests read the bundles' sky.yaml with its loader."""
    python = python_of(CLOUD_VENV)
    stamp_file = CLOUD_VENV / ".studio-stamp"
    stamp = hashlib.sha256(CLOUD_CONSTRAINTS.read_bytes()).hexdigest()
    if python.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        return python
    if not python.exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(CLOUD_VENV)
    install(python, ["-c", CLOUD_CONSTRAINTS, "skypilot"])
    stamp_file.write_text(stamp)
    return python


def setup_compat() -> Path:
    """An environment with only the libraries that load a model, at the versions kohya's scripts and
    many UIs pin (transformers 4.x, diffusers 0.3x): the tests load the studio's outputs in it."""
    python = python_of(COMPAT_VENV)
    stamp_file = COMPAT_VENV / ".studio-stamp"
    stamp = hashlib.sha256(COMPAT_PINS.read_bytes()).hexdigest()
    if python.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        return python
    if not python.exists():
        print(f"Creating the compatibility environment in {COMPAT_VENV.name}/ …", flush=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(COMPAT_VENV)
    install(python, ["-r", COMPAT_PINS])
    stamp_file.write_text(stamp)
    return python


def test(extra: list[str]) -> None:
    python = setup(dev=True)
    core_python = setup_core()
    setup_cloud()
    setup_compat()
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", HF_HUB_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1")
    run([python, "-m", "ruff", "check", "studio", "tests", "benchmarks", "dev.py", "docs", "packaging"], env=env)
    run([python, "-m", "mypy", "studio"], env=env)
    print("\n== core tests without PySide6 or torch ==", flush=True)
    run([core_python, "-m", "pytest", "tests/core", "-q", "-p", "no:cacheprovider"],
        env=dict(env, STUDIO_CORE_ONLY="1"))
    print("\n== the whole suite ==", flush=True)
    # Two workers: most end-to-end tests wait on processes they start, so two share two cores well.
    workers = os.environ.get("STUDIO_TEST_WORKERS") or str(min(2, os.cpu_count() or 1))
    parallel = ["-n", workers, "--dist", "loadgroup"] if workers != "1" else []
    repeat, extra = repeat_count(extra)
    command = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=15", *parallel, *extra]
    if repeat == 1:
        run(command, env=env)
        return
    sys.exit(repeat_suite(command, repeat, env))


def repeat_count(args: list[str]) -> tuple[int, list[str]]:
    """`--repeat N` (to find flaky tests) out of the test command's arguments."""
    if "--repeat" not in args:
        return 1, args
    at = args.index("--repeat")
    try:
        count = int(args[at + 1])
    except (IndexError, ValueError):
        sys.exit("dev.py test --repeat N: N is how many times to run the suite, e.g. --repeat 3")
    return max(1, count), args[:at] + args[at + 2:]


def repeat_suite(command: list[str | Path], times: int, env: dict[str, str]) -> int:
    """Run the suite `times` times and list every test that failed at least once; 1 when one did."""
    import time
    import xml.etree.ElementTree as ET

    reports = ROOT / "build" / "repeat"
    reports.mkdir(parents=True, exist_ok=True)
    failures: dict[str, int] = {}
    lines = []
    for number in range(1, times + 1):
        report = reports / f"run-{number}.xml"
        print(f"\n== run {number} of {times} ==", flush=True)
        started = time.monotonic()
        subprocess.run([str(c) for c in [*command, f"--junitxml={report}"]], cwd=ROOT, env=env)
        minutes = (time.monotonic() - started) / 60
        tests = failed = 0
        if report.exists():
            for case in ET.parse(report).getroot().iter("testcase"):
                tests += 1
                if case.find("failure") is not None or case.find("error") is not None:
                    failed += 1
                    name = f"{case.get('classname', '')}::{case.get('name', '')}"
                    failures[name] = failures.get(name, 0) + 1
        lines.append(f"run {number}: {tests} tests, {failed} failed, {minutes:.1f} min")
    print("\n== flakiness ==")
    print("\n".join(lines))
    for name, count in sorted(failures.items(), key=lambda item: -item[1]):
        print(f"failed {count} of {times}: {name}")
    if not failures:
        print(f"no test failed in {times} runs")
    return 1 if failures else 0


def main(argv: list[str]) -> None:
    command = argv[0] if argv else "help"
    if command == "run":
        python = setup(dev=False)
        run([python, "-m", "studio", *argv[1:]])
    elif command == "test":
        test(argv[1:])
    elif command == "package":
        # The window's dependencies and PyInstaller only: nothing of the trainer can slip into the app.
        python = ensure_env(PACKAGE_VENV, "gui,package", ["-c", str(CONSTRAINTS)], "packaging")
        run([python, ROOT / "packaging" / "build_app.py", *argv[1:]])
    elif command == "setup":
        setup(dev=True)
        setup_core()
        setup_cloud()
        setup_compat()
    else:
        print(__doc__)
        sys.exit(0 if command in ("help", "-h", "--help") else 2)


if __name__ == "__main__":
    main(sys.argv[1:])

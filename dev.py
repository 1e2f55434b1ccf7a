#!/usr/bin/env python3
"""Set up and run the studio, or its test suite, with nothing but Python 3.11+.

    python3 dev.py run      # make .venv, install the studio, open it on the demo project
    python3 dev.py test     # make .venv, install everything, run lint and the whole test suite
    python3 dev.py test --repeat 3   # the suite three times, listing every test that failed once or more
    python3 dev.py package  # build the desktop app for this system (dist/: the app and its download)
    python3 dev.py test-app # the download as a person gets it: built, installed, its first Train on the demo
    python3 dev.py setup    # only make the environments

On Windows use `py dev.py run` / `py dev.py test`.

Torch: the pinned version of constraints/ci.txt, in the build this machine runs: with an
NVIDIA driver, the newest CUDA build the driver supports (the table the desktop app uses,
resources/trainenv/torch_builds.toml); without one, the CPU build (PyTorch's CPU index, so
that PyPI's CUDA build is not pulled on Linux). Set STUDIO_TORCH to a pip requirement to
choose yourself.
"""

from __future__ import annotations

import sys

# Checked before anything else: an older Python fails much later, in the resolver, with
# errors that do not say why.
NEEDED_PYTHON = (3, 11)
if sys.version_info[:2] < NEEDED_PYTHON:
    sys.exit("dev.py needs Python {}.{} or newer (3.11, 3.12 or 3.13); this is Python {} ({}). Install one "
             "(python.org, your package manager, or pyenv) and run it with that, e.g. `python3.11 dev.py run`; "
             "on Windows `py -3.11 dev.py run`.".format(*NEEDED_PYTHON, sys.version.split()[0], sys.executable))

import concurrent.futures  # noqa: E402 - after the version check, which must run on any Python
import hashlib  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import tomllib  # noqa: E402
import venv  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

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
TORCH_BUILDS = ROOT / "resources" / "trainenv" / "torch_builds.toml"


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


@dataclass(frozen=True)
class SetupStep:
    """One line of a cold set-up: what is installed, and the arguments that install it."""

    title: str
    requirements: tuple[str, ...]


@dataclass(frozen=True)
class InstallPlan:
    torch_build: str  # "cpu", "cu128", …, "default" (PyPI's: macOS) or "chosen" (STUDIO_TORCH)
    reason: str
    steps: tuple[SetupStep, ...] = field(default_factory=tuple)


def pinned_torch(constraints: str) -> str:
    """The torch version constraints/ci.txt pins ("2.13.0")."""
    found = re.search(r"^torch==([^\s;#]+)", constraints, re.MULTILINE)
    if found is None:
        raise SystemExit(f"{CONSTRAINTS} pins no torch version (a line torch==X.Y.Z)")
    return found.group(1)


def driver_cuda(nvidia_smi: str) -> str | None:
    """The newest CUDA version the NVIDIA driver supports, from `nvidia-smi`'s header; None without one."""
    found = re.search(r"CUDA Version:\s*([0-9]+\.[0-9]+)", nvidia_smi)
    return found.group(1) if found else None


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def install_plan(extras: str, platform: str, cuda: str | None, constraints: str, builds: dict[str, object],
                 choice: str | None = None, torch_index: bool = True) -> InstallPlan:
    """What a set-up installs, decided from facts only (tests assert it; nothing runs here).

    `cuda`: the newest CUDA the NVIDIA driver supports (None: no driver); `builds`: the
    desktop app's table (resources/trainenv/torch_builds.toml); `choice`: STUDIO_TORCH;
    `torch_index`: whether PyTorch's index answers (else the build comes from the sources
    pip is configured with, e.g. a company mirror or a folder of wheels). Every step is pinned by the constraints; torch is the pinned version in the build
    this machine runs, from PyTorch's index for that build.
    """
    pins = ("-c", str(CONSTRAINTS))
    package = ("-e", f".[{extras}]" if extras else ".")
    if choice:
        torch: tuple[str, ...] = (choice,)
        build, reason = "chosen", f"STUDIO_TORCH={choice}"
    else:
        version, index = pinned_torch(constraints), str(builds["index"])
        cudas = [b for b in builds.get("cuda", []) if isinstance(b, dict)]  # type: ignore[attr-defined]
        usable = [b for b in cudas if cuda is not None and _version(cuda) >= _version(str(b["cuda"]))]
        if platform == "darwin":
            build, reason, torch = "default", "macOS: PyPI's build (Apple GPUs through MPS)", (f"torch=={version}",)
        elif usable:
            tag = str(usable[0]["tag"])
            build, reason = tag, f"the NVIDIA driver supports CUDA {cuda}: the CUDA {usable[0]['cuda']} build"
            torch = (f"torch=={version}+{tag}", *(("--extra-index-url", f"{index}/{tag}") if torch_index else ()))
        else:
            build = "cpu"
            reason = ("no NVIDIA driver: the CPU build" if cuda is None else
                      f"the NVIDIA driver's CUDA {cuda} is older than every build: the CPU build")
            torch = (f"torch=={version}+cpu", *(("--extra-index-url", f"{index}/cpu") if torch_index else ()))
    disk = builds.get("disk_gb", {})
    size = disk.get("cuda" if build.startswith("cu") else "cpu", 4) if isinstance(disk, dict) else 4
    steps = (
        SetupStep(f"PyTorch ({reason}; the environment needs up to {size} GB of disk)", (*torch, *pins)),
        SetupStep(f"the studio and its libraries ({extras or 'core'})", (*torch, *pins, *package)),
    )
    return InstallPlan(build, reason, steps)


def machine_plan(extras: str, probe: bool = True) -> InstallPlan:
    """install_plan for this machine (`probe`: ask whether PyTorch's index answers; else assume it does)."""
    smi = shutil.which("nvidia-smi")
    header = ""
    if smi:
        try:
            header = subprocess.run([smi], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            header = ""
    builds = tomllib.loads(TORCH_BUILDS.read_text(encoding="utf-8"))
    choice = os.environ.get("STUDIO_TORCH") or None
    reachable = not probe or choice is not None or sys.platform == "darwin" or answers(f"{builds['index']}/cpu/")
    if not reachable:
        print(f"PyTorch's index {builds['index']} does not answer: torch comes from the sources pip is set up "
              "with (pip config list).", flush=True)
    return install_plan(extras, sys.platform, driver_cuda(header), CONSTRAINTS.read_text(encoding="utf-8"), builds,
                        choice, reachable)


def answers(url: str, timeout: float = 5.0) -> bool:
    """Whether `url` answers at all (with the system's or pip's certificates)."""
    import ssl
    import urllib.request

    cafile = os.environ.get("SSL_CERT_FILE") or os.environ.get("PIP_CERT") or None
    try:
        context = ssl.create_default_context(cafile=cafile)
        with urllib.request.urlopen(url, timeout=timeout, context=context):
            return True
    except (OSError, ValueError):
        return False


def venv_python_version(env: Path) -> str | None:
    """The Python version that made `env` (its pyvenv.cfg), "major.minor"; None when it cannot be read."""
    try:
        text = (env / "pyvenv.cfg").read_text(encoding="utf-8")
    except OSError:
        return None
    found = re.search(r"^version(?:_info)?\s*=\s*([0-9]+\.[0-9]+)", text, re.MULTILINE)
    return found.group(1) if found else None


def say(step: int, count: int, text: str) -> None:
    print(f"[{step}/{count}] {text}", flush=True)


def ensure_env(env: Path, extras: str, label: str, with_torch: bool = False) -> Path:
    """Create `env` and install the studio with `extras` (and torch in this machine's build); skipped when
    nothing changed. Whether PyTorch's index answers is asked only when something is installed."""
    python = python_of(env)
    stamp_file = env / ".studio-stamp"
    build = machine_plan(extras, probe=False) if with_torch else None
    ours = f"{sys.version_info[0]}.{sys.version_info[1]}"
    stamp = stamp_of(ours, extras, *((build.torch_build, build.steps[0].requirements[0]) if build else ()))
    if python.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        return python
    plan = machine_plan(extras) if with_torch else InstallPlan("none", "no torch", (
        SetupStep(f"the {label} packages", ("-c", str(CONSTRAINTS), "-e", f".[{extras}]" if extras else ".")),))
    made_by = venv_python_version(env)
    if env.exists() and made_by is not None and made_by != ours:
        if env.is_symlink():
            raise SystemExit(f"{env} was made by Python {made_by}, this is {ours}, and it is a link to another "
                             "folder: remove the link, or run dev.py with Python " + made_by)
        print(f"{env.name}/ was made by Python {made_by}; making it again with Python {ours}.", flush=True)
        shutil.rmtree(env)
    count = len(plan.steps) + 2
    started = time.monotonic()
    if not python.exists():
        say(1, count, f"Making the {label} environment in {env.name}/ with Python {sys.version.split()[0]}")
        venv.EnvBuilder(with_pip=True, clear=True).create(env)
    else:
        say(1, count, f"Updating the {label} environment in {env.name}/")
    say(2, count, "Getting uv (a fast installer; pip is used without it)")
    uv = uv_command(python)
    for index, step in enumerate(plan.steps, start=3):
        say(index, count, f"Installing {step.title}")
        install(python, list(step.requirements), uv)
    print(f"The {label} environment is ready ({time.monotonic() - started:.0f} s).", flush=True)
    stamp_file.write_text(stamp)
    return python


def install(python: Path, requirements: list[str | Path], uv: list[str | Path] | None) -> None:
    """pip install into `python`'s environment, through uv when it can be had (several times faster:
    parallel downloads, a shared cache, bytecode compiled in parallel), else through pip itself."""
    pip: list[str | Path] = [python, "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    if uv is not None:
        command = [*map(str, uv), "pip", "install", "-q", "--python", str(python), "--compile-bytecode",
                   # pip's rule: the best version from any of the sources.
                   "--index-strategy", "unsafe-best-match", *pip_sources(), *map(str, requirements)]
        result = subprocess.run(command, cwd=ROOT, env=uv_env())
        if result.returncode == 0:
            return
        print("uv could not install the environment; pip tries instead.", flush=True)
    if subprocess.run([str(python), "-m", "pip", "--version"], capture_output=True).returncode != 0:
        run([python, "-m", "ensurepip", "-q"])  # an environment made without pip for uv
    run([*pip, *requirements])


def studio_uv() -> list[str | Path] | None:
    """The studio environment's uv, for the test environments beside it: each of them made without pip and
    without its own uv saves about 7 s (ensurepip, then pip installing uv). None when it has none."""
    python = python_of(VENV)
    if python.exists() and subprocess.run([str(python), "-m", "uv", "--version"], capture_output=True).returncode == 0:
        return [python, "-m", "uv"]
    return None


def make_test_env(env: Path) -> list[str | Path] | None:
    """Make `env` (when missing) for a test environment; the uv to install into it (None: pip)."""
    uv = studio_uv()
    if not python_of(env).exists():
        venv.EnvBuilder(with_pip=uv is None, clear=True).create(env)
    return uv or uv_command(python_of(env))


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


def setup(dev: bool) -> Path:
    # cuda: bitsandbytes, whose CPU kernels the quantized-base tests train on.
    extras = "gui,train,logging,cuda,dev" if dev else "gui,train"
    return ensure_env(VENV, extras, "studio", with_torch=True)


def setup_core() -> Path:
    """An environment with the core's dependencies and pytest but no Qt and no torch."""
    python = python_of(CORE_VENV)
    stamp_file = CORE_VENV / ".studio-stamp"
    # uv: the training-environment tests install with it, as the studio does (pinned by the constraints).
    packages = ["pytest", "pytest-timeout", "pytest-xdist", "uv"]
    stamp = stamp_of("core", *packages)
    if python.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        return python
    install(python, ["-c", CONSTRAINTS, "-e", ".", *packages], make_test_env(CORE_VENV))
    stamp_file.write_text(stamp)
    return python


def setup_cloud() -> Path:
    """SkyPilot alone (pinned by constraints/cloud.txt): the tests read the bundles' sky.yaml with its loader."""
    python = python_of(CLOUD_VENV)
    stamp_file = CLOUD_VENV / ".studio-stamp"
    stamp = hashlib.sha256(CLOUD_CONSTRAINTS.read_bytes()).hexdigest()
    if python.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        return python
    install(python, ["-c", CLOUD_CONSTRAINTS, "skypilot"], make_test_env(CLOUD_VENV))
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
    install(python, ["-r", COMPAT_PINS], make_test_env(COMPAT_VENV))
    stamp_file.write_text(stamp)
    return python


# One test may take at most this long (the slowest takes about 80 s on a quiet machine): a hung test
# fails with its stack and the suite goes on, instead of holding CI past its limit.
TEST_TIMEOUT = ["--timeout", "600"]


def parallel_args() -> list[str]:
    """pytest-xdist's workers: two on two cores (STUDIO_TEST_WORKERS=1: none).
    `--dist load`: with loadgroup/loadscope, pytest-xdist 3.8 replaces a crashed worker with one that
    waits forever for work that never comes, so one crash held the whole run past CI's limit."""
    workers = os.environ.get("STUDIO_TEST_WORKERS") or str(min(2, os.cpu_count() or 1))
    return ["-n", workers, "--dist", "load"] if workers != "1" else []


def mypy_cache() -> Path:
    """mypy's cache, shared by every checkout on this machine (as uv's download cache is): mypy checks a file
    again when its content differs from what the cache saw, so a new clone checks the studio in about 2 s
    instead of about 65 s. MYPY_CACHE_DIR, when set, wins."""
    if os.environ.get("MYPY_CACHE_DIR"):
        return Path(os.environ["MYPY_CACHE_DIR"])
    if os.name == "nt":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "sd-training-studio" / "mypy"


def test(extra: list[str]) -> None:
    python = setup(dev=True)
    core_python = setup_core()
    setup_cloud()
    # Only the whole suite reads the compatibility environment: it is made while ruff, mypy and the core tests run.
    compat = concurrent.futures.ThreadPoolExecutor(1)
    compat_ready = compat.submit(setup_compat)
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", HF_HUB_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1")
    # Two workers on two cores: a trainer a test starts computes on one thread, not on as many as there are cores.
    env.setdefault("OMP_NUM_THREADS", "1")
    run([python, "-m", "ruff", "check", "studio", "tests", "benchmarks", "dev.py", "docs", "packaging"], env=env)
    # mypy (one core) checks while the core tests run (on the other); its verdict is read after them.
    mypy = subprocess.Popen([str(python), "-m", "mypy", "studio", "--cache-dir", str(mypy_cache())], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    print("\n== core tests without PySide6 or torch ==", flush=True)
    # The core tests that pass here (the stricter environment) are left out of the whole suite below.
    passed = ROOT / "build" / "core-passed.txt"
    passed.unlink(missing_ok=True)
    # Two workers beside mypy: the core tests are many short ones, most of them waiting on nothing.
    core = subprocess.run([str(core_python), "-m", "pytest", "tests/core", "-q", "-p", "no:cacheprovider",
                           *TEST_TIMEOUT, *parallel_args()], cwd=ROOT,
                          env=dict(env, STUDIO_CORE_ONLY="1", STUDIO_RECORD_PASSED=str(passed)))
    checked = mypy.communicate()[0]
    print(f"\n+ {python} -m mypy studio --cache-dir {mypy_cache()}\n{checked}", end="", flush=True)
    if mypy.returncode != 0 or core.returncode != 0:
        passed.unlink(missing_ok=True)
        sys.exit(mypy.returncode or core.returncode)
    env["STUDIO_SKIP_PASSED"] = str(passed)
    compat_ready.result()  # its failure (a SystemExit with pip's words) ends the test command here
    compat.shutdown()
    print("\n== the whole suite ==", flush=True)
    # Two workers: most end-to-end tests wait on processes they start, so two share two cores well.
    parallel = parallel_args()
    repeat, extra = repeat_count(extra)
    command: list[str | Path] = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=15",
                                 *TEST_TIMEOUT, *parallel, *extra]
    if repeat == 1:
        run(command, env=env)
        return
    sys.exit(repeat_suite(command, repeat, env))


def test_app(extra: list[str]) -> None:
    """The package job: the frozen app built and started (its self-test, offscreen and on Xvfb), installed by
    install.sh into an empty home folder, and its first Train on the demo pressed in the installed copy
    (tests/packaging/test_frozen_app.py and test_first_train.py; minutes, not in the suite)."""
    python = setup(dev=True)
    env = dict(os.environ, STUDIO_PACKAGE_JOB="1", STUDIO_FIRST_TRAIN="1", HF_HUB_OFFLINE="1",
               PYTHONDONTWRITEBYTECODE="1")
    run([python, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "--durations=5", *TEST_TIMEOUT,
         "tests/packaging/test_frozen_app.py", "tests/packaging/test_first_train.py", *extra], env=env)


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
    elif command == "test-app":
        test_app(argv[1:])
    elif command == "package":
        # The window's dependencies and PyInstaller only: nothing of the trainer can slip into the app.
        python = ensure_env(PACKAGE_VENV, "gui,package", "packaging")
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

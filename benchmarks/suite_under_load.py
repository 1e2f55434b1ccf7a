"""The test suite on a quiet machine and under a CPU hog: a suite that passes only when the machine is slow,
or only when it is fast, decides nothing.

    python benchmarks/suite_under_load.py --runs 5 --out DIR                 # 5 idle, then 5 under the hog
    python benchmarks/suite_under_load.py --runs 1 --only hog -- tests/e2e   # pytest arguments after --
    python benchmarks/suite_under_load.py --fresh-clone --runs 5 --out DIR   # each run in a new clone of HEAD

Each run is `python3 dev.py test` (or, with pytest arguments after `--`, that pytest selection in the
checkout's .venv), timed as a whole. The hog is 4 x the cores of busy-looping processes at normal
priority, as a person's other work or a shared CI machine would be, started before the run and
ended after it. For every run the table gets: mode, wall time,
load average (1 min) at the end, passed / failed / skipped as pytest printed them, and the failed tests'
names. Results go to `DIR/suite_under_load.json` and `.md`, rewritten after every run.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUMMARY = re.compile(r"^=*\s*(?P<body>(?:\d+ (?:passed|failed|skipped|errors?|xfailed|xpassed|deselected|warnings?)"
                     r"(?:, )?)+) in [\d.]+s", re.MULTILINE)


@dataclass
class RunRow:
    mode: str  # idle | hog
    seconds: float
    load_1min: float
    code: int
    counts: dict[str, int] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    commit: str = ""  # what the run tested: HEAD when it began (a later commit does not change a run under way)


def _spin() -> None:
    while True:
        pass


def start_hog(processes: int) -> list[multiprocessing.Process]:
    hog = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(processes)]
    for p in hog:
        p.start()
    return hog


def stop_hog(hog: list[multiprocessing.Process]) -> None:
    for p in hog:
        p.kill()
    for p in hog:
        p.join()


def counts_of(output: str) -> dict[str, int]:
    """Every pytest summary line's counts, added up (dev.py test runs the core tests, then the whole suite)."""
    counts: dict[str, int] = {}
    for match in SUMMARY.finditer(output):
        for part in match.group("body").split(", "):
            number, word = part.split(" ", 1)
            word = {"error": "errors", "warning": "warnings"}.get(word, word)
            counts[word] = counts.get(word, 0) + int(number)
    return counts


def failed_of(output: str) -> list[str]:
    return sorted(set(re.findall(r"^(?:FAILED|ERROR) (\S+)", output, re.MULTILINE)))


def head_of(checkout: Path) -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True,
                          text=True).stdout.strip()


def fresh_clone(into: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(REPO), str(into)], check=True)
    return into


def one_run(mode: str, hog_processes: int, pytest_args: list[str], clone: bool, log: Path) -> RunRow:
    with tempfile.TemporaryDirectory(prefix="suite-") as tmp:
        where = fresh_clone(Path(tmp) / "checkout") if clone else REPO
        commit = head_of(where)
        if pytest_args:
            command = [str(REPO / ".venv" / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                       *pytest_args]
            env = dict(os.environ, QT_QPA_PLATFORM="offscreen", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
        else:
            command, env = [sys.executable, "dev.py", "test"], dict(os.environ)
        hog = start_hog(hog_processes) if mode == "hog" else []
        began = time.monotonic()
        try:
            result = subprocess.run(command, cwd=where, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, errors="replace")
        finally:
            seconds = time.monotonic() - began
            load = os.getloadavg()[0]
            stop_hog(hog)
    log.write_text(result.stdout, encoding="utf-8")
    return RunRow(mode, round(seconds, 1), round(load, 2), result.returncode, counts_of(result.stdout),
                  failed_of(result.stdout), commit)


def markdown(rows: list[RunRow], meta: dict[str, object]) -> str:
    lines = [f"Suite runs, {meta['date']}: {meta['cores']} cores, hog {meta['hog']} busy processes; "
             f"{meta['what']}", "",
             "| # | mode | commit | wall | load (1 min) at the end | passed | failed | skipped | exit | failed tests |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(rows, 1):
        c = r.counts
        lines.append(f"| {i} | {r.mode} | {r.commit or '—'} | {r.seconds / 60:.1f} min | {r.load_1min:.1f} | {c.get('passed', 0)} | "
                     f"{c.get('failed', 0) + c.get('errors', 0)} | {c.get('skipped', 0)} | {r.code} | "
                     f"{', '.join(r.failed) or '—'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs in each mode")
    parser.add_argument("--only", choices=["idle", "hog"], help="one mode only")
    parser.add_argument("--hog", type=int, default=4 * (os.cpu_count() or 1), help="busy processes (4 x cores)")
    parser.add_argument("--fresh-clone", action="store_true", help="each run in a new clone of HEAD (setup included)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("pytest_args", nargs="*", help="after --: a pytest selection instead of `dev.py test`")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    modes = [args.only] if args.only else ["idle", "hog"]
    meta: dict[str, object] = {"date": time.strftime("%Y-%m-%d %H:%M"), "cores": os.cpu_count(), "hog": args.hog,
                               "what": ("pytest " + " ".join(args.pytest_args)) if args.pytest_args else
                               ("`python3 dev.py test`" + (" in a fresh clone" if args.fresh_clone else ""))}
    rows: list[RunRow] = []
    for mode in modes:
        for i in range(args.runs):
            rows.append(one_run(mode, args.hog if mode == "hog" else 0, args.pytest_args, args.fresh_clone,
                                args.out / f"run-{mode}-{i + 1}.log"))
            (args.out / "suite_under_load.json").write_text(
                json.dumps({**meta, "rows": [asdict(r) for r in rows]}, indent=2) + "\n")
            (args.out / "suite_under_load.md").write_text(markdown(rows, meta))
            print(markdown(rows, meta).splitlines()[-1], flush=True)
    return 0 if all(r.code == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

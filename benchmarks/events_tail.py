"""A long run's events file (1 GB by default): the Runs table's row, resume's question and a TensorBoard
export's reading, before (every line parsed) and after (the two ends; a stream).

    python benchmarks/events_tail.py [--size-mb 1024] [--folder /tmp] [--skip-before]

The file is written to FOLDER (a run folder made for the purpose) and deleted at the end. Each
measurement runs in a fresh process, so its peak memory (max RSS) is its own.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from studio.core.runs.events import RankMemory, RunFinished, RunStarted, Step, Validation


def write_run(run: Path, size: int) -> None:
    events = run / "events.jsonl"
    (run / "config.toml").write_text('[model]\nfamily = "sdxl"\nbase = "x"\n[method]\nkind = "lora"\n')
    started = RunStarted(config={"model": {"family": "sdxl"}}, world_size=1, total_steps=4_000_000,
                         devices=["cuda:0"], time=1000.0)
    step = Step(step=5, epoch=0, loss=0.125, lr=1e-4, samples_per_s=4.0, eta_s=10.0,
                memory=[RankMemory(rank=0, device="cuda:0", allocated_mb=9000.0, reserved_mb=9500.0, peak_mb=9600.0)],
                time=2000.0)
    line = (step.to_json() + "\n").encode()
    block = line * ((64 << 20) // len(line))
    with open(events, "wb") as handle:
        handle.write((started.to_json() + "\n").encode())
        while handle.tell() + len(block) < size:
            handle.write(block)
        handle.write(line * max(0, (size - handle.tell()) // len(line)))
        handle.write((Validation(step=4_000_000, loss=0.25, images=4, time=90_000.0).to_json() + "\n").encode())
        handle.write((RunFinished(status="completed", step=4_000_000, time=90_001.0).to_json() + "\n").encode())


# ------------------------------------------------------------ what each measurement does (in a child)
def before_summary(run: Path) -> str:
    from studio.core.runs.records.run_model import replay_run

    model = replay_run(run).model  # what summarize_run read before: every event
    return f"{model.finished.status if model.finished else None} at step {model.step}"


def after_summary(run: Path) -> str:
    from studio.core.runs.records.history import summarize_run

    row = summarize_run(run, lambda _run: False)
    return f"{row.status} at step {row.steps}"


def before_resume(run: Path) -> str:
    from studio.core.runs.events import RunFinished, read_events

    finished = [e for e in read_events(run / "events.jsonl") if isinstance(e, RunFinished)]  # last_finish before
    return f"{finished[-1].status if finished else None}"


def after_resume(run: Path) -> str:
    from studio.core.runs.records.outcome import completed_run

    finished = completed_run(run)
    return f"{finished.status if finished else None}"


def before_export_read(run: Path) -> str:
    from studio.core.runs.events import read_events

    return f"{len(read_events(run / 'events.jsonl')):,} events"  # the whole list held, as the export did


def after_export_read(run: Path) -> str:
    from studio.core.runs.event_reading.files import stream_events

    count = sum(1 for _event in stream_events(run / "events.jsonl"))
    return f"{count:,} events"


def _child(job: Callable[[Path], str], run: Path, out: Any) -> None:
    import studio.core.runs.records.history
    import studio.core.runs.records.outcome
    import studio.core.tracking.tensorboard

    studio.core.runs.records.history._presets()  # nor the presets' first read (a project's list does it once)
    started = time.perf_counter()
    said = job(run)
    seconds = time.perf_counter() - started
    out.send((said, seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))


def measure(job: Callable[[Path], str], run: Path) -> tuple[str, float, float]:
    ours, theirs = multiprocessing.Pipe()
    child = multiprocessing.Process(target=_child, args=(job, run, theirs))
    child.start()
    result = ours.recv()
    child.join()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--folder", default="/tmp")
    parser.add_argument("--skip-before", action="store_true", help="measure only the new readers")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="events-tail-", dir=args.folder))
    run = root / "20260101-000000-week"
    run.mkdir()
    try:
        started = time.perf_counter()
        write_run(run, args.size_mb << 20)
        size = (run / "events.jsonl").stat().st_size
        print(f"wrote {size / 1e9:.2f} GB in {time.perf_counter() - started:.1f} s", flush=True)
        jobs = [("Runs table row", before_summary, after_summary), ("resume: completed?", before_resume, after_resume),
                ("TensorBoard export: reading", before_export_read, after_export_read)]
        rows = []
        for name, before, after in jobs:
            old = measure(before, run) if not args.skip_before else ("-", float("nan"), float("nan"))
            new = measure(after, run)
            rows.append({"what": name, "before": old, "after": new})
            print(f"| {name} | {old[1]:.2f} s, {old[2]:,.0f} MB ({old[0]}) | {new[1]:.3f} s, {new[2]:,.0f} MB "
                  f"({new[0]}) |", flush=True)
        print(json.dumps(rows))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

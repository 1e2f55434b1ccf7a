"""The GPU speed benchmark's table: one row per case, each path's step against the bare step's."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any


def number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def table(results: list[Any]) -> str:
    bare = {(r.case.family, r.case.batch): r.s_per_step for r in results if r.case.path == "bare"}
    rows = ["| family | px | batch | path | s/step | images/s | MFU | vs bare | peak VRAM (GiB) | compile (s) "
            "| ops/step | kernels/step | note |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        reference = bare.get((r.case.family, r.case.batch))
        ratio = f"{r.s_per_step / reference:.2f}x" if r.s_per_step and reference and r.case.path != "bare" else "-"
        rows.append(f"| {r.case.family} | {r.resolution} | {r.case.batch} | {r.case.path} | "
                    f"{number(r.s_per_step, 3)} | {number(r.images_per_s, 1)} | "
                    f"{'-' if r.mfu is None else f'{r.mfu:.0%}'} | {ratio} | {number(r.peak_gib, 1)} | "
                    f"{number(r.compile_s, 1)} | {_count(r.ops_per_step)} | {_count(r.kernels_per_step)} | "
                    f"{r.note} |")
    return "\n".join(rows)


def write_results(out: Path, header: str, results: list[Any]) -> str:
    """table.md and results.json in `out`, rewritten after every case."""
    text = f"{header}\n\n{table(results)}\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(text, encoding="utf-8")
    (out / "results.json").write_text(json.dumps([asdict(r) for r in results], indent=1), encoding="utf-8")
    return text

"""The GPU calibration fitted to the measured peaks, and how it holds on peaks it was not fitted to.

`resources/architectures/gpu_peaks.json` holds peaks a GPU measured for whole `studio-train
run`s; `calibration.json` holds the few numbers that turn the meta-device counts into such a
peak. The numbers listed in `FITTED` are fitted here to the measured points (least squares of
the relative errors, Levenberg-Marquardt over the estimate itself, a few hundred estimates);
the others are derived from counts or first principles and stay as they are. Each fitted number
rests on the points whose estimate moves with it (`rests_on`), and `leave_one_out` says, for
every point, how far a fit made without it lands: the error to expect on a run not measured.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from studio.core.config.files.paths import NO_FOLDER, ResolvedConfig, resolve_paths
from studio.core.config.schema import TrainConfig
from studio.core.estimate.estimate import estimate_vram
from studio.core.estimate.memory_data import load_calibration, load_gpu_peaks
from studio.core.hardware.report import GPUInfo

# The GPU numbers fitted to the measured peaks, with the step used for their derivatives.
FITTED: dict[str, float] = {
    "workspace_mb": 10.0,
    "allocator_fraction": 0.002,
    "vae_encode_factor": 0.01,
    "vae_decode_factor": 0.01,
}
LOWER = {"workspace_mb": 0.0, "allocator_fraction": 0.0, "vae_encode_factor": 0.5, "vae_decode_factor": 0.5}
# Where every fit starts: what the counts say with no GPU measured (no workspace over the context's
# 300 MB, 5% allocator rounding, the VAE's meta-device counts as they are). A number that the points
# of a fit do not move keeps this value, so a fit without a point learns nothing from it.
START = {"workspace_mb": 300.0, "allocator_fraction": 0.05, "vae_encode_factor": 1.0, "vae_decode_factor": 1.0}
# The measuring card: room for every case, so no estimate is cut short by the card's size.
MEASURING_GPU = GPUInfo(index=0, name="NVIDIA H200", total_mb=143_771, free_mb=143_771)


@dataclass(frozen=True)
class Point:
    """One measured peak: the run's settings and what the GPU showed, in MiB."""

    id: str
    name: str
    config: ResolvedConfig
    measured_mb: float


def gpu_points() -> list[Point]:
    """Every measured GPU peak shipped in resources/ (gpu_peaks.json)."""
    points = []
    for case in load_gpu_peaks()["cases"]:
        settings = copy.deepcopy(case["settings"])
        settings["model"]["base"] = "models/random-weights"
        points.append(Point(str(case["id"]), str(case["name"]), resolve_paths(TrainConfig.model_validate(settings), NO_FOLDER),
                            float(case["measured_gb"]) * 1024))
    return points


def with_values(calibration: dict[str, Any], values: dict[str, float]) -> dict[str, Any]:
    """A copy of `calibration` with these GPU numbers."""
    out = copy.deepcopy(calibration)
    out["gpu"].update(values)
    return out


def errors(points: Sequence[Point], calibration: dict[str, Any]) -> list[float]:
    """The estimate's relative error on each point (estimate / measured - 1)."""
    return [estimate_vram(p.config, MEASURING_GPU, calibration).total_mb / p.measured_mb - 1 for p in points]


def _solve(matrix: list[list[float]], vector: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (a handful of unknowns)."""
    n = len(vector)
    rows = [[*row, vector[i]] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(rows[r][col]))
        rows[col], rows[pivot] = rows[pivot], rows[col]
        if abs(rows[col][col]) < 1e-18:
            continue
        for r in range(n):
            if r != col:
                ratio = rows[r][col] / rows[col][col]
                rows[r] = [a - ratio * b for a, b in zip(rows[r], rows[col], strict=True)]
    return [rows[i][n] / rows[i][i] if abs(rows[i][i]) >= 1e-18 else 0.0 for i in range(n)]


def _jacobian(points: Sequence[Point], base: dict[str, Any], x: dict[str, float],
              now: list[float]) -> list[list[float]]:
    """d(error_i)/d(value_j), one forward difference per fitted number."""
    columns = []
    for name, step in FITTED.items():
        moved = errors(points, with_values(base, {**x, name: x[name] + step}))
        columns.append([(m - e) / step for m, e in zip(moved, now, strict=True)])
    return [list(row) for row in zip(*columns, strict=True)]


def fit(points: Sequence[Point], calibration: dict[str, Any] | None = None) -> dict[str, float]:
    """The `FITTED` numbers that minimise the squared relative errors over `points`, started from
    `START`; the other numbers are `calibration`'s (the shipped one by default)."""
    base = calibration or load_calibration()
    x = dict(START)
    now = errors(points, with_values(base, x))
    cost, damping = sum(e * e for e in now), 1e-3
    moved = 0.0
    for _ in range(60):
        jac = _jacobian(points, base, x, now)
        names = list(FITTED)
        jtj = [[sum(r[a] * r[b] for r in jac) for b in range(len(names))] for a in range(len(names))]
        jtr = [sum(r[a] * e for r, e in zip(jac, now, strict=True)) for a in range(len(names))]
        improved = False
        for _ in range(12):
            damped = [[v + (damping * jtj[a][a] if a == b else 0.0) for b, v in enumerate(row)]
                      for a, row in enumerate(jtj)]
            step = _solve(damped, [-v for v in jtr])
            trial = {n: max(LOWER[n], x[n] + d) for n, d in zip(names, step, strict=True)}
            trial_errors = errors(points, with_values(base, trial))
            trial_cost = sum(e * e for e in trial_errors)
            if trial_cost < cost:
                moved = max(abs(trial[n] - x[n]) / FITTED[n] for n in names)
                x, now, cost, damping, improved = trial, trial_errors, trial_cost, damping / 3, True
                break
            damping *= 4
        if not improved or moved < 0.01:
            break
    return x


def rests_on(points: Sequence[Point], values: dict[str, float],
             calibration: dict[str, Any] | None = None) -> dict[str, list[str]]:
    """For each fitted number, the ids of the points whose estimate moves with it."""
    base = with_values(calibration or load_calibration(), values)
    now = errors(points, base)
    jac = _jacobian(points, base, values, now)
    return {name: [p.id for p, row in zip(points, jac, strict=True) if abs(row[j]) * FITTED[name] > 1e-6]
            for j, name in enumerate(FITTED)}


@dataclass(frozen=True)
class HeldOut:
    point: Point
    in_sample: float  # the error of the fit to every point
    left_out: float  # the error of a fit made without this point


def leave_one_out(points: Sequence[Point] | None = None,
                  calibration: dict[str, Any] | None = None) -> list[HeldOut]:
    """For every point: its error under the shipped fit and under a fit to all the other points."""
    points = list(points if points is not None else gpu_points())
    base = calibration or load_calibration()
    inside = errors(points, base)
    out = []
    for i, point in enumerate(points):
        others = points[:i] + points[i + 1:]
        values = fit(others, base)
        out.append(HeldOut(point, inside[i], errors([point], with_values(base, values))[0]))
    return out

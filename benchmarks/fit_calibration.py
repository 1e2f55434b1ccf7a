"""Fit the GPU calibration to the measured peaks and say how it holds on peaks it was not fitted to.

Run: `python benchmarks/fit_calibration.py [--write]`.

Fits the numbers `studio/core/estimate/calibration_fit.py` names (FITTED) to every point of
`resources/architectures/gpu_peaks.json`, prints each point's error in sample and left out
(a fit made without it), as the markdown table in docs/benchmarks.md, and with `--write`
stores the fitted values and the points each rests on in `resources/architectures/calibration.json`.
No torch, no GPU: a second or two.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from studio.core.estimate import calibration_fit as cf  # noqa: E402
from studio.core.estimate.memory_data import load_calibration  # noqa: E402

ROUNDING = {"workspace_mb": 0, "allocator_fraction": 3, "vae_encode_factor": 2, "vae_decode_factor": 2}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--write", action="store_true", help="store the fit in calibration.json")
    args = parser.parse_args(argv)
    points = cf.gpu_points()
    values = {k: round(v, ROUNDING[k]) if ROUNDING[k] else round(v) for k, v in cf.fit(points).items()}
    calibration = cf.with_values(load_calibration(), values)
    rests = cf.rests_on(points, values, calibration)
    print("fitted: " + ", ".join(f"{k} = {v:g} ({len(rests[k])} points)" for k, v in values.items()))
    print()
    print("| case | measured | estimate | error in sample | error left out |")
    print("|---|---|---|---|---|")
    for held in cf.leave_one_out(points, calibration):
        estimate = held.point.measured_mb * (1 + held.in_sample) / 1024
        print(f"| {held.point.name} | {held.point.measured_mb / 1024:.2f} GB | {estimate:.2f} GB | "
              f"{held.in_sample:+.1%} | {held.left_out:+.1%} |")
    if args.write:
        path = REPO / "resources" / "architectures" / "calibration.json"
        data = json.loads(path.read_text(encoding="utf-8"))
        data["gpu"].update(values)
        data["fit"]["rests_on"] = rests
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        print(f"\nwrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

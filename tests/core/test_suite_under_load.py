"""benchmarks/suite_under_load.py reads pytest's closing lines as a person reads them."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from fixtures.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    return load_script("benchmarks/suite_under_load.py")


def test_the_counts_of_both_stages_add_up_and_failures_are_named() -> None:
    script = _script()
    output = ("636 passed in 58.21s\n"
              "FAILED tests/e2e/test_gui_training.py::test_stop - assert 'finished' == 'stopped'\n"
              "ERROR tests/gui/x.py::test_y - RuntimeError\n"
              "= 1 failed, 1290 passed, 4 skipped, 1 error, 3 warnings in 700.10s (0:11:40) =\n")
    assert script.counts_of(output) == {"passed": 1926, "failed": 1, "skipped": 4, "errors": 1, "warnings": 3}
    assert script.failed_of(output) == ["tests/e2e/test_gui_training.py::test_stop", "tests/gui/x.py::test_y"]
    row = script.RunRow("hog", 600.0, 9.5, 1, script.counts_of(output), script.failed_of(output), "143fc9a")
    table = script.markdown([row], {"date": "2026-12-04", "cores": 2, "hog": 8, "what": "x"})
    assert "| 1 | hog | 143fc9a | 10.0 min | 9.5 | 1926 | 2 | 4 | 1 | tests/e2e/test_gui_training.py::test_stop, " in table

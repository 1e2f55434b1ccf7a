"""The suite's scheduler for two workers (tests/fixtures/module_scheduling.py): whole modules, handed out as a
worker is about to run out, and a crashed worker's unfinished tests handed on."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("xdist")

from fixtures.module_scheduling import ModuleLoadScheduling

COLLECTION = ["tests/e2e/test_a.py::one", "tests/e2e/test_a.py::two", "tests/e2e/test_a.py::three",
              "tests/train/test_b.py::one", "tests/gui/test_c.py::one", "tests/gui/test_c.py::two",
              "tests/gui/test_d.py::one"]


class Config:
    def getoption(self, name: str) -> Any:
        return {"tx": ["2*popen"], "maxschedchunk": None}[name]

    getvalue = getoption


class Worker:
    count = 0

    def __init__(self) -> None:
        Worker.count += 1
        self.gateway = SimpleNamespace(id=f"gw{Worker.count}")
        self.sent: list[list[int]] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.append(list(indices))

    def shutdown(self) -> None:
        self.shutting_down = True


def _scheduler() -> tuple[ModuleLoadScheduling, Worker, Worker]:
    scheduler = ModuleLoadScheduling(Config())  # type: ignore[arg-type]
    first, second = Worker(), Worker()
    for worker in (first, second):
        scheduler.add_node(worker)  # type: ignore[arg-type]
        scheduler.add_node_collection(worker, COLLECTION)  # type: ignore[arg-type]
    scheduler.schedule()
    return scheduler, first, second


def test_each_worker_gets_the_next_whole_module_when_it_is_about_to_run_out() -> None:
    scheduler, first, second = _scheduler()
    # test_a whole to one worker; test_b (one test) and test_c to the other, which must hold two to start.
    assert first.sent == [[0, 1, 2]] and second.sent == [[3], [4, 5]]
    scheduler.mark_test_complete(first, 0)  # two of test_a left: nothing more yet
    assert first.sent == [[0, 1, 2]]
    scheduler.mark_test_complete(first, 1)  # one left, held until the worker knows what follows it
    assert first.sent == [[0, 1, 2], [6]] and not scheduler.pending and first.shutting_down
    for worker, index in ((second, 3), (second, 4), (second, 5), (first, 2), (first, 6)):
        scheduler.mark_test_complete(worker, index)  # type: ignore[arg-type]
    assert first.shutting_down and second.shutting_down and scheduler.tests_finished


def test_a_worker_holding_one_test_is_told_to_finish_when_nothing_is_left() -> None:
    scheduler = ModuleLoadScheduling(Config())  # type: ignore[arg-type]
    only = Worker()
    scheduler.add_node(only)  # type: ignore[arg-type]
    scheduler.numnodes = 1
    scheduler.add_node_collection(only, COLLECTION[3:4])  # type: ignore[arg-type]
    scheduler.schedule()
    assert only.sent == [[0]] and only.shutting_down  # else it would wait for a second test forever


def test_a_crashed_workers_unfinished_tests_go_to_the_worker_that_replaces_it() -> None:
    scheduler, first, second = _scheduler()
    crashed = scheduler.remove_node(first)  # type: ignore[arg-type]  # it died in test_a::one
    assert crashed == COLLECTION[0]
    replacement = Worker()
    scheduler.add_node(replacement)  # type: ignore[arg-type]
    scheduler.add_node_collection(replacement, COLLECTION)  # type: ignore[arg-type]
    scheduler.schedule()
    handed = [index for batch in replacement.sent + second.sent[2:] for index in batch]
    assert sorted(handed) == [1, 2, 6]  # test_a's other two tests and test_d: nothing lost, nothing twice
    assert replacement.sent[0] == [6] and replacement.sent[1] == [1, 2]  # whole modules, two held to start

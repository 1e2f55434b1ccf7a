"""End-to-end tests; the shared fixtures are in tests/fixtures/training.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(scope="session", autouse=True)
def _one_thread() -> Iterator[None]:
    # The tiny models are fastest on one thread, and the machine is shared.
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)

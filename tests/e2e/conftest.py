"""End-to-end tests; the shared fixtures are in tests/fixtures/training.py."""

from __future__ import annotations

import pytest
from fixtures.torch_threads import one_torch_thread  # noqa: F401  (autouse here: torch on one thread)

torch = pytest.importorskip("torch")

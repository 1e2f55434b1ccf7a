"""The export tests' demo project (a stand-in model folder, no torch) for the remote-run tests too."""

from tests.core.export.conftest import demo

__all__ = ["demo"]

"""Which cloud launcher the studio uses: SkyPilot's adapter when SkyPilot is installed, or a test's fake."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

from studio.core.cloud.api import ENABLE_HINT, CloudApi, CloudError

# Tests put a fake here; the GUI and the CLI ask `cloud_api()`.
_factory: Callable[[], CloudApi] | None = None


def set_cloud_api(factory: Callable[[], CloudApi] | None) -> None:
    global _factory
    _factory = factory


def cloud_api() -> CloudApi:
    """SkyPilot's adapter (or a test's fake); CloudError with how to enable it when SkyPilot is missing."""
    if _factory is not None:
        return _factory()
    if importlib.util.find_spec("sky") is None:
        raise CloudError(ENABLE_HINT)
    from studio.core.cloud.skypilot import SkyPilotApi

    return SkyPilotApi()


def cloud_available() -> str | None:
    """None when a launcher can be used; else why not and how to enable it."""
    if _factory is not None or importlib.util.find_spec("sky") is not None:
        return None
    return ENABLE_HINT

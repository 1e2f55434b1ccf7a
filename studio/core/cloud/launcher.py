"""Which cloud launcher the studio uses: SkyPilot's adapter when SkyPilot is installed beside the studio,
else the bridge to the cloud environment's SkyPilot (the desktop app's way), or a test's fake."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

from studio.core.cloud.api import ENABLE_HINT, CloudApi, CloudError
from studio.core.cloud.bridge import BridgeApi
from studio.core.cloud.environment import cloud_env_dir, cloud_python
from studio.core.resources import app_root, is_frozen

# Tests put a fake here; the GUI and the CLI ask `cloud_api()`.
_factory: Callable[[], CloudApi] | None = None


def set_cloud_api(factory: Callable[[], CloudApi] | None) -> None:
    global _factory
    _factory = factory


def cloud_api() -> CloudApi:
    """SkyPilot's adapter (or a test's fake); CloudError with how to enable it when SkyPilot is missing."""
    if _factory is not None:
        return _factory()
    if importlib.util.find_spec("sky") is not None:
        from studio.core.cloud.skypilot import SkyPilotApi

        return SkyPilotApi()
    python = cloud_python()
    if python is None:
        raise CloudError(enable_hint())
    return BridgeApi(python, app_root())


def cloud_available() -> str | None:
    """None when a launcher can be used; else why not and how to enable it."""
    if _factory is not None or importlib.util.find_spec("sky") is not None or cloud_python() is not None:
        return None
    return enable_hint()


def enable_hint() -> str:
    """How to get SkyPilot, in the words of the place the person is: the desktop app has a button for it."""
    if is_frozen():
        return ("SkyPilot is not installed: press Install SkyPilot… to add it in a cloud environment of its own "
                f"({cloud_env_dir()}), then enable a cloud with `sky check` there")
    return ENABLE_HINT + f"; or `studio-train cloud setup` installs it in a cloud environment of its own ({cloud_env_dir()})"

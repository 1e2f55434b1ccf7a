"""The Runs page tests share the Train tests' project, config and context fixtures."""

from tests.gui.training.conftest import config, context, project_dir  # noqa: F401

"""The environment installs pyproject.toml's core and train dependencies, pinned by constraints/ci.txt."""

from __future__ import annotations

from studio.core.trainenv.packages import package_lists, pinned_versions, requirement_name


def test_torch_first_then_the_core_and_trainer_packages_and_never_the_window() -> None:
    lists = package_lists()
    names = [requirement_name(r) for r in lists.requirements]
    assert names[0] == "torch"
    assert {"pydantic", "tomlkit", "diffusers", "transformers", "peft", "accelerate"} <= set(names)
    assert not {"pyside6-essentials", "pyqtgraph", "pytest", "pyinstaller"} & set(names)
    assert "bitsandbytes" not in names
    assert "bitsandbytes" in [requirement_name(r) for r in package_lists(nvidia=True).requirements]


def test_every_training_package_is_pinned_by_the_shipped_constraints() -> None:
    lists = package_lists()
    pins = pinned_versions(lists.constraints)
    text = lists.constraints.read_text()
    unpinned = [requirement_name(r) for r in lists.requirements
                if requirement_name(r) not in pins and f"\n{requirement_name(r)}<=" not in text]
    assert unpinned == []
    assert pins["torch"] == "2.13.0"

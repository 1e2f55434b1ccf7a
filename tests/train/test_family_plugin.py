"""A family declared in the test folder alone gets the whole family contract: the toy family of
tests/fixtures/toy_family.py, named in STUDIO_FAMILY_MODULES, is found by the registry, the trainer and
the tiny-model builder, and test_family_contract.py runs for it as for the studio's own families."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from studio.core.families.registry import FamilyDeclarationError, _outside
from studio.core.families.sd15 import FAMILY as SD15

TESTS = Path(__file__).resolve().parents[1]
TOY = "fixtures.toy_family"


@pytest.mark.slow
def test_the_contract_runs_for_a_family_declared_only_in_the_test_folder(tmp_path: Path) -> None:
    env = {**os.environ, "STUDIO_FAMILY_MODULES": TOY, "PYTHONPATH": os.pathsep.join(
        [str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")])}
    env.pop("PYTEST_XDIST_WORKER", None)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-o", "addopts=", "--basetemp", str(tmp_path / "base"),
         str(TESTS / "train" / "test_family_contract.py"), "-k", "toy or homes"],
        cwd=TESTS.parent, env=env, capture_output=True, text=True, timeout=600)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "PASSED tests/train/test_family_contract.py::test_the_tiny_model_trains_samples_saves_reloads_and_resumes_exactly[toy-unet]" in out, out[-4000:]
    assert "PASSED tests/train/test_family_contract.py::test_every_family_is_found_by_name_in_each_of_its_homes" in out


def test_a_declaration_that_takes_a_registered_name_or_class_is_refused_with_what_to_change() -> None:
    from fixtures.toy_family import FAMILY as TOY_FAMILY

    with pytest.raises(FamilyDeclarationError, match=r"'toy-unet'.*already has that name or class"):
        _outside(TOY, (SD15, TOY_FAMILY))
    with pytest.raises(FamilyDeclarationError, match=r"cannot be imported.*PYTHONPATH"):
        _outside("no_such_package.family", (SD15,))
    with pytest.raises(FamilyDeclarationError, match="must define FAMILY"):
        _outside("studio.core.families.sd15", (SD15,))  # a declaration without a home
    assert [spec.name for spec in _outside(f" {TOY} ,", (SD15,))] == ["toy-unet"]

"""Every family lives in its own home: outside it, no code in studio/ names a family.

A family's home is its declaration (`studio/core/families/<family>.py`), its trainer adapter
(`studio/train/families/<family>.py`) and its pipeline builders (`studio/train/pipelines/<family>.py`),
each with the modules beside it named `<family>_*.py`. Everything else (the shared base, the
kohya writer, the offline configs, the tiny and full-size builders, the CLI, the GUI) finds a family
by the name it is given, through the registry. Resources, presets, tests and docs are outside studio/
and may name families freely.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from studio.core.families import FAMILY_NAMES

ROOT = Path(__file__).resolve().parents[3]
HOME_FOLDERS = ("studio/core/families", "studio/train/families", "studio/train/pipelines")
# "path:line" -> why that file may name a family there. Keep it short: each entry is a family fact
# outside its home.
ALLOWED: dict[str, str] = {}


def module_name(family: str) -> str:
    return family.replace("-", "_")


def home_of(rel: str) -> str | None:
    """The family whose home the file `rel` (relative to the repository) is in, or None for shared code."""
    folder, _, file = rel.rpartition("/")
    if folder not in HOME_FOLDERS:
        return None
    stem = file.removesuffix(".py")
    return next((name for name in FAMILY_NAMES
                 if stem == module_name(name) or stem.startswith(module_name(name) + "_")), None)


# A family id, alone or starting a longer name (`<id>-lora-8gb`, `<id>-4b`, `<id>_base`); longest first.
NAMED = re.compile(rf"^({'|'.join(map(re.escape, sorted(FAMILY_NAMES, key=len, reverse=True)))})(?:[-_.]|$)")


def _named(value: str) -> str | None:
    """The family a string constant names, or None."""
    found = NAMED.match(value)
    return found.group(1) if found else None


def family_names_outside_homes(root: Path) -> list[str]:
    """Every string constant in studio/ that names a family, outside that family's home, as `file:line: value`
    (a home names its own family only)."""
    found = []
    for path in sorted((root / "studio").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        home = home_of(rel)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), rel)):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            named = _named(node.value)
            if named is not None and named != home and f"{rel}:{node.lineno}" not in ALLOWED:
                found.append(f"{rel}:{node.lineno}: {node.value!r}")
    return found


def test_no_code_outside_a_family_home_names_a_family() -> None:
    assert family_names_outside_homes(ROOT) == []


def test_every_allowed_place_still_names_a_family_and_says_why() -> None:
    for place, reason in ALLOWED.items():
        rel, _, line = place.rpartition(":")
        source = (ROOT / rel).read_text(encoding="utf-8").splitlines()[int(line) - 1]
        assert any(re.search(rf"[\"']{re.escape(name)}", source) for name in FAMILY_NAMES), place
        assert reason.strip(), place


def test_every_family_has_its_three_homes() -> None:
    for name in FAMILY_NAMES:
        for folder in HOME_FOLDERS:
            assert (ROOT / folder / f"{module_name(name)}.py").is_file(), f"{folder}/{module_name(name)}.py"


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def test_the_check_finds_a_family_named_in_shared_code_or_in_another_familys_home(tmp_path: Path) -> None:
    first, last = FAMILY_NAMES[0], FAMILY_NAMES[-1]
    first_home, last_home = module_name(first), module_name(last)
    root = _tree(tmp_path, {
        "studio/train/pipelines/tiny.py": f"BUILDERS = {{'{first}': None}}\n",
        "studio/train/families/base.py": f"if family == '{last}-4b':\n    pass\n",
        f"studio/train/pipelines/{last_home}.py": f"FAMILY = '{last}'\nOTHER = '{first}'\n",
        f"studio/train/families/{first_home}_names.py": f"NAME = '{first}'\n",
        f"studio/core/families/{first_home}.py": f"NAME = '{first}'\n",
        "studio/gui/page.py": "TEXT = 'a family: ' + NAME\n",
    })
    assert family_names_outside_homes(root) == sorted([
        f"studio/train/families/base.py:1: '{last}-4b'",
        f"studio/train/pipelines/tiny.py:1: '{first}'",
        f"studio/train/pipelines/{last_home}.py:2: '{first}'",
    ])

"""The one gate for names from outside: `..`, absolute names, drive letters and links out are refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from studio.core.containment import OutsideFolderError, contained_path, is_link_out, link_stays_inside


@pytest.mark.parametrize("name", ["samples/step-1/a.png", "a b [c].txt", "./x/./y", "deep/er/still.json"])
def test_a_plain_name_lands_inside(tmp_path: Path, name: str) -> None:
    path = contained_path(tmp_path, name)
    assert tmp_path in path.parents and path == tmp_path.joinpath(*[p for p in name.split("/") if p != "."])


@pytest.mark.parametrize(("name", "why"), [
    ("../../PWNED.txt", "'..'"), ("samples/../../x", "'..'"), ("..\\..\\x", "'..'"), ("/etc/passwd", "absolute"),
    ("\\\\server\\share", "absolute"), ("C:\\Users\\x", "absolute"), ("c:x", "absolute"), ("", "empty"),
    ("a/b:stream", "':'"), ("a\x00b", "NUL"), (".", "folder itself"),
])
def test_a_name_that_leaves_is_refused_and_named(tmp_path: Path, name: str, why: str) -> None:
    with pytest.raises(OutsideFolderError) as caught:
        contained_path(tmp_path, name, "box:/runs/x")
    text = str(caught.value)
    assert repr(name) in text and why in text and text.startswith("box:/runs/x: refused")
    assert str(tmp_path) in text


def test_a_link_on_the_way_out_is_refused_and_one_inside_is_kept(tmp_path: Path) -> None:
    root, outside = tmp_path / "run", tmp_path / "elsewhere"
    root.mkdir()
    outside.mkdir()
    (root / "samples").symlink_to(outside)  # a folder linking beside the run
    (root / "bashrc").symlink_to(tmp_path / ".bashrc")  # the file itself, dangling, outside
    (root / "kept").mkdir()
    (root / "alias").symlink_to(root / "kept")
    for name in ("samples/step-1.png", "bashrc"):
        with pytest.raises(OutsideFolderError, match="a link on the way leads to"):
            contained_path(root, name)
    assert contained_path(root, "alias/x.png") == root / "alias" / "x.png"
    assert is_link_out(root / "samples", root) and not is_link_out(root / "alias", root)
    loop = root / "loop"
    os.symlink("loop", loop)
    assert contained_path(root, "loop") == loop  # a link loop leads nowhere outside: no hang (a write fails)


@pytest.mark.parametrize(("text", "name", "inside"), [
    ("events.jsonl", "latest.jsonl", True),
    ("../output/lora.safetensors", "samples/latest", True),
    ("..", "up", False),
    ("../../x", "samples/latest", False),
    ("/workspace/run/output/lora.safetensors", "latest", False),  # absolute: the source run, not the copy
    ("C:/runs/x", "latest", False),
    ("..\\..\\secret", "samples/latest", False),
])
def test_a_links_own_text_stays_inside_its_folder_only_relative_and_below(text: str, name: str,
                                                                          inside: bool) -> None:
    assert link_stays_inside(text, name) is inside

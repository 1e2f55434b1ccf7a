"""The text that studio/core/quoting.py writes for sftp, rsync, sh and YAML, read back by each one's own rules.

sftp's batch parser is modelled on OpenSSH's `makeargv` for unquoted words (what the studio
writes): whitespace ends a word, `#` starts a comment, a backslash takes the next character
(kept for glob's `?[*\\`, which glob then unescapes). The real sftp runs in
tests/core/remote/test_hostile_names.py.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from studio.core.quoting import (
    SFTP_LINE_MAX,
    UnsafeNameError,
    nul_list,
    sftp_line,
    sh_word,
    shown,
    yaml_scalar,
)

yaml = pytest.importorskip("yaml")  # accelerate's YAML reader: in the studio's environment, not the core one

NAMES = ["nl\n!touch x", "!touch x", "a;b", "it's \"q\"", "back\\slash\\n", "$(x)", "`x`", "#x", "a #b",
         "nul\x00", "latin\udce9", "-rf", "--help", " a  b ", "*?[ab]{c}", "tab\tx", "cr\rx", "caf\u00e9"]


def makeargv(line: str) -> list[str]:
    """sftp's split of a batch line into words, then glob's unescaping (unquoted words only)."""
    words: list[str] = []
    word: str | None = None
    i = 0
    while i < len(line) and line[i] != "#":  # an unescaped # ends the line, even inside a word
        char = line[i]
        if char in " \t\n\v\f\r":
            if word is not None:
                words.append(word)
                word = None
        elif char in "'\"":
            raise AssertionError(f"the studio never writes a quote unescaped: {line!r}")
        else:
            if char == "\\":
                i += 1
                char = line[i]
            word = (word or "") + char
        i += 1
    if word is not None:
        words.append(word)
    return words


@pytest.mark.parametrize("name", NAMES)
def test_an_sftp_line_is_one_command_whose_words_are_the_paths_or_the_name_is_refused(name: str) -> None:
    path = f"/runs/{name}"
    try:
        line = sftp_line("get", ["-a", "-p"], path, "relative/" + name)
    except UnsafeNameError as refused:
        assert any(c < " " or c == "\x7f" or "\udc80" <= c <= "\udcff" for c in name)
        assert shown(path) in str(refused) and "install rsync" in str(refused)
        return
    assert "\n" not in line and "\r" not in line and line.startswith("get -a -p /")
    assert makeargv(line) == ["get", "-a", "-p", path, "relative/" + name]
    assert makeargv(sftp_line("put", [], name, "/x"))[1] == ("./" + name if name.startswith("-") else name)


def test_an_sftp_line_over_the_line_buffer_is_refused_and_only_the_studios_commands_are_written() -> None:
    fits = "/" + "x" * (SFTP_LINE_MAX - len("put  /y") - 1)
    assert len(sftp_line("put", [], fits, "/y")) == SFTP_LINE_MAX
    with pytest.raises(UnsafeNameError, match=f"over the {SFTP_LINE_MAX} that sftp reads as one line"):
        sftp_line("put", [], fits + "x", "/y")
    for command, flags in (("!sh", []), ("get", ["-p; !sh"]), ("rm", [])):
        with pytest.raises(ValueError, match="not a batch command"):
            sftp_line(command, flags, "/a")


class _Windows:
    platform = "win32"


def test_on_windows_a_refused_name_is_not_told_to_install_rsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows sends always go by sftp, so the refusals there name only what helps: rename or shorten."""
    import studio.core.quoting as quoting

    monkeypatch.setattr(quoting, "sys", _Windows())
    with pytest.raises(UnsafeNameError) as refused:
        sftp_line("get", [], "/runs/nl\n!touch x", "x")
    assert "rename it" in str(refused.value) and "rsync" not in str(refused.value)
    with pytest.raises(UnsafeNameError) as refused:
        sftp_line("put", [], "/" + "x" * SFTP_LINE_MAX, "/y")
    assert "shorten the path" in str(refused.value) and "rsync" not in str(refused.value)


def test_an_rsync_list_holds_every_name_as_its_bytes_and_refuses_nul() -> None:
    names = [n for n in NAMES if "\x00" not in n]
    assert nul_list(names).split(b"\x00")[:-1] == [n.encode("utf-8", "surrogateescape") for n in names]
    with pytest.raises(UnsafeNameError, match=r"'nul\\x00' holds a NUL byte"):
        nul_list(["fine", "nul\x00"])


def test_a_shell_word_is_one_argument_whatever_it_holds(tmp_path: Path) -> None:
    names = [n for n in NAMES if "\x00" not in n and "\udce9" not in n]
    script = "printf '%s\\0' " + " ".join(sh_word(n) for n in names)
    done = subprocess.run(["sh", "-c", script], capture_output=True, cwd=tmp_path, check=True)
    assert done.stdout.decode().split("\x00")[:-1] == names
    assert list(tmp_path.iterdir()) == []  # nothing ran
    with pytest.raises(UnsafeNameError, match="NUL"):
        sh_word("nul\x00")
    assert shlex.split(sh_word("-rf")) == ["-rf"]


def test_a_yaml_value_is_one_scalar_or_is_refused_naming_the_key() -> None:
    for name in NAMES:
        if name.isprintable():
            text = f"main_process_ip: {yaml_scalar('main_process_ip', name)}\nnum_machines: 1\n"
            assert yaml.safe_load(text) == {"main_process_ip": name, "num_machines": 1}, name
        else:
            with pytest.raises(UnsafeNameError, match=r"^accelerate.yaml: main_process_ip = '.*' holds "):
                yaml_scalar("main_process_ip", name)
    assert yaml_scalar("use_cpu", False) == "false" and yaml_scalar("num_processes", 2) == "2"
    assert yaml_scalar("gpu_ids", "") == "''"


def test_a_name_in_a_message_shows_what_it_holds() -> None:
    assert shown("nl\n!x\x00\tlatin\udce9 it's caf\u00e9") == "'nl\\n!x\\x00\\tlatin\\xe9 it\\'s caf\u00e9'"

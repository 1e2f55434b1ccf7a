"""Names and values from elsewhere, written into another program's language: quoted, or refused.

A file name on a rented machine, an image name in a sample event, a dataset file's name and
an address typed into a config all end up inside text that another program parses: sftp's
batch lines, rsync's file lists, a shell command run over ssh, accelerate's YAML. Whoever
chose the name must not be able to write a command or a key of their own into that text
(`x\\n!touch ~/owned` in sftp's batch runs `touch` on the person's computer). Every such
route writes names through one function here, which either quotes the name by the rules of
the program that reads it or refuses it with a sentence naming it, why and what to do.

What each language can carry:
- sftp batch (`sftp_line`): one line per command, read with fgets into 2048 bytes and split by
  OpenSSH's `makeargv` (backslash escapes, quotes, `#` comments, glob characters). Line breaks
  and other control characters have no escape there, and bytes that are not UTF-8 depend on
  the locale's idea of a space: such names are refused (rsync carries them).
- rsync file lists (`nul_list`): NUL-separated (`--from0`), so any name a file system allows
  travels byte for byte; with `--protect-args` no remote shell splits the paths.
- POSIX sh (`sh_word`): single quotes carry every byte but NUL.
- a command line shown for a person to paste (`command_line`): the quoting of this computer's shell.
- YAML (`yaml_scalar`): single-quoted scalars, printable text on one line only.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterable

# fgets(cmd, 2048, ...) in sftp's batch loop: a longer line is cut, and its rest read as a command
# of its own (a rest that begins with `!` is run by the local shell). The line's newline counts.
SFTP_LINE_MAX = 2046
# makeargv's specials (whitespace, quotes, backslash, `#` comment) and glob(3)'s, escaped with a
# backslash outside quotes: inside quotes sftp keeps the backslash before a glob character.
_SFTP_SPECIAL = frozenset(" \t\"'\\*?[]{}#")
_SFTP_COMMANDS = ("get", "put")
_NAMES = {"\n": "a line break (\\n)", "\r": "a carriage return (\\r)", "\t": "a tab (\\t)",
          "\x00": "a NUL byte (\\x00)", "\x7f": "a DEL character (\\x7f)"}


class UnsafeNameError(ValueError):
    """A name or value that the program reading it cannot be given safely; says which, why, what to do."""

    def __init__(self, name: str, why: str, todo: str, what: str = "the name") -> None:
        self.name, self.why, self.todo = name, why, todo
        super().__init__(f"{what} {shown(name)} {why}; {todo}")


def shown(text: str) -> str:
    """A name as a person can read it in a message: control characters and bytes that are not UTF-8
    written as escapes (\\n, \\x00, \\xe9), everything else as it is, in quotes."""
    out = []
    for char in text:
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
            out.append(f"\\x{code - 0xDC00:02x}")
        elif char in _NAMES:
            out.append(_NAMES[char].rsplit("(", 1)[1].rstrip(")"))
        elif code < 0x20 or 0x7F <= code < 0xA0:
            out.append(f"\\x{code:02x}")
        elif char == "'":
            out.append("\\'")
        else:
            out.append(char)
    return "'" + "".join(out) + "'"


def control_characters(text: str) -> list[str]:
    """What in `text` is a control character (C0, DEL, C1), each described once, in order."""
    found: list[str] = []
    for char in text:
        code = ord(char)
        if code < 0x20 or 0x7F <= code < 0xA0:
            said = _NAMES.get(char, f"a control character (\\x{code:02x})")
            if said not in found:
                found.append(said)
    return found


def not_utf8(text: str) -> bool:
    """Whether a name holds bytes that are not UTF-8 (kept by Python as lone surrogates)."""
    return any(0xD800 <= ord(char) <= 0xDFFF for char in text)


# ------------------------------------------------------------ sftp batch
def sftp_refusal(path: str) -> str | None:
    """Why `path` cannot be written into an sftp batch line, or None when it can."""
    said = control_characters(path)
    if said:
        return f"holds {' and '.join(said)}, which sftp's batch file cannot carry"
    if not_utf8(path):
        return "holds bytes that are not UTF-8, which sftp's batch file does not carry byte for byte"
    return None


def or_rsync(why: str) -> str:
    """The advice to install rsync where the studio would then use it: ", or install rsync on both computers
    (why)"; nothing on Windows, whose sends always go by sftp (remote/transfer.py says why)."""
    return "" if sys.platform == "win32" else f", or install rsync on both computers ({why})"


def sftp_path(path: str) -> str:
    """One path for an sftp batch line: refused when it cannot be carried (see `sftp_refusal`), else every
    special character escaped, and led by `./` when it starts with `-` (C:\\ stays as it is on Windows)."""
    why = sftp_refusal(path)
    if why:
        raise UnsafeNameError(path, why, "rename it" + or_rsync("rsync carries any name"))
    if path.startswith("-"):  # getopt would read it as flags (glibc's even after the first path)
        path = "./" + path
    return "".join("\\" + c if c in _SFTP_SPECIAL else c for c in path)


def sftp_line(command: str, flags: Iterable[str], *paths: str) -> str:
    """`get`/`put` with fixed flags and escaped paths: a line that cannot start another command (`!` runs the
    local shell, `-` and `@` change error handling) and that fits sftp's line buffer whole."""
    if command not in _SFTP_COMMANDS or any(not f.startswith("-") or not f[1:].isalpha() for f in flags):
        raise ValueError(f"not a batch command of the studio's: {command} {' '.join(flags)}")
    line = " ".join([command, *flags, *(sftp_path(p) for p in paths)])
    if len(line.encode("utf-8")) > SFTP_LINE_MAX:
        longest = max(paths, key=len)
        raise UnsafeNameError(longest, f"makes an sftp batch line of {len(line.encode('utf-8'))} bytes, over the "
                              f"{SFTP_LINE_MAX} that sftp reads as one line",
                              "shorten the path" + or_rsync("rsync has no such limit"),
                              what="the path")
    return line


# ------------------------------------------------------------ rsync file lists
def nul_list(names: Iterable[str]) -> bytes:
    """A file list for rsync's `--files-from=FILE --from0`: each name's own bytes, ended by NUL."""
    out = bytearray()
    for name in names:
        if "\x00" in name:
            raise UnsafeNameError(name, "holds a NUL byte, which no file name can", "rename it")
        out += name.encode("utf-8", "surrogateescape") + b"\x00"
    return bytes(out)


# ------------------------------------------------------------ POSIX sh
def sh_word(text: str) -> str:
    """One word of a POSIX sh command line, whatever `text` holds (NUL, which no argument can, is refused)."""
    if "\x00" in text:
        raise UnsafeNameError(text, "holds a NUL byte, which no command argument can", "rename it")
    return shlex.quote(text)


# ------------------------------------------------------------ a command line for a person
def command_line(words: Iterable[str]) -> str:
    """A command line a person copies into this computer's shell (command.txt, `studio-train command`, the
    `studio-train resume` a stopped run names): POSIX sh quoting, and on Windows cmd.exe's.

    Windows' shells do not read POSIX quotes: every Windows path was put in single quotes (for its backslashes),
    which cmd.exe takes as part of the name and PowerShell as a string, not a program. There a word goes in double
    quotes only where it holds a space."""
    words = list(words)
    if os.name == "nt":
        return subprocess.list2cmdline(words)
    return shlex.join(words)


# ------------------------------------------------------------ YAML
def yaml_scalar(key: str, value: object, where: str = "accelerate.yaml") -> str:
    """A YAML scalar for `key`: booleans and numbers as they are, text single-quoted (`'` doubled) when it is
    printable text on one line; anything else is refused naming the key, the value and what is allowed."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if not isinstance(value, str):
        raise UnsafeNameError(repr(value), f"is a {type(value).__name__}, not text, a number or true/false",
                              "fix the setting", what=f"{where}: {key} =")
    if not value.isprintable():
        said = control_characters(value) or ["a character that is not printable"]
        fix = ("a host name or an address such as 10.0.0.1: fix launch.main_process_ip in the config, or the "
               "address the node was started with" if key == "main_process_ip" else "fix the setting")
        raise UnsafeNameError(value, f"holds {' and '.join(said)}",
                              f"only printable text on one line is allowed for {key}, {fix}", what=f"{where}: {key} =")
    return "'" + value.replace("'", "''") + "'"

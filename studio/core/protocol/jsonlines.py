"""Typed messages as JSON lines: one object per line, checked field by field when read.

A message class is a dataclass with a `type` class variable; a `Protocol` names the
classes of one channel (run events, caption-job messages, download messages) and turns
a decoded line back into its class, refusing a wrong-typed field instead of letting it
break a reader later (a Qt slot, a plot).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields
from typing import IO, Any, ClassVar, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

_fast_loads: Callable[[bytes | str], Any] | None
try:  # several times faster on long replays; the standard library does the same job
    from orjson import loads as _fast_loads
except ImportError:  # pragma: no cover - depends on the environment
    _fast_loads = None

M = TypeVar("M", bound="Message")


def loads_line(line: bytes | str) -> Any:
    """One JSON line decoded; ValueError for anything that is not JSON a reader can hold.

    orjson refuses the lone surrogates that undecodable file names became in older files;
    the standard library reads them. Absurdly deep nesting is garbage, not a crash.
    """
    if _fast_loads is not None:
        try:
            return _fast_loads(line)
        except ValueError:
            pass
    try:
        return json.loads(line)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def printable(value: Any) -> Any:
    """Strings with undecodable bytes (a file name that is not UTF-8) with those bytes written as
    \\xNN, so that every reader can decode the line; other values unchanged."""
    if isinstance(value, str):
        try:
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:  # a surrogate that no file name decoding makes
            return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {printable(k): printable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [printable(v) for v in value]
    return value


def dumps_line(data: dict[str, Any]) -> str:
    """One object as a compact JSON line (no newline); NaN refused, undecodable bytes written as \\xNN."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False, default=str)
    if "\\ud" in text:  # a surrogate escape: maybe an undecodable file name (rare; checked cheaply)
        text = json.dumps(printable(data), separators=(",", ":"), allow_nan=False, default=str)
    return text


@dataclass
class Message:
    """One line of a channel. Subclasses set `type` and declare their fields with types."""

    type: ClassVar[str] = "message"

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, **asdict(self)}

    def to_json(self) -> str:
        return dumps_line(self.to_dict())


def write_message(message: Message, stream: IO[str] | None = None) -> None:
    """Print one message as a line and flush it (a child's stdout read by the window as it comes)."""
    out = stream or sys.stdout
    out.write(message.to_json() + "\n")
    out.flush()


class UnknownMessage(Exception):
    """A line whose type this version does not know (a newer program wrote it)."""


Check = Callable[[Any], bool]


def check_for(annotation: Any) -> Check:
    """Whether a decoded JSON value fits a field's type (ints count as floats; bools as neither)."""
    origin = get_origin(annotation)
    if annotation is Any:
        return lambda v: True
    if annotation is float:
        return lambda v: isinstance(v, int | float) and not isinstance(v, bool)
    if annotation is int:
        return lambda v: isinstance(v, int) and not isinstance(v, bool)
    if annotation is str:
        return lambda v: isinstance(v, str)
    if annotation is bool:
        return lambda v: isinstance(v, bool)
    if annotation is type(None):
        return lambda v: v is None
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return lambda v: isinstance(v, dict)  # its own fields are checked when it is built
    if origin is Literal:
        allowed = get_args(annotation)
        return lambda v: v in allowed
    if origin in (Union, types.UnionType):
        options = [check_for(a) for a in get_args(annotation)]
        return lambda v: any(check(v) for check in options)
    if origin is list:
        (item,) = get_args(annotation)
        check_item = check_for(item)
        return lambda v: isinstance(v, list) and all(check_item(x) for x in v)
    if origin is dict:
        return lambda v: isinstance(v, dict)
    raise TypeError(f"no check for {annotation!r}")  # a new field type: teach check_for


@dataclass(frozen=True)
class _Shape:
    """What reading one class needs: a check per field, and the fields holding lists of nested records."""

    checks: dict[str, Check]
    nested_lists: dict[str, type]


def _shape(cls: type) -> _Shape:
    hints = get_type_hints(cls)
    checks = {f.name: check_for(hints[f.name]) for f in fields(cls)}
    nested: dict[str, type] = {}
    for f in fields(cls):
        args = get_args(hints[f.name])
        if get_origin(hints[f.name]) is list and args and isinstance(args[0], type) and dataclasses.is_dataclass(args[0]):
            nested[f.name] = args[0]
    return _Shape(checks, nested)


class Protocol:
    """The message classes of one channel, and the one way its lines are read back.

    `nullable` names (class, field) pairs that may be null although their type says otherwise
    (older writers wrote null there).
    """

    def __init__(self, name: str, classes: Iterable[type[Message]],
                 nullable: Iterable[tuple[type, str]] = ()) -> None:
        self.name = name
        self.types: dict[str, type[Message]] = {cls.type: cls for cls in classes}
        self._shapes: dict[type, _Shape] = {}
        for cls in self.types.values():
            self._learn(cls)
        self._nullable = set(nullable)

    def _learn(self, cls: type) -> None:
        shape = self._shapes[cls] = _shape(cls)
        for nested in shape.nested_lists.values():
            if nested not in self._shapes:
                self._learn(nested)

    def checked(self, cls: type, data: dict[str, Any]) -> dict[str, Any]:
        """The fields of `cls` in `data`, each checked against its type (ValueError names the first bad one)."""
        checks = self._shapes[cls].checks
        kwargs = {k: v for k, v in data.items() if k in checks}
        for key, value in kwargs.items():
            if not checks[key](value) and not (value is None and (cls, key) in self._nullable):
                kind = getattr(cls, "type", cls.__name__)
                raise ValueError(f"{kind} {self.name}: {key} = {str(value)[:40]!r} has the wrong type")
        return kwargs

    def _build(self, cls: type, data: dict[str, Any]) -> Any:
        kwargs = self.checked(cls, data)
        for key, nested in self._shapes[cls].nested_lists.items():
            if key in kwargs:
                kwargs[key] = [self._build(nested, item) for item in kwargs[key] or []]
        return cls(**kwargs)

    def from_dict(self, data: Any) -> Message:
        """A decoded JSON object -> its typed message (ValueError for garbage, UnknownMessage for new types).

        Keys this version does not know are ignored, so a newer writer's extra fields do no harm.
        """
        if not isinstance(data, dict) or "type" not in data:
            raise ValueError(f"not a {self.name} object")
        kind = data["type"]
        cls = self.types.get(kind) if isinstance(kind, str) else None
        if cls is None:
            raise UnknownMessage(str(kind))
        try:
            message: Message = self._build(cls, data)
        except TypeError as exc:
            raise ValueError(f"{kind} {self.name} is missing or has bad fields: {exc}") from None
        return message

    def parse(self, line: bytes | str) -> Message:
        """One JSON line -> typed message. ValueError for garbage, UnknownMessage for new types."""
        return self.from_dict(loads_line(line))

"""A settings field's words and numbers, from the schema: its bounds, its tooltip, what it accepts, a typed
value parsed for the config, and a number shown whole."""

from __future__ import annotations

import types
import typing
from typing import Any, Literal

from pydantic.fields import FieldInfo


def unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else annotation), True
    return annotation, False


def bounds(field: FieldInfo) -> dict[str, float]:
    out: dict[str, float] = {}
    for meta in field.metadata:
        for name in ("ge", "gt", "le", "lt", "multiple_of"):
            value = getattr(meta, name, None)
            if value is not None:
                out[name] = value
    return out


def tooltip(field: FieldInfo, kind: Any, optional: bool) -> str:
    parts = [field.description or ""]
    b = bounds(field)
    low = b.get("ge", b.get("gt"))
    high = b.get("le", b.get("lt"))
    if low is not None or high is not None:
        parts.append(f"Allowed: {'' if low is None else low}…{'' if high is None else high}"
                     + (f", a multiple of {b['multiple_of']:g}" if "multiple_of" in b else ""))
    if typing.get_origin(kind) is Literal:
        parts.append("Allowed: " + ", ".join(map(str, typing.get_args(kind))))
    if optional:
        parts.append("Leave empty for the default.")
    return "\n".join(p for p in parts if p)


def allowed_text(field: FieldInfo, kind: Any) -> str:
    """What a field accepts, from the schema: "at least 64 and at most 4096, a multiple of 8"."""
    b = bounds(field)
    words = {"ge": "at least", "gt": "more than", "le": "at most", "lt": "less than"}
    parts = [f"{words[name]} {number_text(b[name])}" for name in ("ge", "gt", "le", "lt") if name in b]
    text = " and ".join(parts)
    if "multiple_of" in b:
        text += f"{', ' if text else ''}a multiple of {b['multiple_of']:g}"
    if typing.get_origin(kind) is Literal:
        text = "one of " + ", ".join(map(str, typing.get_args(kind)))
    elif not text and kind in (int, float):
        text = "a whole number" if kind is int else "a number"
    return text


def parse_text(text: str, kind: Any, empty: str | None = None) -> Any:
    """A typed value for the config: empty is `empty` (None, or the empty text of a setting whose default
    it is: the negative prompt), numbers parsed; anything else goes as typed, for the config to refuse
    with a message naming the key."""
    text = text.strip()
    if text == "":
        return empty
    if kind in (int, float):
        try:
            number = float(text)
        except ValueError:
            return text
        # 2.5 epochs is refused as what was typed, not trained as 2 (1e3 is a whole 1000).
        return int(number) if kind is int and number.is_integer() else number
    return text


def number_text(value: float | int) -> str:
    """A number as a field shows it: short (1e-05, 0.0001, 1), yet whole: six digits would show a learning rate
    of 0.0001234567 as 0.000123457, and pressing Enter in its field saved that."""
    if isinstance(value, int):  # a seed's bound: 4294967295, not 4.29497e+09
        return str(value)
    short = f"{value:g}"
    return short if float(short) == value else repr(value)

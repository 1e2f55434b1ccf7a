"""What is wrong with a config, said the way a person can fix it: the key, the value, what is allowed, the line."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo


class Contradiction(ValueError):
    """Raised inside validators to name the key at fault."""

    def __init__(self, key: str, value: Any, message: str) -> None:
        super().__init__(message)
        self.key = key
        self.value = value
        self.message = message


class ConfigIssue(BaseModel):
    key: str
    value: Any = None
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        shown = "" if self.value is None else f" = {_show(self.value)}"
        return f"{where}{self.key}{shown}: {self.message}"


class ConfigError(Exception):
    """A config that cannot be used; `issues` names each key, value and what is allowed."""

    def __init__(self, source: str, issues: list[ConfigIssue]) -> None:
        self.source = source
        self.issues = issues
        super().__init__(self.describe())

    def describe(self) -> str:
        head = f"{self.source}: {len(self.issues)} problem{'s' if len(self.issues) != 1 else ''}"
        return "\n".join([head, *(f"  - {i}" for i in self.issues)])


# A value's control characters as the escapes that made them: "D:\new\train" read from TOML's double quotes is
# shown as typed, on one line, not broken over two with a tab in it.
_ESCAPES = {ord("\n"): "\\n", ord("\t"): "\\t", ord("\r"): "\\r", ord("\b"): "\\b", ord("\f"): "\\f"}


def _show(value: Any) -> str:
    text = repr(value) if not isinstance(value, str) else f'"{value.translate(_ESCAPES)}"'
    return text if len(text) <= 80 else text[:77] + "..."


def _model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    model: type[BaseModel] | None = root
    for part in loc:
        if model is None:
            return None
        if isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        model = section_type(field.annotation)
    return model


def _field_at(root: type[BaseModel], loc: tuple[Any, ...]) -> FieldInfo | None:
    parent = _model_at(root, loc[:-1]) if loc else None
    return parent.model_fields.get(str(loc[-1])) if parent is not None else None


def _sections(root: type[BaseModel], prefix: str = "") -> list[tuple[str, str, type[BaseModel]]]:
    """Each table of `root`, tables inside tables too: its dotted name (dataset.concepts), its header as written
    ([[dataset.concepts]]) and its model."""
    found: list[tuple[str, str, type[BaseModel]]] = []
    for name, field in root.model_fields.items():
        section = section_type(field.annotation)
        if section is not None:
            where = f"{prefix}{name}"
            header = f"[[{where}]]" if get_origin(field.annotation) is list else f"[{where}]"
            found += [(where, header, section), *_sections(section, f"{where}.")]
    return found


def section_type(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = section_type(arg)
        if found is not None:
            return found
    return None


def _allowed(err: Mapping[str, Any]) -> str:
    ctx = err.get("ctx") or {}
    kind = err["type"]
    if kind == "literal_error":
        return f"allowed: {ctx.get('expected')}"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than", "multiple_of"):
        words = {
            "greater_than_equal": "at least",
            "greater_than": "greater than",
            "less_than_equal": "at most",
            "less_than": "less than",
            "multiple_of": "a multiple of",
        }
        bound = next(iter(ctx.values()), "")
        return f"must be {words[kind]} {bound}"
    msg = str(err.get("msg", "invalid value"))
    return msg[0].lower() + msg[1:]


def issues_from_validation(exc: ValidationError, root: type[BaseModel]) -> list[ConfigIssue]:
    """Each pydantic error as a ConfigIssue; `root` is the model that was validated (TrainConfig)."""
    issues: list[ConfigIssue] = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        key = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in loc).replace(".[", "[")
        if err["type"] == "extra_forbidden" and loc == ("preset",):
            # A preset file (presets/*.toml, or one copied to start a config) given where a run's config goes.
            issues.append(ConfigIssue(key="preset", message=(
                "this is a preset file: its [preset] table is the card the studio shows (title, description, "
                "promised VRAM), not a run's setting. To train with the preset, choose it on the Model & Preset "
                "page, or delete the [preset] table and set model.base and a [[dataset.concepts]] folder")))
        elif err["type"] == "extra_forbidden":
            parent = _model_at(root, loc[:-1])
            known = list(parent.model_fields) if parent else []
            guess = difflib.get_close_matches(str(loc[-1]), known, n=1)
            hint = f"; did you mean '{guess[0]}'?" if guess else ""
            # A key of another table written under this one (resolution under [training], a [dataset] key after
            # a [[dataset.concepts]] header, which takes every key below it): where it goes, not a near name here.
            homes = [header for where, header, section in _sections(root) if str(loc[-1]) in section.model_fields
                     and where != ".".join(str(p) for p in loc[:-1] if not isinstance(p, int))]
            if homes:
                hint = (f"; it is a key of {homes[0]}: move it under that table's header" if len(homes) == 1 else
                        f"; it is a key of {' and '.join(homes)}: move it under the header of the one you mean")
            allowed = ", ".join(known)
            issues.append(ConfigIssue(
                key=key, value=None, message=f"unknown key{hint} (known keys here: {allowed})"
            ))
        elif err["type"] == "missing":
            issues.append(ConfigIssue(key=key, message="is required but missing"))
        elif err["type"] == "list_type" and isinstance(err.get("input"), dict):
            # [dataset.concepts] written where each concept needs [[dataset.concepts]]
            issues.append(ConfigIssue(key=key, message=(
                f"is a list of tables: write the header of each one in double brackets, [[{key}]]")))
        elif err["type"] == "model_type" and isinstance(err.get("input"), list):
            issues.append(ConfigIssue(key=key, message=(
                f"is one table: write its header in single brackets, [{key}], not [[{key}]]")))
        elif err["type"] == "list_type" and isinstance(err.get("input"), str):
            # prompts = "a red circle": one item, written without the list's brackets
            issues.append(ConfigIssue(key=key, value=err["input"], message=(
                f"must be a list: write it in brackets, [{_show(err['input'])}]")))
        elif err["type"] == "string_pattern_mismatch" and (field := _field_at(root, loc)) is not None \
                and field.description:
            # "my run" as output.name: what the field takes in words, not its regular expression
            issues.append(ConfigIssue(key=key, value=err.get("input"), message=(
                f"does not have the form this key takes: {field.description}")))
        elif err["type"] == "value_error" and isinstance((err.get("ctx") or {}).get("error"), Contradiction):
            c: Contradiction = err["ctx"]["error"]
            issues.append(ConfigIssue(key=c.key, value=c.value, message=c.message))
        else:
            issues.append(ConfigIssue(key=key or "(top level)", value=err.get("input"), message=_allowed(err)))
    return issues



"""Two saves of one config, merged: what one window changed lands on what the other one wrote.

Two studio windows on one project each hold the config they loaded. A save writes, over the
file as it is now, only the keys this window changed from what it loaded (a three-way merge
on the config's values), so the other window's change to other keys stays. Where both
changed the same key this window's value wins; where the two changes together break a rule,
this window's config wins whole: it was valid as the person made it.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from studio.core.config.schema import TrainConfig

_MISSING = object()


def merge_configs(base: TrainConfig, mine: TrainConfig, theirs: TrainConfig) -> TrainConfig:
    """`theirs` (the file as it is now) with what `mine` changed from `base` (the config it was loaded as)."""
    merged = theirs.model_dump()
    _apply(merged, _changes(base.model_dump(), mine.model_dump()))
    try:
        return TrainConfig.model_validate(merged)
    except ValidationError:
        return mine


def _changes(base: dict[str, Any], mine: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...],
                                                                                                       Any]]:
    """(path, new value or _MISSING) of every value `mine` holds differently from `base`; lists are values."""
    found: list[tuple[tuple[str, ...], Any]] = []
    for key in dict.fromkeys([*base, *mine]):
        before, after = base.get(key, _MISSING), mine.get(key, _MISSING)
        if isinstance(before, dict) and isinstance(after, dict):
            found += _changes(before, after, (*prefix, key))
        elif before != after:
            found.append(((*prefix, key), after))
    return found


def _apply(data: dict[str, Any], changes: list[tuple[tuple[str, ...], Any]]) -> None:
    for path, value in changes:
        node = data
        for part in path[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        if value is _MISSING:
            node.pop(path[-1], None)
        else:
            node[path[-1]] = value

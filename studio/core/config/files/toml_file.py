"""The config's TOML file: migrations between schema versions, reading with line numbers, and
writing that keeps a person's comments and order."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import tomlkit
from pydantic import ValidationError
from tomlkit.exceptions import KeyAlreadyPresent, ParseError
from tomlkit.items import AoT, Table

from studio.core.config.errors import ConfigError, ConfigIssue, issues_from_validation
from studio.core.config.schema import SCHEMA_VERSION, TrainConfig
from studio.core.families import own_sampling
from studio.core.files import atomic_write_text

Migration = Callable[[dict[str, Any]], dict[str, Any]]

# MIGRATIONS[n] turns a version-n document into a version-(n+1) one.
MIGRATIONS: dict[int, Migration] = {}


class NewerConfigError(ConfigError):
    """A file written by a newer studio (a higher schema_version): refused, and never written over here."""


def migrate(data: dict[str, Any], source: str = "config") -> dict[str, Any]:
    version = data.get("schema_version", SCHEMA_VERSION)
    if not isinstance(version, int) or version < 1:
        raise ConfigError(source, [ConfigIssue(key="schema_version", value=version, message="must be a whole number from 1")])
    if version > SCHEMA_VERSION:
        raise NewerConfigError(source, [ConfigIssue(
            key="schema_version", value=version,
            message=f"this studio reads versions up to {SCHEMA_VERSION}; update the studio to open this file",
        )])
    while version < SCHEMA_VERSION:
        data = MIGRATIONS[version](dict(data))
        version += 1
        data["schema_version"] = version
    return data



# A path as Windows' "Copy as path" gives it, in TOML's double quotes: each backslash starts an escape there.
_WINDOWS_PATH_IN_DOUBLE_QUOTES = re.compile(r'"[^"]*\\[^"]*"')


def parse_toml(text: str, source: str) -> tomlkit.TOMLDocument:
    try:
        return tomlkit.parse(text)
    except (KeyAlreadyPresent, ParseError) as exc:
        twice = re.match(r'Key "(.+)" already exists', str(exc))
        if twice:
            # A key set twice in one table (a line copied to change it, the old one left above): the parser names
            # neither the table nor, inside a table, the line.
            where, key, table = _second_setting(text, twice.group(1))
            raise ConfigError(source, [ConfigIssue(
                key=key, line=where or getattr(exc, "line", None),
                message=f"the table [{key}] is written twice; move the keys under this header to the first one "
                        "and delete it" if table else "is set twice in the same table; delete one of the two lines",
            )]) from None
        if not isinstance(exc, ParseError):
            raise
        lines = text.splitlines()
        line = lines[exc.line - 1] if 0 < exc.line <= len(lines) else ""
        hint = (" (in double quotes TOML reads each \\ as the start of an escape: write a Windows path in single "
                "quotes, 'C:\\Users\\me\\images', or with forward slashes, \"C:/Users/me/images\")"
                if _WINDOWS_PATH_IN_DOUBLE_QUOTES.search(line) else "")
        raise ConfigError(source, [ConfigIssue(
            key="(file)", line=exc.line,
            message=f"not valid TOML at column {exc.col}: {str(exc).split(' at line')[0]}; fix the syntax there"
                    f"{hint}",
        )]) from None


def _second_setting(text: str, name: str) -> tuple[int | None, str, bool]:
    """The line that sets the key `name` a second time in one table, read as `_line_of` reads the tables, the
    key in full (training.seed) and whether that line is a table's header written twice; (None, name, False)
    where no line is found."""
    set_here: set[tuple[str, ...]] = set()
    headers: set[tuple[str, ...]] = set()
    for number, table, path, kind in _settings(text):
        if kind == "array":
            continue
        found = tuple(path)  # a header: [model.base] after base = "..." in [model]
        if found[-1] == name and found in set_here:
            return number, re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", ".".join(found)), found in headers
        set_here.update(found[:end] for end in range(len(table) + 1, len(found) + 1))
        if kind == "table":
            set_here.add(found)
            headers.add(found)
    return None, name, False


def _settings(text: str) -> Iterator[tuple[int, list[str], list[str], str]]:
    """Each line of `text` that opens a table or sets a key, read as TOML reads the tables: (line number, the
    table it is in, the full path it names, "table", "array" or "key"). The N-th [[name]] is the table name.N."""
    table: list[str] = []
    tables_seen: dict[tuple[str, ...], int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        header = re.match(r"^(\[\[?)\s*([^\]]+?)\s*\]\]?", stripped)
        if header:
            table = _dotted(header.group(2))
            if header.group(1) == "[[":
                index = tables_seen.get(tuple(table), -1) + 1
                tables_seen[tuple(table)] = index
                table = [*table, str(index)]
                yield number, table, table, "array"
            else:
                yield number, table, table, "table"
            continue
        assignment = re.match(r"^((?:\"[^\"]*\"|'[^']*'|[^=#\"'])+?)\s*=", stripped)
        if assignment:
            yield number, table, [*table, *_dotted(assignment.group(1))], "key"


def _key_path(key: str) -> list[str]:
    """"dataset.concepts[1].path" -> ["dataset", "concepts", "1", "path"]."""
    return [part for part in re.split(r"[.\[\]]+", key) if part]


def _dotted(name: str) -> list[str]:
    """A TOML key or table name as its parts: `a."b.c"` -> ["a", "b.c"]."""
    return [part.strip().strip("\"'") for part in re.findall(r'"[^"]*"|\'[^\']*\'|[^.]+', name)]


def _line_of(text: str, key: str) -> int | None:
    """The line that sets `key` (section.name, concepts[N]...), reading the tables as TOML does: the seed of
    [sampling] is not the seed of [training], nor is the second concept's path the first one's. A key inside a
    value (a list's item) or missing from its table is at the line of what holds it."""
    wanted = _key_path(key)
    holder, held = None, 1  # the line of the longest part of `wanted` set in the file, and that part's length
    for number, _table, found, kind in _settings(text):
        if kind == "array" and found[:-1] == wanted:  # [[sampling]] where a table goes, [[dataset.concept]]
            return number
        if found == wanted:
            return number
        if len(found) > held and wanted[:len(found)] == found:
            holder, held = number, len(found)
    return holder


def validate_data(data: Mapping[str, Any], source: str = "config", text: str | None = None) -> TrainConfig:
    """Migrate and validate plain data; raise ConfigError naming every bad key."""
    migrated = migrate(dict(data), source)
    try:
        return TrainConfig.model_validate(migrated)
    except ValidationError as exc:
        issues = issues_from_validation(exc, TrainConfig)
        if text is not None:
            for issue in issues:
                issue.line = _line_of(text, issue.key)
        raise ConfigError(source, issues) from None


def load_config(path: str | Path) -> TrainConfig:
    """Read a config file. Relative paths inside it stay as written; see `resolve_paths`."""
    path = Path(path)
    if path.is_dir():  # `studio-train run myproject`: the project's folder for its config
        inside = path / "studio.toml"
        raise ConfigError(str(path), [ConfigIssue(key="(file)", message=(
            f"is a folder, not a config file: give the config inside it, {inside}" if inside.is_file()
            else "is a folder, not a config file: give a config's .toml file (a project's studio.toml)"))])
    try:
        with path.open("rb") as file:
            # TOML holds no NUL: a binary file (a model's .safetensors given in the config's place) is said so
            # from its first bytes, not read whole (gigabytes) to find it is not text. UTF-16 text (its byte-order
            # mark first) is text saved in another encoding, said below.
            head = file.read(8192)
            binary = b"\x00" in head and not head.startswith((b"\xff\xfe", b"\xfe\xff"))
        if binary:
            raise ConfigError(str(path), [ConfigIssue(key="(file)", message=(
                "is not a config file (it holds binary data, such as a model's weights): give a config's .toml "
                "file, such as a project's studio.toml"))])
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(str(path), [ConfigIssue(key="(file)", message="file not found; check the path")]) from None
    except UnicodeDecodeError:
        raise ConfigError(str(path), [ConfigIssue(key="(file)", message="is not UTF-8 text; save it as UTF-8")]) from None
    except OSError as exc:
        raise ConfigError(str(path), [ConfigIssue(key="(file)", message=f"cannot be read: {exc.strerror}")]) from None
    doc = parse_toml(text, str(path))
    return validate_data(doc.unwrap(), str(path), text)


def config_to_data(config: TrainConfig) -> dict[str, Any]:
    """Plain data for TOML: defaults left out, None left out (TOML has no null)."""
    data = config.model_dump(mode="json", exclude_defaults=True)
    data["schema_version"] = config.schema_version
    data.setdefault("model", {})["family"] = config.model.family
    data["model"]["base"] = config.model.base
    # The samples' steps and guidance are left out where they are the family's (or base model's) own (what reading
    # the file back gives): the 7.0 a person chose for a family whose own is 4.0 is written, though it is the schema's default.
    sampling = data.setdefault("sampling", {})
    for key, own in own_sampling(config.model.family, config.model.base).items():
        sampling.pop(key, None)
        if getattr(config.sampling, key) != own:
            sampling[key] = getattr(config.sampling, key)
    if not sampling:
        del data["sampling"]
    return _drop_none(data)


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def _full_data(config: TrainConfig) -> dict[str, Any]:
    return dict(_drop_none(config.model_dump(mode="json")))


_ORDER = ["schema_version", "model", "method", "dataset", "training", "sampling", "output", "launch"]


def _merge_into(doc: Any, current: Mapping[str, Any], full: Mapping[str, Any]) -> None:
    """Write `current` (non-default values) into a tomlkit container, keeping comments.

    Keys already in the document are updated even when the new value is a default,
    so a person's explicit setting stays explicit; keys whose value became None go.
    """
    for key in list(doc.keys()):
        if key not in full:
            del doc[key]
    for key, value in full.items():
        wanted = key in doc or key in current
        if not wanted:
            continue
        existing = doc.get(key) if key in doc else None
        if isinstance(value, dict) and (existing is None or isinstance(existing, Table | dict)):
            if existing is None:
                doc[key] = tomlkit.table()
                existing = doc[key]
            _merge_into(existing, current.get(key, {}), value)
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            sparse = current.get(key) or [{} for _ in value]
            if existing is not None and len(existing) == len(value):
                for table, cur, item in zip(existing, sparse, value, strict=True):
                    _merge_into(table, cur, item)
                continue
            tables = _same_paths(existing, value)
            aot = existing if tables and isinstance(existing, AoT) else tomlkit.aot()
            for index in reversed(range(len(aot))):  # the file's tables of the items gone
                if not any(aot[index] is table for table in tables):
                    del aot[index]
            for table, cur, item in zip(tables or [None] * len(value), sparse, value, strict=True):
                if table is None:
                    table = tomlkit.table()
                    for k, v in cur.items():
                        table[k] = v
                    aot.append(table)
                else:
                    _merge_into(table, cur, item)
            if not tables:
                doc[key] = aot
        else:
            if existing is None or _plain(existing) != value:
                doc[key] = value


def _same_paths(existing: Any, items: list[dict[str, Any]]) -> list[Any]:
    """The file's table of each item with the same `path` (a concept's folder), None for a new item: a folder
    added or removed on the Dataset page leaves the other folders' tables (their comments) as written. Empty
    when the file's tables cannot stay in place: no array of tables, or the items kept in another order or
    before a new one."""
    if not isinstance(existing, AoT):
        return []
    left = list(existing)
    found: list[Any] = []
    for item in items:
        table = next((t for t in left if "path" in item and _plain(t.get("path")) == item["path"]), None)
        if table is not None:
            left.remove(table)
        found.append(table)
    kept = [table for table in found if table is not None]
    in_file_order = [table for table in existing if any(table is k for k in kept)]
    new_last = found[:len(kept)] == kept
    return found if new_last and all(a is b for a, b in zip(in_file_order, kept, strict=True)) else []


def _plain(item: Any) -> Any:
    return item.unwrap() if hasattr(item, "unwrap") else item


def dump_config(config: TrainConfig, original: str | None = None) -> str:
    """TOML text of a config; with `original`, its comments and order are kept."""
    doc = tomlkit.parse(original) if original else tomlkit.document()
    current = config_to_data(config)
    full = _full_data(config)
    if not original:
        current = {k: current[k] for k in _ORDER if k in current}
    _merge_into(doc, current, full)
    return tomlkit.dumps(doc)


def save_config(config: TrainConfig, path: str | Path) -> None:
    """Write a config, keeping the comments of the file already there."""
    path = Path(path)
    original = path.read_text(encoding="utf-8-sig") if path.exists() else None
    atomic_write_text(path, dump_config(config, original))


def dump_resolved(config: TrainConfig) -> str:
    """Every value spelled out, as a run folder's config.toml keeps it."""
    doc = tomlkit.document()
    full = _full_data(config)
    for key in _ORDER:
        if key in full:
            doc[key] = full[key]
    return tomlkit.dumps(doc)



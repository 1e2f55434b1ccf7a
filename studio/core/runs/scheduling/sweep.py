"""Sweeps: one config varied in one field, written as N configs that the queue trains one after the other.

`parse_values("1e-4, 5e-5, 1e-5")` or a range `parse_values("1e-4..1e-5 x3")` (N values, evenly spaced;
spaced by a constant ratio with `log3` instead of `x3`) gives the values; `write_sweep` writes one config
per value into a folder of its own, `<config folder>/sweeps/<name>-<field>/` (`<name>-<field>-2/`, ... when
that is taken: a second sweep never rewrites the configs the first one queued), each named by its value
(file and run name), so the Runs page and the queue tell them apart. Two values that would be one file (the
same number written twice, `1e-4, 0.0001`) are refused: every value is one run.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from studio.core.config.errors import ConfigError
from studio.core.config.files.paths import ResolvedConfig, load_resolved
from studio.core.config.files.toml_file import save_config, validate_data
from studio.core.config.rules.acting import resets_for

SWEEPS_DIR = "sweeps"
MAX_VALUES = 50
# What training.fill_card chooses at a run's start (the batch, its accumulation, the checkpointing): a sweep over
# one of them turns it off in its configs.
FILL_CARD_CHOOSES = ("training.batch_size", "training.gradient_accumulation", "training.gradient_checkpointing")
_RANGE = re.compile(r"^\s*(\S+)\s*\.\.\s*(\S+)\s+(x|log)\s*(\d+)\s*$")


class SweepError(ValueError):
    """A sweep that cannot be made; the message says what to write instead."""


def _number(text: str, where: str) -> float | int:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise SweepError(f"{where}: '{text}' is not a number (write e.g. 1e-4, 5e-5, 1e-5 or 1e-4..1e-5 x3)") from None


def parse_values(text: str) -> list[Any]:
    """The values of a list (`a, b, c`: numbers, true/false, or words) or of a range (`a..b xN`, `a..b logN`)."""
    match = _RANGE.match(text)
    if match:
        start, stop = _number(match.group(1), "range start"), _number(match.group(2), "range end")
        count = int(match.group(4))
        if not 2 <= count <= MAX_VALUES:
            raise SweepError(f"a range needs 2 to {MAX_VALUES} values, not {count}")
        if start == stop:
            raise SweepError(f"the range {text.strip()} starts and ends at the same value: give two different ends")
        if match.group(3) == "log":
            if start <= 0 or stop <= 0:
                raise SweepError("a log range needs two positive ends (e.g. 1e-4..1e-6 log3)")
            ratio = (stop / start) ** (1 / (count - 1))
            return [float(f"{start * ratio ** i:.6g}") for i in range(count)]
        step = (stop - start) / (count - 1)
        values = [start + step * i for i in range(count)]
        if all(isinstance(v, int) for v in (start, stop)) and all(float(v).is_integer() for v in values):
            return [int(v) for v in values]
        return [float(f"{v:.6g}") for v in values]
    parts = [p.strip() for p in text.split(",")]
    if len(parts) > 2 and any(not p for p in parts):  # "1e-4, 5e-5," named fewer than two values
        raise SweepError(f"'{text.strip()}' has an empty value (a comma at the end, or two commas in a row): remove "
                         "the extra comma")
    if len(parts) < 2 or any(not p for p in parts):
        raise SweepError(f"'{text}' names fewer than two values: write a list (1e-4, 5e-5, 1e-5) or a range "
                         "(1e-4..1e-5 x3)")
    if len(parts) > MAX_VALUES:
        raise SweepError(f"{len(parts)} values: a sweep has at most {MAX_VALUES}")
    out: list[Any] = []
    for part in parts:
        if part.lower() in ("true", "false"):
            out.append(part.lower() == "true")
            continue
        try:
            out.append(_number(part, "value"))
        except SweepError:
            out.append(part)
    _check_distinct(out, parts)
    return out


def value_label(value: Any) -> str:
    """The value in the sweep's file and run names, in the characters a run name takes (1e+06 is 1e06)."""
    text = ("true" if value else "false") if isinstance(value, bool) else f"{value:g}".replace(
        "e+", "e") if isinstance(value, float) else str(value)
    return re.sub(r"[^A-Za-z0-9.-]+", "_", text).strip("_") or "value"


def _check_distinct(values: list[Any], texts: list[str] | None = None) -> None:
    """Refuse two values that are one run: the same number (`1e-4, 0.0001`) or one file name; `texts` are
    the values as the person wrote them."""
    written = texts if texts is not None and len(texts) == len(values) else [_written(v) for v in values]
    seen: dict[str, int] = {}
    for index, value in enumerate(values):
        label = value_label(value)
        if label not in seen:
            seen[label] = index
            continue
        first = seen[label]
        both = f"{written[first]} and {written[index]}"
        if not isinstance(value, str) and not isinstance(values[first], str) and value == values[first]:
            why = f"{both} are the same value ({label})"
        else:
            why = f"{both} would be one run named '{label}'"
        raise SweepError(f"{why}: a sweep runs each value once; remove one of them, or write values that differ "
                         "within 6 significant digits")


def _written(value: Any) -> str:
    return repr(value) if isinstance(value, str) else value_label(value) if isinstance(value, bool) else str(value)


def sweep_folder(parent: Path, name: str) -> Path:
    """A new folder under `parent` for one sweep: `name`, or `name-2`, `name-3`, ... when that exists."""
    parent.mkdir(parents=True, exist_ok=True)
    for number in range(1, 10_000):
        folder = parent / (name if number == 1 else f"{name}-{number}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise SweepError(f"{parent} holds 10000 sweeps named {name}: move the old ones away")


def _set(data: dict[str, Any], field: str, value: Any) -> None:
    keys = field.split(".")
    node: Any = data
    for number, key in enumerate(keys[:-1]):
        if not isinstance(node, dict) or key not in node:
            raise SweepError(f"'{field}' is not a config setting: '{'.'.join(keys[:number + 1])}' does not exist "
                             "(write it as in the TOML file, e.g. training.learning_rate)")
        node = node[key]
    if not isinstance(node, dict) or keys[-1] not in node:
        raise SweepError(f"'{field}' is not a config setting (write it as in the TOML file, e.g. "
                         "training.learning_rate)")
    node[keys[-1]] = value


def write_sweep(config_path: Path, field: str, values: list[Any]) -> list[Path]:
    """One config per value, named by it; every value is checked before any file is written."""
    # The sweep's configs sit two folders down: their relative paths are made absolute.
    config = load_resolved(config_path)
    base = config.model_dump(mode="json")
    short = field.rsplit(".", 1)[-1]
    _check_distinct(values)
    configs: list[tuple[str, ResolvedConfig]] = []
    for value in values:
        data = _deep_copy(base)
        _set(data, field, value)
        # What the value makes inert goes back to its default, as on the Model page: max_steps swept over a run
        # in epochs sets its length in steps.
        for key, default in resets_for(config, {field: value}).items():
            _set(data, key, default)
        if field in FILL_CARD_CHOOSES:
            # training.fill_card would start every run at the one batch that fills the card: the value swept is
            # the value trained.
            data["training"]["fill_card"] = False
        label = value_label(value)
        data["output"]["name"] = f"{config.output.name}-{short}-{label}"
        try:
            configs.append((label, config.varied(validate_data(data, f"{config_path} with {field} = {value}"))))
        except ConfigError as exc:
            raise SweepError(exc.describe()) from None
    folder = sweep_folder(config_path.parent / SWEEPS_DIR, f"{config.output.name}-{short}")
    paths = []
    for label, varied in configs:
        path = folder / f"{short}-{label}.toml"
        save_config(varied, path)
        paths.append(path)
    return paths


def _deep_copy(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _deep_copy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_deep_copy(v) for v in data]
    return data

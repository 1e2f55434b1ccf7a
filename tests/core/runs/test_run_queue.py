"""The queue is kept in the project and survives a crash of the app."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio.core.runs.queue import QUEUE_FILE, QueueError, RunQueue


@pytest.fixture
def configs(tmp_path: Path) -> list[Path]:
    out = []
    for name in ("a.toml", "b.toml", "c.toml"):
        p = tmp_path / name
        p.write_text("schema_version = 1\n")
        out.append(p)
    return out


def test_add_reorder_remove_persist(tmp_path: Path, configs: list[Path]) -> None:
    q = RunQueue(tmp_path)
    _a, b, c = (q.add(p) for p in configs)
    q.move(c.id, 0)
    q.remove(b.id)
    again = RunQueue(tmp_path)
    assert [i.name for i in again.items] == ["c.toml", "a.toml"]
    assert (tmp_path / QUEUE_FILE).is_file()


def test_add_missing_config_says_so(tmp_path: Path) -> None:
    with pytest.raises(QueueError, match="does not exist"):
        RunQueue(tmp_path).add(tmp_path / "nope.toml")


def test_runs_in_order_and_stop_after_current(tmp_path: Path, configs: list[Path]) -> None:
    q = RunQueue(tmp_path)
    for p in configs:
        q.add(p)
    first = q.next_pending()
    assert first is not None and first.name == "a.toml"
    q.mark_running(first.id, tmp_path / "runs" / "r1")
    assert q.next_pending() is None  # one at a time
    q.set_stop_after_current(True)
    q.mark_ended(first.id, "completed")
    assert q.next_pending() is None  # held until the person starts the queue again
    by_hand = q.next_pending(by_hand=True)  # a start by hand runs one more, the tick kept
    assert by_hand is not None and by_hand.name == "b.toml" and q.stop_after_current
    q.set_stop_after_current(False)
    nxt = q.next_pending()
    assert nxt is not None and nxt.name == "b.toml"
    with pytest.raises(QueueError, match="not an end state"):
        q.mark_ended(nxt.id, "pending")


def test_running_item_becomes_interrupted_after_app_crash(tmp_path: Path, configs: list[Path]) -> None:
    q = RunQueue(tmp_path)
    item = q.add(configs[0])
    q.mark_running(item.id, tmp_path / "runs" / "r1")
    # The app dies here; the next start reads the file.
    after = RunQueue(tmp_path)
    got = after.get(item.id)
    assert got.state == "interrupted" and got.resumable and got.run_dir.endswith("r1")
    assert "resume" in got.message
    with pytest.raises(QueueError, match="is running"):
        q.remove(item.id)  # the old object still believes it runs


def test_damaged_queue_file_is_kept_aside(tmp_path: Path) -> None:
    (tmp_path / QUEUE_FILE).write_text("{ not json")
    q = RunQueue(tmp_path)
    assert q.items == []
    assert (tmp_path / "queue.json.damaged").read_text() == "{ not json"

"""The queue is kept in the project and survives a crash of the app."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from studio.core.runs.scheduling.queue import QUEUE_FILE, QueueError, RunQueue


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
    q.remove(item.id)  # the old object reads the file first: the item is interrupted there, not running
    assert RunQueue(tmp_path).items == []


def test_damaged_queue_file_is_kept_aside(tmp_path: Path) -> None:
    (tmp_path / QUEUE_FILE).write_text("{ not json")
    q = RunQueue(tmp_path)
    assert q.items == []
    assert (tmp_path / "queue.json.damaged").read_text() == "{ not json"


_ADDER = """
import sys, time
from pathlib import Path
from studio.core.runs.scheduling.queue import RunQueue
root, gate, config, count = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
queue = RunQueue(root)  # the window opened the project before the other one added anything
print("ready", flush=True)
while not gate.exists():
    time.sleep(0.002)
for _ in range(count):
    queue.add(config)
"""


def test_two_windows_adding_at_once_keep_every_item(tmp_path: Path) -> None:
    configs = []
    for name in ("left.toml", "right.toml"):
        (tmp_path / name).write_text("schema_version = 1\n")
        configs.append(tmp_path / name)
    gate = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    adders = [subprocess.Popen([sys.executable, "-c", _ADDER, str(tmp_path), str(gate), str(config), "15"], env=env,
                               stdout=subprocess.PIPE, text=True) for config in configs]
    for adder in adders:
        assert adder.stdout is not None and adder.stdout.readline().strip() == "ready"
    gate.touch()
    for adder in adders:
        adder.communicate(timeout=60)
        assert adder.returncode == 0
    names = [item.name for item in RunQueue(tmp_path).items]
    assert (names.count("left.toml"), names.count("right.toml")) == (15, 15)


def test_a_second_process_cannot_claim_while_the_first_runs_the_queue(tmp_path: Path, configs: list[Path]) -> None:
    first = RunQueue(tmp_path)
    for path in configs:
        first.add(path)
    claimed = first.claim_next(by_hand=True)
    assert claimed is not None and claimed.name == "a.toml"
    script = ("import sys\nfrom studio.core.runs.scheduling.queue import QueueBusyError, RunQueue\nq = RunQueue(sys.argv[1])\n"
              "print([i.state for i in q.items])\ntry:\n    q.claim_next(by_hand=True)\n"
              "except QueueBusyError as exc:\n    print(exc)\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, capture_output=True, text=True,
                         timeout=60)
    states, message = out.stdout.splitlines()
    assert states == "['running', 'pending', 'pending']"  # it sees the first one's queue, the item still running
    assert f"runs in another studio window, process {os.getpid()} on" in message
    first.release_runner()
    again = RunQueue(tmp_path)
    assert [i.state for i in again.items] == ["pending", "pending", "pending"]  # claimed, never started: pending


def test_an_item_whose_trainer_still_runs_is_not_marked_interrupted(tmp_path: Path, configs: list[Path]) -> None:
    from studio.core.runs.scheduling.lock import RunLock

    q = RunQueue(tmp_path)
    item = q.add(configs[0])
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    q.mark_running(item.id, run_dir)
    with RunLock(run_dir):  # the window closed with "keep running": its trainer goes on
        assert RunQueue(tmp_path).get(item.id).state == "running"
    assert RunQueue(tmp_path).get(item.id).state == "interrupted"


def test_a_queue_file_that_cannot_be_read_for_a_moment_is_not_put_aside(tmp_path: Path, configs: list[Path],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A project on a network share that drops for a moment, or in OneDrive with the sync client paused: reading
    queue.json fails. It was taken as damaged, put aside and the queue shown (and then saved) empty."""
    q = RunQueue(tmp_path)
    a, b = q.add(configs[0]), q.add(configs[1])
    real = Path.read_text

    def gone(path: Path, *args: object, **kwargs: object) -> str:
        if path.name == QUEUE_FILE:
            raise OSError(22, "The cloud file provider is not running", str(path))
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", gone)
    with pytest.raises(OSError, match="cloud file provider"):
        q.refresh()  # the window says it could not read it, and tries again later
    with pytest.raises(QueueError, match=r"The queue was not changed: .*queue.json could not be read or written "
                                         r"\(The cloud file provider is not running\)"):
        q.add(configs[2])
    assert not list(tmp_path.glob("*.damaged"))
    monkeypatch.setattr(Path, "read_text", real)
    assert [i.id for i in RunQueue(tmp_path).items] == [a.id, b.id]  # nothing lost, nothing added


def test_a_queue_change_that_cannot_be_saved_says_so_and_shows_the_file(tmp_path: Path, configs: list[Path],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """queue.json held by another program (OneDrive, an antivirus) longer than a save waits."""
    q = RunQueue(tmp_path)
    a = q.add(configs[0])
    real = os.replace

    def held(source: object, target: object) -> None:
        if Path(str(target)).name == QUEUE_FILE:
            raise PermissionError(13, "The process cannot access the file because it is being used by another "
                                      "process", str(target))
        real(source, target)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "replace", held)
    with pytest.raises(QueueError, match=r"The queue was not changed: .*being used by another process\); try again"):
        q.remove(a.id)
    assert [i.id for i in q.items] == [a.id]  # as the file still has it


def test_an_item_whose_run_ended_while_the_studio_was_closed_says_how_it_ended(tmp_path: Path,
                                                                               configs: list[Path]) -> None:
    from studio.core.runs.events import RunFinished
    from studio.core.runs.folders import EVENTS_FILE

    q = RunQueue(tmp_path)
    done, broken = q.add(configs[0]), q.add(configs[1])
    for item, name, finished in ((done, "r1", RunFinished(status="completed", step=10, time=1000.0)),
                                 (broken, "r2", RunFinished(status="failed", message="CUDA out of memory"))):
        run_dir = tmp_path / "runs" / name
        run_dir.mkdir(parents=True)
        (run_dir / EVENTS_FILE).write_text(json.dumps(finished.to_dict()) + "\n")
        q.mark_running(item.id, run_dir)  # (two at once only here: the studio closed with "keep running")
    # The studio was closed with "keep running"; both trainers ended before it was opened again.
    again = RunQueue(tmp_path)
    assert (again.get(done.id).state, again.get(done.id).ended, again.get(done.id).message) == ("completed", 1000.0, "")
    assert (again.get(broken.id).state, again.get(broken.id).message) == ("failed", "CUDA out of memory")

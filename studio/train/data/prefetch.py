"""The next batches are read while the current step runs.

With no data-loader worker processes (the default), a background thread reads and
decodes the next images, draws their captions and pins them for the copy to the GPU,
a couple of batches ahead; image decoding and numpy release the GIL, so this overlaps
with the step. The order is the data's own, so runs stay reproducible.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")
_END = object()


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class Prefetcher(Generic[T]):
    """Iterates `source` in a daemon thread, `depth` items ahead; `close()` ends it."""

    def __init__(self, source: Iterable[T], depth: int = 2) -> None:
        self._source = source
        self._queue: queue.Queue[object] = queue.Queue(maxsize=max(1, depth))
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._fill, name="studio-prefetch", daemon=True)
        self._thread.start()

    def _put(self, item: object) -> bool:
        while not self._closed.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _fill(self) -> None:
        try:
            for item in self._source:
                if not self._put(item):
                    return
            self._put(_END)
        except BaseException as error:  # handed to the consumer, which raises it where it reads
            self._put(_Failed(error))

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        item = self._queue.get()
        if item is _END:
            self._queue.put(_END)  # later calls end too
            raise StopIteration
        if isinstance(item, _Failed):
            raise item.error
        return item  # type: ignore[return-value]

    def close(self) -> None:
        self._closed.set()
        while True:  # free a producer blocked on a full queue
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join(timeout=5.0)

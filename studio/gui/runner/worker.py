"""Background work in the window: a function runs on a pool thread, its result or error comes back on the GUI thread.

The window never waits for the work, and no error is lost on the way: the caller's
`on_failed` shows it to the person, and an error the caller did not name as expected is
a bug, so it is raised again on the GUI thread, where the exception hook reports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from PySide6.QtCore import QCoreApplication, QEvent, QObject, QRunnable, QThreadPool, Signal, Slot

T = TypeVar("T")
Progress = Callable[[str, int, int], None]  # message, done, total


class Job:
    """One call of a function on the pool. `cancel()` drops its result; the call itself runs to its end."""

    def __init__(self, function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                 on_done: Callable[[Any], None], on_failed: Callable[[BaseException], None] | None,
                 on_progress: Progress | None, expected: tuple[type[BaseException], ...]) -> None:
        self.function, self.args, self.kwargs = function, args, kwargs
        self.on_done, self.on_failed, self.on_progress = on_done, on_failed, on_progress
        self.expected = expected
        self.cancelled = False  # read by the pool thread too: a function may check it to stop early
        self.finished = False  # set by the pool thread once the call has returned or raised
        self.result: Any = None
        self.error: BaseException | None = None

    def cancel(self) -> None:
        self.cancelled = True


class _Relay(QObject):
    """Carries finished jobs from the pool thread to the worker (a queued connection)."""

    sig_finished = Signal(object)  # Job
    sig_progress = Signal(object, str, int, int)  # Job, message, done, total


class _Runnable(QRunnable):
    def __init__(self, job: Job, relay: _Relay) -> None:
        super().__init__()
        self.job, self.relay = job, relay

    def run(self) -> None:
        job = self.job
        try:
            job.result = job.function(*job.args, **job.kwargs)
        except BaseException as exc:  # a thread boundary: handed to the GUI thread, which reports it
            job.error = exc
        job.finished = True
        self.relay.sig_finished.emit(job)


class Worker(QObject):
    """Runs functions on its own thread pool (one at a time by default, in the order asked)."""

    def __init__(self, parent: QObject | None = None, max_threads: int = 1) -> None:
        super().__init__(parent)
        self.pool = QThreadPool(self)
        self.pool.setMaxThreadCount(max_threads)
        # Made after the pool: children are deleted in order, so a call still running when the
        # worker goes away finishes (the pool waits for it) while the relay is still there.
        self._relay = _Relay(self)
        self._relay.sig_finished.connect(self._finished)
        self._relay.sig_progress.connect(self._progress)
        self._jobs: list[Job] = []  # started, not yet delivered

    @property
    def busy(self) -> bool:
        return bool(self._jobs)

    def run(self, function: Callable[..., T], *args: Any, on_done: Callable[[T], None],
            on_failed: Callable[[BaseException], None] | None = None, on_progress: Progress | None = None,
            expected: tuple[type[BaseException], ...] = (), **kwargs: Any) -> Job:
        """Call `function(*args, **kwargs)` on the pool; `on_done(result)` or `on_failed(error)` follows here.

        With `on_progress`, the function also gets `progress=` (message, done, total), callable
        from its thread. An error not in `expected` goes to `on_failed` and is then raised again.
        """
        job = Job(function, args, kwargs, on_done, on_failed, on_progress, expected)
        if on_progress is not None:
            job.kwargs["progress"] = lambda message, done, total: self._relay.sig_progress.emit(
                job, message, done, total)
        self._jobs.append(job)
        self.pool.start(_Runnable(job, self._relay))
        return job

    @Slot(object)
    def _finished(self, job: Job) -> None:
        if job in self._jobs:
            self._jobs.remove(job)
        error = job.error
        if not job.cancelled:
            if error is None:
                job.on_done(job.result)
            elif job.on_failed is not None:
                job.on_failed(error)
        if error is not None and not isinstance(error, job.expected):
            raise error

    @Slot(object, str, int, int)
    def _progress(self, job: Job, message: str, done: int, total: int) -> None:
        if not job.cancelled and job.on_progress is not None:
            job.on_progress(message, done, total)

    def wait(self, timeout_s: float = 30.0) -> bool:
        """Block until the running calls are done and their results delivered (tests, shutdown)."""
        done = self.pool.waitForDone(int(timeout_s * 1000))
        # The results wait in the event queue; hand them over now, in order.
        QCoreApplication.sendPostedEvents(self, QEvent.Type.MetaCall.value)
        return done

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Drop every result still to come, forget calls not started, wait for the running ones."""
        for job in self._jobs:
            job.cancel()
        self.pool.clear()
        self.pool.waitForDone(int(timeout_s * 1000))
        self._jobs = [job for job in self._jobs if job.finished]  # the others never ran

"""The consumer under test runs in a thread of its own, so a delivery that never ends fails the test instead of hanging it.

A consumer can block on something no database shows: a handler that sleeps, waits
for a network call without a timeout, or deadlocks on a lock in Python. The
deliver-twice helper cannot tell such a wait from slow work by looking, so it gives
each call into the reader's code (one delivery, one race of two deliveries, one
``reset`` or ``state``) a wall-clock limit, generous by default. The limit only turns a
hang into a failure: a consumer that finishes, however slowly the machine runs,
gets the same report as without it. When the limit passes, :class:`Blocked` says
which delivery was blocked, after which of its steps, at which line of the
consumer's code, and what to do; the consumer's database sessions are ended, as a
dead process's are, so no lock it held keeps the next test waiting.
"""

from __future__ import annotations

import linecache
import math
import queue
import sys
import sysconfig
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar, cast

from deliver_twice.sessions import Sessions
from deliver_twice.steps import Watch

T = TypeVar("T")

_LIBRARY = tuple(str(Path(sysconfig.get_paths()[name]).resolve()) for name in ("stdlib", "platstdlib", "purelib",
                                                                                 "platlib"))
_OURS = tuple(str(Path(__file__).resolve().with_name(name)) for name in ("steps.py", "scenarios.py", "consumer_thread.py"))


class Blocked(AssertionError):
    """A call into the consumer did not end within the time limit: the text says where it waits and what to do."""


def _where(thread: int | None) -> str:
    """The line of the consumer's own code where ``thread`` waits: the innermost frame outside the standard library,
    installed packages and the helper's watching code (or the innermost frame, when everything is library)."""
    frame: FrameType | None = sys._current_frames().get(thread) if thread is not None else None
    if frame is None:
        return ""
    innermost = frame
    while frame is not None:
        name = str(Path(frame.f_code.co_filename).resolve())
        if not name.startswith(_LIBRARY) and name not in _OURS:
            break
        frame = frame.f_back
    frame = frame or innermost
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    return f" in {frame.f_code.co_name} ({Path(frame.f_code.co_filename).name}:{frame.f_lineno}: `{line}`)"


def _stands(watch: Watch) -> str:
    """Where one delivery stands, in its own steps."""
    done = len(watch.steps)
    if watch.held:
        return f"held by the test before step {done} ({watch.steps[-1]}), as this scenario plans"
    if not done:
        return f"blocked before its first statement{_where(watch.thread)}"
    return f"blocked at or after step {done} ({watch.steps[-1]}){_where(watch.thread)}"


class ConsumerThread:
    """The consumer's process: one daemon thread runs every call into the reader's code, one at a time.

    One thread for all of them keeps each database connection in the thread that opened
    it (SQLite refuses a connection from another thread). A thread cannot be killed: one
    that never returns is left behind as a daemon, so it does not keep the test process
    from exiting.
    """

    def __init__(self, sessions: Sessions, time_limit: float, consumer: str, *, ack: bool = False) -> None:
        if not time_limit > 0:  # also refuses NaN
            raise ValueError(f"time_limit is the seconds a delivery may take: give a positive number (or math.inf "
                             f"for none), not {time_limit!r}")
        self.sessions, self.time_limit, self.consumer = sessions, time_limit, consumer
        self.ack = ack
        """Whether the consumer acknowledges by calling the ``ack`` it is given (else by returning)."""
        self.scenario = "one clean delivery of each message"
        self.watches: list[Watch] = []
        """The deliveries of the call running now (two in a race), to say where each stands if it blocks."""
        self.broken = False
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], threading.Event, dict[str, Any]] | None] = (
            queue.SimpleQueue())
        self._thread = threading.Thread(target=self._serve, name="consumer under test", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            work, done, box = job
            try:
                box["result"] = work()
            except BaseException as error:  # noqa: BLE001 - handed to the waiting test thread, which raises it
                box["error"] = error
            finally:
                done.set()

    def call(self, work: Callable[[], T], what: str) -> T:
        """Run ``work`` in the consumer's thread and return its result; raise :class:`Blocked` after the time limit."""
        done: threading.Event = threading.Event()
        box: dict[str, Any] = {}
        self._jobs.put((work, done, box))
        if not done.wait(None if math.isinf(self.time_limit) else self.time_limit):  # inf: no limit at all
            raise self._give_up(what)
        self.watches = []
        if "error" in box:
            raise box["error"]
        return cast(T, box["result"])

    def _give_up(self, what: str) -> Blocked:
        """End what the blocked call holds and say what was blocked, where, and what to do."""
        self.broken = True
        live = [watch for watch in self.watches if watch.thread is not None and not watch.ended]
        lines = [(f"{self.consumer} did not finish {what} within the time limit of {self.time_limit:g} s "
                  f"(scenario: {self.scenario}).")]
        if live:
            lines += [f"- delivery {number}: {_stands(watch)}" for number, watch in enumerate(live, 1)]
        else:
            lines.append(f"- it waits{_where(self._thread.ident) or ' somewhere the test cannot see'}")
        if any(watch.held for watch in live):
            lines.append("The blocked delivery neither ended nor waited for a PostgreSQL lock while the held one "
                         "waited: it waits for something outside the database that the held one has (a lock in "
                         "Python, a file?). Two consumer processes share no such thing; two threads of one process do.")
        lines.append("A delivery must end: give every wait in it (a lock, a network call, a queue) a timeout of its "
                     "own, so a stuck delivery raises and the broker redelivers the message. If it is only slow, "
                     "pass a larger time_limit= (seconds), or set idempotency_time_limit in your pytest "
                     "configuration. The test stopped waiting: the blocked thread is left behind and its database "
                     "sessions were ended.")
        for watch in live:
            watch.abandon()
        self.sessions.end_lent()
        return Blocked("\n".join(lines))

    def stop(self) -> None:
        """Let the thread end once its last call is done (at once, unless it is blocked)."""
        self._jobs.put(None)

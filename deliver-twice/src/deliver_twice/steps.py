"""A consumer's connection, watched call by call, so a test can kill the consumer between two of its steps.

A real consumer talks to its database through a DB-API connection (psycopg,
sqlite3, DuckDB): ``execute`` a statement, ``commit``, perhaps ``with
conn.transaction():``. Each of those calls is a step the test can see without a
line of the consumer changing. :class:`WatchedConnection` wraps the connection,
counts the calls, and at a chosen call either *dies* (raises :class:`Crashed`, as
a process killed there would stop) or *waits* until told to go on (so a second
delivery can run in between, as a second consumer would).

A consumer written as a generator may also ``yield`` a step's name before a step
the database does not see (a call to a payment system, an email): each name is
one more place to crash.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

from deliver_twice.asynchronous import then

Connection = Any
"""A DB-API connection: psycopg, sqlite3 or DuckDB (anything with ``execute``, ``cursor``, ``commit``)."""


class Crashed(BaseException):
    """The consumer's process died before this step: nothing after it runs, and its open transaction is lost.

    A ``BaseException``, like ``KeyboardInterrupt``: a consumer's ``except Exception``
    cannot catch a death and carry on.
    """


class StepFailed(ConnectionError):
    """The database connection was lost before this step: an ordinary error, which the consumer may catch.

    Unlike :class:`Crashed` the process lives on; every later call on the connection fails too.
    A consumer that catches it and acknowledges anyway loses the message.
    """


def describe(query: Any) -> str:
    """A statement as a short label: its verb and table (``INSERT INTO payments``), or the whole of a short one."""
    text = " ".join(str(query).split())
    words = text.split(" ")
    verb = words[0].upper()
    upper = [word.upper() for word in words]
    if verb in ("INSERT", "DELETE") and len(words) > 2:
        return " ".join(words[:3])
    if verb == "UPDATE" and len(words) > 1:
        return " ".join(words[:2])
    if verb == "SELECT" and "FROM" in upper[:-1]:
        return f"SELECT from {words[upper.index('FROM') + 1]}"
    return text if len(text) <= 40 else verb


class Watch:
    """What one delivery's connection has done, and where it must die or wait.

    ``crash_at`` is the number of the call (from 1) before which the consumer dies;
    ``fail_at`` the call before which its connection is lost (:class:`StepFailed` from then on);
    ``pause_at`` the call before which it waits for :meth:`resume`.
    """

    def __init__(self, *, crash_at: int | None = None, fail_at: int | None = None,
                 pause_at: int | None = None, beside: Watch | None = None) -> None:
        self.crash_at, self.fail_at, self.pause_at = crash_at, fail_at, pause_at
        self.beside = beside
        """The delivery this one runs beside in a race: on SQLite a statement of this one that finds the database
        locked waits for that one to end, then runs again, as SQLite's busy timeout would let it."""
        self.racing = beside is not None or pause_at is not None
        self.waiting = threading.Event()
        """Set when this delivery waits for the lock the delivery beside it holds (SQLite; PostgreSQL says so itself)."""
        self.finished = threading.Event()
        """Set once the delivery has ended and its connection is rolled back and given back: its locks are gone."""
        self.lost = False
        self.steps: list[str] = []
        self.dead = False
        self.connection: Connection | None = None
        self.thread: int | None = None
        """The thread the delivery runs in, once it has started (to find where a blocked one waits)."""
        self.ended = False
        self.acked = False
        """The consumer called its ``ack`` (when it is given one): the broker will not send this delivery again."""
        self.paused = threading.Event()
        self._go = threading.Event()

    def step(self, name: str) -> None:
        """Called before each step: die or wait here if this is the chosen one."""
        if self.dead:
            raise Crashed("the process is already dead")
        if self.lost:
            raise StepFailed(f"the connection was lost: {name} cannot run")
        self.steps.append(name)
        if len(self.steps) == self.crash_at:
            self.dead = True
            raise Crashed(f"crashed before {name}")
        if len(self.steps) == self.fail_at:
            self.lost = True
            raise StepFailed(f"the connection was lost before {name}")
        if len(self.steps) == self.pause_at:
            self.paused.set()
            self._go.wait()
            if self.dead:
                raise Crashed(f"the test gave up while this delivery waited before {name}")

    def run(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Make one call on the real connection; in a race on SQLite, a call finding the database locked by the
        delivery beside waits for that one to end (no timeout: the race reads the wait, never guesses it) and runs
        again."""
        try:
            return call(*args, **kwargs)
        except Exception as error:
            if self.beside is None or not _sqlite_locked(error):
                raise
        self.waiting.set()
        while not self.beside.finished.wait(0.01):
            if self.dead:  # the test gave up on this race
                raise Crashed("the test gave up while this delivery waited for the database lock")
        return call(*args, **kwargs)

    def resume(self) -> None:
        """Let a consumer waiting at ``pause_at`` go on."""
        self._go.set()

    @property
    def held(self) -> bool:
        """Waiting at ``pause_at`` for :meth:`resume`, as the test planned."""
        return self.paused.is_set() and not self._go.is_set()

    def abandon(self) -> None:
        """The test gives up on this delivery: its next step dies (a held one is let go, to die at once)."""
        self.dead = True
        self._go.set()


def _sqlite_locked(error: BaseException) -> bool:
    return type(error).__module__ == "sqlite3" and "locked" in str(error)


class _Transparent:
    """A wrapper that reads and writes every attribute it does not define on the object it wraps.

    ``conn.autocommit = True`` or ``cursor.row_factory = ...`` written by the consumer must
    reach the real connection, or the consumer runs differently under test than in production.
    """

    _own: tuple[str, ...] = ()
    _wrapped: str = ""

    def __getattr__(self, name: str) -> Any:
        return getattr(object.__getattribute__(self, self._wrapped), name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._own:
            object.__setattr__(self, name, value)
        else:
            setattr(object.__getattribute__(self, self._wrapped), name, value)


class WatchedCursor(_Transparent):
    """A cursor whose ``execute`` calls are steps of the delivery."""

    _own, _wrapped = ("_cursor", "_watch"), "_cursor"

    def __init__(self, cursor: Any, watch: Watch) -> None:
        self._cursor, self._watch = cursor, watch

    def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
        self._watch.step(describe(query))
        result = self._watch.run(self._cursor.execute, query, *args, **kwargs)
        if inspect.isawaitable(result):  # psycopg's AsyncCursor returns itself once awaited
            return then(result, lambda done: self if done is self._cursor else done)
        return self if result is self._cursor else result

    def executemany(self, query: Any, *args: Any, **kwargs: Any) -> Any:
        self._watch.step(describe(query))
        return self._watch.run(self._cursor.executemany, query, *args, **kwargs)

    def __iter__(self) -> Any:
        return iter(self._cursor)

    def __enter__(self) -> Self:
        self._cursor.__enter__()
        return self

    def __exit__(self, *exc: object) -> Any:
        return self._cursor.__exit__(*exc)


class _Block:
    """``with conn.transaction():``: its clean exit is a commit, and so a step."""

    def __init__(self, block: Any, watch: Watch) -> None:
        self._block, self._watch = block, watch

    def __enter__(self) -> Any:
        return self._block.__enter__()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> Any:
        if kind is None:
            try:
                self._watch.step("COMMIT")
            except (Crashed, StepFailed) as stop:
                self._block.__exit__(type(stop), stop, None)  # rolled back: died, or lost, before the commit
                raise
        return self._block.__exit__(kind, error, trace)

    async def __aenter__(self) -> Any:
        return await self._block.__aenter__()

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> Any:
        if kind is None:
            try:
                self._watch.step("COMMIT")
            except (Crashed, StepFailed) as stop:
                await self._block.__aexit__(type(stop), stop, None)
                raise
        return await self._block.__aexit__(kind, error, trace)


class WatchedConnection(_Transparent):
    """A DB-API connection whose statements and commits are the steps a test can crash or pause before.

    Everything else is the real connection's: attributes read and written (``autocommit``,
    ``isolation_level``, ``row_factory``), ``with conn:`` (sqlite3 rolls back on an error,
    psycopg rolls back and closes), and any call it does not watch. Attributes the consumer
    writes are put back when the delivery ends (:meth:`restore`), so a reused session starts
    the next delivery as a new connection would.
    """

    _own, _wrapped = ("_connection", "_watch", "_written"), "_connection"

    def __init__(self, connection: Connection, watch: Watch) -> None:
        self._connection, self._watch = connection, watch
        self._written: dict[str, Any] = {}

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self._own and name not in self._written:
            self._written[name] = getattr(self._connection, name, None)
        super().__setattr__(name, value)

    def restore(self) -> None:
        """Put back every attribute the consumer wrote (after a rollback: psycopg sets autocommit only outside one)."""
        for name, value in self._written.items():
            with contextlib.suppress(Exception):  # a closed connection: it is not reused anyway
                setattr(self._connection, name, value)

    def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
        self._watch.step(describe(query))
        result = self._watch.run(self._connection.execute, query, *args, **kwargs)
        if inspect.isawaitable(result):  # psycopg's AsyncConnection: a cursor once awaited; asyncpg: a status
            return then(result, lambda done: done if isinstance(done, str) else WatchedCursor(done, self._watch))
        # DuckDB's execute returns the connection itself; psycopg's and sqlite3's a cursor.
        return self if result is self._connection else WatchedCursor(result, self._watch)

    def fetch(self, query: Any, *args: Any, **kwargs: Any) -> Any:
        """asyncpg's statements that return rows: each a step."""
        self._watch.step(describe(query))
        return self._connection.fetch(query, *args, **kwargs)

    def fetchrow(self, query: Any, *args: Any, **kwargs: Any) -> Any:
        self._watch.step(describe(query))
        return self._connection.fetchrow(query, *args, **kwargs)

    def fetchval(self, query: Any, *args: Any, **kwargs: Any) -> Any:
        self._watch.step(describe(query))
        return self._connection.fetchval(query, *args, **kwargs)

    def executemany(self, query: Any, *args: Any, **kwargs: Any) -> Any:
        self._watch.step(describe(query))
        return self._watch.run(self._connection.executemany, query, *args, **kwargs)

    def executescript(self, script: str) -> Any:
        """sqlite3's several statements in one call: one step."""
        self._watch.step(describe(script))
        return self._watch.run(self._connection.executescript, script)

    def cursor(self, *args: Any, **kwargs: Any) -> WatchedCursor:
        return WatchedCursor(self._connection.cursor(*args, **kwargs), self._watch)

    def commit(self) -> Any:
        self._watch.step("COMMIT")
        return self._watch.run(self._connection.commit)  # a coroutine on an async connection, for it to await

    def transaction(self, *args: Any, **kwargs: Any) -> _Block:
        return _Block(self._connection.transaction(*args, **kwargs), self._watch)

    def __enter__(self) -> Self:
        self._connection.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> Any:
        # psycopg and sqlite3 commit a connection's block on a clean exit: a step like any commit.
        # On an error (or a death before that commit) the real connection's own exit rolls back.
        if kind is None:
            try:
                self._watch.step("COMMIT")
            except (Crashed, StepFailed) as stop:
                self._connection.__exit__(type(stop), stop, None)
                raise
        return self._connection.__exit__(kind, error, trace)


Handle = Callable[..., Any]
"""A consumer: ``handle(connection, message)`` (or with ``ack``) handles one message, commits, acknowledges."""

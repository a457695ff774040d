"""SQLAlchemy sessions watched from the inside: every SQL statement the session sends, the ORM flush and the commit
are steps, so a consumer that only ``session.add``s and ``session.commit()``s can die before each of them.

The statements an ORM flush sends never pass through the consumer's hands, so wrapping the
session would miss them. Instead the test listens to the session's engine
(``before_cursor_execute`` and ``commit``, which SQLAlchemy fires just before the driver runs the
statement or the commit) and to the session's ``before_flush``; each listener finds the delivery
by the thread it runs in, so one engine serves several deliveries.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from deliver_twice.steps import Watch, describe

_watching: dict[int, Watch] = {}
_engines: weakref.WeakSet[Any] = weakref.WeakSet()


def is_session(connection: Any) -> bool:
    """A SQLAlchemy ORM ``Session`` (what ``sessionmaker()`` makes)."""
    return type(connection).__module__.startswith("sqlalchemy.orm") and hasattr(connection, "get_bind")


def _step(name: str) -> None:
    if (watch := _watching.get(threading.get_ident())) is not None:
        watch.step(name)


def _statement(connection: Any, cursor: Any, statement: str, *rest: Any) -> None:
    _step(describe(statement))


def _commit(connection: Any) -> None:
    _step("COMMIT")


def _flush(session: Any, context: Any, instances: Any) -> None:
    _step("ORM flush")


def watch(session: Any, delivery: Watch) -> None:
    """Make every statement, flush and commit of ``session`` in this thread a step of ``delivery``."""
    from sqlalchemy import event

    engine = session.get_bind()
    if engine not in _engines:
        event.listen(engine, "before_cursor_execute", _statement)
        event.listen(engine, "commit", _commit)
        _engines.add(engine)
    if not event.contains(session, "before_flush", _flush):
        event.listen(session, "before_flush", _flush)
    _watching[threading.get_ident()] = delivery


def unwatch() -> None:
    """This thread's delivery has ended: its session's calls are no longer steps."""
    _watching.pop(threading.get_ident(), None)


def rows(session: Any, query: str) -> list[Any]:
    """All rows of a plain SQL ``query`` on the session's connection."""
    return list(session.connection().exec_driver_sql(query).fetchall())


def dialect(session: Any) -> str:
    return str(session.get_bind().dialect.name)

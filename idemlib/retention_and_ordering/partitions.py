"""A daily-partitioned inbox's whole life on real PostgreSQL: partitions made ahead, a missing one, a detach
interrupted and finished, what a too-old copy meets, and what a drop costs at several sizes.

Every step that could wait runs with ``lock_timeout`` (or ``statement_timeout`` for the
concurrent detach, whose wait for older transactions is not a table lock) behind a report
that holds its read transaction open until the step is over, so whether a statement waits
is decided by the locks, not by how long anything takes: the outcomes are the same on a busy
machine. Only the cost table is wall-clock time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pandas as pd
import psycopg

from idemlib.retention_and_ordering.pruning import ScratchSchema, scratch_schema
from idemlib.stores.sql import single_value

DAY_SECONDS = 86_400
PARENT = """CREATE TABLE inbox_daily (
    message_id VARCHAR NOT NULL,
    sent_on    DATE    NOT NULL,
    PRIMARY KEY (message_id, sent_on)) PARTITION BY RANGE (sent_on)"""
WAIT_MS = 200
"""How long a step may wait for its lock before it gives up (and the table says it would have waited)."""


def _day(day: int) -> str:
    return f"DATE '2026-01-01' + {day}"


def _bounds(day: int) -> str:
    return f"FOR VALUES FROM ({_day(day)}) TO ({_day(day + 1)})"


def _partition(day: int) -> str:
    return f"inbox_daily_d{day:02d}"


@contextmanager
def _report(schema: ScratchSchema) -> Iterator[None]:
    """A report's read transaction on the inbox, open for as long as the block runs (it locks every partition)."""
    reader = schema.connect()
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM inbox_daily")
    try:
        yield
    finally:
        reader.execute("COMMIT")
        reader.close()


def _attempt(connection: psycopg.Connection, statement: str, timeout: str = "lock_timeout") -> str:
    """Run ``statement`` allowed to wait :data:`WAIT_MS` for what it needs; what happened, in a few words."""
    connection.execute(f"SET {timeout} = '{WAIT_MS}ms'")
    try:
        connection.execute(statement)
        return "done at once"
    except (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled) as error:
        return f"waited, gave up after {WAIT_MS} ms ({type(error).__name__})"
    except psycopg.Error as error:
        return f"refused: {type(error).__name__}: {str(error).splitlines()[0]}"
    finally:
        connection.execute(f"RESET {timeout}")


def _pending(connection: psycopg.Connection, day: int) -> bool:
    row = connection.execute("SELECT inhdetachpending FROM pg_inherits WHERE inhrelid = %s::regclass",
                             (_partition(day),)).fetchone()
    return bool(row and row[0])


def partition_lifecycle(url: str | None = None) -> pd.DataFrame:
    """The partition steps a pruning job and its consumer meet, each run on the server: one row per step, with the
    statement, whether a report's open read transaction was in the way, and what happened."""
    schema = scratch_schema(url)
    job = schema.connect()
    steps: list[tuple[str, str, str, str]] = []

    def step(what: str, statement: str, behind_report: bool, timeout: str = "lock_timeout",
             then: Callable[[], str] | None = None) -> None:
        if behind_report:
            with _report(schema):
                outcome = _attempt(job, statement, timeout)
                outcome += then() if then else ""
        else:
            outcome = _attempt(job, statement, timeout) + (then() if then else "")
        steps.append((what, statement, "yes" if behind_report else "no", outcome))

    try:
        job.execute(PARENT)
        for day in (0, 1):
            job.execute(f"CREATE TABLE {_partition(day)} PARTITION OF inbox_daily {_bounds(day)}")
        step("a delivery for a day with no partition yet",
             f"INSERT INTO inbox_daily VALUES ('m-a1', {_day(2)})", behind_report=False)
        step("create tomorrow's partition directly",
             f"CREATE TABLE {_partition(2)} PARTITION OF inbox_daily {_bounds(2)}", behind_report=True)
        job.execute(f"CREATE TABLE {_partition(2)} (LIKE inbox_daily INCLUDING ALL)")
        step("create it as a table of its own (LIKE inbox_daily), then attach it",
             f"ALTER TABLE inbox_daily ATTACH PARTITION {_partition(2)} {_bounds(2)}", behind_report=True)
        step("the oldest day, a plain DETACH", f"ALTER TABLE inbox_daily DETACH PARTITION {_partition(0)}",
             behind_report=True)
        step("the oldest day, DETACH CONCURRENTLY cut short (statement_timeout)",
             f"ALTER TABLE inbox_daily DETACH PARTITION {_partition(0)} CONCURRENTLY", behind_report=True,
             timeout="statement_timeout",
             then=lambda: f"; detach pending afterwards: {_pending(job, 0)}")
        step("DETACH CONCURRENTLY again", f"ALTER TABLE inbox_daily DETACH PARTITION {_partition(0)} CONCURRENTLY",
             behind_report=False)
        step("finish the interrupted detach", f"ALTER TABLE inbox_daily DETACH PARTITION {_partition(0)} FINALIZE",
             behind_report=False, then=lambda: f"; detach pending afterwards: {_pending(job, 0)}")
        job.execute(f"DROP TABLE {_partition(0)}")
        step("a late copy of a message from the dropped day",
             f"INSERT INTO inbox_daily VALUES ('m-7f3', {_day(0)})", behind_report=False)
        version = single_value(job.execute("SHOW server_version"))
    finally:
        job.close()
        schema.drop()
    table = pd.DataFrame(steps, columns=["step", "statement", "a report's read open", "what happened"])
    # PostgreSQL names the table with its schema, which is this run's own: the lesson shows the same words each time.
    table["what happened"] = table["what happened"].str.replace(f"{schema.name}.", "", regex=False)
    table.attrs["server"] = f"PostgreSQL {version}"
    return table


def droppable_days(now_hours: float, horizon_hours: float, days: int = 6) -> pd.DataFrame:
    """For partitions of one day each (day 0 from hour 0): when each day's newest row passes the horizon, and
    whether the job may drop the day at ``now_hours``. A day goes only once its *newest* row is older than the
    horizon, so the oldest rows are kept up to a day longer than the horizon."""
    rows = []
    for day in range(days):
        oldest, newest = day * 24, (day + 1) * 24
        rows.append((f"day {day}", oldest, newest, newest + horizon_hours, now_hours >= newest + horizon_hours,
                     min(now_hours, newest + horizon_hours) - oldest))
    return pd.DataFrame(rows, columns=["partition", "oldest row (h)", "newest row (h)", "droppable from (h)",
                                       f"droppable at {now_hours:g} h", "its oldest row's age at the drop, or now (h)"]
                        ).set_index("partition")


def drop_cost(sizes: tuple[int, ...] = (1_000, 10_000, 50_000), url: str | None = None) -> pd.DataFrame:
    """Wall-clock cost of removing one day of ``size`` IDs: ``DROP TABLE`` of its partition, and a ``DELETE`` of the
    same rows from a plain table, at each size (nobody else in the way)."""
    schema = scratch_schema(url)
    connection = schema.connect()
    rows = []
    try:
        connection.execute(PARENT)
        connection.execute("CREATE TABLE inbox_plain (message_id VARCHAR PRIMARY KEY, sent_on DATE NOT NULL)")
        connection.execute("CREATE INDEX ON inbox_plain (sent_on)")
        for n, size in enumerate(sizes):
            connection.execute(f"CREATE TABLE {_partition(n)} PARTITION OF inbox_daily {_bounds(n)}")
            for table in ("inbox_daily", "inbox_plain"):
                connection.execute(f"INSERT INTO {table} SELECT 'm-' || {n} || '-' || g, {_day(n)} "
                                   f"FROM generate_series(1, {size}) g")
            connection.execute("ANALYZE")
            started = time.perf_counter()
            connection.execute(f"DROP TABLE {_partition(n)}")
            dropped = time.perf_counter() - started
            started = time.perf_counter()
            connection.execute(f"DELETE FROM inbox_plain WHERE sent_on = {_day(n)}")
            deleted = time.perf_counter() - started
            rows.append((size, round(dropped * 1000, 1), round(deleted * 1000, 1)))
    finally:
        connection.close()
        schema.drop()
    return pd.DataFrame(rows, columns=["IDs in the day", "DROP TABLE of its partition (ms)",
                                       "DELETE of the same rows (ms)"]).set_index("IDs in the day")


def admit(created_hours: float, now_hours: float, retention_hours: float) -> str:
    """What the consumer does with a copy created at ``created_hours``, arriving at ``now_hours``, before it trusts an
    inbox that keeps IDs ``retention_hours``: check it against the inbox, or, when the copy is older than the
    retention (its ID may already be pruned, so the inbox cannot tell a duplicate from new work), park it for review:
    neither charged nor silently dropped."""
    if now_hours - created_hours <= retention_hours:
        return "checked against the inbox"
    return "parked for review (older than the retention)"


def age_checks(copies: dict[str, tuple[float, float]], retention_hours: float) -> pd.DataFrame:
    """:func:`admit` for each named copy (created, arrived, in hours)."""
    return pd.DataFrame([(name, created, arrived, arrived - created, admit(created, arrived, retention_hours))
                         for name, (created, arrived) in copies.items()],
                        columns=["copy", "created (h)", "arrives (h)", "age (h)", "what the consumer does"]
                        ).set_index("copy")

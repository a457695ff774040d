"""What the inbox costs, measured on the real engines: per message, and per batch against a raw bulk insert.

All figures here are wall-clock measurements of this machine, best of a few
runs. They vary from run to run and from machine to machine; the ratios between
them, taken in the same run on the same messages, are what carries over.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import duckdb
import pandas as pd

from idemlib.explore import cost_per_message
from idemlib.handlers import Handler, InboxHandler, NaiveHandler
from idemlib.messages import Message, parse_charge
from idemlib.operating.batch import RECORD_IDS, BatchSession, batch_engine
from idemlib.sim import simulate
from idemlib.stores import PaymentsDatabase, SqlPayments
from idemlib.stores.sql import Cursor, inbox_table


def inbox_against_naive(engines: dict[str, Callable[[], SqlPayments]], messages: list[Message],
                        repeats: int = 3, rounds: int = 1) -> pd.DataFrame:
    """Milliseconds per message for the naive consumer and the inbox on each engine, and their ratio.

    The same messages, no faults, one run after the other in this process, best of
    ``repeats``. The simulator's own bookkeeping is in both figures alike. With several
    ``rounds`` (each a fresh measurement), the ratio is given as its lowest and highest,
    and whether every round fell within 20 % of their middle: a ratio that does not is
    noise larger than the inbox's own cost.
    """
    rows = []
    for engine, make in engines.items():
        setups: dict[str, Callable[[], tuple[Handler, PaymentsDatabase]]] = {
            "naive": functools.partial(_pair, NaiveHandler, make),
            "inbox": functools.partial(_pair, InboxHandler, make),
        }
        measured = [cost_per_message(setups, messages, repeats=repeats) for _ in range(rounds)]
        ratios = [costs["inbox"] / costs["naive"] for costs in measured]
        middle = (min(ratios) + max(ratios)) / 2
        rows.append((engine, min(c["naive"] for c in measured), min(c["inbox"] for c in measured),
                     round(min(ratios), 2), round(max(ratios), 2),
                     all(abs(ratio - middle) <= 0.2 * middle for ratio in ratios)))
    frame = pd.DataFrame(rows, columns=["engine", "naive (ms per message)", "inbox (ms per message)",
                                        "inbox / naive, lowest", "inbox / naive, highest", "within ±20 %"])
    return frame.set_index("engine")


def record_ids_duckdb(stored: Sequence[int] = (0, 100_000), new_ids: int = 1000, repeats: int = 3) -> pd.DataFrame:
    """Milliseconds for one statement recording ``new_ids`` new IDs on DuckDB, best of ``repeats``, for each size
    of inbox in ``stored``: the batched inbox's anti-join, and ``ON CONFLICT DO NOTHING`` with the same ``RETURNING``.

    Each timed insert is rolled back, so every run of either statement meets the same inbox."""
    statements = {
        "anti-join (ms)": RECORD_IDS["DuckDB"],
        "ON CONFLICT DO NOTHING (ms)": "INSERT INTO processed_messages (message_id) SELECT unnest(?::VARCHAR[]) "
                                       "ON CONFLICT DO NOTHING RETURNING message_id",
    }
    ids = [f"m-new-{number}" for number in range(new_ids)]
    timings: dict[str, dict[int, list[float]]] = {name: {size: [] for size in stored} for name in statements}
    for size in stored:
        # One inbox per size, filled once: each timed insert is rolled back, so every run meets the same inbox,
        # and the two statements take turns, so a busy moment of the machine falls on both alike.
        database = duckdb.connect(":memory:", config={"threads": 1})
        database.execute(inbox_table())
        database.execute("INSERT INTO processed_messages SELECT 'm-old-' || range FROM range(?)", (size,))
        for _ in range(repeats):
            for name, statement in statements.items():
                database.execute("BEGIN TRANSACTION")
                started = time.perf_counter()
                recorded = database.execute(statement, (ids,)).fetchall()
                timings[name][size].append(time.perf_counter() - started)
                database.execute("ROLLBACK")
                assert len(recorded) == new_ids  # every ID was new: both statements must say so
        database.close()
    table = {name: {size: round(min(runs) * 1000, 1) for size, runs in by_size.items()}
             for name, by_size in timings.items()}
    return pd.DataFrame(table).rename_axis("IDs already in the inbox")


class CountingCursor:
    """A cursor that counts the statements it runs, by their first word (BEGIN, INSERT, COMMIT...)."""

    def __init__(self, cursor: Cursor, counts: dict[str, int]) -> None:
        self._cursor, self._counts = cursor, counts

    def execute(self, sql: str, parameters: object = ()) -> object:
        kind = sql.split(None, 1)[0].upper()
        target = sql.split()[2] if kind == "INSERT" else ""
        label = f"{kind} {target}".strip()
        self._counts[label] = self._counts.get(label, 0) + 1
        return self._cursor.execute(sql, parameters)

    def fetchall(self) -> list[tuple[object, ...]]:
        return self._cursor.fetchall()

    def close(self) -> None:
        self._cursor.close()


def _pair(handler: Callable[[], Handler], make: Callable[[], PaymentsDatabase]) -> tuple[Handler, PaymentsDatabase]:
    return handler(), make()


def _counting(connect: Callable[[], Cursor], counts: dict[str, int]) -> Callable[[], CountingCursor]:
    """A ``connect`` whose cursors count the statements they run into ``counts``."""
    return lambda: CountingCursor(connect(), counts)


def statements_per_message(make: Callable[[], SqlPayments], messages: list[Message]) -> pd.DataFrame:
    """How many statements of each kind the naive consumer and the inbox send per message (no faults)."""
    table = {}
    for handler in (NaiveHandler(), InboxHandler()):
        counts: dict[str, int] = {}
        database = make()
        original = database.connect
        database.connect = _counting(original, counts)  # type: ignore[method-assign]
        simulate(handler, messages, database=database)
        table[handler.name] = {kind: n / len(messages) for kind, n in counts.items()}
    return pd.DataFrame(table).fillna(0.0).rename_axis("statement")


def bulk_insert(database: SqlPayments, messages: Sequence[Message], batch_size: int, *, inbox: bool = False) -> None:
    """The engine's bulk insert of the payment rows, one transaction per ``batch_size`` messages, no broker.

    With ``inbox=False`` it is the raw insert, the ceiling to compare with. With
    ``inbox=True`` each transaction first records the batch's IDs with one statement
    and inserts only the new payments: the batched inbox's database work alone.
    """
    _write_batches(BatchSession(database), messages, batch_size, inbox=inbox)


def _bulk_seconds(database: SqlPayments, messages: Sequence[Message], batch_size: int, *, inbox: bool = False) -> float:
    """:func:`bulk_insert`, timed from its connection's first statement: opening the connection (tens of milliseconds
    on PostgreSQL) is left out, as it is of the consumer's time, which connects before its clock starts."""
    session = BatchSession(database)
    started = time.perf_counter()
    _write_batches(session, messages, batch_size, inbox=inbox)
    return time.perf_counter() - started


def _write_batches(session: BatchSession, messages: Sequence[Message], batch_size: int, *, inbox: bool) -> None:
    for start in range(0, len(messages), batch_size):
        chunk = messages[start:start + batch_size]
        rows = [(charge.order_id, charge.amount, message.label)
                for message, charge in zip(chunk, map(parse_charge, chunk))]
        session.begin()
        if inbox:
            new = session.record_messages([row[2] for row in rows])
            rows = [row for row in rows if row[2] in new]
        session.charge_many(rows)
        session.commit()


def _consumer_seconds(database: SqlPayments, messages: Sequence[Message], batch_size: int) -> float:
    # The messages are published before the clock starts: publishing is the producer's work.
    engine = batch_engine(database, batch_size)
    engine.add_consumers(1)
    engine.publish(messages)
    started = time.perf_counter()
    engine.run()
    return time.perf_counter() - started


def _best(database: SqlPayments, run: Callable[[SqlPayments], float | None], repeats: int) -> float:
    """Best of ``repeats``, each from an empty database; ``run`` may return the seconds it timed itself."""
    timings = []
    for _ in range(repeats):
        database.empty()  # emptied, not made anew: a PostgreSQL schema takes longer to create than to fill
        started = time.perf_counter()
        measured = run(database)
        timings.append(measured if measured is not None else time.perf_counter() - started)
    return min(timings)


def batch_throughput(engines: dict[str, Callable[[], SqlPayments]], messages: list[Message],
                     batch_sizes: Sequence[int], repeats: int = 3) -> pd.DataFrame:
    """Messages per second, per engine and batch size, of three ways to write the same payments.

    - the batched-inbox consumer: the simulated broker's receive and ack of every
      delivery, plus the batch's transaction;
    - the batched inbox's transactions alone (IDs recorded, new payments inserted), no broker;
    - the raw bulk insert of the payment rows: no inbox, no broker.

    Each measurement starts from an empty database (one per engine, emptied), best of ``repeats``.
    The three take turns, each round in another order, so that none of them always runs first
    on a cold connection or last on a warm one.
    """
    rows = []
    for engine, make in engines.items():
        database = make()
        for size in batch_sizes:
            ways = (functools.partial(_consumer_seconds, messages=messages, batch_size=size),
                    functools.partial(_bulk_seconds, messages=messages, batch_size=size, inbox=True),
                    functools.partial(_bulk_seconds, messages=messages, batch_size=size))
            best = [math.inf] * len(ways)
            for turn in range(repeats):
                for step in range(len(ways)):
                    way = (turn + step) % len(ways)
                    best[way] = min(best[way], _best(database, ways[way], 1))
            rows.append((engine, size, *(len(messages) / seconds for seconds in best)))
    frame = pd.DataFrame(rows, columns=["engine", "batch size", "batched inbox consumer (msg/s)",
                                        "inbox transactions alone (msg/s)", "raw bulk insert (rows/s)"])
    frame["consumer / raw"] = (frame["batched inbox consumer (msg/s)"] / frame["raw bulk insert (rows/s)"]).round(2)
    frame["transactions / raw"] = (frame["inbox transactions alone (msg/s)"]
                                   / frame["raw bulk insert (rows/s)"]).round(2)
    return frame


def commit_latency(engines: dict[str, Callable[[], SqlPayments]], commits: int = 30) -> pd.Series:
    """Median milliseconds of one small transaction (one row inserted, then its commit) on each engine: the floor
    under every message's cost, and on SQLite and PostgreSQL the wait for the disk, if there is one, made visible.
"""
    medians = {}
    for engine, make in engines.items():
        database = make()  # held while it is used: a SQLite store removes its file when it goes
        # Every engine's cursor here runs in autocommit: its own BEGIN and COMMIT decide, as in the consumers.
        cursor: Any = database.connect()
        cursor.execute("CREATE TABLE IF NOT EXISTS commit_probe (n INTEGER)")
        timings = []
        for _ in range(commits):
            started = time.perf_counter()
            cursor.execute("BEGIN")
            cursor.execute("INSERT INTO commit_probe VALUES (1)")
            cursor.execute("COMMIT")
            timings.append(time.perf_counter() - started)
        cursor.execute("DROP TABLE commit_probe")
        medians[engine] = round(float(pd.Series(timings).median()) * 1000, 2)
    return pd.Series(medians, name="one insert and its commit, median (ms)")

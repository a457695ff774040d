"""Pruning the inbox on real engines: batched DELETE versus dropping a day's partition, and what a consumer feels.

PostgreSQL: the same rows are kept in a plain table, pruned by deleting old rows
in batches, and in a table partitioned by day (declarative partitioning), pruned
by dropping the oldest partition. Meanwhile a consumer thread keeps inserting new
IDs, one transaction each, and every insert's latency is recorded. DuckDB: what a
DELETE does to the database file, before and after a ``CHECKPOINT``.

Every object lives in a schema named for this process and run, dropped at the end,
because other people's tests share the server.
"""

from __future__ import annotations

import itertools
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import duckdb
import pandas as pd
import psycopg

from idemlib.stores.postgres_store import postgres_url
from idemlib.stores.sql import inbox_table, single_value

_runs = itertools.count(1)


@dataclass
class ScratchSchema:
    """A schema of this process's own on a PostgreSQL server; :meth:`drop` removes it and all it holds."""

    url: str
    name: str

    def connect(self) -> psycopg.Connection:
        """An autocommit connection whose tables live in this schema."""
        return psycopg.connect(self.url, autocommit=True, options=f"-c search_path={self.name}")

    def drop(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as connection:
            connection.execute(f"DROP SCHEMA IF EXISTS {self.name} CASCADE")


def scratch_schema(url: str | None = None) -> ScratchSchema:
    """Create an empty schema named after this process and run (``idemlib_l10_<pid>_<n>``)."""
    schema = ScratchSchema(url or postgres_url(), f"idemlib_l10_{os.getpid()}_{next(_runs)}")
    with psycopg.connect(schema.url, autocommit=True) as connection:
        connection.execute(f"DROP SCHEMA IF EXISTS {schema.name} CASCADE")
        connection.execute(f"CREATE SCHEMA {schema.name}")
    return schema


PLAIN_TABLE = """CREATE TABLE inbox_plain (
    message_id VARCHAR NOT NULL PRIMARY KEY,
    sent_on    DATE    NOT NULL)"""
PLAIN_INDEX = "CREATE INDEX inbox_plain_sent_on ON inbox_plain (sent_on)"
# A unique key on a partitioned table must include the partition key, so the table is
# partitioned by the day the message was created: a field the producer writes once and
# every copy (retries and replays included) carries unchanged, so a duplicate lands in
# the same partition and meets the original's key.
PARTITIONED_TABLE = """CREATE TABLE inbox_daily (
    message_id VARCHAR NOT NULL,
    sent_on    DATE    NOT NULL,
    PRIMARY KEY (message_id, sent_on)) PARTITION BY RANGE (sent_on)"""
BATCHED_DELETE = ("DELETE FROM inbox_plain WHERE message_id IN "
                  "(SELECT message_id FROM inbox_plain WHERE sent_on < %s LIMIT %s)")
# PostgreSQL has no DROP PARTITION statement: a partition is a table of its own. Dropping it
# takes an ACCESS EXCLUSIVE lock on the parent table; detaching it CONCURRENTLY first takes
# only SHARE UPDATE EXCLUSIVE on the parent, and the DROP TABLE then locks the detached table alone.
DROP_PARTITION = "DROP TABLE {partition}"
DETACH_CONCURRENTLY = "ALTER TABLE inbox_daily DETACH PARTITION {partition} CONCURRENTLY"


def pruning_statements(day: int = 0) -> pd.DataFrame:
    """The SQL each way of pruning runs, for ``day``'s IDs."""
    partition = partition_name(day)
    return pd.DataFrame({"statements it runs": {
        "batched DELETE": BATCHED_DELETE.replace("%s", "<cutoff>", 1).replace("%s", "<batch>") + ", repeated until "
                          "it deletes nothing, one transaction each",
        "drop the day's partition": DROP_PARTITION.format(partition=partition),
        "detach it concurrently, then drop it": (f"{DETACH_CONCURRENTLY.format(partition=partition)}; "
                                                 f"{DROP_PARTITION.format(partition=partition)}"),
    }})


def partition_name(day: int) -> str:
    return f"inbox_daily_d{day:02d}"


def _date(day: int) -> str:
    return f"2026-01-01'::date + {day}"


@dataclass
class PruningBench:
    """Both tables filled with the same ``days`` × ``rows_per_day`` IDs, one partition per day, plus today's."""

    days: int = 4
    rows_per_day: int = 10_000
    batch: int = 1_000
    url: str | None = None
    schema: ScratchSchema = field(init=False)

    def __post_init__(self) -> None:
        if self.days < 2 or self.rows_per_day < 1 or self.batch < 1:
            raise ValueError(f"need at least 2 days, 1 row a day and batches of 1 row or more; got days={self.days}, "
                             f"rows_per_day={self.rows_per_day}, batch={self.batch}")
        self.schema = scratch_schema(self.url)
        self.connection = self.schema.connect()
        try:
            self._fill()
        except BaseException:
            self.close()  # leave nothing behind on a shared server
            raise
        self._new_ids = itertools.count(10**9)

    def _fill(self) -> None:
        run = self.connection.execute
        run(PLAIN_TABLE)
        run(PLAIN_INDEX)
        run(PARTITIONED_TABLE)
        for day in range(self.days + 1):  # the last partition is today's, where new messages go
            run(f"CREATE TABLE {partition_name(day)} PARTITION OF inbox_daily "
                f"FOR VALUES FROM ('{_date(day)}) TO ('{_date(day + 1)})")
        for table in ("inbox_plain", "inbox_daily"):
            run(f"INSERT INTO {table} SELECT md5(n::text), '2026-01-01'::date + (n / %s)::int "
                "FROM generate_series(0, %s) n", (self.rows_per_day, self.days * self.rows_per_day - 1))
            run(f"VACUUM ANALYZE {table}")

    def count(self, table: str) -> int:
        return int(single_value(self.connection.execute(f"SELECT count(*) FROM {table}")))

    def prune_batched(self) -> tuple[int, int]:
        """Delete the oldest day from the plain table in batches, one transaction each; (rows, batches)."""
        cutoff = "2026-01-02"  # the day after the oldest partition
        deleted = batches = 0
        while True:
            gone = self.connection.execute(BATCHED_DELETE, (cutoff, self.batch)).rowcount
            if gone == 0:
                return deleted, batches
            deleted, batches = deleted + gone, batches + 1

    def prune_partition(self) -> int:
        """Drop the oldest day's partition of the partitioned table; returns the rows it held."""
        rows = self.count(partition_name(0))
        self.connection.execute(DROP_PARTITION.format(partition=partition_name(0)))
        return rows

    def insert_latencies(self, table: str, during: Callable[[], object], settle: float = 0.1) -> pd.DataFrame:
        """Run ``during()`` while a consumer inserts new IDs into ``table``; every insert's start and latency.

        The consumer starts ``settle`` seconds before and stops ``settle`` seconds after,
        so the table shows the consumer's normal pace around the pruning too.
        """
        stop = threading.Event()
        samples: list[tuple[float, float]] = []
        today = f"'{_date(self.days)}"
        sql = f"INSERT INTO {table} VALUES (%s, {today}) ON CONFLICT DO NOTHING"

        def consume() -> None:
            with self.schema.connect() as connection:
                while not stop.is_set():
                    started = time.perf_counter()
                    connection.execute(sql, (f"new-{next(self._new_ids)}",))
                    samples.append((started, time.perf_counter() - started))

        consumer = threading.Thread(target=consume, daemon=True)
        origin = time.perf_counter()
        consumer.start()
        time.sleep(settle)
        began = time.perf_counter()
        during()
        ended = time.perf_counter()
        time.sleep(settle)
        stop.set()
        consumer.join()
        frame = pd.DataFrame(samples, columns=["start", "latency"])
        frame["start"] -= origin
        frame["during pruning"] = frame["start"].between(began - origin, ended - origin)
        frame.attrs["pruning seconds"] = ended - began
        frame.attrs["window"] = (began - origin, ended - origin)
        return frame

    def drop_behind_reader(self, day: int, reader_seconds: float, lock_timeout_ms: int | None = None) -> bool:
        """Drop ``day``'s partition while a report holds a read transaction open for ``reader_seconds``.

        With ``lock_timeout_ms`` the drop gives up when it cannot have its lock in time;
        returns whether the partition was dropped.
        """
        threading.Timer(reader_seconds, self._open_report()[1]).start()
        timeout = f"{lock_timeout_ms}ms" if lock_timeout_ms is not None else "0"  # 0: wait as long as it takes
        self.connection.execute(f"SET lock_timeout = '{timeout}'")
        try:
            self.connection.execute(DROP_PARTITION.format(partition=partition_name(day)))
            return True
        except psycopg.errors.LockNotAvailable:
            return False
        finally:
            self.connection.execute("RESET lock_timeout")

    def detach_behind_reader(self, day: int, reader_seconds: float) -> bool:
        """Detach ``day``'s partition CONCURRENTLY, then drop it, while a report holds a read transaction open.

        The detach waits for the report to finish, holding only SHARE UPDATE EXCLUSIVE on
        the parent table, which inserts do not conflict with.
        """
        threading.Timer(reader_seconds, self._open_report()[1]).start()
        partition = partition_name(day)
        self.connection.execute(DETACH_CONCURRENTLY.format(partition=partition))  # autocommit: no transaction block
        self.connection.execute(DROP_PARTITION.format(partition=partition))
        return True

    def _open_report(self) -> tuple[int, Callable[[], None]]:
        """Open a report's read transaction on the partitioned table; returns its server process ID and what ends it."""
        reader = self.schema.connect()
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM inbox_daily")  # holds a lock on every partition until it ends

        def report_finishes() -> None:
            reader.execute("COMMIT")
            reader.close()

        return reader.info.backend_pid, report_finishes

    def locks_while_drop_waits(self, day: int) -> pd.DataFrame:
        """``pg_locks`` while ``DROP TABLE`` of ``day``'s partition waits behind a report and a consumer's insert
        into today's partition waits behind the drop: who holds or waits for which lock on which table."""
        report_pid, finish_report = self._open_report()
        sessions = {"pruning job": self.schema.connect(), "consumer": self.schema.connect()}
        statements = {"report": "BEGIN; SELECT count(*) FROM inbox_daily (still open)",
                      "pruning job": DROP_PARTITION.format(partition=partition_name(day)),
                      "consumer": f"INSERT INTO inbox_daily VALUES ('new-locks', '{_date(self.days)})"}
        waiting: list[threading.Thread] = []
        observer = self.connection
        pids = {"report": report_pid} | {name: session.info.backend_pid for name, session in sessions.items()}
        try:
            for name in ("pruning job", "consumer"):  # the drop queues first, then the insert behind it
                waiting.append(threading.Thread(target=sessions[name].execute, args=(statements[name],)))
                waiting[-1].start()
                self._wait_until_blocked(pids[name])
            rows = observer.execute(
                "SELECT pid, relation::regclass::text, mode, granted FROM pg_locks "
                "WHERE locktype = 'relation' AND pid = ANY(%s) AND relation::regclass::text = ANY(%s)",
                (list(pids.values()), ["inbox_daily", partition_name(day), partition_name(self.days)])).fetchall()
        finally:
            finish_report()
            for thread in waiting:
                thread.join()
            for session in sessions.values():
                session.close()
        who = {pid: (rank, f"{name}: {statements[name]}") for rank, (name, pid) in enumerate(pids.items())}
        frame = pd.DataFrame(sorted((*who[pid], table, mode, "held" if granted else "waiting")
                                    for pid, table, mode, granted in rows),
                             columns=["rank", "session", "table", "lock mode", "held or waiting"])
        return frame.drop(columns="rank")

    def _wait_until_blocked(self, pid: int, timeout: float = 10.0) -> None:
        """Return once backend ``pid`` waits for a lock (a condition, not a sleep: the outcome must not depend on
        how busy the machine is)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if single_value(self.connection.execute("SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted",
                                       (pid,))):
                return
            time.sleep(0.01)
        raise TimeoutError(f"backend {pid} never waited for a lock")

    def detach_concurrently_limits(self, day: int) -> pd.DataFrame:
        """Try ``DETACH PARTITION ... CONCURRENTLY`` where PostgreSQL refuses it; the error each attempt gets."""
        detach = DETACH_CONCURRENTLY.format(partition=partition_name(day))
        attempts = {}
        try:
            with self.connection.transaction():
                self.connection.execute(detach)
        except psycopg.Error as error:
            attempts["inside a transaction block (BEGIN; ...)"] = (type(error).__name__, str(error).splitlines()[0])
        self.connection.execute("CREATE TABLE inbox_daily_default PARTITION OF inbox_daily DEFAULT")
        try:
            self.connection.execute(detach)
        except psycopg.Error as error:
            attempts["on a table with a DEFAULT partition"] = (type(error).__name__, str(error).splitlines()[0])
        finally:
            self.connection.execute("DROP TABLE inbox_daily_default")
        return pd.DataFrame.from_dict(attempts, orient="index", columns=["error", "PostgreSQL says"])

    def close(self) -> None:
        self.connection.close()
        self.schema.drop()


def _keep_outcome(prune: Callable[[], object], outcome: list[object]) -> None:
    outcome.append(prune())


def measure_pruning(days: int = 4, rows_per_day: int = 10_000, batch: int = 1_000, reader_seconds: float = 0.4,
                    lock_timeout_ms: int = 100, url: str | None = None) -> dict[str, pd.DataFrame]:
    """Prune one day of IDs five ways on real PostgreSQL, with a consumer inserting all along.

    ``batched DELETE``: the plain table, ``batch`` rows per transaction.
    ``DROP TABLE (partition)``: the partitioned table's oldest day.
    ``... behind a report``: the same, while a report holds a transaction open on the
    table for ``reader_seconds``: the drop waits for its ACCESS EXCLUSIVE lock on the
    parent table, and every insert queues behind the waiting drop.
    ``... with lock_timeout``: the same with ``lock_timeout`` set on the drop, which
    gives up instead of waiting (to be retried later).
    ``DETACH ... CONCURRENTLY, then DROP TABLE, behind a report``: the detach waits for
    the report without blocking inserts.
    Returns each method's insert-latency table (see :meth:`PruningBench.insert_latencies`);
    its ``outcome`` says whether the day was pruned.
    """
    if days < 4:
        raise ValueError(f"the five runs prune four different days and keep today's; got days={days}")
    bench = PruningBench(days, rows_per_day, batch, url)
    runs: dict[str, tuple[str, Callable[[], object]]] = {
        "batched DELETE": ("inbox_plain", bench.prune_batched),
        "DROP TABLE (partition)": ("inbox_daily", bench.prune_partition),
        "DROP TABLE (partition) behind a report": ("inbox_daily", lambda: bench.drop_behind_reader(1, reader_seconds)),
        f"... with lock_timeout {lock_timeout_ms} ms": (
            "inbox_daily", lambda: bench.drop_behind_reader(2, reader_seconds, lock_timeout_ms)),
        "DETACH ... CONCURRENTLY, then DROP TABLE, behind a report": (
            "inbox_daily", lambda: bench.detach_behind_reader(3, reader_seconds)),
    }
    results = {}
    try:
        for label, (table, prune) in runs.items():
            outcome: list[object] = []
            frame = bench.insert_latencies(table, partial(_keep_outcome, prune, outcome))
            pruned = outcome[0] is not False
            frame.attrs["rows"] = rows_per_day if pruned else 0
            frame.attrs["outcome"] = "day pruned" if pruned else "gave up, retry later"
            results[label] = frame
    finally:
        bench.close()
    return results


def pruning_summary(results: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per method: its outcome, rows pruned, how long it took, and the consumer's inserts meanwhile (count, median,
    worst)."""
    rows = []
    for label, frame in results.items():
        during, outside = frame[frame["during pruning"]], frame[~frame["during pruning"]]
        rows.append((label, frame.attrs["outcome"], frame.attrs["rows"], round(frame.attrs["pruning seconds"] * 1000, 1),
                     len(during),
                     round(outside["latency"].median() * 1000, 2), round(during["latency"].median() * 1000, 2)
                     if len(during) else float("nan"),
                     round(frame["latency"].max() * 1000, 1)))
    return pd.DataFrame(rows, columns=["method", "outcome", "rows pruned", "pruning took (ms)", "inserts meanwhile",
                                       "insert median, normal (ms)", "insert median, while pruning (ms)",
                                       "longest insert (ms)"]).set_index("method")


def partition_locks(url: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """On a small partitioned inbox: ``pg_locks`` while a partition's drop waits behind a report, and what
    ``DETACH PARTITION ... CONCURRENTLY`` is refused."""
    bench = PruningBench(days=2, rows_per_day=10, url=url)
    try:
        return bench.locks_while_drop_waits(0), bench.detach_concurrently_limits(1)
    finally:
        bench.close()


def duckdb_delete_behaviour(rows: int = 200_000) -> pd.DataFrame:
    """A DuckDB file holding ``rows`` IDs: its size after deleting the older half, before and after ``CHECKPOINT``,
    and after a day of new IDs is added to it."""
    folder = tempfile.mkdtemp(prefix="idemlib-duck-")
    path = os.path.join(folder, "inbox.duckdb")
    db = duckdb.connect(path, config={"threads": 1})
    steps = []

    def note(what: str) -> None:
        count = single_value(db.execute("SELECT count(*) FROM processed_messages"))
        steps.append((what, count, round(os.path.getsize(path) / 1e6, 2)))

    try:
        db.execute(inbox_table(also="processed_on INTEGER"))
        db.execute(f"INSERT INTO processed_messages SELECT md5(CAST(n AS VARCHAR)), n * 10 // {rows} "
                   f"FROM range({rows}) t(n)")
        db.execute("CHECKPOINT")
        note(f"{rows:,} IDs over 10 days, checkpointed")
        db.execute("DELETE FROM processed_messages WHERE processed_on < 5")
        note("DELETE of the older 5 days")
        db.execute("CHECKPOINT")
        note("after CHECKPOINT")
        db.execute(f"INSERT INTO processed_messages SELECT md5('new' || n), 10 FROM range({rows // 10}) t(n)")
        db.execute("CHECKPOINT")
        note("one more day of IDs, checkpointed")
    finally:
        db.close()
        os.remove(path)
        os.rmdir(folder)
    return pd.DataFrame(steps, columns=["after", "rows", "file size (MB)"]).set_index("after")


def postgres_for_lesson() -> str | None:
    """PostgreSQL's URL when a server answers; else None, after saying why and how to start one.

    Where servers are required (``IDEMLIB_REQUIRE_SERVERS=1``, as in CI) a missing server is an error instead.
    """
    from idemlib.servers import ServerMissing, require_servers
    from idemlib.stores.postgres_store import postgres_unavailable

    reason = postgres_unavailable()
    if reason is None:
        return postgres_url()
    if require_servers("postgres"):
        raise ServerMissing(f"IDEMLIB_REQUIRE_SERVERS is set. {reason}")
    print(f"{reason} The PostgreSQL measurements of this lesson are skipped.")
    return None

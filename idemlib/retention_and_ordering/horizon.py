"""How long the inbox must remember an ID, what remembering costs, and what forgetting too early does.

The processed-ID table gains a row for every message, so it grows with traffic and
has to be pruned. Pruning bounds its memory: once an ID is deleted, a late
duplicate of that message is new again. Retention therefore has to cover the
longest way a copy can still arrive: the queue's retention, plus a dead-letter
queue that may be replayed, plus the producer's own retry horizon.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

import duckdb
import pandas as pd

from idemlib.clock import VirtualClock
from idemlib.facts import fact_seconds
from idemlib.retention_and_ordering.pruning import scratch_schema
from idemlib.stores.keyvalue import KeyValueTable

HOUR = 3600.0
DAY = 86400.0


@dataclass(frozen=True)
class RetentionConfig:
    """The three ways a copy of a message can still arrive after the first one was handled (all in seconds).

    ``dlq_replay`` is how long a dead-lettered message may sit before someone replays
    it (0 when there is no dead-letter queue, or it is never replayed);
    ``producer_retry`` how long after its first publish the producer may still send a copy.
    """

    queue_retention: float
    dlq_replay: float = 0.0
    producer_retry: float = 0.0

    def __post_init__(self) -> None:
        for name in ("queue_retention", "dlq_replay", "producer_retry"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or value < 0:
                raise ValueError(f"{name} must be a number of seconds, zero or more; got {value!r}")

    def horizon(self) -> float:
        """The seconds an ID must be kept: a producer's last retry can wait out the queue, then the DLQ, then be replayed."""
        return self.queue_retention + self.dlq_replay + self.producer_retry


def example_configs() -> dict[str, RetentionConfig]:
    """A few queue / dead-letter / producer set-ups, with SQS's retention figures from ``data/facts.csv``."""
    default, longest = fact_seconds("sqs_retention_default"), fact_seconds("sqs_retention_max")
    return {
        "SQS default, no DLQ, no producer retry": RetentionConfig(default),
        "SQS default + producer retries for 1 h": RetentionConfig(default, producer_retry=HOUR),
        "SQS default + DLQ replayed within 7 days + retries 1 h": RetentionConfig(default, 7 * DAY, HOUR),
        "SQS maximum + DLQ kept 14 days + retries 1 day": RetentionConfig(longest, longest, DAY),
    }


def horizon_table(configs: dict[str, RetentionConfig]) -> pd.DataFrame:
    """One row per set-up: its three parts and the retention they add up to, in days."""
    rows = [(label, c.queue_retention / DAY, c.dlq_replay / DAY, c.producer_retry / DAY, c.horizon() / DAY,
             c.horizon() / HOUR) for label, c in configs.items()]
    return pd.DataFrame(rows, columns=["set-up", "queue (days)", "DLQ replay (days)", "producer retry (days)",
                                       "keep IDs at least (days)", "(hours)"]).set_index("set-up").round(3)


class DatedInbox:
    """A DuckDB inbox whose rows carry the (simulated) time they were written, so they can be pruned.

    ``handle`` records the ID and charges in one transaction, as lesson 02's inbox
    does; ``prune`` deletes rows older than the retention, as a nightly job would.
    """

    def __init__(self, path: str = ":memory:") -> None:
        self.db = duckdb.connect(path, config={"threads": 1})
        self.db.execute("CREATE TABLE IF NOT EXISTS processed_messages (message_id VARCHAR PRIMARY KEY, "
                        "processed_at DOUBLE NOT NULL)")
        self.db.execute("CREATE TABLE IF NOT EXISTS payments (message_id VARCHAR, amount INTEGER)")

    def handle(self, message_id: str, amount: int, now: float) -> bool:
        """Record the ID and charge in one transaction; True if it charged, False if the ID was remembered."""
        self.db.execute("BEGIN")
        new = self.db.execute("INSERT INTO processed_messages VALUES (?, ?) ON CONFLICT DO NOTHING RETURNING 1",
                              [message_id, now]).fetchall()
        if new:
            self.db.execute("INSERT INTO payments VALUES (?, ?)", [message_id, amount])
        self.db.execute("COMMIT")
        return bool(new)

    def prune(self, now: float, retention: float) -> int:
        """Delete every ID written more than ``retention`` seconds before ``now``; returns how many went."""
        return len(self.db.execute("DELETE FROM processed_messages WHERE processed_at < ? RETURNING 1",
                                   [now - retention]).fetchall())

    def reset(self) -> None:
        """Forget every ID and payment, so the next run starts from nothing."""
        self.db.execute("DELETE FROM processed_messages")
        self.db.execute("DELETE FROM payments")

    def remembered(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM processed_messages").fetchone()[0])

    def total_charged(self) -> int:
        return int(self.db.execute("SELECT coalesce(sum(amount), 0) FROM payments").fetchone()[0])


def late_duplicate(retention: float, config: RetentionConfig, *, prune_every: float = 15 * 60,
                   replay_early: float = 5 * 60, amount: int = 40, message_id: str = "m-7f3",
                   inbox: DatedInbox | None = None) -> pd.DataFrame:
    """Play the worst late duplicate against an inbox pruned every ``prune_every`` seconds, keeping ``retention``.

    The model's assumptions: ``message_id`` is handled at time 0; a copy the producer
    retried at the end of its retry horizon waits out the queue's retention, is
    dead-lettered, and is replayed at the end of the DLQ window, so it arrives
    ``replay_early`` seconds (five minutes) before the horizon has passed. One row
    per event, with what the inbox did.
    ``inbox`` (emptied first) saves opening a new database for every run of a sweep.
    """
    if not isinstance(retention, int | float) or retention <= 0:
        raise ValueError(f"retention must be a positive number of seconds; got {retention!r}")
    if inbox is None:
        inbox = DatedInbox()
    inbox.reset()
    events = [(0.0, "first delivery", "charged" if inbox.handle(message_id, amount, 0.0) else "skipped")]
    replay_at = config.horizon() - replay_early
    # Ticks before the retention has passed find nothing old enough to delete; start at the last of them.
    now = max(prune_every, (retention // prune_every) * prune_every)
    while now < replay_at:
        if inbox.prune(now, retention):
            events.append((now, "pruning job deletes the ID", f"{inbox.remembered()} IDs left"))
            break  # the inbox is empty now: later runs of the job have nothing to delete
        now += prune_every
    outcome = "charged again" if inbox.handle(message_id, amount, replay_at) else "caught: skipped"
    events.append((replay_at, "DLQ replay of a retried copy arrives", outcome))
    frame = pd.DataFrame(events, columns=["time (s)", "event", "inbox"])
    frame.insert(1, "time", [f"day {t // DAY:.0f}, {t % DAY / HOUR:05.2f} h" for t in frame["time (s)"]])
    frame.attrs["total charged"] = inbox.total_charged()
    return frame


def retention_sweep(config: RetentionConfig, offsets_hours: list[float], **kwargs: float) -> pd.DataFrame:
    """Total charged for the late duplicate when retention is the horizon plus each offset (in hours)."""
    rows = []
    inbox = DatedInbox()
    for offset in offsets_hours:
        retention = config.horizon() + offset * HOUR
        played = late_duplicate(retention, config, inbox=inbox, **kwargs)
        rows.append((offset, retention / HOUR, played.attrs["total charged"]))
    return pd.DataFrame(rows, columns=["retention minus horizon (h)", "retention (h)", "total charged"])


def table_growth(messages_per_day: int, days: int, retention_days: int | None = None,
                 postgres_url: str | None = None, every: int = 1) -> pd.DataFrame:
    """The inbox table day by day: rows, and bytes on disk in a DuckDB file and (with ``postgres_url``) PostgreSQL.

    Each day adds ``messages_per_day`` IDs (32-character hex, like a UUID without
    dashes). With ``retention_days``, a pruning job then deletes IDs older than that.
    DuckDB's size is its file after a ``CHECKPOINT``; PostgreSQL's is
    ``pg_total_relation_size`` (table, index and their free space), with the
    primary key's index (``pg_indexes_size``) that every insert updates. Sizes are
    measured (and the pruning job run) every ``every`` days.
    """
    if messages_per_day < 1 or days < 1 or every < 1 or (retention_days is not None and retention_days < 1):
        raise ValueError("messages_per_day, days, every and retention_days (if given) must be whole numbers of 1 or "
                         f"more; got {messages_per_day}, {days}, {every}, {retention_days}")
    folder = tempfile.mkdtemp(prefix="idemlib-growth-")
    path = os.path.join(folder, "inbox.duckdb")
    duck = duckdb.connect(path, config={"threads": 1})
    create = "CREATE TABLE processed_messages (message_id VARCHAR PRIMARY KEY, processed_on INTEGER NOT NULL)"
    duck.execute(create)
    pg = _PostgresGrowth(postgres_url, create) if postgres_url else None
    rows = []
    try:
        for day in range(every - 1, days, every):
            first = (day + 1 - every) * messages_per_day
            insert = ("INSERT INTO processed_messages SELECT md5(CAST(n AS VARCHAR)), n // {per_day} "
                      "FROM range({a}, {b}) t(n)")
            duck.execute(insert.format(per_day=messages_per_day, a=first, b=(day + 1) * messages_per_day))
            if retention_days is not None:
                duck.execute(f"DELETE FROM processed_messages WHERE processed_on <= {day - retention_days}")
            duck.execute("CHECKPOINT")
            count = duck.execute("SELECT count(*) FROM processed_messages").fetchone()[0]
            row = {"day": day + 1, "rows": count, "DuckDB file (MB)": os.path.getsize(path) / 1e6}
            if pg is not None:
                total, index = pg.day(day, first, (day + 1) * messages_per_day, messages_per_day, retention_days)
                row["PostgreSQL (MB)"], row["PostgreSQL index (MB)"] = total / 1e6, index / 1e6
            rows.append(row)
    finally:
        duck.close()
        os.remove(path)
        os.rmdir(folder)
        if pg is not None:
            pg.close()
    return pd.DataFrame(rows).set_index("day")


class _PostgresGrowth:
    """The same daily inserts and pruning on a real PostgreSQL, in a schema of its own dropped at the end."""

    def __init__(self, url: str, create: str) -> None:
        self.scratch = scratch_schema(url)
        self.connection = self.scratch.connect()
        self.connection.execute(create)

    def day(self, day: int, first: int, end: int, per_day: int, retention_days: int | None) -> tuple[int, int]:
        """Add the day's IDs (and prune); the bytes of the whole relation and of its index."""
        self.connection.execute("INSERT INTO processed_messages SELECT md5(n::text), n / %s "
                                "FROM generate_series(%s::int, %s::int) n", (per_day, first, end - 1))
        if retention_days is not None:
            self.connection.execute("DELETE FROM processed_messages WHERE processed_on <= %s", (day - retention_days,))
            self.connection.execute("VACUUM processed_messages")
        total, index = self.connection.execute("SELECT pg_total_relation_size('processed_messages'), "
                                               "pg_indexes_size('processed_messages')").fetchone()
        return int(total), int(index)

    def close(self) -> None:
        self.connection.close()
        self.scratch.drop()


# --- A store with a time to live (lesson 06's DynamoDB-style model): expiry is not deletion.

def ttl_reads(ttl: float, hours: list[float], markers: int = 50, seed: int = 3,
              delay: float = 2 * DAY) -> pd.DataFrame:
    """``markers`` IDs written at time 0 with a time to live of ``ttl`` seconds, read at each of ``hours``.

    ``stored`` is what a plain Scan returns (items not yet deleted, however long
    expired); ``live`` is what a reader gets when it filters on the expiry attribute
    (``expires_at > now``), which is what the time to live promised.
    """
    clock = VirtualClock()
    table = KeyValueTable(clock=clock, seed=seed, deletion_delay_seconds=delay)
    for n in range(markers):
        table.put(f"msg#p-{n:02d}", {"message_id": f"p-{n:02d}", "expires_at": ttl})
    rows = []
    for hour in hours:
        clock.advance_to(hour * HOUR)
        table.reap()
        live = sum(1 for item in table.items.values() if item["expires_at"] > clock.now())
        rows.append((hour, len(table.items), live))
    return pd.DataFrame(rows, columns=["hours after writing", "stored (plain Scan)", "live (filtered on expires_at)"]
                        ).set_index("hours after writing")


def claim_with_ttl(table: KeyValueTable, message_id: str, ttl: float, *, filter_expired: bool) -> bool:
    """A conditional put of ``msg#<id>`` with a time to live; True if the ID was claimed (so: do the work).

    Without ``filter_expired`` the condition is ``attribute_not_exists(pk)``: an
    expired marker the store has not deleted yet still blocks. With it, the
    condition adds ``OR expires_at <= :now``, so the ID is remembered exactly ``ttl``.
    """
    key, now = f"msg#{message_id}", table.clock.now()
    table.reap()
    existing = table.items.get(key)
    if existing is not None and (not filter_expired or existing["expires_at"] > now):
        return False
    table.items[key] = {"message_id": message_id, "expires_at": now + ttl}
    return True


def ttl_late_duplicates(ttl: float, arrivals_hours: list[float], seed: int = 3) -> pd.DataFrame:
    """``m-7f3`` handled at time 0 with a marker kept ``ttl`` seconds; one duplicate arrives at each of ``arrivals_hours``.

    Each arrival is played on a fresh store, with and without the filter on the
    expiry attribute: the column says whether the duplicate was charged again.
    """
    rows = []
    for hour in arrivals_hours:
        verdicts = []
        for filtered in (False, True):
            clock = VirtualClock()
            table = KeyValueTable(clock=clock, seed=seed)
            claim_with_ttl(table, "m-7f3", ttl, filter_expired=filtered)
            clock.advance_to(hour * HOUR)
            verdicts.append("charged again" if claim_with_ttl(table, "m-7f3", ttl, filter_expired=filtered)
                            else "caught")
        rows.append((hour, *verdicts))
    return pd.DataFrame(rows, columns=["duplicate arrives (h)", "attribute_not_exists(pk)",
                                       "... OR expires_at <= :now"]).set_index("duplicate arrives (h)")

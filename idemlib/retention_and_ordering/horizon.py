"""How long the inbox must remember an ID, what remembering costs, and what forgetting too early does.

The processed-ID table gains a row for every message, so it grows with traffic and
has to be pruned. Pruning bounds its memory: once an ID is deleted, a late
duplicate of that message is new again. Retention therefore has to cover the
longest way a copy can still arrive: the producer's retries, the time until a
dead-lettered copy may be redriven, and then the queue's retention once more,
because Amazon SQS treats a redriven message as a new message whose retention
starts again.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

import duckdb
import pandas as pd

from idemlib.facts import fact_seconds, load_facts
from idemlib.retention_and_ordering.pruning import scratch_schema
from idemlib.stores.sql import inbox_table, single_value

HOUR = 3600.0
DAY = 86400.0


@dataclass(frozen=True)
class RetentionConfig:
    """What bounds how late a copy of a message can arrive after the first one was handled (all in seconds).

    ``producer_retry`` is how long after its first publish the producer may still send
    a copy; ``dlq_replay`` how long after a copy was sent it may still be redriven from
    the dead-letter queue, its last redrive if there can be several (0 when there is no
    dead-letter queue, or it is never redriven; for an SQS standard queue at most the
    DLQ's own retention, which counts from the message's original enqueue);
    ``queue_retention`` how long the queue keeps a message no consumer has taken.
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
        """The seconds an ID must be kept: the producer's last retry, dead-lettered and redriven as late as the
        replay policy allows, is a new message whose retention starts again, so it may wait a whole queue
        retention more before it is delivered."""
        return self.producer_retry + self.dlq_replay + self.queue_retention

    def worst_copy(self) -> pd.DataFrame:
        """The latest copy's way to the consumer, step by step, with the time each step can happen at the latest."""
        steps = [(0.0, "m-7f3 handled; its ID stored"),
                 (self.producer_retry,
                  "the producer's last retry is sent (the first publish's acknowledgement was lost)")]
        if self.dlq_replay:
            steps.append((self.producer_retry + self.dlq_replay, "the copy, dead-lettered, is redriven: a new message "
                          "with a new message ID and enqueue time, so its retention starts again"))
        steps.append((self.horizon(), "its retention runs out: the last moment a consumer can still receive it"))
        return pd.DataFrame([(t / HOUR, what) for t, what in steps], columns=["at the latest (h)", "step"]
                            ).set_index("at the latest (h)")


def example_configs() -> dict[str, RetentionConfig]:
    """A few queue / dead-letter / producer set-ups, with SQS's retention figures from ``data/facts.csv``."""
    default, longest = fact_seconds("sqs_retention_default"), fact_seconds("sqs_retention_max")
    return {
        "SQS default, no DLQ, no producer retry": RetentionConfig(default),
        "SQS default + producer retries for 1 h": RetentionConfig(default, producer_retry=HOUR),
        "SQS default + DLQ redriven within 7 days of the send + retries 1 h": RetentionConfig(default, 7 * DAY, HOUR),
        "SQS maximum + standard DLQ kept 14 days, redriven at its end + retries 1 day": RetentionConfig(longest,
                                                                                                      longest, DAY),
    }


def horizon_table(configs: dict[str, RetentionConfig]) -> pd.DataFrame:
    """One row per set-up: its three parts and the retention they add up to, in days."""
    rows = [(label, c.producer_retry / DAY, c.dlq_replay / DAY, c.queue_retention / DAY, c.horizon() / DAY,
             c.horizon() / HOUR) for label, c in configs.items()]
    return pd.DataFrame(rows, columns=["set-up", "producer retry (days)", "redrive up to (days after the send)",
                                       "queue retention after that (days)", "keep IDs at least (days)", "(hours)"]
                        ).set_index("set-up").round(3)


def sources(*names: str) -> pd.DataFrame:
    """Rows of ``data/facts.csv`` as the lesson shows them: the value, the sentence quoted from the source, and the
    versions or date it holds for."""
    return load_facts().loc[list(names), ["value", "unit", "quote", "holds_for"]].fillna("")


class DatedInbox:
    """A DuckDB inbox whose rows carry the (simulated) time they were written, so they can be pruned.

    ``handle`` records the ID and charges in one transaction, as lesson 02's inbox
    does; ``prune`` deletes rows older than the retention, as a nightly job would.
    """

    def __init__(self, path: str = ":memory:") -> None:
        self.db = duckdb.connect(path, config={"threads": 1})
        self.db.execute(inbox_table(also="processed_at DOUBLE NOT NULL", if_not_exists=True))
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
        return int(single_value(self.db.execute("SELECT count(*) FROM processed_messages")))

    def total_charged(self) -> int:
        return int(single_value(self.db.execute("SELECT coalesce(sum(amount), 0) FROM payments")))


def late_copy(retention: float, arrive_at: float, *, what: str = "a late copy arrives",
              prune_every: float = 15 * 60, amount: int = 40, message_id: str = "m-7f3",
              inbox: DatedInbox | None = None) -> pd.DataFrame:
    """Handle ``message_id`` at time 0 and a copy of it at ``arrive_at``, on an inbox keeping ``retention`` seconds.

    A pruning job runs every ``prune_every`` seconds and deletes IDs older than the
    retention. One row per event, with what the inbox did; ``attrs["total charged"]``
    is what the customer paid. ``inbox`` (emptied first) saves opening a new database
    for every run of a sweep.
    """
    if not isinstance(retention, int | float) or retention <= 0:
        raise ValueError(f"retention must be a positive number of seconds; got {retention!r}")
    if inbox is None:
        inbox = DatedInbox()
    inbox.reset()
    events = [(0.0, "first delivery", "charged" if inbox.handle(message_id, amount, 0.0) else "skipped")]
    # Ticks before the retention has passed find nothing old enough to delete; start at the last of them.
    now = max(prune_every, (retention // prune_every) * prune_every)
    while now < arrive_at:
        if inbox.prune(now, retention):
            events.append((now, "pruning job deletes the ID", f"{inbox.remembered()} IDs left"))
            break  # the inbox is empty now: later runs of the job have nothing to delete
        now += prune_every
    events.append((arrive_at, what, "charged again" if inbox.handle(message_id, amount, arrive_at)
                   else "caught: skipped"))
    frame = pd.DataFrame(events, columns=["time (s)", "event", "inbox"])
    frame.insert(1, "time", [f"day {t // DAY:.0f}, {t % DAY / HOUR:05.2f} h" for t in frame["time (s)"]])
    frame.attrs["total charged"] = inbox.total_charged()
    return frame


def late_duplicate(retention: float, config: RetentionConfig, *, replay_early: float = 5 * 60,
                   prune_every: float = 15 * 60, inbox: DatedInbox | None = None) -> pd.DataFrame:
    """Play the worst late copy of ``config`` against an inbox keeping ``retention`` seconds.

    The model's assumptions: m-7f3 is handled at time 0; the producer's retry, sent at
    the end of its retry horizon, is dead-lettered and redriven at the end of the
    replay window; the redriven message, new to the queue, waits almost its whole
    retention (consumers down, or a backlog) and arrives ``replay_early`` seconds
    (five minutes) before the horizon has passed.
    """
    return late_copy(retention, config.horizon() - replay_early, what="the redriven copy of a retry arrives",
                     prune_every=prune_every, inbox=inbox)


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
    create = inbox_table(also="processed_on INTEGER NOT NULL")
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
            count = single_value(duck.execute("SELECT count(*) FROM processed_messages"))
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
        [(total, index)] = self.connection.execute("SELECT pg_total_relation_size('processed_messages'), "
                                                   "pg_indexes_size('processed_messages')").fetchall()
        return int(total), int(index)

    def close(self) -> None:
        self.connection.close()
        self.scratch.drop()


# --- Exercise 1: which incidents a given retention survives.

@dataclass(frozen=True)
class Incident:
    """One way a copy of m-7f3 comes back after the first was handled at time 0 (times in seconds since then).

    The copy is the producer's retry, sent at ``sent``. With ``redriven`` it failed,
    was dead-lettered at once, and the dead-letter queue was redriven at that time;
    ``consumers_back`` is when consumers read the queue again after an outage (0: no outage).
    """

    name: str
    sent: float
    redriven: float | None = None
    consumers_back: float = 0.0

    def arrival(self, queue_retention: float, dlq_retention: float) -> float | None:
        """When the copy is delivered on an SQS standard queue, or None when it expires undelivered.

        The DLQ's retention counts from the original enqueue; a redriven message is new,
        so the queue's retention counts again from the redrive.
        """
        enqueued = self.sent
        if self.redriven is not None:
            if self.redriven >= self.sent + dlq_retention:
                return None  # deleted from the dead-letter queue before the redrive
            enqueued = self.redriven
        delivered = max(enqueued, self.consumers_back)
        return delivered if delivered < enqueued + queue_retention else None


KEEP_IDS = 6 * DAY
"""The inbox of lesson 10's incidents keeps IDs for 6 days (144 hours); exercise 1 asks which it survives."""

INCIDENTS = (
    Incident("A", sent=50 * 60, redriven=5 * DAY),
    Incident("B", sent=50 * 60, redriven=3 * DAY, consumers_back=6.5 * DAY),
    Incident("C", sent=50 * 60, redriven=10 * DAY),
    Incident("D", sent=50 * 60, redriven=15 * DAY),
    Incident("E", sent=50 * 60, consumers_back=3.5 * DAY),
)
"""Lesson 10's incidents (exercise 1 judges an inbox on them), on an SQS standard queue keeping messages 4 days
with a dead-letter queue keeping them 14 days (both from ``data/facts.csv``): the producer's retry of m-7f3,
50 minutes after the first publish,
A: fails, is dead-lettered, and the DLQ is redriven on day 5 (after the queue's 4 days, inside the inbox's 6, so
comparing with the queue's retention instead of the inbox's gets it wrong); B: the same, redriven on day 3, but
consumers are down from the redrive until day 6.5; C: redriven on day 10; D: redriven on day 15; E: no failure,
consumers down until day 3.5."""


def play_incident(incident: Incident, retention: float, queue_retention: float, dlq_retention: float,
                  inbox: DatedInbox | None = None) -> str:
    """What an inbox keeping ``retention`` seconds does with the incident's copy: ``caught``, ``charged again``,
    or ``never arrives`` (it expired on the way)."""
    arrives = incident.arrival(queue_retention, dlq_retention)
    if arrives is None:
        return "never arrives"
    played = late_copy(retention, arrives, what=f"incident {incident.name}: the copy arrives", inbox=inbox)
    return "charged again" if played["inbox"].iloc[-1] == "charged again" else "caught"


def incident_table(incidents: tuple[Incident, ...], retention: float, prune_every: float = 15 * 60) -> pd.DataFrame:
    """The incidents' set-up, without their outcomes: when each copy was sent, redriven, and when consumers are back.

    Printed first: the inbox's retention and pruning, and the SQS queue's and dead-letter
    queue's retention from ``data/facts.csv`` (the default, and the longest a queue allows).
    """
    queue, dlq = fact_seconds("sqs_retention_default"), fact_seconds("sqs_retention_max")
    print(f"inbox keeps IDs {retention / HOUR:g} h, pruned every {prune_every / 60:g} min; the queue keeps messages "
          f"{queue / DAY:g} days, its dead-letter queue {dlq / DAY:g} days")
    rows = [(incident.name, round(incident.sent / 60),
             "" if incident.redriven is None else f"day {incident.redriven / DAY:g}",
             f"day {incident.consumers_back / DAY:g}" if incident.consumers_back else "no outage")
            for incident in incidents]
    return pd.DataFrame(rows, columns=["incident", "retry sent (min)", "dead-letter queue redriven",
                                       "consumers read again"]).set_index("incident")

"""When a transaction's snapshot starts, and what the inbox's insert of an ID committed after it ends in.

Two sessions take turns, one statement at a time, in one thread: nobody waits, so every
outcome here is the same however busy the machine is. Consumer B opens its transaction
(``BEGIN``, and with ``b_reads_first`` one read as well); consumer A then records the same
message ID and commits; only then does B run the inbox's ``INSERT ... ON CONFLICT DO NOTHING``.
A redelivery is exactly this when B's transaction did some work before its insert.
"""

from __future__ import annotations

from dataclasses import dataclass

from idemlib.stores.engine_errors import VERSION_QUERIES
from idemlib.stores.sql import PaymentsSession, SqlPayments, WriteConflict

SIGNALS = ("one row", "zero rows", "serialization failure", "duplicate-key error")
"""What B's ``INSERT ... ON CONFLICT DO NOTHING`` can end in, in the course's words."""


@dataclass(frozen=True)
class LateDuplicate:
    """What B's insert ended in, after A committed the same ID while B's transaction was open."""

    engine: str
    version: str
    b_before_a_commits: str
    b_insert: str
    error: str


def engine_version(database: SqlPayments) -> str:
    """The version of the engine (the server, for PostgreSQL) that ``database`` runs on, as it reports it."""
    cursor = database.connect()
    cursor.execute(VERSION_QUERIES[database.engine.split(",")[0]])
    return str(cursor.fetchall()[0][0])


def signal_of(conflict: WriteConflict) -> str:
    """The course's name for the error an engine raised at B's insert."""
    text = str(conflict)
    return "serialization failure" if "Serializ" in text else "duplicate-key error"


def late_duplicate(database: SqlPayments, *, b_reads_first: bool, message_id: str = "m-7f3") -> LateDuplicate:
    """B begins (and, with ``b_reads_first``, reads the inbox once); A records ``message_id`` and commits; B inserts it.

    The read is any statement at all; it is there because an engine may take B's snapshot at
    B's first statement rather than at its ``BEGIN``, and the insert then meets a committed row
    that B's snapshot does not hold.
    """
    a, b = PaymentsSession(database.connect(), database), PaymentsSession(database.connect(), database)
    version = engine_version(database)
    b.begin()
    if b_reads_first:
        b.has_processed("some other message")
    a.begin()
    a.record_message(message_id)
    a.commit()
    try:
        signal, error = ("one row" if b.record_message(message_id) else "zero rows"), ""
        b.rollback()
    except WriteConflict as conflict:
        signal, error = signal_of(conflict), str(conflict).splitlines()[0]
    return LateDuplicate(engine=database.engine, version=version,
                         b_before_a_commits="BEGIN and a read" if b_reads_first else "BEGIN only",
                         b_insert=signal, error=error)


def snapshot_starts_at_begin(database: SqlPayments, message_id: str = "m-7f3") -> bool:
    """Whether B's snapshot is taken at its ``BEGIN``: B begins, A commits ``message_id``, then B's first read looks.

    False means B's first read saw A's row, committed after B's ``BEGIN``: the snapshot starts at
    B's first statement.
    """
    a, b = PaymentsSession(database.connect(), database), PaymentsSession(database.connect(), database)
    b.begin()
    a.begin()
    a.record_message(message_id)
    a.commit()
    seen = b.has_processed(message_id)
    b.rollback()
    return not seen

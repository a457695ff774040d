"""The inbox tables that messaging libraries ship, as DuckDB DDL that mirrors each one's shape.

Each definition follows the library's own schema (column names, key, the types
DuckDB has closest to the original); the source says where the shape comes from.
What they share is the point: a row per handled message, and a unique key that
names the message, and in two of the three the consumer too.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import pandas as pd


@dataclass(frozen=True)
class LibraryInbox:
    """One library's table of handled messages."""

    library: str
    table: str
    key: str
    ddl: str
    insert: str
    source: str


LIBRARIES = (
    LibraryInbox(
        "Eventuate Tram", "received_messages", "(consumer_id, message_id)",
        """CREATE TABLE received_messages (
    consumer_id   VARCHAR(1000),
    message_id    VARCHAR(1000),
    creation_time BIGINT,
    PRIMARY KEY (consumer_id, message_id)
)""",
        "INSERT INTO received_messages VALUES ('payments', 'm-7f3', 0) ON CONFLICT DO NOTHING",
        "eventuate-foundation/eventuate-common, postgres/2.initialize-database.sql (eventuate.received_messages)",
    ),
    LibraryInbox(
        "NServiceBus Outbox (SQL persistence)", "OutboxData", "(MessageId), one table per endpoint",
        """CREATE TABLE OutboxData (
    MessageId          VARCHAR(200) PRIMARY KEY,
    Dispatched         BOOLEAN NOT NULL DEFAULT false,
    DispatchedAt       TIMESTAMP,
    PersistenceVersion VARCHAR(23) NOT NULL,
    Operations         VARCHAR NOT NULL  -- the messages the handler sends, dispatched after the commit
)""",
        "INSERT INTO OutboxData (MessageId, PersistenceVersion, Operations) VALUES ('m-7f3', '8.0.0', '[]') "
        "ON CONFLICT DO NOTHING",
        "docs.particular.net/persistence/sql/sqlserver-scripts (Outbox, Create Table; the table name carries "
        "the endpoint's prefix)",
    ),
    LibraryInbox(
        "MassTransit (Entity Framework Core)", "InboxState", "UNIQUE (MessageId, ConsumerId)",
        """CREATE TABLE InboxState (
    Id                 BIGINT PRIMARY KEY,  -- an identity column, for an ordered clustered index
    MessageId          UUID NOT NULL,
    ConsumerId         UUID NOT NULL,       -- an MD5 hash of the endpoint name and consumer type
    LockId             UUID NOT NULL,
    RowVersion         BLOB,
    Received           TIMESTAMP NOT NULL,
    ReceiveCount       INTEGER NOT NULL,
    ExpirationTime     TIMESTAMP,
    Consumed           TIMESTAMP,
    Delivered          TIMESTAMP,
    LastSequenceNumber BIGINT,
    UNIQUE (MessageId, ConsumerId)
)""",
        "INSERT INTO InboxState (Id, MessageId, ConsumerId, LockId, Received, ReceiveCount) VALUES "
        "(nextval('inbox_ids'), '00000000-0000-0000-0000-0000000007f3', '00000000-0000-0000-0000-00000000cafe', "
        "uuid(), TIMESTAMP '2026-01-01 12:00:00', 1) ON CONFLICT DO NOTHING",
        "MassTransit's InboxState (masstransit.io, Transactional Outbox Configuration: 'tracks received messages "
        "by MessageId for each endpoint'; MassTransit/MassTransit reference docs for its columns; the EF Core "
        "migration's UNIQUE (MessageId, ConsumerId))",
    ),
)


def deliver_twice_to_each() -> pd.DataFrame:
    """Create every library's table in one DuckDB and insert the same handled message twice into each.

    One row per library: its key, and how many rows the two inserts left (1: the
    second was recognised as a duplicate).
    """
    connection = duckdb.connect()
    connection.execute("CREATE SEQUENCE inbox_ids")
    rows = []
    for library in LIBRARIES:
        connection.execute(library.ddl)
        for _ in range(2):
            connection.execute(library.insert)
        stored = connection.execute(f"SELECT count(*) FROM {library.table}").fetchone()
        rows.append((library.library, library.table, library.key, stored[0] if stored else 0))
    return pd.DataFrame(rows, columns=["library", "table", "unique key", "rows after two deliveries"])

"""The order of message IDs, and what it does to the inbox's index on a real PostgreSQL server (lesson 05).

A random UUID (version 4) lands anywhere in the inbox's B-tree, so inserts split
pages all over the index and leave them part full; a time-ordered one (version 7,
RFC 9562: a millisecond timestamp first) lands after the last, so the index fills its
rightmost page and moves on. The IDs are made here from a seeded generator and a
virtual clock, so every run inserts the same IDs in the same order and the server's
figures are the same on every run. The course's inbox keys on a VARCHAR column, so an ID is
stored as its 36 characters and compared under the database's collation; a ``uuid`` column
stores 16 bytes. Both are measured.
"""

from __future__ import annotations

import random
import uuid

import pandas as pd
import psycopg

from idemlib.stores.postgres_store import PostgresPayments
from idemlib.stores.sql import inbox_table, single_value

START_MS = 1_796_083_200_000
"""2026-12-01 00:00 UTC in Unix milliseconds: when the virtual day of messages begins."""


def uuid4s(count: int, seed: int = 5) -> list[uuid.UUID]:
    """``count`` random (version 4) UUIDs, the same ones for the same seed."""
    rng = random.Random(seed)
    return [uuid.UUID(int=rng.getrandbits(128), version=4) for _ in range(count)]


def uuid7s(count: int, seed: int = 5, per_second: int = 500) -> list[uuid.UUID]:
    """``count`` version 7 UUIDs of messages sent ``per_second`` apart on a virtual clock from :data:`START_MS`.

    The layout is RFC 9562's: 48 bits of Unix milliseconds, the version (7), 12
    random bits, the variant, 62 random bits. Within one millisecond the random bits
    decide the order, as the RFC allows.
    """
    rng = random.Random(seed)
    ids = []
    for n in range(count):
        millis = START_MS + n * 1000 // per_second
        value = (millis << 80) | (0x7 << 76) | (rng.getrandbits(12) << 64) | (0b10 << 62) | rng.getrandbits(62)
        ids.append(uuid.UUID(int=value))
    return ids


FILLFACTOR = 90
"""How full PostgreSQL fills a B-tree's leaf pages when the index grows at its right edge (the default fillfactor)."""

KEY_TYPES = {"uuid (16 bytes)": "uuid", "VARCHAR, the course's inbox": "VARCHAR"}
"""The inbox's key column, typed two ways: PostgreSQL's ``uuid`` type, and the text column the course's inbox has."""


def _pgstattuple(connection: psycopg.Connection) -> bool:
    """Whether the server has the ``pgstattuple`` extension, made ready in the ``public`` schema.

    A run's tables live in a schema of its own, dropped when the run ends (with any extension created in it),
    and an extension exists once per database. So it is created, or moved, into ``public``, where no run's
    drop takes it away and every run finds it under one name.
    """
    where = "SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'pgstattuple'"
    for make_ready in ("CREATE EXTENSION IF NOT EXISTS pgstattuple SCHEMA public",
                       "ALTER EXTENSION pgstattuple SET SCHEMA public"):
        try:
            connection.execute(make_ready)
        except psycopg.Error:
            pass  # not installed (a contrib extension), not ours to create, or another run made it just now
        found = connection.execute(where).fetchone()
        if found is None or found[0] == "public":
            return found is not None
    return False


def _index_figures(connection: psycopg.Connection, table: str, *, density: bool) -> dict[str, float]:
    index = f"{table}_pkey"
    pages = single_value(connection.execute(
        "SELECT pg_relation_size(%s::regclass) / current_setting('block_size')::int", (index,)))
    stats: dict[str, float] = {"index pages": int(pages)}
    if not density:
        return stats
    try:
        row = connection.execute("SELECT leaf_pages, avg_leaf_density FROM public.pgstatindex(%s::regclass)",
                                 (index,)).fetchone()
        assert row is not None, "pgstatindex returns one row for an index"
        leaf_pages, density = row
        stats |= {"leaf pages": int(leaf_pages), "leaf pages filled (%)": round(float(density), 1)}
    except psycopg.Error:
        connection.rollback()  # the extension went away meanwhile: the size alone is measured
    return stats


def _derived_density(table: pd.DataFrame) -> pd.DataFrame:
    """Without ``pgstattuple``, how full the random IDs' pages are, worked out and labelled as worked out.

    Time-ordered inserts fill each leaf to :data:`FILLFACTOR`; the same entries on more pages are that much
    emptier: FILLFACTOR × (time-ordered pages / random pages). The index's few inner pages are counted in.
    """
    derived = f"leaf pages filled (%, derived: {FILLFACTOR} × time-ordered pages / these pages)"
    table[derived] = 0.0
    for key in table.index.get_level_values(0).unique():
        ordered = table.loc[(key, "UUID version 7 (time-ordered)"), "index pages"]
        for kind in table.loc[key].index:
            table.loc[(key, kind), derived] = round(FILLFACTOR * ordered / table.loc[(key, kind), "index pages"], 1)
    return table


def index_after_inserts(count: int = 50_000, seed: int = 5) -> pd.DataFrame:
    """Insert ``count`` IDs of each kind, in the order they were made, into the inbox's table on PostgreSQL.

    The table is the course's own inbox (:func:`~idemlib.stores.sql.inbox_table`), its key column typed
    each way of :data:`KEY_TYPES`; the VARCHAR one holds an ID as the 36 characters a producer sends.
    Returns, per key type and kind of ID, the primary-key index's size in pages and, where the server has
    the ``pgstattuple`` extension, its leaf pages and how full they are; where it has not, how full they
    must be, worked out from the pages (labelled so). ``attrs`` names the server's version and collation, and
    the bytes one key takes in each column type (``pg_column_size``).
    """
    database = PostgresPayments()
    connection = database.connect().connection
    density = _pgstattuple(connection)  # without it, the density is worked out instead
    figures, key_bytes = {}, {}
    kinds = {"UUID version 4 (random)": [str(one) for one in uuid4s(count, seed)],
             "UUID version 7 (time-ordered)": [str(one) for one in uuid7s(count, seed)]}  # made once, for both columns
    for key, id_type in KEY_TYPES.items():
        for label, ids in kinds.items():
            connection.execute("DROP TABLE IF EXISTS processed_messages")
            connection.execute(inbox_table(id_type))
            connection.execute(f"INSERT INTO processed_messages SELECT id::{id_type} "
                               "FROM unnest(%s::text[]) WITH ORDINALITY AS u(id, n) ORDER BY n", (ids,))
            figures[(key, label)] = _index_figures(connection, "processed_messages", density=density)
            key_bytes[key] = int(single_value(connection.execute(  # as stored in the table's rows
                "SELECT max(pg_column_size(message_id)) FROM processed_messages")))
    table = pd.DataFrame.from_dict(figures, orient="index")
    table.index.names = ["inbox key column", "IDs inserted"]
    if "leaf pages filled (%)" not in table:
        table = _derived_density(table)
    table.attrs["key bytes"] = key_bytes
    table.attrs["server"] = single_value(connection.execute("SHOW server_version")).split()[0]
    table.attrs["collation"] = single_value(connection.execute(
        "SELECT datcollate FROM pg_database WHERE datname = current_database()"))
    return table

"""The order of message IDs, and what it does to the inbox's index on a real PostgreSQL server (lesson 05).

A random UUID (version 4) lands anywhere in the inbox's B-tree, so inserts split
pages all over the index and leave them part full; a time-ordered one (version 7,
RFC 9562: a millisecond timestamp first) lands after the last, so the index fills its
rightmost page and moves on. The IDs are made here from a seeded generator and a
virtual clock, so every run inserts the same IDs in the same order and the server's
figures are the same on every run.
"""

from __future__ import annotations

import random
import uuid

import pandas as pd
import psycopg

from idemlib.stores.postgres_store import PostgresPayments
from idemlib.stores.sql import single_value

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


def _index_figures(connection: psycopg.Connection, table: str) -> dict[str, float]:
    index = f"{table}_pkey"
    pages = single_value(connection.execute(
        "SELECT pg_relation_size(%s::regclass) / current_setting('block_size')::int", (index,)))
    stats: dict[str, float] = {"index pages": int(pages)}
    try:
        row = connection.execute("SELECT leaf_pages, avg_leaf_density FROM pgstatindex(%s::regclass)", (index,)).fetchone()
        assert row is not None, "pgstatindex returns one row for an index"
        leaf_pages, density = row
        stats |= {"leaf pages": int(leaf_pages), "leaf pages filled (%)": round(float(density), 1)}
    except psycopg.Error:
        connection.rollback()  # pgstattuple is a contrib extension; without it the size alone is shown
    return stats


def index_after_inserts(count: int = 50_000, seed: int = 5) -> pd.DataFrame:
    """Insert ``count`` IDs of each kind, in the order they were made, into an inbox table on PostgreSQL.

    Returns, per kind, the primary-key index's size in pages and, where the
    server has the ``pgstattuple`` extension, its leaf pages and how full they are.
    """
    database = PostgresPayments()
    connection = database.connect().connection
    try:
        connection.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
    except psycopg.Error:
        pass  # not installed on this server: the figures leave the density out
    figures = {}
    for label, ids in {"UUID version 4 (random)": uuid4s(count, seed),
                       "UUID version 7 (time-ordered)": uuid7s(count, seed)}.items():
        table = "inbox_v4" if "4" in label else "inbox_v7"
        connection.execute(f"CREATE TABLE {table} (message_id uuid PRIMARY KEY)")
        connection.execute(f"INSERT INTO {table} SELECT id FROM unnest(%s::uuid[]) WITH ORDINALITY AS u(id, n) "
                           "ORDER BY n", (ids,))
        figures[label] = _index_figures(connection, table)
    table = pd.DataFrame.from_dict(figures, orient="index")
    table.attrs["server"] = single_value(connection.execute("SHOW server_version")).split()[0]
    return table

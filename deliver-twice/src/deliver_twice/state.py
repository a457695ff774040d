"""The whole state of the database under test: every table the connection sees, so a side effect is seen anywhere.

A ``state`` function that reads one table misses a consumer that also writes another
(an outbox row twice, an audit row per delivery). Without ``state=`` the helper reads
every table: on PostgreSQL those of the schemas on the ``search_path`` (a test's own schema),
on SQLite every table of the main database. Rows are compared as sorted lists, so their
order on disk does not matter; generated IDs and timestamps, if a table has them, differ by
design, so a consumer with such columns passes its own ``state`` instead.
"""

from __future__ import annotations

from typing import Any

from deliver_twice import orm
from deliver_twice.asynchronous import is_async, settle

Connection = Any


_POSTGRES_TABLES = ("SELECT quote_ident(table_schema) || '.' || quote_ident(table_name) FROM information_schema.tables "
                    "WHERE table_schema = ANY (current_schemas(false)) AND table_type = 'BASE TABLE' ORDER BY 1")


def _rows(connection: Connection, query: str) -> list[Any]:
    """All rows of ``query``, on a blocking DB-API connection, psycopg's async one or asyncpg's."""
    driver = type(connection).__module__
    if orm.is_session(connection):
        return orm.rows(connection, query)
    if driver.startswith("asyncpg"):
        return list(settle(connection.fetch(query)))
    if is_async(connection):
        return list(settle(_fetch_async(connection, query)))
    return list(connection.execute(query).fetchall())


async def _fetch_async(connection: Connection, query: str) -> list[Any]:
    cursor = await connection.execute(query)
    return list(await cursor.fetchall())


def _tables(connection: Connection) -> list[str]:
    if type(connection).__module__.startswith(("psycopg", "asyncpg")) or (
            orm.is_session(connection) and orm.dialect(connection) == "postgresql"):
        rows = _rows(connection, _POSTGRES_TABLES)
    else:  # sqlite3, and DuckDB's sqlite_master view
        rows = _rows(connection, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
                                 "ORDER BY name")
    return [row[0] for row in rows]


def whole_database(connection: Connection) -> dict[str, list[tuple[Any, ...]]]:
    """Every table's rows, by table name, each table's rows sorted (by their text, so NULLs and mixed types sort)."""
    return {name: sorted((tuple(row) for row in _rows(connection, f"SELECT * FROM {name}")), key=repr)
            for name in _tables(connection)}

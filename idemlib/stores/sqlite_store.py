"""SQLite: one writer at a time, in a file (a new temporary one unless you give a path)."""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

from idemlib.stores.sql import SqlPayments


class SQLitePayments(SqlPayments):
    """A payments database on SQLite, in write-ahead-log mode.

    SQLite lets one transaction write at a time. ``BEGIN IMMEDIATE`` takes the write
    lock at the start, so a second writer waits at its ``BEGIN`` for up to
    ``busy_timeout`` seconds and then gets ``database is locked``. With the lock
    released by a commit, its insert sees the winner's row and writes zero rows.
    """

    engine = "SQLite"
    begin_statement = "BEGIN IMMEDIATE"
    conflict_errors = (sqlite3.OperationalError, sqlite3.IntegrityError)

    def __init__(self, path: str | None = None, *, busy_timeout: float = 5.0) -> None:
        if path is None:
            self._folder = tempfile.TemporaryDirectory(prefix="idemlib-sqlite-")
            path = str(Path(self._folder.name) / "payments.sqlite")
        self.path = path
        self.busy_timeout = busy_timeout
        # WAL lets readers go on while one writer writes; the mode is kept in the file.
        # Reading the answer finishes the statement, which would otherwise hold a lock.
        self.connect().execute("PRAGMA journal_mode = WAL").fetchall()
        self._create_schema()

    def connect(self) -> sqlite3.Cursor:  # a Cursor, and sqlite3's own: its .connection is read by the races
        # isolation_level=None: the session's own BEGIN and COMMIT decide, not the driver.
        connection = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None,
                                     check_same_thread=False)
        return connection.cursor()

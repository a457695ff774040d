"""An order's status, set with ``PUT`` and removed with ``DELETE``: idempotent methods, and HTTP's guard against overtaking.

``PUT`` and ``DELETE`` need no key: HTTP defines them, and the safe methods (GET,
HEAD, OPTIONS, TRACE), as idempotent (RFC 9110, section 9.2.2). Repeating one is
harmless only while no newer request has come between: a delayed ``PUT`` of an old
status overwrites a newer one. HTTP's own answer is a conditional request (RFC 9110,
section 13): every state of the status has a version, sent as an ``ETag``; a client
sends the version it based its change on in ``If-Match``, and a request whose
version is no longer current is refused with 412 and changes nothing.

A ``DELETE`` keeps the row, with no status and the next version, so a status set
again later never reuses a version an old request may still carry. A deleted status
has no representation, so no ``If-Match`` matches it, ``*`` included, and a second
``DELETE`` finds nothing to delete: 404, as a ``GET`` gets, and no new version.
"""

from __future__ import annotations

import threading
from typing import Any

from idemlib.http.keys import retry_conflicts
from idemlib.http.problems import Refused, busy
from idemlib.stores import DuckDBPayments, WriteConflict
from idemlib.stores.sql import Cursor

ORDERS_SCHEMA = """CREATE TABLE IF NOT EXISTS order_status (
    order_id INTEGER PRIMARY KEY,
    status   VARCHAR,           -- NULL once deleted
    version  INTEGER NOT NULL   -- 1 for the first status, one more for every change
)"""
MAX_STATUS_LENGTH = 64


def etag(version: int) -> str:
    """The strong entity tag of a version of an order's status."""
    return f'"{version}"'


def matches(if_match: str | None, version: int | None) -> bool:
    """Whether ``If-Match`` lets a request change the status now at ``version`` (None: no current status).

    No header: always. ``*``: when there is a current status. Otherwise a list of
    entity tags compared strongly (RFC 9110, section 13.1.1): a weak tag never matches.
    """
    if if_match is None:
        return True
    tags = [tag.strip() for tag in if_match.split(",")]
    if tags == ["*"]:
        return version is not None
    return version is not None and etag(version) in tags


class OrderStatuses:
    """The status of each order, with a version per change, in the course's DuckDB database."""

    def __init__(self, database: DuckDBPayments) -> None:
        self.database = database
        # One writer at a time: the version check and the write conflict in DuckDB when concurrent
        # requests make both at once, and this server is one process.
        self._writing = threading.Lock()
        database.connect().execute(ORDERS_SCHEMA)

    def read(self, order_id: int) -> tuple[str | None, int | None]:
        """The order's status (None if none) and its version (None if it never had one)."""
        rows = self.database.connect().execute("SELECT status, version FROM order_status WHERE order_id = ?",
                                               (order_id,)).fetchall()
        return (rows[0][0], rows[0][1]) if rows else (None, None)

    def write(self, order_id: int, status: str | None, if_match: str | None) -> tuple[int, dict[str, Any], str | None]:
        """Set (or, with None, remove) the status if ``If-Match`` allows: (HTTP status, body, ETag, None once
        removed); 412 if ``If-Match`` does not match, 404 for removing a status that is not there."""
        def change(cursor: Cursor) -> int:
            rows = cursor.execute("SELECT status, version FROM order_status WHERE order_id = ?",
                                  (order_id,)).fetchall()
            version = rows[0][1] if rows else None
            current = version if rows and rows[0][0] is not None else None  # a removed status has no representation
            if status is None and current is None:  # a 404 whatever the preconditions say (RFC 9110, 13.2.1)
                raise Refused(404, "Not Found", f"Order {order_id} has no status to delete; nothing was changed.")
            if not matches(if_match, current):
                raise Refused(412, "Precondition Failed", f"If-Match: {if_match[:60] if if_match else ''} is not the "
                              f"status's current version ({etag(current) if current else 'it has none'}); nothing "
                              "was changed.", headers={"ETag": etag(current)} if current else None)
            cursor.execute("INSERT INTO order_status VALUES (?, ?, 1) ON CONFLICT (order_id) DO UPDATE "
                           "SET status = excluded.status, version = version + 1", (order_id, status))
            return (version or 0) + 1

        try:
            # Setting or removing a value is safe to repeat, so a write conflict with a concurrent request is retried.
            with self._writing:
                version = retry_conflicts(self.database, change)
        except (WriteConflict, *self.database.conflict_errors):
            raise busy() from None
        return 200, {"order_id": order_id, "status": status}, etag(version) if status is not None else None


def parse_status(body: Any) -> str:
    """The status in a ``PUT`` body: 1 to :data:`MAX_STATUS_LENGTH` printable characters."""
    status = body.get("status") if isinstance(body, dict) else None
    if not isinstance(status, str) or not 0 < len(status) <= MAX_STATUS_LENGTH or not status.isprintable():
        raise Refused(400, "Invalid status", f'Send a JSON object such as {{"status": "PAID"}}: a status of 1 to '
                      f"{MAX_STATUS_LENGTH} printable characters.")
    return status

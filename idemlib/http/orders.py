"""An order's status, set with ``PUT`` and removed with ``DELETE``: idempotent methods, and HTTP's guard against overtaking.

``PUT`` and ``DELETE`` need no key: HTTP defines them, and the safe methods (GET,
HEAD, OPTIONS, TRACE), as idempotent (RFC 9110, section 9.2.2). Repeating one is
harmless only while no newer request has come between: a delayed ``PUT`` of an old
status overwrites a newer one. HTTP's own answer is a conditional request (RFC 9110,
section 13): every state of the status has a version, sent as an ``ETag``; a client
sends the version it based its change on in ``If-Match``, and a request whose
version is no longer current is refused with 412 and changes nothing. The request
that creates the status has no version to send: it sends ``If-None-Match: *``, which
holds only while there is no current status (section 13.1.2), so a delayed retry of
the creation is refused with 412 too, instead of overwriting what came after it.

Each client has its orders of its own, as it has its keys: the status of order 5 is
kept per client the bearer token authenticates, so another client's ``GET``,
``PUT`` or ``DELETE`` of order 5 meets its own order 5 (none, until it sets one) and
learns nothing about anyone else's.

A ``DELETE`` keeps the row, with no status and the next version, so a status set
again later never reuses a version an old request may still carry. A deleted status
has no representation, so no ``If-Match`` matches it, ``*`` included, and a second
``DELETE`` finds nothing to delete: 404, as a ``GET`` gets, and no new version.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from idemlib.http.keys import retry_conflicts
from idemlib.http.problems import Refused, busy
from idemlib.stores import DuckDBPayments, WriteConflict
from idemlib.stores.sql import Cursor

ORDERS_SCHEMA = """CREATE TABLE IF NOT EXISTS order_status (
    client_id VARCHAR NOT NULL,  -- whose order it is: every client has its own
    order_id  INTEGER NOT NULL,
    status    VARCHAR,           -- NULL once deleted
    version   INTEGER NOT NULL,  -- 1 for the first status, one more for every change
    PRIMARY KEY (client_id, order_id)
)"""
MAX_STATUS_LENGTH = 64


@dataclass(frozen=True)
class Preconditions:
    """A request's ``If-Match`` and ``If-None-Match`` field values, each of its lines combined (None: not sent)."""

    if_match: str | None = None
    if_none_match: str | None = None

    @classmethod
    def of(cls, lines: Callable[[str], list[str]]) -> Preconditions:
        """From the field lines ``lines(name)`` returns: a list field sent on several lines is one list
        (RFC 9110, section 5.3), so its lines are joined with commas, in order."""
        def combined(name: str) -> str | None:
            return ", ".join(found) if (found := lines(name)) else None
        return cls(combined("If-Match"), combined("If-None-Match"))

    def hold(self, version: int | None) -> bool:
        """Whether the request may change a status now at ``version`` (None: no current status), as RFC 9110
        (section 13.2.2) evaluates them: ``If-Match`` first, then ``If-None-Match``."""
        if self.if_match is not None and not _any_tag(self.if_match, version, weak=False):
            return False
        return self.if_none_match is None or not _any_tag(self.if_none_match, version, weak=True)

    def shown(self) -> str:
        """The preconditions as sent, for a refusal's detail."""
        sent = [f"{name}: {value[:60]}" for name, value in (("If-Match", self.if_match),
                                                            ("If-None-Match", self.if_none_match)) if value is not None]
        return " and ".join(sent)


def etag(version: int) -> str:
    """The strong entity tag of a version of an order's status."""
    return f'"{version}"'


def _any_tag(value: str, version: int | None, *, weak: bool) -> bool:
    """Whether a list of entity tags, or ``*``, matches the status now at ``version`` (None: no current status).

    ``*`` matches any current status. ``If-Match`` compares strongly, so a weak tag
    never matches; ``If-None-Match`` compares weakly, ignoring ``W/`` (section 13.1.1 and 13.1.2).
    """
    tags = [tag.strip() for tag in value.split(",")]
    if version is None:
        return False
    if tags == ["*"]:
        return True
    return etag(version) in (tag.removeprefix("W/") if weak else tag for tag in tags)


class OrderStatuses:
    """The status of each client's orders, with a version per change, in the course's DuckDB database."""

    def __init__(self, database: DuckDBPayments) -> None:
        self.database = database
        # One writer at a time: the version check and the write conflict in DuckDB when concurrent
        # requests make both at once, and this server is one process.
        self._writing = threading.Lock()
        database.connect().execute(ORDERS_SCHEMA)

    def read(self, client: str, order_id: int) -> tuple[str | None, int | None]:
        """The client's order's status (None if none) and its version (None if it never had one)."""
        rows = self.database.connect().execute("SELECT status, version FROM order_status WHERE client_id = ? "
                                               "AND order_id = ?", (client, order_id)).fetchall()
        return (rows[0][0], rows[0][1]) if rows else (None, None)

    def write(self, client: str, order_id: int, status: str | None,
              conditions: Preconditions) -> tuple[int, dict[str, Any], str | None]:
        """Set (or, with None, remove) the status if the preconditions hold: (HTTP status, body, ETag, None once
        removed); 412 if they do not, 404 for removing a status that is not there."""
        def change(cursor: Cursor) -> int:
            rows = cursor.execute("SELECT status, version FROM order_status WHERE client_id = ? AND order_id = ?",
                                  (client, order_id)).fetchall()
            version = rows[0][1] if rows else None
            current = version if rows and rows[0][0] is not None else None  # a removed status has no representation
            if status is None and current is None:  # a 404 whatever the preconditions say (RFC 9110, 13.2.1)
                raise Refused(404, "Not Found", f"Order {order_id} has no status to delete; nothing was changed.")
            if not conditions.hold(current):
                raise Refused(412, "Precondition Failed", f"{conditions.shown()} does not hold for the status's "
                              f"current version ({etag(current) if current else 'it has none'}); nothing was "
                              "changed.", headers={"ETag": etag(current)} if current else None)
            cursor.execute("INSERT INTO order_status VALUES (?, ?, ?, 1) ON CONFLICT (client_id, order_id) DO UPDATE "
                           "SET status = excluded.status, version = version + 1", (client, order_id, status))
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

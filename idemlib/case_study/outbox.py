"""The sending side of the mortgage case: a transactional outbox and its relay.

The approval service writes "application approved" and the event announcing it
in one transaction, so neither exists without the other. A relay then publishes
every unpublished event and marks it published. A relay that dies between the
two publishes the same event again on its next pass, with the same ID: the
outbox trades a lost event for a duplicate, which the receiver's inbox absorbs.
"""

from __future__ import annotations

from collections.abc import Callable

import duckdb

from idemlib.case_study.mortgage import open_account_message
from idemlib.messages import Message


class RelayCrashed(RuntimeError):
    """The relay process died after publishing an event and before marking it published."""


class ApprovalService:
    """Approves mortgage applications, each with its event in the same DuckDB transaction."""

    def __init__(self) -> None:
        self._db = duckdb.connect(":memory:", config={"threads": 1})
        self._db.execute("CREATE TABLE applications (application_id INTEGER PRIMARY KEY, status VARCHAR NOT NULL)")
        self._db.execute("CREATE TABLE outbox (event_id VARCHAR PRIMARY KEY, application_id INTEGER NOT NULL, "
                         "amount INTEGER NOT NULL, published BOOLEAN NOT NULL DEFAULT false)")

    def approve(self, application_id: int, amount: int, *, crash_before_commit: bool = False) -> None:
        """Mark the application approved and write its event, together; a crash before the commit keeps neither."""
        self._db.execute("BEGIN")
        self._db.execute("INSERT INTO applications VALUES (?, 'approved')", (application_id,))
        # The event's ID is made here, once, with the business fact: every republish carries it.
        self._db.execute("INSERT INTO outbox (event_id, application_id, amount) VALUES (?, ?, ?)",
                         (f"m-{application_id}", application_id, amount))
        self._db.execute("ROLLBACK" if crash_before_commit else "COMMIT")

    def relay(self, publish: Callable[[Message], None], *, crash_after_publish: bool = False) -> int:
        """Publish every unpublished event, then mark it; returns how many were published.

        ``crash_after_publish`` kills the relay after its first publish, before the mark:
        :class:`RelayCrashed` is raised and the event stays unpublished in the outbox.
        """
        pending = self._db.execute("SELECT event_id, application_id, amount FROM outbox WHERE NOT published "
                                   "ORDER BY event_id").fetchall()
        for event_id, application_id, amount in pending:
            publish(open_account_message(event_id, application_id, amount))
            if crash_after_publish:
                raise RelayCrashed(f"the relay died after publishing {event_id}, before marking it published")
            self._db.execute("UPDATE outbox SET published = true WHERE event_id = ?", (event_id,))
        return len(pending)

    def approved(self) -> list[int]:
        """The applications approved for good (committed)."""
        return [row[0] for row in self._db.execute("SELECT application_id FROM applications ORDER BY 1").fetchall()]

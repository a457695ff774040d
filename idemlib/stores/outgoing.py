"""What a skipped duplicate skips: the event the first delivery was to publish after its commit.

An inbox handler that finds its message's ID skips the work, and with it anything the first
delivery meant to do after its commit. Here that is publishing an *order paid* event. The
first delivery commits and dies just before it publishes; the redelivery finds the ID. Sent
straight after the commit, the event is never sent. Recorded as a row of an outgoing table in
the work's transaction and sent on every delivery until marked sent (an outbox, as
NServiceBus's is), the redelivery sends it.
"""

from __future__ import annotations

import duckdb
import pandas as pd

from idemlib.stores.sql import SCHEMA, single_value

DESIGNS = ("publish after the commit", "outgoing row in the transaction")


def _deliver(db: duckdb.DuckDBPyConnection, design: str, message_id: str, published: list[str], *,
             dies_before_publishing: bool) -> str:
    """One delivery of ``message_id`` under ``design``; returns what the handler did with the work."""
    db.execute("BEGIN")
    new = db.execute("INSERT INTO processed_messages (message_id) VALUES (?) ON CONFLICT DO NOTHING RETURNING message_id",
                     [message_id]).fetchall()
    if new:
        db.execute("INSERT INTO payments (order_id, amount, message_id) VALUES (1042, 40, ?)", [message_id])
        if design == DESIGNS[1]:
            db.execute("INSERT INTO outgoing (event, sent) VALUES (?, false)", [f"order 1042 paid ({message_id})"])
    db.execute("COMMIT")
    if dies_before_publishing:
        return "charged, then died before publishing" if new else "duplicate skipped, then died"
    if design == DESIGNS[0]:
        if new:
            published.append(f"order 1042 paid ({message_id})")
    else:
        # Every delivery, a duplicate too, sends whatever is still unsent, then marks it sent.
        for (event,) in db.execute("SELECT event FROM outgoing WHERE NOT sent").fetchall():
            published.append(event)
        db.execute("UPDATE outgoing SET sent = true WHERE NOT sent")
    return "charged" if new else "duplicate skipped"


def crash_before_publishing(message_id: str = "m-7f3") -> pd.DataFrame:
    """Each design, delivered twice on a fresh DuckDB database: the first delivery dies after its commit, before
    it publishes; one row per design with what each delivery did, the charges, and the events published."""
    rows = []
    for design in DESIGNS:
        db = duckdb.connect(":memory:")
        for statement in SCHEMA:
            db.execute(statement)
        db.execute("CREATE TABLE outgoing (event VARCHAR NOT NULL, sent BOOLEAN NOT NULL)")
        published: list[str] = []
        first = _deliver(db, design, message_id, published, dies_before_publishing=True)
        second = _deliver(db, design, message_id, published, dies_before_publishing=False)
        charges = single_value(db.execute("SELECT count(*) FROM payments"))
        rows.append({"design": design, "delivery 1": first, "delivery 2": second, "charges": charges,
                     "events published": len(published)})
    return pd.DataFrame(rows).set_index("design")

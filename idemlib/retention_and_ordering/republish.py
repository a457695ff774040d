"""A duplicate written into the log: a producer's retry, or an outbox relay's republish, is a second record.

The offset consumer absorbs *redeliveries*: the same record, at the same stream
sequence, delivered again after a crash. It cannot absorb a copy that was written
into the log twice. A producer whose publish timed out (the broker stored it, the
acknowledgement was lost) publishes again; an outbox relay that crashed after
publishing but before marking the row sent publishes it again on restart. Either
way the log holds a second record of the same message at a new, higher sequence,
and the consumer's stored position lets it through.

Two fixes, shown here: the broker drops the repeat (JetStream keeps each
``Nats-Msg-Id`` for the stream's duplicate window and answers a repeat within it
as a duplicate), or the consumer also keeps the message IDs it applied, in the
same transaction as the effect and the offset.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from idemlib.retention_and_ordering.offsets import Projection, consume
from idemlib.retention_and_ordering.ordered_log import OrderedLog

SHORT_WINDOW = 0.2
"""Seconds of duplicate window for the case that waits it out (the server keeps its own default)."""

CHARGE: dict[str, Any] = {"message_id": "m-7f3", "order_id": 1042, "amount": 40}
"""Order 1042 charged \\$40: the message the producer publishes twice."""
OTHER_CHARGE: dict[str, Any] = {"message_id": "m-2d9", "order_id": 2077, "amount": 15}


@dataclass(frozen=True)
class Republish:
    """One way the second publish of :data:`CHARGE` can reach the log, and how the consumer reads it.

    ``msg_id`` publishes both copies with the message ID as ``Nats-Msg-Id``;
    ``after_window`` sends the second copy only once the stream's duplicate window has
    passed (a relay restarted late, a producer retrying from a queue of its own);
    ``consumer_checks_ids`` reads with the offset consumer that also keeps message IDs.
    """

    label: str
    msg_id: bool = False
    after_window: bool = False
    consumer_checks_ids: bool = False


CASES = (
    Republish("no Nats-Msg-Id; the offset consumer"),
    Republish("Nats-Msg-Id, the copy within the duplicate window", msg_id=True),
    Republish("Nats-Msg-Id, the copy after the duplicate window", msg_id=True, after_window=True),
    Republish("no Nats-Msg-Id; the offset consumer also checks message IDs", consumer_checks_ids=True),
)


def publish_twice(make_log: Callable[..., OrderedLog], case: Republish, short_window: float = SHORT_WINDOW
                  ) -> dict[str, object]:
    """Publish :data:`CHARGE` twice and :data:`OTHER_CHARGE` once, consume the stream, and say what was charged.

    A case that waits out the duplicate window gets a stream whose window is
    ``short_window`` seconds and waits five times that (a busy machine only waits
    longer); the others keep the server's default window. The row gives the window as
    the log holds it.
    """
    log = make_log(duplicate_window=short_window) if case.after_window else make_log()
    try:
        msg_id = CHARGE["message_id"] if case.msg_id else None
        log.publish("orders", CHARGE, msg_id)
        if case.after_window:
            time.sleep(5 * short_window)
        second = log.publish("orders", CHARGE, msg_id)  # the retry: the first publish's acknowledgement was lost
        last = log.publish("orders", OTHER_CHARGE, OTHER_CHARGE["message_id"] if case.msg_id else None)
        projection = Projection()
        consume(log, projection, use_ids=case.consumer_checks_ids)
        window = log.duplicate_window()
    finally:
        log.close()
    totals = projection.totals()
    return {"how the copy reaches the log": case.label, "duplicate window (s)": window,
            "records in the stream": last.seq,
            "second publish answered as duplicate": second.duplicate,
            "times m-7f3 applied": projection.times_applied(str(CHARGE["message_id"])),
            "order 1042 paid ($)": totals.get(1042, 0), "order 2077 paid ($)": totals.get(2077, 0)}


def republish_table(make_log: Callable[..., OrderedLog], cases: tuple[Republish, ...] = CASES) -> pd.DataFrame:
    """One row per case of :func:`publish_twice`, each on a stream of its own."""
    return pd.DataFrame([publish_twice(make_log, case) for case in cases]).set_index("how the copy reaches the log")

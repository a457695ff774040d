"""Lesson 01's two tempting fixes, measured: what the broker sees, and what its retry settings change.

The broker decides everything from what reaches it: deliveries it hands out, acks
that come back, leases that run out. :func:`broker_view` keeps exactly those rows of
a trace. :func:`retry_settings` runs the same faulty day under several lease lengths
and delivery limits, to show that "retrying more carefully" trades duplicates for
lost messages and never removes duplicates altogether.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pandas as pd

from idemlib.faults import FaultPlan
from idemlib.handlers import Handler
from idemlib.messages import Message
from idemlib.sim import simulate

BROKER_EVENTS = ("published", "delivered", "lease expired", "acked", "dead-lettered")
"""What the broker does or receives. A lost ack, a crash or a commit never reaches it."""


def broker_view(trace: pd.DataFrame) -> pd.DataFrame:
    """The trace as the broker knows it: publishes, deliveries (and redeliveries), lease expiries, acks, dead letters.

    ``consumer`` is the one a delivery went to or an ack came from; a ``delivery``
    above 1 is a redelivery.
    """
    rows = trace[trace["event"].isin(BROKER_EVENTS)]
    view = pd.DataFrame({
        "time (s)": rows["time"],
        "the broker": rows["event"].replace({"acked": "ack received"}),
        "message": rows["message_id"],
        "delivery": rows["delivery"].where(rows["event"] != "published", 0).astype(int),
        "consumer": rows["actor"].where(rows["actor"] != "broker", ""),
    })
    return view.reset_index(drop=True)


def retry_settings(
    handler: Handler,
    messages: list[Message],
    faults: FaultPlan,
    *,
    leases: Iterable[float],
    max_deliveries: Iterable[int],
    step_seconds: Mapping[str, float] | None = None,
    consumers: int = 2,
) -> pd.DataFrame:
    """Run ``messages`` under every (lease, delivery limit) pair and count what went wrong.

    One row per setting: extra charges (duplicates that got through), payments never
    made (the message was dead-lettered before any delivery committed), and messages
    in the dead-letter queue. The faults are the same in every run.
    """
    rows = []
    for lease in leases:
        for limit in max_deliveries:
            result = simulate(handler, messages, faults=faults, consumers=consumers, visibility_timeout=lease,
                              max_deliveries=limit, step_seconds=step_seconds)
            charges = result.charges_per_message()
            rows.append({"lease (s)": lease, "max deliveries": limit,
                         "extra charges": int((charges - 1).clip(lower=0).sum()),
                         "payments never made": int((charges == 0).sum()),
                         "dead-lettered": len(result.dead_letters)})
    return pd.DataFrame(rows)

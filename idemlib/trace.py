"""The record of everything that happened in a run, for tables and plots.

Every event has a name in :class:`Event`, the course's one vocabulary of what can
happen to a message; an event the vocabulary lacks (a misspelt name) is refused
where it is recorded, not drawn wrongly later. The names are strings, so a trace's
DataFrame and every printed list read as before: ``"duplicate skipped"``, not a code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

import pandas as pd

from idemlib.clock import VirtualClock

TRACE_COLUMNS = ["time", "actor", "event", "message_id", "delivery", "detail", "total charged"]


class Event(StrEnum):
    """What can happen in a run, by whoever it happens to: the broker, a consumer, the database, the provider."""

    # The broker's
    PUBLISHED = "published"
    DUPLICATE_DROPPED = "duplicate dropped"
    DELIVERED = "delivered"
    LEASE_EXPIRED = "lease expired"
    LEASE_EXTENDED = "lease extended"
    ACKED = "acked"
    DEAD_LETTERED = "dead-lettered"
    # A consumer's, step by step
    STARTED = "started"
    STEP = "step"
    CHARGED = "charged"
    COMMITTED = "committed"
    DUPLICATE_SKIPPED = "duplicate skipped"
    ACK_LOST = "ack lost"
    CRASHED = "crashed"
    ROLLED_BACK = "rolled back"
    # A step that raised, by the kind of error
    REJECTED = "rejected"
    CONFLICT = "conflict"
    PROVIDER_FAILED = "provider failed"
    RESPONSE_LOST = "response lost"
    FAILED = "failed"
    RAISED = "raised"
    # The payment provider's answer
    PROVIDER_ANSWERED = "provider answered"
    # A pending row (lesson 04) older than the provider keeps keys: its key may be gone, so no call is made
    LEFT_FOR_RECONCILER = "pending past the key's lifetime: left for the reconciler"
    # Long work (lesson 09): an in-progress record, a claim, a deadline
    BACKED_OFF = "in progress: backed off"
    TAKEN_OVER = "deadline passed: taken over"
    CLAIM_LOST = "claim lost: left to the owner"
    TIMED_OUT = "stopped at its timeout"
    # The case study's payout (lesson 12)
    PAYOUT_FOUND = "payout found at the payment system: not sent again"


class TraceRow(NamedTuple):
    """One event of a run, read by name: ``row.event``, not ``row[2]``."""

    time: float
    actor: str
    event: str
    message_id: str
    delivery: int
    detail: str
    total_charged: int | None


@dataclass
class Trace:
    """An append-only log of events stamped with the virtual clock, each named in :class:`Event`."""

    clock: VirtualClock
    total_charged: Callable[[], int] | None = None
    """When given, each event also records the committed total read from the database at that moment."""
    rows: list[TraceRow] = field(default_factory=list)
    lease_seconds: float | None = None
    """How long the broker's leases last, when a broker records on this trace; step-throughs count them down."""

    def record(
        self, actor: str, event: str, message_id: str, delivery: int = 0, detail: str = "", *, at: float | None = None
    ) -> None:
        """Append one event, stamped ``at`` a given moment or else at the current simulated time.

        Raises ValueError for an event :class:`Event` does not name.
        """
        try:
            name = str(Event(event))
        except ValueError:
            raise ValueError(f"no trace event {event!r}; the events are {[str(e) for e in Event]}") from None
        moment = self.clock.now() if at is None else at
        total = self.total_charged() if self.total_charged else None
        self.rows.append(TraceRow(moment, actor, name, message_id, delivery, detail, total))

    def count(self, event: Event) -> int:
        """How many events of one kind the run had so far."""
        return sum(1 for row in self.rows if row.event == event)

    def to_frame(self) -> pd.DataFrame:
        """The events as a DataFrame, one row each, in the order they happened."""
        frame = pd.DataFrame(self.rows, columns=TRACE_COLUMNS)
        if self.lease_seconds is not None:
            frame.attrs["lease seconds"] = self.lease_seconds
        return frame

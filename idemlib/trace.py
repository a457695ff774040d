"""The record of everything that happened in a run, for tables and plots."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from idemlib.clock import VirtualClock

TRACE_COLUMNS = ["time", "actor", "event", "message_id", "delivery", "detail", "total charged"]


@dataclass
class Trace:
    """An append-only log of events stamped with the virtual clock.

    Events use the course's vocabulary: ``published``, ``delivered``, ``step``,
    ``crashed``, ``committed``, ``rolled back``, ``duplicate skipped``, ``acked``,
    ``ack lost``, ``rejected``, ``failed`` (a step raised any other error), ``dead-lettered``.
    """

    clock: VirtualClock
    total_charged: Callable[[], int] | None = None
    """When given, each event also records the committed total read from the database at that moment."""
    rows: list[tuple[float, str, str, str, int, str, int | None]] = field(default_factory=list)
    lease_seconds: float | None = None
    """How long the broker's leases last, when a broker records on this trace; step-throughs count them down."""

    def record(
        self, actor: str, event: str, message_id: str, delivery: int = 0, detail: str = "", *, at: float | None = None
    ) -> None:
        """Append one event, stamped ``at`` a given moment or else at the current simulated time."""
        moment = self.clock.now() if at is None else at
        total = self.total_charged() if self.total_charged else None
        self.rows.append((moment, actor, event, message_id, delivery, detail, total))

    def to_frame(self) -> pd.DataFrame:
        """The events as a DataFrame, one row each, in the order they happened."""
        frame = pd.DataFrame(self.rows, columns=TRACE_COLUMNS)
        if self.lease_seconds is not None:
            frame.attrs["lease seconds"] = self.lease_seconds
        return frame

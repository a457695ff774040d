"""Simulated time, so that leases run out without anyone waiting for them."""

from __future__ import annotations


class VirtualClock:
    """A clock that moves only when the simulation moves it.

    Lease deadlines and step durations are measured against it, so a run of a
    thousand deliveries with timeouts takes as long as the database work and no more,
    and the same run always produces the same timestamps.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        """The current simulated time, in seconds since the run began."""
        return self._now

    def advance(self, seconds: float) -> float:
        """Move time forward by ``seconds`` and return the new time."""
        if seconds < 0:
            raise ValueError(f"time only moves forward; cannot advance by {seconds} s")
        self._now += seconds
        return self._now

    def advance_to(self, moment: float) -> float:
        """Move time forward to ``moment`` (a moment already past leaves the clock as it is)."""
        self._now = max(self._now, moment)
        return self._now

"""The three days lesson 11 watches through the skip rate: the same arrivals, and from noon either
nothing, a slow handler, or a storm of lost acks."""

from __future__ import annotations

from functools import cache

from idemlib.operating.day import NOON, Day, run_day
from idemlib.sim import RunResult

LESSON_DAYS = {
    "quiet day": Day(),
    "slow from noon": Day(slow_from=NOON),
    "lost-ack storm from noon": Day(storm_from=NOON, storm_until=NOON + 3 * 3600),
}
"""The three days of lesson 11: the same arrivals, and from noon either nothing, a slow handler, or lost acks."""


@cache
def lesson_days() -> dict[str, RunResult]:
    """The three days of lesson 11, run once per process and shared by the cells that read them."""
    return {name: run_day(day) for name, day in LESSON_DAYS.items()}

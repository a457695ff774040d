"""Checks for lesson 10, Retention and ordering."""

from __future__ import annotations

import datetime
import math
from typing import Any

import duckdb

from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.retention_and_ordering.ordering import OTHER_HISTORY, Writer, arrival_orders, explore_orderings
from idemlib.retention_and_ordering.horizon import DAY, HOUR, RetentionConfig, late_duplicate

__all__ = ["EXERCISE_CONFIG", "check_safe_retention", "check_version_guard"]

EXERCISE_CONFIG = RetentionConfig(queue_retention=7 * DAY, dlq_replay=10 * DAY, producer_retry=6 * HOUR)
"""Exercise 1's set-up: a queue keeping messages 7 days, a DLQ replayed within 10 days, producer retries for 6 hours."""


def _hours(answer: Any) -> float | None:
    if isinstance(answer, datetime.timedelta):
        return answer.total_seconds() / HOUR
    if isinstance(answer, int | float) and not isinstance(answer, bool):
        return float(answer)
    return None


@exercise
def check_safe_retention(keep_ids_hours: Any) -> Feedback:
    """Lesson 10: how many hours the inbox must keep an ID under :data:`EXERCISE_CONFIG`.

    Accepts a number of hours or a ``datetime.timedelta``. A retention below the
    horizon is played against the worst late duplicate, which it lets through; one more
    than a day above the horizon is safe but refused as keeping IDs for nothing.
    """
    if (missing := blank(keep_ids_hours, "a number of hours (or a datetime.timedelta)")) is not None:
        return missing
    hours = _hours(keep_ids_hours)
    if hours is None or not math.isfinite(hours) or hours <= 0:
        return hint(f"Give a positive number of hours or a datetime.timedelta, not {keep_ids_hours!r}.")
    horizon = EXERCISE_CONFIG.horizon() / HOUR
    if hours < horizon:
        # The latest copy can arrive at any moment up to the horizon: play it, and the pruning job, inside the gap.
        gap = (horizon - hours) * HOUR
        charged = late_duplicate(hours * HOUR, EXERCISE_CONFIG, prune_every=min(15 * 60, gap / 4),
                                 replay_early=min(5 * 60, gap / 4)).attrs["total charged"]
        if gap < HOUR:
            return hint(f"With {hours:.10g} hours a retried copy replayed from the dead-letter queue in the last "
                        f"{gap / 60:.3g} minutes before the horizon finds the ID pruned and charges ${charged} in all. "
                        "A copy can arrive until the very end: add the three parts exactly, without rounding down.")
        return hint(f"With {hours:.10g} hours the pruning job deletes m-7f3's ID before the latest copy can arrive: "
                    f"a retried copy replayed from the dead-letter queue charges ${charged} in all. Which of the three "
                    "ways a copy can still arrive did you leave out, and are all three in the same unit?")
    if hours > horizon + 24:  # rounding up to whole days is fine; more keeps IDs no copy can still need
        return hint(f"{hours:.10g} hours is safe but keeps every ID more than a day longer than any copy can "
                    "arrive, so the table grows for nothing. Add up the three parts exactly: are all three in hours?")
    margin = f" (with {hours - horizon:.10g} hours to spare)" if hours > horizon else ""
    return right(f"{hours:.10g} hours covers the queue, the dead-letter replay and the producer's retries{margin}; "
                 "the late replay finds the ID and is skipped.")


@exercise
def check_version_guard(statement: Any) -> Feedback:
    """Lesson 10: an SQL statement that applies a status change only if it is newer than the row's version.

    It is run on DuckDB against every arrival order of order 1042's PAID, SHIPPED and
    REFUNDED with duplicates of the first two, and of order 2077's PAID and SHIPPED
    with a duplicate of PAID, both rows in the table: each run must end in its
    order's newest status and leave the other order's row alone.
    """
    if (missing := blank(statement, "an SQL statement using $order_id, $status and $version")) is not None:
        return missing
    if not isinstance(statement, str):
        return hint(f"Write the statement as a string of SQL, not {type(statement).__name__}.")
    if not statement.strip():
        return hint("The string is empty: write the UPDATE of orders that one status change runs.")
    if "$version" not in statement:
        return hint("The statement never looks at the message's $version, so it cannot tell old from new.")
    if "$status" not in statement:
        return hint("The statement never writes the message's $status: each message brings the status to set.")
    try:
        orders = arrival_orders() + arrival_orders(OTHER_HISTORY, duplicated=OTHER_HISTORY[:1])
        explored = explore_orderings([Writer("yours", statement)], orders=orders)
    except duckdb.Error as error:
        return hint(f"DuckDB refused the statement: {str(error).splitlines()[0]} The table is "
                    "orders(order_id, status, version); parameters are $order_id, $status, $version.")
    wrong = explored[~explored["right"]]
    if wrong.empty:
        return right(f"All {len(explored)} arrival orders of both orders end in their newest status: an old message, "
                     "or a late duplicate, no longer overwrites newer state.")
    trampled = wrong[~wrong["other order untouched"]]
    if not trampled.empty:
        first = trampled.iloc[0]
        return hint(f"Applying order {first['order']}'s messages ({first['arrival order']}) changed the other order's "
                    "row too. Which rows should one message's update touch?")
    first = wrong.iloc[0]
    return hint(f"{len(wrong)} of {len(explored)} arrival orders end wrong, for example order {first['order']}'s "
                f"{first['arrival order']} ends {first['final status']} (version {first['final version']}). Does the "
                "row remember the version it has seen, and does the update apply exactly the messages newer than it?")

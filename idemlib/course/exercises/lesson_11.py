"""Checks for lesson 11, Operating it."""

from __future__ import annotations

from functools import cache
from typing import Any

import pandas as pd

from idemlib.operating.batch import STEPS, consume
from idemlib.operating.day import DAY_SECONDS, NOON, Day, clock_time, run_day
from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.faults import Crash, FaultPlan
from idemlib.messages import Message
from idemlib.operating.metrics import SkipRateAlert, quiet_hour, skip_rate
from idemlib.sim import RunResult
from idemlib.stores import DuckDBPayments

__all__ = ["LESSON_DAYS", "WINDOW_SECONDS", "check_alert_rule", "check_batch_crash", "lesson_days"]

WINDOW_SECONDS = 900
LESSON_DAYS = {
    "quiet day": Day(),
    "slow from noon": Day(slow_from=NOON),
    "lost-ack storm from noon": Day(storm_from=NOON, storm_until=NOON + 3 * 3600),
}
"""The three days of lesson 11: the same arrivals, and from noon either nothing, a slow handler, or lost acks."""


@cache
def lesson_days() -> dict[str, RunResult]:
    """The three days of lesson 11, run once per process and shared by the lesson and its check."""
    return {name: run_day(day) for name, day in LESSON_DAYS.items()}


def _rates(name: str) -> pd.DataFrame:
    return skip_rate(lesson_days()[name].trace, WINDOW_SECONDS, until=DAY_SECONDS)


def _stray_skip_pages(alert: SkipRateAlert) -> tuple[float, int] | None:
    """The first quiet-day window with no skip where one stray lost ack (one more delivery, skipped) makes ``alert``
    page: its start and how many deliveries it would then handle; None if a stray skip pages nowhere."""
    quiet = _rates("quiet day")
    for start in quiet.index[(quiet["handled"] > 0) & (quiet["skipped"] == 0)]:
        day = quiet.copy()
        day.loc[start, "handled"] += 1
        day.loc[start, "skipped"] += 1
        day["skip rate"] = day["skipped"] / day["handled"].where(day["handled"] > 0).fillna(1)
        if alert.fires_at(day, WINDOW_SECONDS) is not None:
            return float(start), int(day.loc[start, "handled"])
    return None


@exercise
def check_alert_rule(alert: Any) -> Feedback:
    """Lesson 11: a SkipRateAlert that pages by 12:15 on both bad days (a window after noon), never on the quiet day,
    never at the quiet hour of :func:`~idemlib.operating.metrics.quiet_hour`."""
    if (missing := blank(alert, "SkipRateAlert(threshold=..., windows=...)")) is not None:
        return missing
    if type(alert) is not SkipRateAlert:
        # A subclass could bring its own fires_at: the rule is judged by the course's own.
        return hint(f"Give a SkipRateAlert itself, such as SkipRateAlert(threshold=0.5, windows=3), "
                    f"not {type(alert).__name__}.")
    quiet = alert.fires_at(_rates("quiet day"), WINDOW_SECONDS)
    if quiet is not None:
        return hint(f"Your rule pages someone on the quiet day at {clock_time(quiet)}, when nothing is wrong: "
                    "a stray lost ack is normal. Read the quiet day's highest window in the plot and stay above it.")
    night = quiet_hour()
    if (paged := alert.fires_at(night, WINDOW_SECONDS)) is not None:
        return hint(f"Your rule pages at {clock_time(paged)} in the quiet hour of section 2, where a window handles "
                    f"{int(night['handled'].iloc[0])} deliveries and one stray lost ack is one skip. Which setting "
                    "decides whether such a thin window counts at all?")
    if (stray := _stray_skip_pages(alert)) is not None:
        start, handled = stray
        return hint(f"The quiet day's few lost acks happened to fall in busy windows. Had one fallen in the "
                    f"window from {clock_time(start)}, which would then handle {handled} deliveries with one "
                    f"skip ({1 / handled:.0%}), your rule would page. A stray skip must not page wherever it "
                    "falls: what is one skip's share of the thinnest window your rule counts?")
    deadline = NOON + WINDOW_SECONDS
    for name in ("slow from noon", "lost-ack storm from noon"):
        fired = alert.fires_at(_rates(name), WINDOW_SECONDS)
        if fired is None:
            return hint(f"Your rule never fires on the day '{name}'. Look at the skip rates after noon in the "
                        "plot, and at how many deliveries those windows handled (rates[...]): is your threshold above the rates, "
                        "or your floor above the counts?")
        if fired > deadline:
            if alert.windows > 1:
                return hint(f"On the day '{name}' your rule fires at {clock_time(fired)}. It waits for "
                            f"{alert.windows} high windows in a row; how many windows after noon have ended by "
                            f"{clock_time(deadline)}?")
            return hint(f"On the day '{name}' your rule fires at {clock_time(fired)}, after {clock_time(deadline)}. "
                        "Read that day's first window after noon in the plot, and in rates[...] how many deliveries "
                        "it handled: does your rule count it as high?")
    return right(f"Quiet on the quiet day wherever a stray lost ack falls, and at the quiet hour, and it pages at {clock_time(deadline)} on both bad "
                 "days, a window sooner than the lesson's rule. The price: a single noisy window is enough to page, "
                 "so its floor has to keep thin windows out, and a busier normal day would need a higher threshold. "
                 "Which of the two troubles it is, the delivery signals answer.")


@exercise
def check_batch_crash(step: Any) -> Feedback:
    """Lesson 11: the batch step before which a crash makes the redelivered batch all skips."""
    if (missing := blank(step, "the name of a step of the batched inbox")) is not None:
        return missing
    if not isinstance(step, str):
        return hint(f"Name the step as text, one of {list(STEPS)}.")
    # "crash before the commit", "the commit", "right after the commit": the words around a step name
    # say where the crash falls, and "after X" is the moment before the step that follows X.
    text = step.lower().replace("_", " ").replace("-", " ")
    words = [word for word in "".join(c if c.isalnum() or c.isspace() else " " for c in text).split()
             if word not in ("crash", "the", "right", "just", "immediately", "a", "step")]
    # "after the commit, before ack all" and "between commit and ack all" name one gap: its two sides must touch.
    if words[:1] in (["after"], ["between"]) and ("before" in words[1:] or (words[0] == "between" and "and" in words)):
        cut = words.index("before" if "before" in words[1:] else "and", 1)
        # "after the commit and before ack all": the "and" joins the two sides, it names no step.
        first = " ".join(words[1:cut][:-1] if words[cut - 1:cut] == ["and"] and cut > 2 else words[1:cut])
        second = " ".join(words[cut + 1:])
        if first not in STEPS or second not in STEPS:
            return hint(f"The batched inbox has no step {first if first not in STEPS else second!r}; "
                        f"its steps are {list(STEPS)}.")
        if STEPS.index(second) != STEPS.index(first) + 1:
            return hint(f"{first!r} and {second!r} do not follow one another in the batch: name one moment "
                        "between two steps in the order they run, or one step before which the crash falls.")
        words = ["before", second]
    after = words[:1] == ["after"]
    name = " ".join(words[1:] if words[:1] in (["after"], ["before"]) else words)
    if name not in STEPS:
        return hint(f"The batched inbox has no step {step!r}; its steps are {list(STEPS)}.")
    if after:
        if name == STEPS[-1]:
            return hint("After 'ack all' the batch is acknowledged: the broker redelivers nothing, so there is no "
                        "redelivered batch to watch. Name the step before which the crash falls.")
        name = STEPS[STEPS.index(name) + 1]
    # IDs of different lengths, out of order, two for one order: a batch like a real one.
    messages = [Message.charge(label, order, amount) for label, order, amount in
                (("m-7f3", 1042, 40), ("m-10b2c", 1042, 15), ("m-1", 1044, 40), ("m-a9", 1043, 25), ("m-3e", 1045, 5))]
    result = consume(DuckDBPayments(), messages, batch_size=5, faults=FaultPlan(crashes=[Crash(name)]))
    redelivered = result.trace[(result.trace["delivery"] == 2)]
    skipped = int((redelivered["event"] == "duplicate skipped").sum())
    if not (result.outcomes() == "charged once").all():
        return hint(f"Something is off: with a crash before {name!r} not every message was charged once.")
    if skipped == len(messages):
        return right(f"A crash before {name!r} comes after the commit: the IDs are saved, no ack went out, "
                     "so the broker redelivers the whole batch and every message in it is skipped.")
    return hint(f"A crash before {name!r} rolls the whole batch back: the redelivered batch finds none of its IDs "
                "and charges every message then, with no skips. Where must the crash fall for the IDs to be saved?")

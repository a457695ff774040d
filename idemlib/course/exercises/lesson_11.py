"""Checks for lesson 11, Operating it."""

from __future__ import annotations

import ast
import numbers
import random
from collections.abc import Callable, Iterable
from functools import cache
from typing import Any

import pandas as pd

from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.course.exercises.restart import OTHER_MACHINES, in_fresh_process
from idemlib.operating.day import DAY_SECONDS, Day, clock_time, run_day
from idemlib.operating.metrics import SkipRateAlert, quiet_hour, skip_rate

__all__ = ["EXERCISE_DAYS", "TROUBLE_FROM", "WINDOW_SECONDS", "check_alert_rule", "check_batch_order", "exercise_rates"]

WINDOW_SECONDS = 900
TROUBLE_FROM = 15 * 3600
"""When trouble starts on exercise 1's bad days: 15:00."""

EXERCISE_DAYS = {
    "quiet day": Day(messages=720, seed=23),
    "slow from 15:00": Day(messages=720, seed=23, slow_from=TROUBLE_FROM),
    "lost-ack storm from 15:00": Day(messages=720, seed=23, storm_from=TROUBLE_FROM, storm_until=TROUBLE_FROM + 3 * 3600),
}
"""Exercise 1's service: half the lesson's traffic (720 payments a day, so about 7 deliveries a window), other
arrival moments, trouble from 15:00."""

NIGHT_HANDLED = 3
"""Exercise 1's quiet night: 3 deliveries a window, and stray lost acks in any of its windows, two in a row included."""


@cache
def _exercise_runs() -> dict[str, pd.DataFrame]:
    return {name: skip_rate(run_day(day).trace, WINDOW_SECONDS, until=DAY_SECONDS)
            for name, day in EXERCISE_DAYS.items()}


def exercise_rates() -> dict[str, pd.DataFrame]:
    """Exercise 1's three days as :func:`skip_rate` tables them (fresh copies: change them freely)."""
    return {name: rates.copy() for name, rates in _exercise_runs().items()}


def _with_strays(rates: pd.DataFrame, starts: tuple[int, ...]) -> pd.DataFrame:
    """``rates`` with one more delivery, a skipped duplicate, in each window of ``starts``: stray lost acks."""
    day = rates.copy()
    for start in starts:
        day.loc[start, "handled"] += 1
        day.loc[start, "skipped"] += 1
    day["skip rate"] = (day["skipped"] / day["handled"].where(day["handled"] > 0)).fillna(0.0)
    return day


def _stray_pages(alert: SkipRateAlert, rates: pd.DataFrame) -> tuple[float, int] | None:
    """The first window of ``rates`` where a stray lost ack (and another in the next window) makes ``alert``
    page: its start and the deliveries it then handles; None if strays page nowhere."""
    starts = list(rates.index)
    for here, after in zip(starts, starts[1:] + [None]):
        if rates.loc[here, "handled"] == 0:
            continue
        strays = (here,) if after is None or alert.windows == 1 else (here, after)
        day = _with_strays(rates, strays)
        if alert.fires_at(day, WINDOW_SECONDS) is not None:
            return float(here), int(day.loc[here, "handled"])
    return None


def _quiet_night() -> pd.DataFrame:
    return quiet_hour(handled=NIGHT_HANDLED, skipped=(0,) * 8)


def _rule(answer: Any) -> SkipRateAlert | str:
    """The answer as a rule, or why it cannot be read as one."""
    if isinstance(answer, SkipRateAlert):
        return ("give the rule as plain numbers, a dict {'threshold': ..., 'windows': ..., 'min_handled': ...}, "
                "not a SkipRateAlert object (build one to try your numbers, then hand in the numbers)")
    if isinstance(answer, dict):
        if set(answer) != {"threshold", "windows", "min_handled"}:
            return ("a dict needs exactly the keys 'threshold', 'windows' and 'min_handled'; "
                    f"got {sorted(map(str, answer))}")
        values = (answer["threshold"], answer["windows"], answer["min_handled"])
    elif isinstance(answer, (tuple, list)) and len(answer) == 3:
        values = tuple(answer)
    else:
        return ("give the rule as a dict {'threshold': ..., 'windows': ..., 'min_handled': ...} "
                f"(or a tuple of the three in that order), not {answer!r}")
    threshold, windows, floor = values
    if isinstance(threshold, numbers.Real) and not isinstance(threshold, (bool, int, float)):
        return f"give the threshold as a plain number, a float such as 0.2, not a {type(threshold).__name__}"
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < float(threshold) <= 1:
        return f"the threshold is a share of deliveries between 0 and 1 (0.2 for 20 %), not {threshold!r}"
    for name, value in (("windows", windows), ("min_handled", floor)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            if not (hasattr(value, "is_integer") and value.is_integer() and value >= 1):
                return f"{name} is a whole number of at least 1, not {value!r}"
    return SkipRateAlert(threshold=float(threshold), windows=int(windows), min_handled=int(floor))


@exercise
def check_alert_rule(alert: Any) -> Feedback:
    """Lesson 11: a skip-rate rule for exercise 1's service (:data:`EXERCISE_DAYS`) as plain numbers.

    It must page within two windows of 15:00 (by 15:30) on both bad days, and never on the
    quiet day (wherever in it a stray lost ack falls, or two in a row), nor on a quiet night
    of 3 deliveries a window with stray lost acks anywhere in it.
    """
    if (missing := blank(alert, "a dict {'threshold': ..., 'windows': ..., 'min_handled': ...}")) is not None:
        return missing
    rule = _rule(alert)
    if isinstance(rule, str):
        return hint(rule[0].upper() + rule[1:] + ".")
    rates = _exercise_runs()
    quiet = rule.fires_at(rates["quiet day"], WINDOW_SECONDS)
    if quiet is not None:
        return hint(f"Your rule pages on the quiet day at {clock_time(quiet)}, when nothing is wrong: a stray lost "
                    "ack is normal. Look up the quiet day's highest windows in exercise_rates()['quiet day'] and "
                    "stay above them.")
    night = _quiet_night()
    if (stray := _stray_pages(rule, night)) is not None:
        return hint(f"On a quiet night of {NIGHT_HANDLED} deliveries a window, a stray lost ack at "
                    f"{clock_time(stray[0])}{' and another in the next window' if rule.windows > 1 else ''} pages "
                    "someone: one skip in so thin a window is a high rate. Which setting decides whether such a "
                    "window counts at all (section 2, 'The floor')?")
    if (stray := _stray_pages(rule, rates["quiet day"])) is not None:
        start, handled = stray
        return hint(f"The quiet day's few lost acks happened to fall in busy windows. Had one fallen in the window "
                    f"from {clock_time(start)}{' and another in the next' if rule.windows > 1 else ''}, that window "
                    f"would handle {handled} deliveries with one skip ({1 / handled:.0%}) and your rule would page. "
                    "What is one skip's share of the thinnest window your rule counts?")
    deadline = TROUBLE_FROM + 2 * WINDOW_SECONDS
    for name in ("slow from 15:00", "lost-ack storm from 15:00"):
        fired = rule.fires_at(rates[name], WINDOW_SECONDS)
        if fired is None:
            return hint(f"Your rule never fires on the day '{name}'. Look at exercise_rates()['{name}'] after "
                        "15:00: is your threshold above its rates, or your floor above how many deliveries its "
                        "windows handled? This service has half the lesson's traffic.")
        if fired > deadline:
            extra = (f" It waits for {rule.windows} high windows in a row: how many high windows does that day "
                     "have by 15:30?" if rule.windows > 1 else
                     " Which of its first two windows after 15:00 does your rule count as high, and why not?")
            return hint(f"On the day '{name}' your rule fires at {clock_time(fired)}, after {clock_time(deadline)}."
                        + extra)
    return right(f"Silent on the quiet day and the quiet night wherever stray lost acks fall, and it pages by "
                 f"{clock_time(deadline)} on both bad days. On thin traffic a rule has little room: its floor must "
                 "keep out windows where one skip is a high share, and yet count the windows trouble fills. "
                 "A leading signal (handling time against the lease) would have warned before any duplicate.")


BATCH_SIZE = 100
BATCH_PAIRS = 1_000
"""Exercise 2's test: 1,000 pairs of overlapping batches of 100 IDs, 10^5 IDs in all."""


@cache
def _overlapping_batches(seed: int) -> tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]:
    """Pairs of batches that two consumers hold at once: the second holds half the first's messages (their leases
    ran out and the broker handed them on) in another order, with new ones. IDs from several producers, of
    different lengths, some differing only in case, and a message delivered twice within one batch."""
    rng = random.Random(seed)
    pairs = []
    for pair in range(BATCH_PAIRS):
        ids = []
        for n in range(BATCH_SIZE + BATCH_SIZE // 2):
            shape = rng.randrange(4)
            ids.append(f"m-{rng.getrandbits(32):x}" if shape == 0 else
                       f"{rng.choice(['orders', 'Billing', 'refunds'])}-{pair}-{n}" if shape == 1 else
                       f"{rng.getrandbits(24):06X}" if shape == 2 else f"{rng.getrandbits(24):06x}")
        # Two IDs of one pair that differ only in case: distinct messages, as a case-sensitive broker keeps them.
        ids[1] = ids[0].swapcase() if ids[0].swapcase() != ids[0] else ids[0] + "a"
        first = ids[:BATCH_SIZE]
        second = rng.sample(first, BATCH_SIZE // 2) + ids[BATCH_SIZE:]
        rng.shuffle(second)
        first.append(first[rng.randrange(BATCH_SIZE)])  # a redelivered copy within the same batch
        pairs.append((tuple(first), tuple(second)))
    return tuple(pairs)


def _order(insert_order: Callable[..., Any], ids: tuple[str, ...]) -> list[str] | str:
    """What ``insert_order`` makes of ``ids``, or what is wrong with it."""
    try:
        made = insert_order(list(ids))
        if isinstance(made, (str, bytes)) or not isinstance(made, Iterable):
            return f"your function must return the batch's IDs as a list, not {made!r:.60}"
        given = list(made)  # an iterator or generator is read out, as the INSERT's caller would loop over it
    except Exception as error:  # the learner's code may raise anything: the check says what, and goes on
        return f"your function raised {type(error).__name__}: {error} (on a batch such as {ids[:3]})"
    if not all(isinstance(item, str) for item in given):
        return "your function must return the batch's IDs themselves, as strings"
    if set(given) != set(ids) or len(given) > len(ids):
        lost = sorted(set(ids) - set(given))[:2]
        return (f"your function returned other IDs than the batch's (missing {lost})" if lost else
                "your function returned IDs the batch does not hold, or more than it holds")
    return given


def _other_process_order(insert_order: Callable[..., Any], seed: int) -> str | None:
    """Why another consumer process (another hash seed, other object addresses) would order a batch otherwise, or
    None when it orders each batch of a sample as this process does."""
    sample = [second for _, second in _overlapping_batches(seed)[::100]]
    try:
        there = in_fresh_process(insert_order, [(list(batch),) for batch in sample], OTHER_MACHINES[0], 1)
    except Exception as error:  # noqa: BLE001 - any failure of the rerun is the learner's to fix, as a hint
        return (f"The check reruns your function in a fresh Python process, as another consumer is, and that failed "
                f"({error}). Import what it uses at the top of its cell.")
    for batch, text in zip(sample, there):
        try:
            theirs = list(ast.literal_eval(text))
        except (ValueError, SyntaxError, TypeError):  # an iterator or an object: its text holds no order to compare
            continue
        mine = _order(insert_order, batch)
        if isinstance(mine, list) and list(dict.fromkeys(mine)) != list(dict.fromkeys(theirs)):
            return ("Another consumer is another process, and there your function put the same batch in another "
                    "order: Python's hash() of a string and id() change from process to process. Two consumers "
                    "would still insert shared IDs in opposite orders and deadlock. What order do two processes "
                    "agree on without talking to each other (section 4, the one order all transactions follow)?")
    return None


@exercise
def check_batch_order(insert_order: Any, *, seed: int = 11) -> Feedback:
    """Lesson 11: a function from a batch's message IDs to the order its one multi-row ``INSERT … ON CONFLICT DO
    NOTHING`` writes them in, such that two consumers inserting overlapping batches at once never deadlock.

    Run on :data:`BATCH_PAIRS` pairs of overlapping batches (``seed`` picks them): every two batches
    must write the IDs they share in the same relative order, and keep every ID of the batch.
    """
    if (missing := blank(insert_order, "a function from a list of message IDs to the list in insert order")) is not None:
        return missing
    if not callable(insert_order):
        return hint(f"Give a function that takes a list of IDs and returns them in the order to insert them, "
                    f"not {type(insert_order).__name__}.")
    for first, second in _overlapping_batches(seed):
        a, b = _order(insert_order, first), _order(insert_order, second)
        for result in (a, b):
            if isinstance(result, str):
                return hint(result[0].upper() + result[1:] + ".")
        assert isinstance(a, list) and isinstance(b, list)
        shared = set(a) & set(b)
        a_shared = [item for item in dict.fromkeys(a) if item in shared]
        b_shared = [item for item in dict.fromkeys(b) if item in shared]
        if a_shared != b_shared:
            rank = {item: n for n, item in enumerate(b_shared)}
            x, y = next((x, y) for x, y in zip(a_shared, a_shared[1:]) if rank[x] > rank[y])
            cased = (" The two differ only in case: two messages, which your order ranks as equals and so "
                     "leaves in arrival order." if x.casefold() == y.casefold() else "")
            return hint(f"Two consumers hold overlapping batches: one inserts {x!r} before {y!r}, the other "
                        f"{y!r} before {x!r}.{cased} Each then waits for the row the other has just inserted and "
                        "not yet committed: the deadlock section 4 shows. Which order could every consumer follow without "
                        "talking to the others, whatever order the broker delivered its batch in (section 4, the "
                        "one order all transactions follow)?")
    if (elsewhere := _other_process_order(insert_order, seed)) is not None:
        return hint(elsewhere)
    return right(f"{BATCH_PAIRS:,} pairs of overlapping batches ({BATCH_PAIRS * BATCH_SIZE:,} IDs) all write their "
                 "shared IDs in one order: a consumer waits for another's row at most, and never both for each "
                 "other's. Case is kept: two IDs that differ only in case are two messages.")

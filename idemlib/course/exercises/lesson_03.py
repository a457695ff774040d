"""Checks for lesson 03, Redelivery and races."""

from __future__ import annotations

from functools import cache
from typing import Any

from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, not_judged, one_each, one_of, right
from idemlib.races import postgres_at, race
from idemlib.stores import DuckDBPayments, SQLitePayments, postgres_unavailable, require_servers
from idemlib.stores.snapshots import SIGNALS, late_duplicate

__all__ = ["check_race_losers", "check_late_insert"]

LOSERS = ("A at begin", "A at record id", "A at commit", "B at begin", "B at record id", "B at commit", "nobody")
"""Who fails, and at which step of the inbox (begin, record id, charge, commit, ack), or nobody."""

SWAPPED_RACES = ("DuckDB, B commits", "DuckDB, B rolls back", "SQLite with busy timeout 0, B commits")
"""Exercise 1's races: section 3's race with the roles swapped, B the slow one that holds its transaction open."""


def _swap_roles(failed: str) -> str:
    return failed.translate(str.maketrans("AB", "BA"))


@cache
def swapped_race_losers() -> dict[str, str]:
    """Who fails in each of :data:`SWAPPED_RACES`, measured on the real engines.

    The lesson's race holds A and runs B; the two consumers run the same code, so the
    roles are swapped by swapping the names. A goes on only once the engine shows B
    finished or failed, so the answer is the same however busy the machine is.
    """
    runs = {SWAPPED_RACES[0]: race(DuckDBPayments(), hold_seconds=0.05),
            SWAPPED_RACES[1]: race(DuckDBPayments(), first_commits=False, hold_seconds=0.05),
            SWAPPED_RACES[2]: race(SQLitePayments(busy_timeout=0), hold_seconds=0.05)}
    return {case: _swap_roles(outcome.failed) for case, outcome in runs.items()}


_LOSER_HINTS = {
    ("DuckDB", "B at commit", "A at commit"): "In section 3 A was the slow one and failed. Here B holds its transaction "
                                              "open while A runs the whole handler: who reaches COMMIT second now?",
    ("DuckDB", "nobody", "B at commit"): "When the slow consumer rolls back, its m-7f3 row is gone. Is there still a "
                                         "second commit of the same key for DuckDB to refuse?",
    ("SQLite", "A at begin", "nobody"): "With a busy timeout of 0 SQLite does not wait for the write lock (section 3c). "
                                        "Who asks for the lock while the other one holds it?",
}


@exercise
def check_race_losers(answer: Any) -> Feedback:
    """Lesson 03, exercise 1: who fails, and where, in each of :data:`SWAPPED_RACES` (each one of :data:`LOSERS`)."""
    if (missing := blank(answer, f"a dict mapping each of {list(SWAPPED_RACES)} to one of {list(LOSERS)}")) is not None:
        return missing
    given = one_each(answer, SWAPPED_RACES, LOSERS, "the loser")
    if isinstance(given, Feedback):
        return given
    truth = swapped_race_losers()
    wrong = [case for case in SWAPPED_RACES if given[case] != truth[case]]
    if not wrong:
        return right("DuckDB lets both insert and fails the second COMMIT of the same key, whoever that is, and "
                     "nobody if the holder rolls back; SQLite with no patience refuses the second BEGIN IMMEDIATE at once.")
    case = wrong[0]
    engine = case.split(",")[0].split()[0]
    said = _LOSER_HINTS.get((engine, truth[case], given[case]))
    if said is None and given[case].endswith(("record id", "charge")) and engine == "DuckDB":
        said = ("DuckDB is optimistic: neither insert waits or fails, since neither can see the other's uncommitted "
                "row. When does it find the clash?")
    if said is None and engine == "SQLite":
        said = ("SQLite has one write lock, taken at BEGIN IMMEDIATE by whoever begins first. With a busy timeout of "
                "0, what happens to the one that asks second (section 3c)?")
    return hint(f"{len(wrong)} of {len(SWAPPED_RACES)} are not right yet, {case!r} among them. "
                + (said or "Replay the race step by step: who holds the key, and who asks for it second?"))


ACTIONS = ("charge", "skip and ack", "give it back")
"""What the inbox handler does next: charge, skip the charge and ack, or roll back and give the message back."""

LATE_CASES = {"READ COMMITTED, B read first": ("READ COMMITTED", True),
              "REPEATABLE READ, B read first": ("REPEATABLE READ", True),
              "REPEATABLE READ, B only began": ("REPEATABLE READ", False)}
"""Exercise 2's cases: B's isolation level, and whether B ran a statement before A committed m-7f3."""

_NEXT = {"one row": "charge", "zero rows": "skip and ack"}


@cache
def late_insert_signals() -> dict[str, tuple[str, str]]:
    """B's signal in each of :data:`LATE_CASES`, measured on the PostgreSQL server, and the handler's next move."""
    truth = {}
    for case, (level, reads_first) in LATE_CASES.items():
        signal = late_duplicate(postgres_at(level), b_reads_first=reads_first).b_insert
        truth[case] = (signal, _NEXT.get(signal, "give it back"))
    return truth


@exercise
def check_late_insert(answer: Any) -> Feedback:
    """Lesson 03, exercise 2: B's transaction was open when A committed m-7f3; what does B's insert end in?

    The answer maps each of :data:`LATE_CASES` to a pair (signal, action), a signal one of
    :data:`~idemlib.stores.snapshots.SIGNALS` and an action one of :data:`ACTIONS`; the
    check runs each case on the PostgreSQL server.
    """
    shape = f"a dict mapping each of {list(LATE_CASES)} to a pair (signal, action)"
    if (missing := blank(answer, shape)) is not None:
        return missing
    if not isinstance(answer, dict) or set(answer) != set(LATE_CASES):
        return hint(f"Answer with {shape}: the signal one of {list(SIGNALS)}, the action one of {list(ACTIONS)}.")
    given: dict[str, tuple[str, str]] = {}
    for case, pair in answer.items():
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            return hint(f"For {case!r} give a pair (signal, action), such as ('one row', 'charge').")
        signal, action = one_of(pair[0], SIGNALS, "the signal"), one_of(pair[1], ACTIONS, "the action")
        for named in (signal, action):
            if not isinstance(named, str):
                return named
        given[case] = (str(signal), str(action))
    if (reason := postgres_unavailable()) is not None:
        if require_servers("postgres"):
            raise RuntimeError(reason)
        return not_judged(f"this check runs each case on a PostgreSQL server, and none answers here. {reason}")
    truth = late_insert_signals()
    wrong = [case for case in LATE_CASES if given[case] != truth[case]]
    if not wrong:
        return right("a REPEATABLE READ transaction reads one snapshot, taken at its first statement, not at its BEGIN: "
                     "if that came before A's commit, the insert meets a row its snapshot cannot hold and PostgreSQL "
                     "refuses it; the message goes back and its redelivery, in a fresh snapshot, skips it. At READ "
                     "COMMITTED each statement takes a new snapshot, and the insert finds A's row.")
    case = wrong[0]
    signal, action = given[case]
    true_signal, true_action = truth[case]
    level = LATE_CASES[case][0]
    if signal == true_signal:
        if true_signal == "zero rows":
            return hint(f"The signal for {case!r} is right, what comes next is not. What do zero rows written tell "
                        "the handler about the work (lesson 02, section 2, step 3)?")
        return hint(f"The signal for {case!r} is right, what comes next is not. After that error, can B's "
                    "transaction commit anything, and does B know yet whether the work was done? Section 3 ends with "
                    "the handler's move for each engine's signal.")
    if signal == "duplicate-key error":
        return hint("B's insert says ON CONFLICT DO NOTHING: on PostgreSQL, when does that still raise an error, and "
                    "which error is it? Section 3b compares the levels.")
    if level == "REPEATABLE READ" and signal == "zero rows":
        return hint(f"In {case!r}: when did B's snapshot start, before or after A's commit? And what does section "
                    "3b's documentation say an ON CONFLICT insert at REPEATABLE READ does about a row its snapshot "
                    "does not hold?")
    if true_signal == "zero rows":
        return hint(f"In {case!r}: when does a {level} transaction take the snapshot its insert reads, at its BEGIN, "
                    "at its first statement, or at each statement (section 3b)? Count B's statements before A's "
                    "commit: did that moment come before it or after it?")
    return hint(f"In {case!r}: A's row is committed before B inserts. Can B write a second m-7f3 under the unique key?")

"""Checks for lesson 03, Redelivery and races."""

from __future__ import annotations

from functools import cache
from typing import Any

from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, not_judged, one_each, one_of, right
from idemlib.races import postgres_at, race
from idemlib.stores import DuckDBPayments, PostgresPayments, SQLitePayments, postgres_unavailable, require_servers
from idemlib.stores.snapshots import SIGNALS, late_duplicate

__all__ = ["check_race_losers", "check_late_insert"]

LOSERS = ("A at begin", "A at record id", "A at commit", "B at begin", "B at record id", "B at commit", "nobody")
"""Who fails, and at which step of the inbox (begin, record id, charge, commit, ack), or nobody."""

RACES = ("DuckDB, B the slow one, B commits", "SQLite with busy timeout 0, A rolls back",
         "PostgreSQL with lock_timeout 100 ms, A rolls back")
"""Exercise 1's races, each one change from a race the lesson prints: the roles swapped on DuckDB, the holder's
rollback in section 3c's race on SQLite, and the holder's rollback in the lock-timeout race on PostgreSQL."""

PG_HOLD = 0.5
"""Seconds A holds on in the PostgreSQL race once B waits: five times the lock timeout, so B's limit runs out first
however busy the machine is."""


def _swap_roles(failed: str) -> str:
    return failed.translate(str.maketrans("AB", "BA"))


@cache
def race_losers() -> dict[str, str]:
    """Who fails, and where, in each of :data:`RACES`, measured on the real engines.

    The lesson's race holds A and runs B; the two consumers run the same code, so the
    DuckDB race with the roles swapped is run as it stands and the names are swapped. A goes on only
    once the engine shows B finished, failed or waiting, so the answer is the same however busy the
    machine is.
    """
    return {RACES[0]: _swap_roles(race(DuckDBPayments(), hold_seconds=0.05).failed),
            RACES[1]: race(SQLitePayments(busy_timeout=0), first_commits=False, hold_seconds=0.05).failed,
            RACES[2]: race(PostgresPayments(lock_timeout="100ms"), first_commits=False, hold_seconds=PG_HOLD).failed}


_LOSER_HINTS = {
    (RACES[0], "A at commit"): "In section 3 A was the slow one and failed at commit. Here B holds its transaction "
                               "open while A runs the whole handler: who reaches COMMIT second now?",
    (RACES[0], "nobody"): "Both transactions hold a row for m-7f3 and both go on to commit. Does DuckDB let the "
                          "second COMMIT of the same key stand?",
    (RACES[1], "nobody"): "A rolls back in the end, but when does B ask for the write lock, and who holds it at that "
                          "moment? With a busy timeout of 0, does B wait for A to decide (section 3c)?",
    (RACES[1], "B at record id"): "With SQLite's BEGIN IMMEDIATE the write lock is asked for before any insert. Where "
                                  "does B meet A's lock (section 3)?",
    (RACES[2], "nobody"): "A rolls back in the end, but B's insert waits for A's transaction at most lock_timeout. "
                          "Which comes first: the end of that limit, or A's rollback ('What a wait costs')?",
    (RACES[2], "B at begin"): "PostgreSQL lets B begin while A holds its transaction. Where does B wait (section 3's "
                              "table), and where does its limit run out?",
    (RACES[2], "B at commit"): "PostgreSQL lets B begin while A holds its transaction. Where does B wait (section 3's "
                               "table), and where does its limit run out?",
}


@exercise
def check_race_losers(answer: Any) -> Feedback:
    """Lesson 03, exercise 1: who fails, and where, in each of :data:`RACES` (each one of :data:`LOSERS`)."""
    if (missing := blank(answer, f"a dict mapping each of {list(RACES)} to one of {list(LOSERS)}")) is not None:
        return missing
    given = one_each(answer, RACES, LOSERS, "the loser")
    if isinstance(given, Feedback):
        return given
    if (reason := postgres_unavailable()) is not None:
        if require_servers("postgres"):
            raise RuntimeError(reason)
        return not_judged(f"one of these races runs on a PostgreSQL server, and none answers here. {reason}")
    truth = race_losers()
    wrong = [case for case in RACES if given[case] != truth[case]]
    if not wrong:
        return right("DuckDB fails whoever commits second, whichever consumer was slow; SQLite with no patience "
                     "refuses the second BEGIN IMMEDIATE at once, before anyone knows how the holder will end; and "
                     "PostgreSQL's lock_timeout ends B's wait at its insert whatever A later decides, so B's delivery "
                     "comes back and, A's row gone, charges.")
    case = wrong[0]
    said = _LOSER_HINTS.get((case, given[case]))
    if said is None and given[case].startswith(("A at", "B at")) and given[case][0] != truth[case][:1]:
        said = "Which consumer is the one that asks second, for the key or the lock, while the other holds it?"
    return hint(f"{len(wrong)} of {len(RACES)} are not right yet, {case!r} among them. "
                + (said or "Replay the race step by step: who holds the key or the lock, who asks for it second, "
                            "and at which step does the engine answer?"))


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
    if signal == "duplicate-key error" and true_signal != "zero rows":
        return hint("B's insert says ON CONFLICT DO NOTHING: on PostgreSQL, when does that still raise an error, and "
                    "which error is it? Section 3b compares the levels.")
    if signal == "duplicate-key error":
        return hint(f"In {case!r}: B's insert says ON CONFLICT DO NOTHING. When the row it conflicts with is one "
                    "B's snapshot can see, what does DO NOTHING do, and what does the insert report? Section 3b "
                    "compares the levels.")
    if level == "REPEATABLE READ" and signal == "zero rows":
        return hint(f"In {case!r}: when did B's snapshot start, before or after A's commit? And what does section "
                    "3b's documentation say an ON CONFLICT insert at REPEATABLE READ does about a row its snapshot "
                    "does not hold?")
    if true_signal == "zero rows":
        return hint(f"In {case!r}: when does a {level} transaction take the snapshot its insert reads, at its BEGIN, "
                    "at its first statement, or at each statement (section 3b)? Did the snapshot B's insert reads "
                    "start before A's commit or after it?")
    return hint(f"In {case!r}: A's row is committed before B inserts. Can B write a second m-7f3 under the unique key?")

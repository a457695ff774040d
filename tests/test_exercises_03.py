"""Lesson 03's exercises: who loses the races with the roles swapped, and what an insert meets after a snapshot."""

from __future__ import annotations

import pytest
from exercise_bank import Bank, Wrong, bank_tests

LOSERS = {"DuckDB, B the slow one, B commits": "B at commit", "SQLite with busy timeout 0, A rolls back": "B at begin",
          "PostgreSQL with lock_timeout 100 ms, A rolls back": "B at record id"}
DUCK, SQLITE, PG = LOSERS
LATE = {"READ COMMITTED, B read first": ("zero rows", "skip and ack"),
        "REPEATABLE READ, B read first": ("serialization failure", "give it back"),
        "REPEATABLE READ, B only began": ("zero rows", "skip and ack")}
RC, RR_READ, RR_BEGAN = LATE

BANKS = {
    "check_race_losers": Bank(
        right=[(LOSERS,), ({case: f" {loser} " for case, loser in reversed(LOSERS.items())},),
               ({case: loser.lower().replace(" at ", "  at ") for case, loser in LOSERS.items()},)],  # "b  at commit"
        wrong=[
            # section 3's DuckDB row read off without swapping the roles
            Wrong(({**LOSERS, DUCK: "A at commit"},), "who reaches COMMIT second"),
            Wrong(({**LOSERS, DUCK: "nobody"},), "second COMMIT of the same key"),
            # "the second insert of the key fails": DuckDB lets both inserts through
            Wrong(({**LOSERS, DUCK: "A at record id"},), "asks second"),
            # the printed rollback rows carried over: "if the holder rolls back, nobody fails"
            Wrong(({**LOSERS, SQLITE: "nobody"},), "busy timeout of 0"),
            Wrong(({**LOSERS, PG: "nobody"},), "at most lock_timeout"),
            Wrong(({**LOSERS, SQLITE: "nobody", PG: "nobody"},), "busy timeout of 0"),
            # SQLite's lock is asked for at BEGIN IMMEDIATE, not at the insert
            Wrong(({**LOSERS, SQLITE: "B at record id"},), "BEGIN IMMEDIATE"),
            Wrong(({**LOSERS, SQLITE: "A at begin"},), "asks second"),
            # PostgreSQL's wait, and its limit, are at the insert
            Wrong(({**LOSERS, PG: "B at commit"},), "Where does B wait"),
            Wrong(({**LOSERS, PG: "B at begin"},), "Where does B wait"),
            Wrong(({**LOSERS, PG: "A at record id"},), "asks second"),
            # the English the old check tried to read is not an answer now
            Wrong(({**LOSERS, DUCK: "B at commit with a duplicate key error"},), "one of the names"),
            # the old exercise's races are not these races
            Wrong(({"DuckDB, B commits": "B at commit", "DuckDB, B rolls back": "nobody",
                    "SQLite with busy timeout 0, B commits": "A at begin"},), "keys"),
            Wrong(({DUCK: "B at commit"},), "keys"),
            Wrong(("B at commit",), "dict"),
        ],
    ),
    "check_late_insert": Bank(
        right=[(LATE,), ({case: list(pair) for case, pair in LATE.items()},),
               ({case: (f"{signal} ", f" {action}") for case, (signal, action) in LATE.items()},),
               ({case: (signal.upper(), action.title()) for case, (signal, action) in LATE.items()},)],
        wrong=[
            # READ COMMITTED's answer carried over to a level whose snapshot does not move
            Wrong(({**LATE, RR_READ: ("zero rows", "skip and ack")},), "when did B's snapshot start"),
            # "REPEATABLE READ always fails a late duplicate": the snapshot starts at the first statement, not BEGIN
            Wrong(({**LATE, RR_BEGAN: ("serialization failure", "give it back")},), "when does a"),
            Wrong(({**LATE, RC: ("serialization failure", "give it back")},), "when does a"),
            # the signal right, the error taken for proof the message was handled
            Wrong(({**LATE, RR_READ: ("serialization failure", "skip and ack")},), "what comes next is not"),
            Wrong(({**LATE, RR_READ: ("serialization failure", "charge")},), "what comes next is not"),
            Wrong(({**LATE, RC: ("zero rows", "charge")},), "what comes next is not"),
            # DuckDB's signal (lesson 02) on PostgreSQL
            Wrong(({**LATE, RR_READ: ("duplicate-key error", "give it back")},), "ON CONFLICT DO NOTHING"),
            # where the truth is zero rows, the hint must not presume that an error is raised
            Wrong(({**LATE, RC: ("duplicate-key error", "give it back")},), "what does do nothing do"),
            Wrong(({**LATE, RR_BEGAN: ("duplicate-key error", "skip and ack")},), "what does do nothing do"),
            Wrong(({**LATE, RC: ("one row", "charge")},), "at each statement"),
            Wrong(({**LATE, RR_BEGAN: ("one row", "charge")},), "start before a's commit or after"),
            # zero rows right, the move after it not: lesson 02's step 3
            Wrong(({**LATE, RR_BEGAN: ("zero rows", "give it back")},), "step 3"),
            # English instead of a named option
            Wrong(({**LATE, RR_READ: ("serialization failure", "roll back and skip the message")},), "one of the names"),
            Wrong(({**LATE, RR_READ: ("zero rows, not a serialization failure", "give it back")},), "one of the names"),
            Wrong(({RC: LATE[RC]},), "dict"),
            Wrong(({**LATE, RC: "zero rows"},), "pair"),
        ],
    ),
}

test_bank = bank_tests(BANKS)


def test_without_a_postgresql_server_the_late_insert_check_is_not_judged(monkeypatch):
    from idemlib.course.exercises import check_late_insert, lesson_03

    monkeypatch.setattr(lesson_03, "postgres_unavailable", lambda: "PostgreSQL is not reachable here.")
    monkeypatch.setattr(lesson_03, "require_servers", lambda server=None: False)
    feedback = check_late_insert(LATE)
    assert feedback.verdict == "not judged" and "not reachable" in feedback.message
    # an answer that is not even one of the options is still told so, server or not
    assert check_late_insert({**LATE, RC: ("none", "skip and ack")}).verdict == "wrong"
    monkeypatch.setattr(lesson_03, "require_servers", lambda server=None: True)  # as in CI: a missing server is an error
    with pytest.raises(RuntimeError, match="not reachable"):
        check_late_insert(LATE)


def test_a_late_insert_hint_asks_when_the_snapshot_is_taken_and_never_says_it():
    from idemlib.course.exercises import check_late_insert

    for case in (RR_BEGAN, RC):
        message = check_late_insert({**LATE, case: ("serialization failure", "give it back")}).message
        if message.startswith("Not judged"):
            pytest.skip("no PostgreSQL server here")
        # the question points at section 3b; it does not state when B's snapshot was taken
        assert "?" in message and "3b" in message
        assert "after A committed" not in message and "taken after" not in message


def test_without_a_postgresql_server_the_race_check_is_not_judged(monkeypatch):
    from idemlib.course.exercises import check_race_losers, lesson_03

    monkeypatch.setattr(lesson_03, "postgres_unavailable", lambda: "PostgreSQL is not reachable here.")
    monkeypatch.setattr(lesson_03, "require_servers", lambda server=None: False)
    assert check_race_losers(LOSERS).verdict == "not judged"
    assert check_race_losers({**LOSERS, DUCK: "nobody at all"}).verdict == "wrong"  # not one of the names

"""Lesson 03's exercises: who loses the races with the roles swapped, and what an insert meets after a snapshot."""

from __future__ import annotations

import pytest
from exercise_bank import Bank, Wrong, bank_tests

LOSERS = {"DuckDB, B commits": "B at commit", "DuckDB, B rolls back": "nobody",
          "SQLite with busy timeout 0, B commits": "A at begin"}
LATE = {"READ COMMITTED, B read first": ("zero rows", "skip and ack"),
        "REPEATABLE READ, B read first": ("serialization failure", "give it back"),
        "REPEATABLE READ, B only began": ("zero rows", "skip and ack")}
RC, RR_READ, RR_BEGAN = LATE

BANKS = {
    "check_race_losers": Bank(
        right=[(LOSERS,), ({case: f" {loser} " for case, loser in reversed(LOSERS.items())},),
               ({case: loser.lower().replace(" at ", "  at ") for case, loser in LOSERS.items()},)],  # "b  at commit"
        wrong=[
            # section 3's table read off without swapping the roles
            Wrong(({**LOSERS, "DuckDB, B commits": "A at commit"},), "who reaches COMMIT second"),
            Wrong(({**LOSERS, "SQLite with busy timeout 0, B commits": "B at begin"},), "begins first"),
            # "a rollback is a failure": the holder's rollback leaves no second commit to refuse
            Wrong(({**LOSERS, "DuckDB, B rolls back": "B at commit"},), "Is there still"),
            Wrong(({**LOSERS, "DuckDB, B rolls back": "A at commit"},), "not right yet"),
            # "the second insert of the key fails": DuckDB lets both inserts through
            Wrong(({**LOSERS, "DuckDB, B commits": "A at record id"},), "optimistic"),
            # "SQLite waits": not with a busy timeout of 0
            Wrong(({**LOSERS, "SQLite with busy timeout 0, B commits": "nobody"},), "busy timeout of 0"),
            Wrong(({**LOSERS, "SQLite with busy timeout 0, B commits": "A at record id"},), "BEGIN IMMEDIATE"),
            # the English the old check tried to read is not an answer now
            Wrong(({**LOSERS, "DuckDB, B commits": "B at commit with a duplicate key error"},), "one of the names"),
            Wrong(({"DuckDB, B commits": "B at commit"},), "keys"),
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
            Wrong(({**LATE, RC: ("one row", "charge")},), "at each statement"),
            Wrong(({**LATE, RR_BEGAN: ("one row", "charge")},), "count b's statements"),
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

"""Lesson 03's exercises: who loses a DuckDB race with the roles swapped, and B's signal at REPEATABLE READ."""

from __future__ import annotations

import pytest
from exercise_bank import Bank, Wrong, bank_tests

RIGHT = {"A commits": ("serialization failure", "give it back"), "A rolls back": ("one row", "charge")}

BANKS = {
    "check_race_loser": Bank(
        right=[("B at commit",), ("consumer B at COMMIT",), ("b, at commit",), ("B fails at its commit",),
               ("B's commit",),
               # the error named beside the step, as the race's table prints it
               ("B at commit (TransactionException)",), ("B: its COMMIT fails on the duplicate key",),
               ("consumer B, at commit time",), ("B, second to commit",)],
        wrong=[
            Wrong(("A at commit",), "section 3"),  # the unswapped race, read off the table
            Wrong(("nobody",), "one of them must fail"),
            Wrong(("B at record id",), "optimistic"),
            Wrong(("A at record id",), "optimistic"),
            Wrong(("A at begin",), "optimistic"),
            Wrong(("B at insert",), "optimistic"),  # the insert is the step called record id
            Wrong(("B at ack",), "acks only after its commit"),
            Wrong(("B",), "which step"),  # who, but not where
            Wrong(("neither",), "one of them must fail"),
            Wrong(("A at commit and B at commit",), "in the form"),
            Wrong((1,), "string"),
            # the error words alone do not move the failure to another step or consumer
            Wrong(("A at commit (TransactionException)",), "section 3"),
            Wrong(("B at record id: duplicate key",), "optimistic"),
            Wrong(("B, second",), "which step"),
        ],
    ),
    "check_repeatable_read": Bank(
        right=[
            (RIGHT,),
            ({"A rolls back": ["writes one row", "charges"],
              "A commits": ["SerializationFailure (40001)", "roll back and retry later"]},),
            ({"A commits": ("could not serialize access", "nack: give the message back"),
              "A rolls back": (1, "charge")},),
            # a rollback without an ack is giving the message back, however it is spelled
            ({**RIGHT, "A commits": ("serialization failure", "ROLLBACK, no ack")},),
            ({**RIGHT, "A commits": ("40001", "abort the transaction")},),
            # the cases named in another case or spacing
            ({"a commits": RIGHT["A commits"], "A  rolls back ": RIGHT["A rolls back"]},),
        ],
        wrong=[
            # READ COMMITTED's answer, carried over to a level where the snapshot does not move
            Wrong(({**RIGHT, "A commits": ("zero rows", "skip and ack")},), "READ COMMITTED"),
            # the signal right, but the error taken for proof that the message was handled
            Wrong(({**RIGHT, "A commits": ("serialization failure", "skip and ack")},), "lost race"),
            Wrong(({**RIGHT, "A commits": ("serialization failure", "charge")},), "lost race"),
            # "back" alone is not giving the message back: a charge-back or a refund moves money, not the message
            Wrong(({**RIGHT, "A commits": ("serialization failure", "charge back")},), "lost race"),
            Wrong(({**RIGHT, "A commits": ("serialization failure", "refund the customer")},), "lost race"),
            # DuckDB's signal: PostgreSQL makes B wait instead
            Wrong(({**RIGHT, "A commits": ("duplicate-key error", "give it back")},), "ON CONFLICT DO NOTHING"),
            Wrong(({**RIGHT, "A commits": ("one row", "charge")},), "two m-7f3s"),
            # "a stricter level always fails the loser": but a rolled-back A leaves nothing to conflict with
            Wrong(({**RIGHT, "A rolls back": ("serialization failure", "give it back")},), "anything for B's insert"),
            Wrong(({**RIGHT, "A rolls back": ("zero rows", "skip and ack")},), "anything for B's insert"),
            Wrong(({**RIGHT, "A rolls back": ("one row", "skip and ack")},), "which step"),
            Wrong(({**RIGHT, "A rolls back": ("one row", "rollback")},), "which step"),
            Wrong(({"A commits": RIGHT["A commits"]},), "dict"),
            # two spellings of one case leave the other unanswered
            Wrong(({"A commits": RIGHT["A commits"], "a commits": RIGHT["A rolls back"]},), "dict"),
            Wrong(({"A commits": RIGHT["A commits"], "B rolls back": RIGHT["A rolls back"]},), "dict"),
            Wrong(({**RIGHT, "A commits": "serialization failure"},), "dict"),
            Wrong(({**RIGHT, "A commits": ("it depends", "give it back")},), "cannot read"),
        ],
    ),
}

test_bank = bank_tests(BANKS)


def test_without_a_postgresql_server_the_repeatable_read_check_says_so_instead_of_judging(monkeypatch):
    from idemlib.course.exercises import check_repeatable_read, lesson_03

    monkeypatch.setattr(lesson_03, "postgres_unavailable", lambda: "PostgreSQL is not reachable here.")
    monkeypatch.setattr(lesson_03, "require_servers", lambda: False)
    feedback = check_repeatable_read(RIGHT)
    assert not feedback and "cannot judge" in feedback.message and "not reachable" in feedback.message
    monkeypatch.setattr(lesson_03, "require_servers", lambda: True)  # as in CI: a missing server is an error
    with pytest.raises(RuntimeError, match="not reachable"):
        check_repeatable_read(RIGHT)

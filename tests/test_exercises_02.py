"""Lesson 02's exercises: the inbox's insert, and the crash that makes the naive consumer charge twice."""

from __future__ import annotations

from exercise_bank import Bank, Wrong, bank_tests

ON_CONFLICT = "INSERT INTO processed_messages (message_id) VALUES (?) ON CONFLICT DO NOTHING"
NOT_EXISTS = ("INSERT INTO processed_messages (message_id) "
              "SELECT ? WHERE NOT EXISTS (SELECT 1 FROM processed_messages WHERE message_id = ?)")

NAIVE = {"no fault": "charged once", "crash before begin": "charged once", "crash before charge": "charged once",
         "crash before commit": "charged once", "crash before ack": "charged twice", "ack lost": "charged twice"}
"""The naive consumer's own column (begin → charge → commit → ack): lesson 01's answer, not this exercise's."""
EARLY = {"no fault": "charged once", "crash before begin": "charged once", "crash before charge": "charged once",
         "crash before ack": "charged once", "crash before commit": "charge lost", "ack lost": "charged twice"}
"""The naive consumer with its ack moved between the charge and the commit (begin → charge → ack → commit)."""



def _comparing(condition: str) -> str:
    """The NOT EXISTS insert with another condition for "the ID is already there"."""
    return ("INSERT INTO processed_messages (message_id) "
            f"SELECT ? WHERE NOT EXISTS (SELECT 1 FROM processed_messages WHERE {condition})")


BANKS = {
    "check_inbox_insert": Bank(
        right=[
            (NOT_EXISTS,),
            (NOT_EXISTS + " RETURNING message_id",),
            ("insert into processed_messages (message_id) select ? where not exists "
             "(select 1 from processed_messages p where p.message_id = ?)  -- no ON CONFLICT here",),
            ("INSERT INTO processed_messages (message_id) SELECT ? WHERE ? NOT IN (SELECT message_id FROM processed_messages)",),
            ("INSERT INTO processed_messages (message_id) SELECT ? EXCEPT SELECT message_id FROM processed_messages",),
            ("INSERT INTO processed_messages (message_id) "
             "SELECT ? WHERE (SELECT count(*) FROM processed_messages WHERE message_id = ?) = 0",),
            # a comment line first, and a ? inside a comment: neither is part of the statement
            ("-- the inbox, without ON CONFLICT\n" + NOT_EXISTS,),
            (NOT_EXISTS + " /* each ? is the message ID */",),
            ("WITH incoming AS (SELECT ? AS message_id) INSERT INTO processed_messages (message_id) "
             "SELECT message_id FROM incoming WHERE message_id NOT IN (SELECT message_id FROM processed_messages)",),
            # DuckDB runs MERGE, and so does PostgreSQL 15
            ("MERGE INTO processed_messages AS seen USING (SELECT ? AS message_id) AS incoming "
             "ON seen.message_id = incoming.message_id "
             "WHEN NOT MATCHED THEN INSERT (message_id) VALUES (incoming.message_id)",),
            ("INSERT INTO processed_messages (message_id) SELECT ? WHERE NOT EXISTS "
             "(SELECT 1 FROM processed_messages WHERE message_id = ? AND message_id <> '?')",),
        ],
        wrong=[
            # part of the ID compared: passes a handful of IDs, fails once the table holds a day's worth (HISTORY)
            *(Wrong((_comparing(condition),), "whole ID") for condition in (
                "left(message_id, 8) = left(?, 8)", "right(message_id, 6) = right(?, 6)",
                "substr(message_id, 1, 12) = substr(?, 1, 12)", "left(message_id, 30) = left(?, 30)",
                "left(md5(message_id), 4) = left(md5(?), 4)")),  # the last a 16-bit digest
            # blocks every message after the first: the condition never looks at the ID
            Wrong(("INSERT INTO processed_messages (message_id) SELECT ? WHERE NOT EXISTS (SELECT 1 FROM processed_messages)",),
                  "never been seen"),
            # right for m-7f3 alone, wrong for every other message
            Wrong((NOT_EXISTS.replace("message_id = ?", "message_id = 'm-7f3'"),), "never been seen"),
            Wrong(("INSERT INTO processed_messages (message_id) VALUES (?)",), "duplicate-key error"),
            # the shorthand of ON CONFLICT DO NOTHING, missing from the engines the exercise is about
            Wrong(("INSERT OR IGNORE INTO processed_messages (message_id) VALUES (?)",), "short forms of ON CONFLICT"),
            Wrong(("INSERT OR REPLACE INTO processed_messages (message_id) VALUES (?)",), "short forms of ON CONFLICT"),
            # looks for any other ID instead of this one: the repeat is inserted again
            Wrong(("INSERT INTO processed_messages (message_id) SELECT ? WHERE NOT EXISTS "
                   "(SELECT 1 FROM processed_messages WHERE message_id <> ?)",), "write no row"),
            Wrong((ON_CONFLICT,), "without ON CONFLICT"),  # the lesson's statement, which the exercise rules out
            Wrong((ON_CONFLICT.replace("DO NOTHING", "DO UPDATE SET message_id = excluded.message_id"),), "without"),
            Wrong(("INSERT INTO processed_messages SELECT ? WHERE NOT EXISTS "
                   "(SELECT 1 FROM processed_messages WHERE message_id = ?)",), "name the column"),
            Wrong(("SELECT count(*) FROM processed_messages WHERE message_id = ?",), "INSERT"),
            Wrong(("INSERT INTO payments (message_id) SELECT ? WHERE NOT EXISTS (SELECT 1 FROM payments WHERE message_id = ?)",),
                  "processed_messages"),
            Wrong(("INSERT INTO processed_messages (message_id) VALUES ('m-7f3')",), "?"),
            Wrong(([NOT_EXISTS],), "string"),
            # a high-water mark: IDs do not arrive in sorted order
            Wrong(("INSERT INTO processed_messages (message_id) SELECT ? "
                   "WHERE ? > (SELECT coalesce(max(message_id), '') FROM processed_messages)",), "never been seen"),
            # pattern matching, not equality: pay_1042 matches pay-1042
            Wrong((NOT_EXISTS.replace("message_id = ?", "message_id LIKE ?"),), "wildcards"),
            # keys cut to a prefix: m-8a10 and m-8a1 collide
            Wrong((NOT_EXISTS.replace("message_id = ?", "left(message_id, 5) = left(?, 5)"),), "never been seen"),
            Wrong(("INSERT INTO processed_messages (message_id) SELECT left(?, 5) WHERE NOT EXISTS "
                   "(SELECT 1 FROM processed_messages WHERE message_id = left(?, 5))",), "exactly that ID"),
            # MERGE that updates a match reports a row for every repeat
            Wrong(("MERGE INTO processed_messages AS seen USING (SELECT ? AS message_id) AS incoming "
                   "ON seen.message_id = incoming.message_id WHEN MATCHED THEN UPDATE SET fingerprint = 'seen' "
                   "WHEN NOT MATCHED THEN INSERT (message_id) VALUES (incoming.message_id)",), "charge it again"),
            # conditions that take one ID for another: case or spaces ignored, the ends compared, a prefix taken
            Wrong((NOT_EXISTS.replace("message_id = ?", "lower(message_id) = lower(?)"),), "never been seen"),
            Wrong((NOT_EXISTS.replace("message_id = ?", "trim(upper(message_id)) = trim(upper(?))"),), "never been seen"),
            Wrong((NOT_EXISTS.replace("message_id = ?", "right(message_id, 5) = right(?, 5)"),), "never been seen"),
            # an ID padded with a space is another producer's ID, not the same one
            Wrong((NOT_EXISTS.replace("message_id = ?", "trim(message_id) = trim(?)"),), "never been seen"),
            Wrong((NOT_EXISTS.replace("message_id = ?", "rtrim(message_id) = rtrim(?)"),), "never been seen"),
            Wrong((NOT_EXISTS.replace("message_id = ?", "starts_with(?, message_id)"),), "never been seen"),
            # only the latest rows looked at: the first ID comes back after nine other messages
            Wrong((NOT_EXISTS.replace("FROM processed_messages WHERE", "FROM (SELECT message_id FROM processed_messages "
                                      "ORDER BY rowid DESC LIMIT 8) WHERE"),), "duplicate-key error"),
            Wrong(("-- INSERT INTO processed_messages (message_id) VALUES (?)\n"
                   "SELECT count(*) FROM processed_messages WHERE message_id = ?",), "INSERT"),
        ],
    ),
    "check_naive_crashes": Bank(
        right=[(EARLY,), ({fault: f" {outcome} " for fault, outcome in reversed(EARLY.items())},),
               # a printed name in another letter case, or with its spaces doubled, is that name
               ({fault: outcome.capitalize().replace(" ", "  ") for fault, outcome in EARLY.items()},)],
        wrong=[
            # the naive consumer's own column, from lesson 01, with the steps' new order ignored
            Wrong((NAIVE,), "commit comes last"),
            # "a crash after the ack is like a crash after the commit": here nothing is committed yet
            Wrong(({**EARLY, "crash before ack": "charged twice"},), "nothing is committed yet"),
            # "before the ack the message is gone too": the broker still holds it
            Wrong(({**EARLY, "crash before ack": "charge lost"},), "still holds the message"),
            Wrong(({**EARLY, "crash before charge": "charge lost"},), "still holds the message"),
            # "the broker will deliver it again": the ack is in, it will not
            Wrong(({**EARLY, "crash before commit": "charged once"},), "ack is already in"),
            Wrong(({**EARLY, "crash before commit": "charged twice"},), "ack is already in"),
            # "a lost ack is harmless now that the ack comes early" / "a lost ack loses the message"
            # with no fault nothing is pending or rolled back: its own hint, not the crash hints
            Wrong(({**EARLY, "no fault": "charge lost"},), "every step runs"),
            Wrong(({**EARLY, "no fault": "charged twice"},), "every step runs"),
            Wrong(({**EARLY, "ack lost": "charged once"},), "ack never arrived"),
            Wrong(({**EARLY, "ack lost": "charge lost"},), "ack never arrived"),
            # section 4's inbox with its ack first: every crash after the ack loses the charge
            Wrong(({**EARLY, "ack lost": "charged once", "crash before commit": "charge lost"},), "ack never arrived"),
            Wrong(({fault: "charged twice" for fault in EARLY},), "of 6"),
            Wrong(({fault: "charged once" for fault in EARLY},), "of 6"),
            Wrong(({"ack lost": "charged twice"},), "keys"),
            Wrong(({**EARLY, "ack lost": "twice"},), "one of the names"),
            Wrong(({**EARLY, "ack lost": 2},), "one of the names"),
            Wrong(("crash before commit",), "dict"),
        ],
    ),
}

test_bank = bank_tests(BANKS)


def test_the_early_ack_column_is_the_crash_matrix_of_that_consumer_and_holds_every_outcome():
    from idemlib.course.exercises.lesson_02 import EARLY_ACK_STEPS, early_ack_column

    assert early_ack_column() == EARLY
    assert EARLY_ACK_STEPS == ("begin", "charge", "ack", "commit")
    assert set(EARLY.values()) == {"charged once", "charge lost", "charged twice"}  # every outcome in one column

"""Lesson 02's exercises: the inbox's insert, and the crash that makes the naive consumer charge twice."""

from __future__ import annotations

from exercise_bank import Bank, Wrong, bank_tests

ON_CONFLICT = "INSERT INTO processed_messages (message_id) VALUES (?) ON CONFLICT DO NOTHING"
NOT_EXISTS = ("INSERT INTO processed_messages (message_id) "
              "SELECT ? WHERE NOT EXISTS (SELECT 1 FROM processed_messages WHERE message_id = ?)")

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
        ],
        wrong=[
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
        ],
    ),
    "check_crash_point": Bank(
        right=[("naive", "crash before ack", "charged twice"), ("naive", " Crash before ACK ", "charged twice"),
               ("naive", "crash after commit", "charged twice"), ("naive", "before ack", "charged twice"),
               ("ID first", "crash before charge", "charge lost"), ("work first", "crash before record id", "charged twice")],
        wrong=[
            Wrong(("naive", "crash before commit", "charged twice"), "charged once"),
            Wrong(("naive", "crash before charge", "charged twice"), "already saved"),
            Wrong(("naive", "crash before record id", "charged twice"), "its crashes are"),
            Wrong(("inbox", "crash before ack", "charged twice"), "charged once"),
            Wrong(("nobody", "crash before ack", "charged twice"), "no handler"),
            # lesson 01's answer: a lost ack does it, but the question asks for a crash
            Wrong(("naive", "ack lost", "charged twice"), "not a crash"),
            Wrong(("naive", "no fault", "charged twice"), "not a crash"),
            Wrong(("naive", "crash after ack", "charged twice"), "its crashes are"),
            Wrong(("naive", 4, "charged twice"), "string"),
        ],
        blank=("naive", ..., "charged twice"),
    ),
}

test_bank = bank_tests(BANKS)

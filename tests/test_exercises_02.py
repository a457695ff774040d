"""Lesson 02's exercises: the inbox's insert, and the crash that makes the naive consumer charge twice."""

from __future__ import annotations

from exercise_bank import Bank, Wrong, bank_tests

INSERT = "INSERT INTO processed_messages (message_id) VALUES (?) ON CONFLICT DO NOTHING"

BANKS = {
    "check_inbox_insert": Bank(
        right=[
            (INSERT,),
            (INSERT + " RETURNING message_id",),
            ("insert into processed_messages (message_id) values (?) on conflict (message_id) do nothing  -- skip repeats",),
            ("INSERT OR IGNORE INTO processed_messages (message_id) VALUES (?)",),
            ("INSERT INTO processed_messages (message_id) SELECT ? "
             "WHERE NOT EXISTS (SELECT 1 FROM processed_messages WHERE message_id = ?)",),
        ],
        wrong=[
            # blocks every message after the first: the condition never looks at the ID
            Wrong(("INSERT INTO processed_messages (message_id) SELECT ? WHERE NOT EXISTS (SELECT 1 FROM processed_messages)",),
                  "never been seen"),
            Wrong(("INSERT INTO processed_messages (message_id) VALUES (?)",), "duplicate-key error"),
            Wrong((INSERT.replace("DO NOTHING", "DO UPDATE SET message_id = excluded.message_id"),), "charge it again"),
            Wrong((INSERT.replace("DO NOTHING", "DO UPDATE SET fingerprint = 'seen'") + " RETURNING message_id",),
                  "charge it again"),
            Wrong(("INSERT INTO processed_messages VALUES (?) ON CONFLICT DO NOTHING",), "name the column"),
            Wrong(("SELECT count(*) FROM processed_messages WHERE message_id = ?",), "INSERT"),
            Wrong(("INSERT INTO payments (message_id) VALUES (?) ON CONFLICT DO NOTHING",), "processed_messages"),
            Wrong(("INSERT INTO processed_messages (message_id) VALUES ('m-7f3') ON CONFLICT DO NOTHING",), "?"),
            Wrong((["INSERT INTO processed_messages (message_id) VALUES (?)"],), "string"),
        ],
    ),
    "check_crash_point": Bank(
        right=[("naive", "crash before ack", "charged twice"), ("naive", "ack lost", "charged twice"),
               ("ID first", "crash before charge", "charge lost"), ("work first", "crash before record id", "charged twice")],
        wrong=[
            Wrong(("naive", "crash before commit", "charged twice"), "charged once"),
            Wrong(("naive", "crash before charge", "charged twice"), "already saved"),
            Wrong(("naive", "crash before record id", "charged twice"), "its faults are"),
            Wrong(("inbox", "crash before ack", "charged twice"), "charged once"),
            Wrong(("nobody", "crash before ack", "charged twice"), "no handler"),
        ],
        blank=("naive", ..., "charged twice"),
    ),
}

test_bank = bank_tests(BANKS)

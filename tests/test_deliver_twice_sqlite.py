"""deliver-twice on SQLite: two deliveries at once on a database file, the wait for a lock read from SQLite's own
"database is locked" (a busy timeout of 0 in the race), never guessed from a timeout."""

from __future__ import annotations

import functools
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from deliver_twice import NotIdempotent, assert_idempotent, idempotency_report

MESSAGES = [{"message_id": f"m-{n}", "amount": 10 + n} for n in range(20)]


def reset(connection: sqlite3.Connection) -> None:
    connection.executescript("DROP TABLE IF EXISTS payments; DROP TABLE IF EXISTS inbox; "
                             "CREATE TABLE payments (message_id, amount); CREATE TABLE inbox (message_id PRIMARY KEY);")


def inbox(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
    if connection.execute("INSERT INTO inbox VALUES (?) ON CONFLICT DO NOTHING", (message["message_id"],)).rowcount:
        connection.execute("INSERT INTO payments VALUES (?, ?)", (message["message_id"], message["amount"]))
    connection.commit()


def check_then_insert(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
    """Looks the payment up first, with no unique key: right alone, wrong when two deliveries overlap."""
    if connection.execute("SELECT 1 FROM payments WHERE message_id = ?", (message["message_id"],)).fetchone():
        return
    connection.execute("INSERT INTO payments VALUES (?, ?)", (message["message_id"], message["amount"]))
    connection.commit()


def database(tmp_path: Path) -> Any:
    return functools.partial(sqlite3.connect, tmp_path / "consumer.db")


def test_on_a_sqlite_file_two_deliveries_at_once_catch_a_check_then_insert_and_pass_the_inbox(tmp_path):
    report = idempotency_report(check_then_insert, MESSAGES[:3], connect=database(tmp_path), reset=reset)
    failed = [row.scenario for row in report.failed()]
    assert failed == ["two at once, one paused before step 2: INSERT INTO payments",
                      "two at once, one paused before step 3: COMMIT"]
    assert "unique key on the message ID" in report.failed()[0].fix
    assert not report.not_played
    assert assert_idempotent(inbox, MESSAGES, connect=database(tmp_path), reset=reset).passed  # 20 messages


def test_the_second_delivery_waits_for_the_lock_of_the_paused_first_and_runs_once_it_has_ended(tmp_path):
    from deliver_twice.race import two_at_once
    from deliver_twice.sessions import Sessions

    connect = database(tmp_path)
    setup = connect()
    reset(setup)
    setup.commit()
    sessions = Sessions(connect)
    race = two_at_once(inbox, sessions, MESSAGES[0], 3)  # paused before COMMIT, holding the inbox row's write lock
    assert race.second_waited, "SQLite said 'database is locked' to the second, which then waited"
    assert (race.first, race.second) == (None, None)
    assert race.second_steps == ["INSERT INTO inbox", "COMMIT"], "it found the ID once the first had committed"
    assert setup.execute("SELECT * FROM payments").fetchall() == [("m-0", 10)]
    busy = connect().execute("PRAGMA busy_timeout").fetchone()[0]
    assert busy == 5000, "a new connection has sqlite3's default timeout: the race set 0 on its own connections only"


def test_an_in_memory_set_of_seen_ids_passes_alone_and_is_caught_when_two_deliveries_overlap(tmp_path):
    seen: set[str] = set()

    def remembers(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
        if message["message_id"] in seen:
            return
        connection.execute("INSERT INTO payments VALUES (?, ?)", (message["message_id"], message["amount"]))
        connection.commit()
        seen.add(message["message_id"])

    def fresh(connection: sqlite3.Connection) -> None:
        seen.clear()  # the process's memory starts empty with the database: each scenario is a new process
        reset(connection)

    with pytest.raises(NotIdempotent) as caught:
        assert_idempotent(remembers, MESSAGES[:2], connect=database(tmp_path), reset=fresh)
    text = str(caught.value)
    assert "is not idempotent in 2 of 10 scenarios" in text
    assert "- two at once, one paused before step 2: COMMIT: table payments: extra [('m-0', 10), ('m-1', 11)]" in text


def test_an_in_memory_database_is_reported_as_not_raced_saying_why(tmp_path):
    report = idempotency_report(inbox, MESSAGES[:2], connect=functools.partial(sqlite3.connect, ":memory:"),
                                reset=reset)
    # One connection is kept and reused between deliveries, so the non-race scenarios still see one database.
    assert report.passed
    assert report.not_played == ["two deliveries at once: this SQLite database is in memory, which each connection "
                                 "sees alone; give connect= a database file, e.g. functools.partial(sqlite3.connect, "
                                 "tmp_path / 'test.db')"]


def test_a_restart_empties_a_module_level_memory_and_catches_it_where_no_overlap_is_played(tmp_path):
    from restart_consumers import consumer, remembers_after_commit

    memory = functools.partial(sqlite3.connect, ":memory:")  # no race on an in-memory database: only the restart
    report = idempotency_report(remembers_after_commit, MESSAGES[:2], connect=memory, reset=reset)
    assert [row.scenario for row in report.failed()] == [
        "every message, then the consumer restarts (its memory empty) and every message comes again"]
    assert report.failed()[0].differs == "table payments: extra [('m-0', 10), ('m-1', 11)]"
    assert "memory in the process is gone after a restart" in report.failed()[0].fix
    # Remembering before the work: a crash restarts the process, so the redelivery pays; the lost connection
    # does not, so that one process skips its own redelivery and the payment is missing.
    report = idempotency_report(consumer.handle, MESSAGES[:2], connect=database(tmp_path), reset=reset)
    failed = {row.scenario.split(":")[0] for row in report.failed()}
    assert failed == {"every message, then the consumer restarts (its memory empty) and every message comes again",
                      "connection lost before step 1 of 2", "connection lost before step 2 of 2",
                      "two at once, one paused before step 1", "two at once, one paused before step 2"}, failed
    assert not any(row.scenario.startswith("crash") for row in report.failed()), "a crash empties the memory"


def test_a_closure_keeps_its_memory_and_the_report_says_a_restart_was_not_played(tmp_path):
    seen: set[str] = set()

    def closure(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
        if message["message_id"] not in seen:
            inbox(connection, message)

    report = idempotency_report(closure, MESSAGES[:2], connect=database(tmp_path), reset=reset)
    assert report.not_played == [
        "a restart that empties the consumer's memory: 'test_a_closure_keeps_its_memory_and_the_report_says_a_restart_"
        "was_not_played.<locals>.closure' is not a global of its module (a closure, a lambda, an object made in a "
        "test), so a restart keeps its memory in Python: define it at module level (in the crash scenarios too)"]

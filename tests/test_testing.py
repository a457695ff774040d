"""The deliver-twice helper on real consumers: it catches what duplicates hurt, passes the inbox, says which message."""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

import pytest

from idemlib.messages import Message
from idemlib.operating import consumers
from idemlib.operating.consumer_thread import Blocked
from idemlib.operating.steps import Crashed, Sessions, Watch, deliver
from idemlib.operating.testing import NotIdempotent, assert_idempotent, idempotency_report

pytest_plugins = ["idemlib.operating.pytest_plugin"]

# IDs of different lengths, falling then rising, two charges for one order: nothing a wrong consumer can lean on.
MESSAGES = [Message.charge("m-7f3", 1042, 40), Message.charge("m-10b2c", 1042, 15), Message.charge("m-1", 1044, 40)]


def check_inside(connection: Any, message: Message) -> None:
    """The duplicate check inside the transaction, with no unique key behind it."""
    with connection.transaction():
        seen = connection.execute("SELECT 1 FROM payments WHERE message_id = %s", (message.message_id,)).fetchone()
        if seen is None:
            connection.execute("INSERT INTO payments VALUES (%s, %s, %s)",
                               (message.body["order_id"], message.body["amount"], message.message_id))


def test_the_naive_consumer_fails_and_the_text_names_the_scenario_and_the_extra_rows(postgres_schema):
    with pytest.raises(NotIdempotent) as caught:
        assert_idempotent(consumers.naive_consumer, MESSAGES, connect=postgres_schema.connect,
                          reset=consumers.reset, state=consumers.payments)
    text = str(caught.value)
    assert "every message twice in a row (the ack lost): extra [(1042, 15), (1042, 40), (1044, 40)]" in text
    assert "crash before" not in text, "a crash before the insert or the commit rolls back: those scenarios pass"


def test_the_inbox_consumer_passes_every_scenario_including_two_deliveries_at_once(postgres_schema):
    report = assert_idempotent(consumers.inbox_consumer, MESSAGES, connect=postgres_schema.connect,
                               reset=consumers.reset, state=consumers.payments)
    assert report["same state as one delivery"].all()
    # Three statements (two inserts and the commit): two plain runs, a late duplicate and a reverse replay,
    # a restart, three crash points, three lost connections, three paused races.
    assert len(report) == 2 + 2 + 1 + 3 + 3 + 3 and report["scenario"].str.startswith("two at once").sum() == 3


def test_a_check_inside_the_transaction_without_a_unique_key_fails_only_when_two_deliveries_race(postgres_schema):
    report = idempotency_report(check_inside, MESSAGES, connect=postgres_schema.connect,
                                reset=consumers.reset, state=consumers.payments)
    failing = report[~report["same state as one delivery"]]["scenario"]
    assert len(failing) > 0 and failing.str.startswith("two at once").all()


def test_a_duplicate_that_raises_is_reported_as_never_acknowledged(postgres_schema):
    def strict(connection: Any, message: Message) -> None:
        connection.execute("INSERT INTO processed_messages VALUES (%s)", (message.message_id,))  # no ON CONFLICT
        connection.execute("INSERT INTO payments VALUES (%s, %s, %s)",
                           (message.body["order_id"], message.body["amount"], message.message_id))
        connection.commit()

    with pytest.raises(NotIdempotent, match=r"m-7f3 failed on all 3 deliveries \(UniqueViolation"):
        assert_idempotent(strict, MESSAGES[:1], connect=postgres_schema.connect,
                          reset=consumers.reset, state=consumers.payments)


def test_a_consumer_that_forgets_to_commit_is_refused_rather_than_passed(postgres_schema):
    def uncommitted(connection: Any, message: Message) -> None:
        connection.execute("INSERT INTO payments VALUES (1, 1, 'x')")

    with pytest.raises(ValueError, match="changed nothing"):
        assert_idempotent(uncommitted, MESSAGES, connect=postgres_schema.connect,
                          reset=consumers.reset, state=consumers.payments)


def sqlite_database(tmp_path) -> Any:
    path = tmp_path / "consumer.db"
    return lambda: sqlite3.connect(path)


def sqlite_reset(connection: sqlite3.Connection) -> None:
    connection.executescript("DROP TABLE IF EXISTS payments; DROP TABLE IF EXISTS processed_messages; "
                             "CREATE TABLE payments (order_id, amount, message_id); "
                             "CREATE TABLE processed_messages (message_id PRIMARY KEY);")


def sqlite_pay_once(connection: sqlite3.Connection, message: Message) -> bool:
    """The inbox's two inserts on SQLite, uncommitted; True if the message was new and its payment written."""
    new = connection.execute("INSERT INTO processed_messages VALUES (?) ON CONFLICT DO NOTHING RETURNING 1",
                             (message.message_id,)).fetchone()
    if new:
        connection.execute("INSERT INTO payments VALUES (?, ?, ?)",
                           (message.body["order_id"], message.body["amount"], message.message_id))
    return new is not None


def test_steps_the_consumer_yields_are_crash_points_too_and_an_email_outside_the_state_goes_unseen(tmp_path):
    sent: list[str] = []

    def inbox_then_email(connection: sqlite3.Connection, message: Message) -> Any:
        if sqlite_pay_once(connection, message):
            yield "send the receipt"
            sent.append(message.message_id)  # an email: no row in the database records it
        connection.commit()

    report = assert_idempotent(inbox_then_email, MESSAGES, connect=sqlite_database(tmp_path), reset=sqlite_reset,
                               state=lambda c: sorted(c.execute("SELECT order_id, amount FROM payments").fetchall()))
    assert report["scenario"].str.contains("step 'send the receipt'").any()
    assert report["scenario"].str.startswith("two at once").any(), "races are played on a SQLite file too"
    # The state passes; the customer got more receipts than messages: what `state` does not read, the helper cannot see.
    assert len(sent) > len(MESSAGES) * len(report)


def test_a_crash_cannot_be_caught_by_the_consumer_and_rolls_its_transaction_back(tmp_path):
    connect = sqlite_database(tmp_path)
    setup = connect()
    sqlite_reset(setup)
    setup.commit()

    def swallowing(connection: sqlite3.Connection, message: Message) -> None:
        try:
            connection.execute("INSERT INTO payments VALUES (1, 40, 'm')")
            connection.commit()
        except Exception:  # noqa: BLE001 - the point: a death is not an Exception
            pass

    outcome = deliver(swallowing, connect, MESSAGES[0], Watch(crash_at=2))
    assert isinstance(outcome, Crashed)
    assert connect().execute("SELECT count(*) FROM payments").fetchone() == (0,)


def test_no_messages_is_refused_with_a_reason(tmp_path):
    with pytest.raises(ValueError, match="at least one message"):
        assert_idempotent(lambda c, m: None, [], connect=sqlite_database(tmp_path), reset=sqlite_reset,
                          state=lambda c: [])


def test_a_session_given_back_after_a_crash_holds_no_lock_and_no_open_transaction(postgres_schema):
    sessions = Sessions(postgres_schema.connect)
    connection = sessions()
    connection.execute("SELECT pg_advisory_lock(42)")  # a session lock: a rollback alone keeps it
    connection.execute("CREATE TABLE IF NOT EXISTS t (x int)")
    connection.execute("INSERT INTO t VALUES (1)")
    sessions.give_back(connection)
    again = sessions()
    assert again is connection, "the session is reused"
    held = again.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
    assert held.fetchone() == (0,)
    assert again.execute("SELECT to_regclass('t')").fetchone() == (None,), "the open transaction was rolled back"
    sessions.give_back(again)
    sessions.close()


def finishes(call: Any, seconds: float = 60) -> BaseException | None:
    """Run ``call`` in a thread and return what it raised (None: returned); fail, not hang, if it never ends."""
    raised: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            raised.append(None)
        except BaseException as error:  # noqa: BLE001 - handed to the test to inspect
            raised.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s: the time limit did not end a blocked consumer"
    return raised[0]


def test_a_consumer_blocked_on_an_event_never_set_fails_saying_where_it_waits_and_what_to_do(tmp_path):
    never = threading.Event()

    def waits_for_a_reply(connection: sqlite3.Connection, message: Message) -> None:
        connection.execute("INSERT INTO payments VALUES (?, ?, ?)",
                           (message.body["order_id"], message.body["amount"], message.message_id))
        never.wait()  # a reply that never comes, and no timeout
        connection.commit()

    # The limit only has to exceed what a finished call takes on a busy machine: the blocked one never ends.
    error = finishes(lambda: assert_idempotent(
        waits_for_a_reply, MESSAGES, connect=sqlite_database(tmp_path), reset=sqlite_reset,
        state=lambda c: c.execute("SELECT count(*) FROM payments").fetchall(), time_limit=3))
    assert isinstance(error, Blocked) and isinstance(error, AssertionError)
    text = str(error)
    assert "'waits_for_a_reply' did not finish the delivery of m-7f3 within the time limit of 3 s" in text
    assert "scenario: one clean delivery of each message" in text
    assert "blocked at or after step 1 (INSERT INTO payments)" in text
    assert "in waits_for_a_reply (test_testing.py:" in text and "`never.wait()" in text
    assert "give every wait in it" in text and "time_limit" in text


def test_a_consumer_that_ends_gets_the_same_report_whatever_the_time_limit(tmp_path):
    def inbox(connection: sqlite3.Connection, message: Message) -> None:
        sqlite_pay_once(connection, message)
        connection.commit()

    def report(**limit: float) -> Any:
        return assert_idempotent(inbox, MESSAGES, connect=sqlite_database(tmp_path), reset=sqlite_reset,
                                 state=lambda c: sorted(c.execute("SELECT order_id, amount FROM payments").fetchall()),
                                 **limit)

    assert report(time_limit=600).equals(report())
    with pytest.raises(ValueError, match="positive number"):
        report(time_limit=0)


def test_a_python_lock_held_across_the_paused_delivery_fails_the_race_and_frees_the_database(postgres_schema):
    one_at_a_time = threading.Lock()  # shared by two threads of one process; two processes would share none

    def serialised(connection: Any, message: Message) -> None:
        with one_at_a_time:
            consumers.inbox_consumer(connection, message)

    error = finishes(lambda: assert_idempotent(serialised, MESSAGES, connect=postgres_schema.connect,
                                               reset=consumers.reset, state=consumers.payments, time_limit=5))
    assert isinstance(error, Blocked)
    text = str(error)
    assert "scenario: two at once, one paused before step 1: INSERT INTO processed_messages" in text
    assert "- delivery 1: held by the test before step 1 (INSERT INTO processed_messages)" in text
    assert "- delivery 2: blocked before its first statement in serialised (test_testing.py:" in text
    assert "`with one_at_a_time:`" in text and "a lock in Python" in text
    # The given-up deliveries' sessions were ended: nothing of theirs still holds a lock on the schema's tables.
    with postgres_schema.connect() as probe:
        probe.execute("SET lock_timeout = '5s'")
        probe.execute("LOCK TABLE payments, processed_messages IN ACCESS EXCLUSIVE MODE")


def test_the_plugin_registers_the_time_limit_setting(request):
    # Refused values and one run's limit not reaching another: tests/test_deliver_twice.py, with pytester.
    from idemlib.operating import testing

    assert float(request.config.getini("idempotency_time_limit")) == testing.TIME_LIMIT

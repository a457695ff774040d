"""The deliver-twice package as an engineer installs it: transparent to the consumer, failing (never skipping)
without its database, settings per pytest run, and the redeliveries brokers make."""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from deliver_twice import NotIdempotent, assert_idempotent, idempotency_report
from deliver_twice.delivery import deliver
from deliver_twice.scenarios import suite_time_limit
from deliver_twice.sessions import Sessions
from deliver_twice.steps import Watch

pytest_plugins = ["pytester", "idemlib.operating.pytest_plugin"]

# 24 messages over 6 orders, each with 3 items: a consumer runs the same statements many times on one connection,
# past psycopg's prepare threshold (5 executions), as a real consumer does over a day.
MESSAGES = [{"message_id": f"m-{n:03x}", "order_id": 100 + n % 6, "items": [n, n + 1, n + 2]} for n in range(24)]

PG_SCHEMA = """
    DROP TABLE IF EXISTS lines, processed_messages;
    CREATE TABLE lines (order_id integer NOT NULL, item integer NOT NULL, message_id text NOT NULL);
    CREATE TABLE processed_messages (message_id text PRIMARY KEY)
"""


def pg_reset(connection: Any) -> None:
    connection.execute(PG_SCHEMA)


def pg_inbox(connection: Any, message: dict[str, Any]) -> None:
    """An inbox consumer that runs its insert once per item, and reads rows as dicts (a connection attribute)."""
    connection.row_factory = dict_row
    with connection.transaction():
        new = connection.execute("INSERT INTO processed_messages VALUES (%s) ON CONFLICT DO NOTHING "
                                 "RETURNING message_id", (message["message_id"],)).fetchone()
        if new is not None:
            assert new["message_id"] == message["message_id"]  # dict_row reached the real connection
            for item in message["items"]:
                connection.execute("INSERT INTO lines VALUES (%s, %s, %s)",
                                   (message["order_id"], item, message["message_id"]))


def test_a_psycopg_consumer_repeating_statements_over_24_messages_passes_every_scenario(postgres_schema):
    report = assert_idempotent(pg_inbox, MESSAGES, connect=postgres_schema.connect, reset=pg_reset)
    # Five steps (the inbox insert, three line inserts, the commit): four plain orders, a restart, five crashes,
    # five lost connections, five races.
    assert report.passed and len(report) == 4 + 1 + 5 + 5 + 5
    assert sum(row.scenario.startswith("two at once") for row in report) == 5


def test_a_reused_session_keeps_psycopgs_prepared_statements_valid(postgres_schema):
    sessions = Sessions(postgres_schema.connect)
    setup = sessions()
    pg_reset(setup)
    setup.commit()
    sessions.give_back(setup)
    for message in MESSAGES[:8]:  # the same statement 8 times on the one reused session: prepared after 5
        assert deliver(pg_inbox, sessions, message, Watch()) is None
    connection = sessions()
    prepared = connection.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
    assert prepared[0] >= 1, "psycopg prepared the repeated statements, and they survived the reset"
    sessions.give_back(connection)
    sessions.close()


def test_autocommit_written_by_the_consumer_reaches_the_connection_and_is_put_back_after_the_delivery(
        postgres_schema):
    def autocommitting(connection: Any, message: dict[str, Any]) -> None:
        connection.autocommit = True  # every statement commits on its own: no commit() call
        connection.execute("INSERT INTO processed_messages VALUES (%s) ON CONFLICT DO NOTHING",
                           (message["message_id"],))

    sessions = Sessions(postgres_schema.connect)
    setup = sessions()
    pg_reset(setup)
    setup.commit()
    sessions.give_back(setup)
    assert deliver(autocommitting, sessions, MESSAGES[0], Watch()) is None
    reused = sessions()
    assert reused.autocommit is False, "the next delivery starts as a new connection would"
    assert reused.execute("SELECT message_id FROM processed_messages").fetchall() == [("m-000",)]
    sessions.give_back(reused)
    sessions.close()


def sqlite_connect(tmp_path: Any) -> Any:
    return lambda: sqlite3.connect(tmp_path / "consumer.db")


def sqlite_reset(connection: sqlite3.Connection) -> None:
    connection.executescript("DROP TABLE IF EXISTS lines; DROP TABLE IF EXISTS processed_messages; "
                             "CREATE TABLE lines (order_id, item, message_id); "
                             "CREATE TABLE processed_messages (message_id PRIMARY KEY);")


def sqlite_inbox(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
    """``with conn:`` commits the block; a bad item raises inside it, and that block must roll back."""
    connection.row_factory = sqlite3.Row
    try:
        with connection:
            connection.execute("INSERT INTO lines VALUES (?, ?, ?)", (message["order_id"], -1, message["message_id"]))
            raise ValueError("a bad item: this block rolls back")
    except ValueError:
        pass
    with connection:
        new = connection.execute("INSERT INTO processed_messages VALUES (?) ON CONFLICT DO NOTHING "
                                 "RETURNING message_id", (message["message_id"],)).fetchone()
        if new is not None:
            assert new["message_id"] == message["message_id"]  # sqlite3.Row reached the real connection
            for item in message["items"]:
                connection.execute("INSERT INTO lines VALUES (?, ?, ?)",
                                   (message["order_id"], item, message["message_id"]))


def test_a_sqlite_consumer_with_conn_blocks_over_24_messages_passes_and_its_failed_block_rolled_back(tmp_path):
    report = assert_idempotent(sqlite_inbox, MESSAGES, connect=sqlite_connect(tmp_path), reset=sqlite_reset)
    assert report.passed
    check = sqlite_connect(tmp_path)()
    assert check.execute("SELECT count(*) FROM lines WHERE item = -1").fetchone() == (0,)
    assert check.execute("SELECT count(*) FROM lines").fetchone() == (3 * len(MESSAGES),)


def test_the_whole_database_is_compared_so_an_audit_row_per_delivery_is_caught(tmp_path):
    def audited(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
        sqlite_inbox(connection, message)
        with connection:
            connection.execute("INSERT INTO audit VALUES (?)", (message["message_id"],))  # once per delivery

    def reset(connection: sqlite3.Connection) -> None:
        sqlite_reset(connection)
        connection.executescript("DROP TABLE IF EXISTS audit; CREATE TABLE audit (message_id);")

    with pytest.raises(NotIdempotent) as caught:
        assert_idempotent(audited, MESSAGES[:3], connect=sqlite_connect(tmp_path), reset=reset)
    text = str(caught.value)
    assert "every message twice in a row (the ack lost): table audit: extra [('m-000',), ('m-001',), ('m-002',)]" \
        in text
    assert "table lines" not in text, "the inbox keeps the lines right: only the audit table differs"
    assert text.count("fix: record the message ID in an inbox table") == 1, "each fix is said once"
    assert "two at once, one paused before step 2" in text, "a SQLite file has races too"


def set_status(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
    """Lesson 10's mistake: the order's status is whatever the last message delivered says."""
    with connection:
        connection.execute("INSERT OR REPLACE INTO orders VALUES (?, ?)", (message["order_id"], message["status"]))


def orders_reset(connection: sqlite3.Connection) -> None:
    connection.executescript("DROP TABLE IF EXISTS orders; CREATE TABLE orders (order_id PRIMARY KEY, status);")


ORDER = [{"message_id": f"s-{n}", "order_id": 7, "status": status} for n, status in
         enumerate(["created", "paid", "shipped"])]


def test_a_late_duplicate_after_newer_messages_catches_the_set_status_consumer_duplicates_in_order_miss(tmp_path):
    report = idempotency_report(set_status, ORDER, connect=sqlite_connect(tmp_path), reset=orders_reset)
    failed = {row.scenario: row for row in report if not row.same}
    assert set(failed) == {"every message, then the oldest (s-0) again after the newer ones",
                           "every message, then all of them again in reverse order (a replay)"}
    row = failed["every message, then the oldest (s-0) again after the newer ones"]
    assert row.differs == "table orders: extra [(7, 'created')]; missing [(7, 'shipped')]"
    assert "never overwrite newer state with an older message's" in row.fix


def pay_then_ack(connection: sqlite3.Connection, message: dict[str, Any], ack: Any) -> None:
    new = connection.execute("INSERT INTO processed_messages VALUES (?) ON CONFLICT DO NOTHING RETURNING 1",
                             (message["message_id"],)).fetchone()
    if new:
        connection.execute("INSERT INTO lines VALUES (?, ?, ?)", (message["order_id"], 1, message["message_id"]))
    connection.commit()
    ack()


def test_an_explicit_ack_after_the_commit_passes_and_one_before_it_fails_naming_the_message(tmp_path):
    assert assert_idempotent(pay_then_ack, MESSAGES[:3], connect=sqlite_connect(tmp_path), reset=sqlite_reset,
                             ack=True).passed

    def ack_then_pay(connection: sqlite3.Connection, message: dict[str, Any], ack: Any) -> None:
        ack()  # the broker forgets the message now: a death before the commit loses it
        new = connection.execute("INSERT INTO processed_messages VALUES (?) ON CONFLICT DO NOTHING RETURNING 1",
                                 (message["message_id"],)).fetchone()
        if new:
            connection.execute("INSERT INTO lines VALUES (?, ?, ?)", (message["order_id"], 1, message["message_id"]))
        connection.commit()

    with pytest.raises(NotIdempotent) as caught:
        assert_idempotent(ack_then_pay, MESSAGES[:3], connect=sqlite_connect(tmp_path), reset=sqlite_reset, ack=True)
    text = str(caught.value)
    assert "crash before step 4 of 4: COMMIT: table lines: missing" in text
    assert "m-000 was acknowledged before COMMIT and the consumer died there: the broker will not redeliver it" in text
    assert "committed before the ack" in text


def test_a_consumer_that_never_calls_ack_is_reported_as_never_acknowledged(tmp_path):
    def forgets(connection: sqlite3.Connection, message: dict[str, Any], ack: Any) -> None:
        pay_then_ack(connection, message, lambda: None)

    with pytest.raises(ValueError, match=r"one clean delivery of m-000 failed: NotAcknowledged"):
        assert_idempotent(forgets, MESSAGES[:1], connect=sqlite_connect(tmp_path), reset=sqlite_reset, ack=True)


def test_expected_refuses_a_consumer_wrong_on_its_first_delivery(tmp_path):
    def charges_twice(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
        with connection:
            if connection.execute("INSERT INTO processed_messages VALUES (?) ON CONFLICT DO NOTHING RETURNING 1",
                                  (message["message_id"],)).fetchone():
                for _ in (1, 2):
                    connection.execute("INSERT INTO lines VALUES (?, 1, ?)", (message["order_id"], message["message_id"]))

    right = [(100, 1, "m-000")]
    with pytest.raises(NotIdempotent, match=r"does not leave what expected= says: extra \[\(100, 1, 'm-000'\)\]"):
        assert_idempotent(charges_twice, MESSAGES[:1], connect=sqlite_connect(tmp_path), reset=sqlite_reset,
                          state=lambda c: sorted(c.execute("SELECT * FROM lines").fetchall()), expected=right)


# The plugin, as installed: run in a pytest of its own with pytester, with no pytest_plugins line.

INNER_SCHEMA_TEST = """
def test_uses_the_schema(postgres_schema):
    with postgres_schema.connect() as connection:
        assert connection.execute("SELECT current_schema()").fetchone() == (postgres_schema.name,)
"""


def test_the_installed_plugin_gives_postgres_schema_on_the_configured_url(pytester, postgres_schema):
    pytester.makepyfile(INNER_SCHEMA_TEST)
    result = pytester.runpytest_inprocess(f"--deliver-twice-postgres-url={postgres_schema.url}")
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(("configure", "says"), [
    ([], "postgres_schema needs a PostgreSQL: pass --deliver-twice-postgres-url=URL"),
    (["--deliver-twice-postgres-url=postgresql://127.0.0.1:9/postgres"], "Connection refused"),
])
def test_without_an_answering_database_the_plugin_fails_with_the_reason_and_never_skips(pytester, monkeypatch,
                                                                                          configure, says):
    monkeypatch.delenv("DELIVER_TWICE_POSTGRES_URL", raising=False)
    pytester.makepyfile(INNER_SCHEMA_TEST)
    result = pytester.runpytest_inprocess(*configure)
    result.assert_outcomes(errors=1)  # the fixture fails in its setup: an error, never a skip
    assert says in result.stdout.str()


def test_refused_credentials_fail_with_the_servers_reason(pytester, postgres_schema):
    wrong = psycopg.conninfo.make_conninfo(postgres_schema.url, user="no_such_role_here", password="wrong")
    pytester.makepyfile(INNER_SCHEMA_TEST)
    result = pytester.runpytest_inprocess(f"--deliver-twice-postgres-url={wrong}")
    result.assert_outcomes(errors=1)
    text = result.stdout.str()
    assert 'password authentication failed for user "no_such_role_here"' in text and "cannot be used" in text
    assert "wrong" not in text, "the password is not printed"


def test_the_time_limit_lives_on_each_runs_config_and_a_second_session_does_not_inherit_it(pytester):
    pytester.makepyfile("""
        from deliver_twice.scenarios import suite_time_limit

        def test_limit(request):
            assert suite_time_limit.get() == float(request.config.getini("idempotency_time_limit"))
            print("LIMIT", suite_time_limit.get())
    """)
    first = pytester.runpytest_inprocess("-o", "idempotency_time_limit=7", "-s")
    first.assert_outcomes(passed=1)
    assert "LIMIT 7.0" in first.stdout.str()
    second = pytester.runpytest_inprocess("-s")
    second.assert_outcomes(passed=1)
    assert "LIMIT 60.0" in second.stdout.str()
    assert suite_time_limit.get() == 60.0, "this (outer) test still reads its own run's limit"
    for wrong in ("soon", "0", "-5"):
        refused = pytester.runpytest_inprocess("-o", f"idempotency_time_limit={wrong}")
        assert "idempotency_time_limit" in refused.stderr.str()


def test_an_engineers_suite_uses_the_installed_plugin_and_sees_the_failure_with_its_fix(pytester):
    pytester.makepyfile(test_consumer="""
        import sqlite3
        from deliver_twice import assert_idempotent

        def charge(connection, message):
            with connection:
                connection.execute("INSERT INTO payments VALUES (?, ?)", (message["id"], message["amount"]))

        def reset(connection):
            connection.executescript("DROP TABLE IF EXISTS payments; CREATE TABLE payments (id, amount);")

        def test_charge(tmp_path):
            assert_idempotent(charge, [{"id": "a", "amount": 5}, {"id": "b", "amount": 7}],
                              connect=lambda: sqlite3.connect(tmp_path / "db"), reset=reset)
    """)
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*NotIdempotent: 'charge' is not idempotent in * scenarios:",
                                 "*- every message twice in a row (the ack lost): table payments: extra *('a', 5)*",
                                 "*fix: record the message ID in an inbox table*"])


def by_delivery_tag(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
    """A duplicate check on the broker's delivery tag: a redelivered copy has a new one, so it pays again."""
    with connection:
        if connection.execute("INSERT INTO processed_messages VALUES (?) ON CONFLICT DO NOTHING RETURNING 1",
                              (message["delivery_tag"],)).fetchone():
            connection.execute("INSERT INTO lines VALUES (?, 1, ?)", (message["order_id"], message["message_id"]))


TAGGED = [{**message, "delivery_tag": n, "redelivered": False} for n, message in enumerate(MESSAGES[:3], 1)]


def test_copies_with_a_new_delivery_tag_catch_a_check_on_the_tag_that_identical_copies_pass(tmp_path):
    tags = iter(range(1000, 2000))
    state = lambda c: sorted(c.execute("SELECT * FROM lines").fetchall())  # noqa: E731 - the payments only
    assert assert_idempotent(by_delivery_tag, TAGGED, connect=sqlite_connect(tmp_path), reset=sqlite_reset,
                             state=state).passed
    with pytest.raises(NotIdempotent, match=r"every message twice in a row \(the ack lost\): extra \[\(100, 1, 'm-000'\)"):
        assert_idempotent(by_delivery_tag, TAGGED, connect=sqlite_connect(tmp_path), reset=sqlite_reset, state=state,
                          redelivered=lambda message: {**message, "delivery_tag": next(tags), "redelivered": True})
    # The inbox keyed on the message ID passes the same copies.
    assert assert_idempotent(sqlite_inbox, TAGGED, connect=sqlite_connect(tmp_path), reset=sqlite_reset, state=state,
                             redelivered=lambda message: {**message, "delivery_tag": next(tags),
                                                          "redelivered": True}).passed


def test_on_postgres_the_second_of_two_deliveries_at_once_gets_the_redelivered_copy(postgres_schema):
    copies: list[dict[str, Any]] = []

    def copy(message: dict[str, Any]) -> dict[str, Any]:
        copies.append({**message, "redelivered": True})
        return copies[-1]

    report = assert_idempotent(pg_inbox, MESSAGES[:2], connect=postgres_schema.connect, reset=pg_reset,
                               redelivered=copy)
    races = sum(row.scenario.startswith("two at once") for row in report)
    assert races == 5 and len(copies) >= races * 2, "each race's second delivery of each message is a copy"


def test_a_consumer_that_catches_a_lost_connection_and_acknowledges_loses_the_message_and_is_told_so(tmp_path):
    def swallowing(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
        try:
            pay_then_ack(connection, message, lambda: None)
        except Exception:  # noqa: BLE001 - the mistake under test: log and carry on, so the message is acked
            pass

    with pytest.raises(NotIdempotent) as caught:
        assert_idempotent(swallowing, MESSAGES[:2], connect=sqlite_connect(tmp_path), reset=sqlite_reset)
    text = str(caught.value)
    assert "crash before" not in text, "a death is not an Exception: the crash scenarios pass"
    assert ("- connection lost before step 3 of 3: COMMIT (an error the consumer can catch): table lines: missing "
            "[(100, 1, 'm-000'), (101, 1, 'm-001')]") in text
    assert "m-000 lost its connection before COMMIT, and the consumer acknowledged it anyway" in text
    assert "fix: let an error end the delivery unacknowledged" in text

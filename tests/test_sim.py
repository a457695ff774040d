import re

import pandas as pd
import pytest

from idemlib.explore import RUNNING_EXAMPLE, fault_sweep, interleavings
from idemlib.faults import Crash, FaultPlan, LostAck
from idemlib.handlers import InboxHandler, NaiveHandler
from idemlib.messages import BadMessage, Message, payment_stream
from idemlib.sim import simulate
from idemlib.stores import SQLitePayments


def test_the_story_of_lesson_01_naive_consumer_charges_80_for_one_40_message():
    result = simulate(NaiveHandler(), [RUNNING_EXAMPLE], faults=FaultPlan(lost_acks=[LostAck(1)]))
    assert result.total_charged == 80
    assert list(result.charges_per_message()) == [2]


def test_the_inbox_keeps_it_at_40_and_records_the_skipped_duplicate():
    result = simulate(InboxHandler(), [RUNNING_EXAMPLE], faults=FaultPlan(lost_acks=[LostAck(1), LostAck(2)]))
    assert result.total_charged == 40
    assert len(result.events("duplicate skipped")) == 2
    assert len(result.events("delivered")) == 3


def broker_view(result):
    trace = result.trace
    return trace[trace["actor"] == "broker"][["time", "event", "delivery"]].reset_index(drop=True)


def test_a_crash_before_commit_and_a_lost_ack_after_commit_look_the_same_to_the_broker():
    crashed = simulate(NaiveHandler(), [RUNNING_EXAMPLE], faults=FaultPlan(crashes=[Crash("commit")]))
    ack_lost = simulate(NaiveHandler(), [RUNNING_EXAMPLE], faults=FaultPlan(lost_acks=[LostAck()]))
    pd.testing.assert_frame_equal(broker_view(crashed), broker_view(ack_lost))
    assert (crashed.total_charged, ack_lost.total_charged) == (40, 80)


def test_a_crash_rolls_back_the_open_transaction_and_waits_out_the_lease():
    result = simulate(InboxHandler(), [RUNNING_EXAMPLE], faults=FaultPlan(crashes=[Crash("commit")]), visibility_timeout=30)
    events = list(result.trace["event"])
    assert events.index("crashed") < events.index("rolled back") < events.index("lease expired")
    second = result.events("delivered").iloc[1]
    assert second["time"] == 30 and second["delivery"] == 2


def test_bad_messages_are_retried_then_dead_lettered_without_blocking_the_ones_behind():
    bad = [Message("m-bad", "{broken"), Message(None, {"order_id": 1, "amount": 5})]
    good = payment_stream(3)
    result = simulate(InboxHandler(), [*bad, *good], max_deliveries=4)
    assert result.total_charged == sum(m.body["amount"] for m in good)
    assert [(d.message.label, d.deliveries) for d in result.dead_letters] == [("m-bad", 4), ("<message without an ID>", 4)]
    assert "not valid JSON" in result.dead_letters[0].reason
    assert len(result.events("rejected")) == 8
    first_good_ack = result.events("acked")["time"].min()
    assert first_good_ack < result.events("dead-lettered")["time"].min()


def test_the_same_run_gives_the_same_trace():
    plan = FaultPlan(ack_loss_rate=0.3, crash_rate=0.1, seed=11)
    first = simulate(InboxHandler(), payment_stream(40), faults=plan)
    again = simulate(InboxHandler(), payment_stream(40), faults=plan)
    pd.testing.assert_frame_equal(first.trace, again.trace)


def test_two_consumers_racing_on_duckdb_charge_once_and_lose_nothing():
    # Consumer A is slower than its lease, so B gets the same message while A still works.
    result = simulate(InboxHandler(), [RUNNING_EXAMPLE], consumers=2, step_seconds={"charge": 40}, visibility_timeout=30)
    assert result.total_charged == 40
    assert set(result.events("delivered")["actor"]) == {"consumer A", "consumer B"}
    assert len(result.events("conflict")) == 1


def test_watching_the_total_reads_what_the_database_committed():
    result = simulate(NaiveHandler(), [RUNNING_EXAMPLE], faults=FaultPlan(lost_acks=[LostAck()]), watch_total=True)
    totals = result.trace["total charged"]
    assert totals.iloc[-1] == result.total_charged == 80
    assert totals.is_monotonic_increasing
    assert simulate(NaiveHandler(), [RUNNING_EXAMPLE]).trace["total charged"].isna().all()


def test_the_fault_sweep_shows_the_inbox_flat_and_the_naive_consumer_rising():
    sweep = fault_sweep([NaiveHandler(), InboxHandler()], payment_stream(60), [0.0, 0.3, 0.6])
    naive = sweep[sweep["handler"] == "naive"]["total charged"].tolist()
    inbox = sweep[sweep["handler"] == "inbox"]["total charged"].tolist()
    expected = sweep["expected total"].iloc[0]
    assert inbox == [expected] * 3
    assert naive[0] == expected < naive[1] < naive[2]


def test_the_fault_sweep_gives_the_same_totals_on_sqlite_as_on_duckdb():
    """Lesson 04 sweeps on SQLite for speed; a single consumer's totals are the engine's, not the speed's."""
    from idemlib.handlers import ProviderHandler
    from idemlib.stores import SQLitePayments

    handlers, stream = [ProviderHandler("inside", keyed=False), ProviderHandler("inside", keyed=True)], payment_stream(30)
    on = {engine: fault_sweep(handlers, stream, [0.0, 0.3], fault="response_loss_rate", provider="stripe-v1",
                              **({"database": SQLitePayments} if engine == "sqlite" else {}))
          for engine in ("duckdb", "sqlite")}
    assert on["duckdb"].equals(on["sqlite"])
    assert on["sqlite"]["charged at provider"].nunique() > 1  # the lost answers charge again without a key


@pytest.mark.parametrize("consumers", [1, 3])
def test_many_messages_with_random_faults_are_each_charged_once_by_the_inbox(consumers):
    stream = payment_stream(150)
    plan = FaultPlan(ack_loss_rate=0.2, crash_rate=0.05, seed=5)
    result = simulate(InboxHandler(), stream, faults=plan, consumers=consumers, max_deliveries=20)
    assert set(result.charges_per_message()) == {1}
    assert result.dead_letters == []


def test_two_consumers_with_a_crash_at_begin_and_a_charge_slower_than_the_lease_finish_the_run():
    # Issue 10: a late ack from the slow consumer made the broker raise KeyError.
    stream = payment_stream(2)
    result = simulate(InboxHandler(), stream, consumers=2, faults=FaultPlan(crashes=[Crash("begin", 1, "p-0001")]),
                      step_seconds={"charge": 31}, visibility_timeout=30)
    assert set(result.charges_per_message()) == {1}
    assert result.total_charged == result.expected_total


HOSTILE = [
    Message("m-big-amount", {"order_id": 1042, "amount": 2**31}),
    Message("m-big-order", {"order_id": 2**40, "amount": 40}),
    Message("m-nul-\x00", {"order_id": 1042, "amount": 40}),
    Message("m-" + "x" * 20_000, {"order_id": 1042, "amount": 40}),
    Message("m-deep", "[" * 100_000 + "]" * 100_000),
]


def test_messages_the_store_cannot_hold_are_dead_lettered_and_the_good_ones_behind_are_charged(engine):
    good = payment_stream(3)
    result = simulate(InboxHandler(), [*HOSTILE, *good], max_deliveries=2, database=engine)
    assert result.total_charged == result.expected_total == sum(m.body["amount"] for m in good)
    assert [d.message for d in result.dead_letters] == HOSTILE
    assert all(d.deliveries == 2 and d.reason for d in result.dead_letters)


class _EngineRefuses(InboxHandler):
    """An inbox whose charge step writes a value the engine's INTEGER column cannot hold."""

    name = "engine refuses"

    def with_the_charge(self, ctx, charge):
        yield "write audit"
        ctx.db.charge(2**70, charge.amount, ctx.message_id)


class _Bug(InboxHandler):
    name = "buggy"

    def with_the_charge(self, ctx, charge):
        yield "compute fee"
        if ctx.message_id == "p-0002":
            raise ZeroDivisionError("fee rate is zero")


def test_any_exception_in_a_step_fails_only_that_delivery_which_is_rolled_back_retried_and_dead_lettered():
    good = payment_stream(3)
    result = simulate(_Bug(), good, max_deliveries=3)
    assert list(result.charges_per_message()) == [1, 0, 1]
    [dead] = result.dead_letters
    assert dead.message.message_id == "p-0002" and dead.deliveries == 3
    assert "ZeroDivisionError" in dead.reason and "fee rate is zero" in dead.reason
    failed = result.events("failed")
    assert len(failed) == 3 and set(failed["message_id"]) == {"p-0002"}
    assert len(result.events("rolled back")) >= 3


def test_an_error_raised_by_the_engine_itself_is_a_failed_delivery_not_a_crashed_run(engine):
    database = engine
    result = simulate(_EngineRefuses(), payment_stream(2), max_deliveries=2, database=database)
    assert result.total_charged == 0 and len(result.dead_letters) == 2
    # each engine names it its own way: out of range (DuckDB, PostgreSQL), too large (SQLite)
    assert all(re.match(r"\w+: .*(out of range|too large)", d.reason) for d in result.dead_letters)
    # each failed transaction was rolled back: no inbox row is left to block a replay after the fix
    assert database.processed_ids() == []


def test_expected_total_leaves_out_malformed_messages_and_counts_json_text_bodies():
    stream = [RUNNING_EXAMPLE, Message("m-text", '{"order_id": 7, "amount": 15}'), Message("m-bad", {"order_id": 1})]
    result = simulate(InboxHandler(), stream, max_deliveries=1)
    assert result.expected_total == result.total_charged == 55


@pytest.mark.parametrize(
    ("settings", "names"),
    [({"consumers": 0}, ["consumers", "at least 1"]), ({"step_seconds": {"charge": -5}}, ["'charge'", "-5"]),
     ({"step_seconds": {"charge": float("nan")}}, ["finite"]), ({"step_seconds": {"commit": float("inf")}}, ["inf"])],
)
def test_impossible_run_settings_are_refused_with_what_to_change(settings, names):
    with pytest.raises(ValueError) as refused:
        simulate(InboxHandler(), [RUNNING_EXAMPLE], **settings)
    assert all(name in str(refused.value) for name in names)


def test_a_message_whose_id_is_not_text_is_named_in_the_dead_letter_queue():
    result = simulate(InboxHandler(), [Message(7, {"order_id": 1, "amount": 5}), RUNNING_EXAMPLE], max_deliveries=1)
    assert result.total_charged == 40
    [dead] = result.dead_letters
    assert "must be text" in dead.reason and list(result.charges_per_message().index) == ["7", "m-7f3"]


def test_the_matrices_refuse_a_message_no_handler_can_read_saying_why():
    with pytest.raises(BadMessage, match="'amount' is missing"):
        interleavings(InboxHandler(), Message("m-1", {"order_id": 1}))


class _ConnectionDrops(InboxHandler):
    """On the first delivery the connection breaks mid-transaction, so even the rollback fails."""

    name = "connection drops"

    def with_the_charge(self, ctx, charge):
        yield "network"
        if ctx.delivery.count == 1:
            ctx.db._cursor.connection.close()
            raise ConnectionError("server closed the connection unexpectedly")


def test_a_broken_connection_is_replaced_and_the_retry_charges_once():
    result = simulate(_ConnectionDrops(), [RUNNING_EXAMPLE], database=SQLitePayments())
    assert result.total_charged == 40 and result.dead_letters == []
    assert "ConnectionError" in result.events("failed")["detail"].iloc[0]

import pandas as pd
import pytest

from idemlib.faults import Crash, FaultPlan, LostAck
from idemlib.handlers import InboxHandler, NaiveHandler
from idemlib.explore import RUNNING_EXAMPLE, fault_sweep
from idemlib.messages import Message, payment_stream
from idemlib.sim import simulate


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


@pytest.mark.parametrize("consumers", [1, 3])
def test_many_messages_with_random_faults_are_each_charged_once_by_the_inbox(consumers):
    stream = payment_stream(150)
    plan = FaultPlan(ack_loss_rate=0.2, crash_rate=0.05, seed=5)
    result = simulate(InboxHandler(), stream, faults=plan, consumers=consumers, max_deliveries=20)
    assert set(result.charges_per_message()) == {1}
    assert result.dead_letters == []

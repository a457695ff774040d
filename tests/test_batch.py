"""The batched inbox: every message charged once, whatever crashes, races or duplicates its batches meet."""

from __future__ import annotations

import pytest

from idemlib import Crash, FaultPlan, Message, payment_stream
from idemlib.explore import crash_matrix, interleavings, outcome_counts
from idemlib.operating.batch import STEPS, BatchConsumer, BatchSession, consume, outcomes_and_conflicts
from idemlib.operating.costs import batch_throughput, bulk_insert
from idemlib.stores import DuckDBPayments


def with_repeats(count: int) -> list[Message]:
    stream = payment_stream(count)
    return stream + stream[1::3]  # a third of the messages come back after their batch


def test_one_statement_finds_the_new_ids_on_every_engine(engine):
    session = BatchSession(engine)
    session.begin()
    assert session.record_messages(["m-1", "m-2"]) == {"m-1", "m-2"}
    assert session.record_messages(["m-2", "m-3"]) == {"m-3"}
    session.charge_many([(1042, 40, "m-1"), (1043, 5, "m-3")])
    session.commit()
    assert engine.total_charged() == 45
    assert engine.processed_ids() == ["m-1", "m-2", "m-3"]


def test_a_batch_with_duplicates_charges_each_message_once(engine):
    messages = with_repeats(10)
    result = consume(engine, messages, batch_size=4)
    assert result.total_charged == result.expected_total
    assert (result.outcomes() == "charged once").all()
    assert len(result.events("duplicate skipped")) == len(messages) - 10


@pytest.mark.parametrize("batch_size", [1, 3, 50])
def test_the_crash_matrix_charges_every_message_once(batch_size):
    messages = with_repeats(7)
    matrix = crash_matrix([BatchConsumer(batch_size)], messages, measure=outcome_counts, label=None)
    assert list(matrix["fault"]) == ["no fault", *(f"crash before {s}" for s in STEPS), "every ack lost once"]
    assert (matrix["charged once"] == 7).all(), matrix
    assert (matrix["total charged ($)"] == matrix["owed ($)"]).all()


def test_a_crash_before_the_commit_rolls_back_the_whole_batch_and_the_broker_redelivers_it():
    messages = payment_stream(4)
    result = consume(DuckDBPayments(), messages, batch_size=4, faults=FaultPlan(crashes=[Crash("commit")]))
    delivered = result.events("delivered")
    assert sorted(delivered["delivery"].value_counts().to_dict().items()) == [(1, 4), (2, 4)]
    assert len(result.events("rolled back")) == 1
    assert result.total_charged == result.expected_total


def test_every_interleaving_of_two_overlapping_batches_charges_each_message_once():
    table = interleavings(BatchConsumer(3), payment_stream(4), DuckDBPayments(), tally=outcomes_and_conflicts,
                          max_deliveries=10)
    assert len(table) > 100
    assert (table["charged once"] == 4).all(), table[table["charged once"] != 4]
    assert table["conflicting deliveries"].max() > 0


def test_a_poison_message_is_given_back_alone_and_its_batch_goes_through():
    messages = [*payment_stream(3), Message("m-bad", {"order_id": 1, "amount": "40"})]
    result = consume(DuckDBPayments(), messages, batch_size=4, max_deliveries=3)
    assert result.total_charged == sum(m.body["amount"] for m in messages[:3])
    assert [d.message.message_id for d in result.dead_letters] == ["m-bad"]


def test_the_bulk_inserts_write_the_same_rows_with_and_without_the_inbox(engine):
    messages = payment_stream(25)
    owed = sum(m.body["amount"] for m in messages)
    bulk_insert(engine, messages, batch_size=10, inbox=True)
    bulk_insert(engine, messages[5:15], batch_size=4, inbox=True)  # a replay: the inbox skips all ten
    assert engine.total_charged() == owed
    assert len(engine.processed_ids()) == 25
    bulk_insert(engine, messages, batch_size=10)  # the raw insert has no memory: it charges again
    assert engine.total_charged() == 2 * owed


def test_the_throughput_table_has_a_row_per_engine_and_size():
    table = batch_throughput({"DuckDB": DuckDBPayments}, payment_stream(40), [1, 20], repeats=1)
    assert list(table["batch size"]) == [1, 20]
    assert (table.filter(like="/s") > 0).all().all()


def test_a_batch_size_below_one_is_refused():
    with pytest.raises(ValueError, match="batch_size"):
        consume(DuckDBPayments(), payment_stream(2), batch_size=0)


def test_a_late_ack_removes_a_message_already_queued_again():
    from idemlib.broker import Broker
    from idemlib.clock import VirtualClock
    from idemlib.trace import Trace

    clock = VirtualClock()
    broker = Broker(clock, Trace(clock), visibility_timeout=30)
    for message in payment_stream(2):
        broker.publish(message)
    first = broker.receive("consumer A")
    clock.advance(31)
    second = broker.receive("consumer B")  # the first lease expires here: p-0001 is queued behind p-0002
    assert first is not None and second is not None and second.message_id == "p-0002"
    broker.ack(first)  # late, but it still removes p-0001
    assert broker.receive("consumer B") is None
    assert broker.waiting == 1

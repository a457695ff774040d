import pytest

from idemlib.broker import Broker
from idemlib.clock import VirtualClock
from idemlib.messages import Message
from idemlib.trace import Trace

M = Message.charge("m-7f3", 1042, 40)


def make_broker(**settings):
    clock = VirtualClock()
    return clock, Broker(clock, Trace(clock), **settings)


def test_a_leased_message_is_not_handed_to_anyone_else_until_the_lease_ends():
    clock, broker = make_broker(visibility_timeout=30)
    broker.publish(M)
    first = broker.receive("A")
    assert first.count == 1 and not first.redelivered and first.lease_expires_at == 30
    clock.advance(29.9)
    assert broker.receive("B") is None
    clock.advance(0.1)
    second = broker.receive("B")
    assert second.message == M and second.count == 2 and second.redelivered


def test_an_ack_removes_the_message_for_good():
    clock, broker = make_broker()
    broker.publish(M)
    assert broker.ack(broker.receive("A")) is True
    clock.advance(3600)
    assert broker.receive("A") is None and broker.is_empty


def test_a_late_ack_from_the_first_consumer_still_removes_the_message():
    clock, broker = make_broker(visibility_timeout=10)
    broker.publish(M)
    slow = broker.receive("A")
    clock.advance(10)
    broker.receive("B")
    assert broker.ack(slow) is True
    assert broker.is_empty


def test_publishing_the_same_message_twice_keeps_two_copies():
    _, broker = make_broker()
    broker.publish(M)
    broker.publish(M)
    assert broker.waiting == 2
    assert broker.receive("A").message == broker.receive("B").message == M


def test_after_max_deliveries_the_message_goes_to_the_dead_letter_queue_with_its_reason():
    clock, broker = make_broker(visibility_timeout=5, max_deliveries=3)
    broker.publish(M)
    for _ in range(3):
        broker.release(broker.receive("A"), "m-7f3: field 'amount' is missing")
    assert broker.receive("A") is None
    [dead] = broker.dead_letters
    assert dead.message == M and dead.deliveries == 3 and "amount" in dead.reason
    assert broker.is_empty


def test_a_release_gives_the_message_back_without_waiting_for_the_lease():
    _, broker = make_broker(visibility_timeout=300)
    broker.publish(M)
    broker.release(broker.receive("A"), "handler failed")
    assert broker.receive("A").count == 2


def test_a_stale_release_does_not_steal_the_message_from_its_new_holder():
    clock, broker = make_broker(visibility_timeout=10)
    broker.publish(M)
    old = broker.receive("A")
    clock.advance(10)
    current = broker.receive("B")
    broker.release(old, "A gave up")
    assert broker.receive("C") is None
    assert broker.next_lease_expiry() == current.lease_expires_at


def test_the_trace_records_deliveries_and_expired_leases_at_the_moment_they_happen():
    clock, broker = make_broker(visibility_timeout=30)
    broker.publish(M)
    broker.receive("A")
    clock.advance(100)
    broker.receive("A")
    events = broker.trace.to_frame()
    assert list(events["event"]) == ["published", "delivered", "lease expired", "delivered"]
    assert list(events["time"]) == [0, 0, 30, 100]
    assert events["detail"].iloc[-1] == "redelivered"


@pytest.mark.parametrize("settings", [{"visibility_timeout": 0}, {"max_deliveries": 0}])
def test_impossible_settings_are_refused(settings):
    with pytest.raises(ValueError):
        make_broker(**settings)


def test_a_late_ack_removes_a_message_already_queued_again():
    clock, broker = make_broker(visibility_timeout=30)
    broker.publish(M)
    broker.publish(Message.charge("m-8a1", 1043, 25))
    slow = broker.receive("consumer A")
    clock.advance(31)
    assert broker.receive("consumer B").message_id == "m-8a1"  # m-7f3's lease ran out: it is queued again
    assert broker.ack(slow)  # A's late ack still removes it
    assert broker.receive("consumer C") is None

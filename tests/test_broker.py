import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, initialize, invariant, multiple, rule

from idemlib.broker import ACKED, DEAD, LEASED, PLACES, READY, Broker
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


def test_an_ack_after_the_lease_expired_but_before_redelivery_leaves_the_queue_consistent():
    # Issue 10: the late ack removed the message but left its slot in the ready queue,
    # and the next receive raised KeyError.
    clock, broker = make_broker(visibility_timeout=10)
    broker.publish(M)
    broker.publish(Message.charge("m-8a1", 1043, 15))
    slow = broker.receive("A")
    clock.advance(10)
    behind = broker.receive("B")  # A's lease has expired: m-7f3 is back on the queue, behind m-8a1
    assert behind.message.message_id == "m-8a1"
    assert broker.ack(slow) is True  # A's late ack still removes m-7f3
    assert broker.receive("C") is None
    broker.ack(behind)
    assert broker.is_empty and broker.waiting == 0


MESSAGES = [M, Message.charge("m-8a1", 1043, 15), Message.charge("m-9c2", 1044, 5)]


class BrokerUnderAnyTiming(RuleBasedStateMachine):
    """Random interleavings of publish, receive, ack, late ack, lost ack, release and lease expiry."""

    def __init__(self):
        super().__init__()
        self.clock, self.broker = make_broker(visibility_timeout=10, max_deliveries=3)
        self.published = 0
        self.acked: set[int] = set()          # positions whose ack the broker accepted
        self.current: dict[int, object] = {}  # position -> the delivery holding its lease, as far as we know

    held = Bundle("held")

    @initialize()
    def a_queue_with_messages_on_it(self):
        for message in MESSAGES:
            self.publish(message)

    @rule(message=st.sampled_from(MESSAGES))
    def publish(self, message):
        assert self.broker.publish(message) == self.published
        self.published += 1

    @rule(target=held, consumer=st.sampled_from(["A", "B"]))
    def receive(self, consumer):
        delivery = self.broker.receive(consumer)
        if delivery is None:
            return multiple()
        assert delivery.position not in self.acked, "an acked message was delivered again"
        holder = self.current.get(delivery.position)
        assert holder is None or holder.lease_expires_at <= self.clock.now(), "a live lease was handed out twice"
        assert delivery.count <= self.broker.max_deliveries
        self.current[delivery.position] = delivery
        return delivery

    @rule(delivery=consumes(held))
    def ack(self, delivery):  # on time or late: the lease may have expired, the message moved on
        place = self.broker.place_of(delivery.position)
        assert self.broker.ack(delivery) is (place in (READY, LEASED))
        if place in (READY, LEASED):
            self.acked.add(delivery.position)
            self.current.pop(delivery.position, None)

    @rule(delivery=consumes(held))
    def lose_the_ack(self, delivery):
        """The consumer acked, but the ack never arrived: the broker hears nothing."""

    @rule(delivery=consumes(held))
    def release(self, delivery):
        self.broker.release(delivery, "handler failed")
        if self.current.get(delivery.position) is delivery and self.broker.place_of(delivery.position) == READY:
            del self.current[delivery.position]

    @rule(seconds=st.sampled_from([4, 10]))
    def time_passes(self, seconds):
        self.clock.advance(seconds)

    @invariant()
    def every_message_is_in_exactly_one_place_and_nothing_vanishes(self):
        places = [self.broker.place_of(position) for position in range(self.published)]
        assert all(place in PLACES for place in places)
        assert self.broker.waiting == places.count(READY) + places.count(LEASED)
        assert self.broker.is_empty is (self.broker.waiting == 0)
        assert len(self.broker.dead_letters) == places.count(DEAD)
        assert all(places[position] == ACKED for position in self.acked)

    @invariant()
    def a_message_is_dead_lettered_only_after_max_deliveries(self):
        assert all(dead.deliveries == self.broker.max_deliveries for dead in self.broker.dead_letters)

    def teardown(self):
        # Whatever happened, a patient consumer empties the queue: every message ends acked or dead-lettered.
        for _ in range(self.published * self.broker.max_deliveries + 1):
            if self.broker.is_empty:
                break
            self.clock.advance(self.broker.visibility_timeout)
            delivery = self.broker.receive("drain")
            if delivery is not None:
                self.broker.ack(delivery)
        assert self.broker.is_empty
        assert {self.broker.place_of(position) for position in range(self.published)} <= {ACKED, DEAD}


BrokerUnderAnyTiming.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, derandomize=True, database=None, deadline=None,
)
test_the_broker_stays_consistent_under_any_timing = BrokerUnderAnyTiming.TestCase

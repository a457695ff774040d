"""For any schedule of crashes and lost acks, the inbox charges exactly once."""

from hypothesis import given, settings
from hypothesis import strategies as st

from idemlib.faults import Crash, FaultPlan, LostAck
from idemlib.handlers import InboxHandler, NaiveHandler
from idemlib.messages import payment_stream
from idemlib.sim import simulate

MESSAGES = payment_stream(3)
IDS = [m.message_id for m in MESSAGES]
MAX_DELIVERIES = 12


def schedules(handler):
    crash = st.builds(Crash, st.sampled_from(handler.steps), st.integers(1, 4), st.sampled_from(IDS))
    lost = st.builds(LostAck, st.integers(1, 4), st.sampled_from(IDS))
    return st.builds(FaultPlan, crashes=st.lists(crash, max_size=6), lost_acks=st.lists(lost, max_size=6))


@settings(max_examples=60, deadline=None)
@given(plan=schedules(InboxHandler()))
def test_the_inbox_charges_every_message_exactly_once(plan):
    result = simulate(InboxHandler(), MESSAGES, faults=plan, max_deliveries=MAX_DELIVERIES)
    assert result.dead_letters == []
    assert result.charges_per_message().tolist() == [1, 1, 1]


@settings(max_examples=60, deadline=None)
@given(plan=schedules(NaiveHandler()))
def test_the_naive_consumer_never_charges_less_than_once(plan):
    result = simulate(NaiveHandler(), MESSAGES, faults=plan, max_deliveries=MAX_DELIVERIES)
    assert (result.charges_per_message() >= 1).all()
